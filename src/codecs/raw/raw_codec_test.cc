#include "codecs/raw/raw_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <tuple>

#include "base/half.h"
#include "codecs/test_kv.h"
#include "tensor/synthetic_kv.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kFp{1, 2, 3};

// Random KV with per-channel offsets for keys and a few large-magnitude channels.
KvCache MakeCache(const KvShape& shape, DType dtype, uint32_t seed) { return OutlierKeysKv(shape, dtype, seed); }

Result<std::vector<uint8_t>> Encode(const KvCache& cache, const EncodeOptions& options = {}) {
  return EncodeKvc(*FindCodec("raw"), cache.View(), options, kFp, 0);
}

const KvShape kShape{.n_layers = 3, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 21};

TEST(RawCodec, Info) {
  const CodecInfo& info = RawCodec().info();
  EXPECT_EQ(info.name, "raw");
  EXPECT_EQ(info.id, 1);
  EXPECT_EQ(info.levels, std::vector<std::string>{"fp16"});
  EXPECT_EQ(info.default_level, "fp16");
}

TEST(RawCodec, Fp16RoundTripIsBitExact) {
  KvCache cache = MakeCache(kShape, DType::kF16, 1);
  // Values a conversion through fp32 could disturb: NaN payloads, inf, -0, subnormals.
  const uint16_t specials[] = {0x7e01, 0xfc00, 0x7c00, 0x8000, 0x0001, 0x83ff, 0x7bff};
  auto k = cache.Bytes(KvKind::kKey);
  for (size_t i = 0; i < std::size(specials); ++i) std::memcpy(k.data() + 2 * (7 * i + 1), &specials[i], 2);
  cache.set_pos_begin(42);

  auto bytes = Encode(cache, {.level = "fp16"});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto decoded = DecodeKvc(*bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == cache);
}

TEST(RawCodec, Fp32RoundTripIsExactToFp16Rounding) {
  const KvCache cache = MakeCache(kShape, DType::kF32, 2);
  auto bytes = Encode(cache);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto decoded = DecodeKvc(*bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->dtype(), DType::kF32);
  ASSERT_EQ(decoded->shape(), kShape);
  std::vector<float> in(kShape.layer_elems());
  std::vector<float> out(kShape.layer_elems());
  for (KvKind kind : kKvKinds) {
    for (uint32_t l = 0; l < kShape.n_layers; ++l) {
      cache.ReadRowsF32(kind, l, 0, kShape.n_tokens, in.data());
      decoded->ReadRowsF32(kind, l, 0, kShape.n_tokens, out.data());
      for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], Fp16ToFp32(Fp32ToFp16(in[i]))) << i;
    }
  }
}

TEST(RawCodec, Bf16SourceIsRestoredAsBf16) {
  const KvCache cache = MakeCache(kShape, DType::kBF16, 3);
  auto decoded = DecodeKvc(Encode(cache).value());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->dtype(), DType::kBF16);
  std::vector<float> in(kShape.layer_elems());
  std::vector<float> out(kShape.layer_elems());
  cache.ReadRowsF32(KvKind::kValue, 1, 0, kShape.n_tokens, in.data());
  decoded->ReadRowsF32(KvKind::kValue, 1, 0, kShape.n_tokens, out.data());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], Bf16ToFp32(Fp32ToBf16(Fp16ToFp32(Fp32ToFp16(in[i])))));
}

TEST(RawCodec, ZeroTokens) {
  KvShape shape = kShape;
  shape.n_tokens = 0;
  for (DType dtype : {DType::kF16, DType::kF32}) {
    const KvCache cache = KvCache::Create(shape, dtype).value();
    auto decoded = DecodeKvc(Encode(cache).value());
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_TRUE(*decoded == cache);
  }
}

TEST(RawCodec, FileIsFp16SizePlusHeaders) {
  const KvCache cache = MakeCache(kShape, DType::kF16, 4);
  const auto bytes = Encode(cache).value();
  EXPECT_GE(bytes.size(), kShape.fp16_bytes());
  EXPECT_LE(bytes.size(), kShape.fp16_bytes() + 200);
}

TEST(RawCodec, Fp32OverflowIsAnError) {
  KvCache cache = MakeCache(kShape, DType::kF32, 5);
  const float big = 70000.0f;
  std::memcpy(cache.Bytes(KvKind::kValue).data() + size_t{4} * 100, &big, 4);
  auto bytes = Encode(cache);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bytes.status().message().find("fp16 range"), std::string::npos) << bytes.status().ToString();

  // inf is not an overflow: raw keeps it, as it keeps NaN.
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(cache.Bytes(KvKind::kValue).data() + size_t{4} * 100, &inf, 4);
  auto decoded = DecodeKvc(Encode(cache).value());
  ASSERT_TRUE(decoded.ok());
  float got;
  std::memcpy(&got, decoded->Bytes(KvKind::kValue).data() + size_t{4} * 100, 4);
  EXPECT_EQ(got, inf);
}

TEST(RawCodec, BadOptionsAreClearErrors) {
  const KvCache cache = MakeCache(kShape, DType::kF16, 6);
  auto bad_level = Encode(cache, {.level = "8"});
  ASSERT_FALSE(bad_level.ok());
  EXPECT_EQ(bad_level.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_level.status().message().find("unknown level '8'"), std::string::npos);

  auto bad_param = Encode(cache, {.params = {{"group_size", "4"}}});
  ASSERT_FALSE(bad_param.ok());
  EXPECT_EQ(bad_param.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_param.status().message().find("unknown parameter 'group_size'"), std::string::npos);
}

TEST(RawCodec, DamagedSectionsAreCorrupt) {
  const auto good = Encode(MakeCache(kShape, DType::kF16, 7)).value();
  const std::vector<std::pair<const char*, std::function<void(KvcHeader&, std::vector<KvcSection>&)>>> edits = {
      {"short K", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.pop_back(); }},
      {"long V", [](KvcHeader&, std::vector<KvcSection>& s) { s[1].bytes.push_back(0); }},
      {"odd-sized K", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.resize(s[0].bytes.size() - 1); }},
      {"missing V", [](KvcHeader&, std::vector<KvcSection>& s) { s.pop_back(); }},
      {"extra",
       [](KvcHeader&, std::vector<KvcSection>& s) {
         s.push_back({0x4B, {}});
       }},
      {"swapped", [](KvcHeader&, std::vector<KvcSection>& s) { std::swap(s[0].tag, s[1].tag); }},
      {"params", [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params = {1}; }},
      {"level", [](KvcHeader& h, std::vector<KvcSection>&) { h.level = "q8"; }},
      {"more tokens", [](KvcHeader& h, std::vector<KvcSection>&) { ++h.shape.n_tokens; }},
  };
  for (const auto& [name, edit] : edits) {
    ExpectEditIsCorrupt(good, name, edit);
  }
}

// Keys-only caches (MLA's latent, an indexer's keys): one 'K' section, V never read or written.
// The MLA shape is one 576-wide "head" per token (512 latent + 64 rope dims).
const KvShape kKeysOnlyShapes[] = {
    {.n_layers = 3, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 21, .keys_only = true},
    {.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 37, .keys_only = true},
    {.n_layers = 2, .n_kv_heads = 1, .head_dim = 128, .n_tokens = 19, .keys_only = true},
};

TEST(RawCodec, KeysOnlyRoundTripWritesKAlone) {
  for (const KvShape& shape : kKeysOnlyShapes) {
    for (DType dtype : {DType::kF16, DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(testing::Message() << "head_dim " << shape.head_dim << " " << DTypeName(dtype));
      const KvCache cache = MakeCache(shape, dtype, 11);
      auto bytes = Encode(cache);
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      const KvcFile file = ReadKvc(*bytes).value();
      EXPECT_EQ(file.header.shape, shape);
      ASSERT_EQ(file.sections.size(), 1u);
      EXPECT_EQ(file.sections[0].tag, KvSectionTag(KvKind::kKey));
      EXPECT_EQ(file.sections[0].bytes.size(), shape.elems() * 2);
      EXPECT_LE(bytes->size(), shape.fp16_bytes() + 200);

      auto decoded = DecodeKvc(*bytes);
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_EQ(decoded->shape(), shape);
      EXPECT_EQ(decoded->dtype(), dtype);
      EXPECT_TRUE(decoded->Bytes(KvKind::kValue).empty());
      if (dtype == DType::kF16) {
        EXPECT_TRUE(*decoded == cache);
        continue;
      }
      std::vector<float> in(shape.layer_elems());
      std::vector<float> out(shape.layer_elems());
      for (uint32_t l = 0; l < shape.n_layers; ++l) {
        cache.ReadRowsF32(KvKind::kKey, l, 0, shape.n_tokens, in.data());
        decoded->ReadRowsF32(KvKind::kKey, l, 0, shape.n_tokens, out.data());
        for (size_t i = 0; i < in.size(); ++i) {
          const float via_fp16 = Fp16ToFp32(Fp32ToFp16(in[i]));
          ASSERT_EQ(out[i], dtype == DType::kF32 ? via_fp16 : Bf16ToFp32(Fp32ToBf16(via_fp16))) << i;
        }
      }
    }
  }
}

// The MLA geometry with V present too: nothing in raw depends on head_dim being a power of two.
TEST(RawCodec, MlaShapeWithValuesRoundTrips) {
  const KvCache cache = MakeCache({.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 9}, DType::kF16, 12);
  auto decoded = DecodeKvc(Encode(cache).value());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == cache);
}

// A keys-only section is the K section of the same keys with V: V never shapes how K is coded.
TEST(RawCodec, KeysOnlySectionIsTheFullFilesK) {
  const KvCache full = MakeCache(kShape, DType::kF16, 13);
  KvShape keys_shape = kShape;
  keys_shape.keys_only = true;
  KvCache keys = KvCache::Create(keys_shape, DType::kF16).value();
  std::ranges::copy(full.Bytes(KvKind::kKey), keys.Bytes(KvKind::kKey).begin());
  const auto full_bytes = Encode(full).value();
  const auto keys_bytes = Encode(keys).value();
  EXPECT_TRUE(std::ranges::equal(ReadKvc(full_bytes)->sections[0].bytes, ReadKvc(keys_bytes)->sections[0].bytes));
}

// A chunk of a longer keys-only cache decoded in place: the other tokens' keys stay as they were.
TEST(RawCodec, KeysOnlyDecodesIntoASlice) {
  const KvShape shape = kKeysOnlyShapes[0];
  const KvCache whole = MakeCache(shape, DType::kF16, 14);
  const KvCache chunk = whole.View(5, 10).value().Copy().value();
  const auto bytes = Encode(chunk).value();
  KvCache restored = MakeCache(shape, DType::kF16, 15);
  const KvCache before = restored;
  const Status s = DecodeKvcInto(bytes, restored.Slice(5, 10).value(), &kFp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<float> got(shape.row_elems() * shape.n_tokens);
  std::vector<float> want(got.size());
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    for (uint32_t t = 0; t < shape.n_tokens; ++t) {
      const KvCache& source = t >= 5 && t < 15 ? whole : before;
      source.ReadRowsF32(KvKind::kKey, l, t, 1, want.data());
      restored.ReadRowsF32(KvKind::kKey, l, t, 1, got.data());
      ASSERT_TRUE(std::equal(got.begin(), got.begin() + shape.row_elems(), want.begin())) << l << " " << t;
    }
  }
}

TEST(RawCodec, KeysOnlyKindMismatchesAreCorrupt) {
  const auto keys = Encode(MakeCache(kKeysOnlyShapes[0], DType::kF16, 16)).value();
  const auto both = Encode(MakeCache(kShape, DType::kF16, 16)).value();
  ExpectKindMismatchesAreCorrupt(keys, both);
}

}  // namespace
}  // namespace kvc
