#include "codecs/quant/quant_codec.h"

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

constexpr ModelFingerprint kFp{9, 8, 7};

// Realistic-ish KV: keys carry per-channel offsets and a few channels of large magnitude (the
// outlier channels per-channel key quantisation exists for); values are per-token scaled, with
// the odd loud token.
KvCache MakeCache(const KvShape& shape, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> offset(shape.row_elems());
  for (float& o : offset) o = 3.0f * normal(rng);
  return FillKv(shape, dtype, 0, [&](KvKind kind, uint32_t, uint32_t t, size_t c) {
    if (kind == KvKind::kKey) return offset[c] + (c % 13 == 5 ? 25.0f : 0.8f) * normal(rng);
    return (t % 37 == 11 ? 8.0f : 0.5f) * normal(rng);
  });
}

Result<std::vector<uint8_t>> Encode(const KvCache& cache, const EncodeOptions& options) {
  return EncodeKvc(*FindCodec("quant"), cache.View(), options, kFp, 0);
}

size_t CeilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// Reads the stored scale of every group straight from the section bytes (the layout of
// docs/format.md) and checks, element by element, |decoded - input| <= scale/2 (plus fp32 rounding
// and the rounding of the restored dtype), and that each scale is as tight as fp16 storage of
// (min, scale) allows.
void ExpectWithinHalfScale(const KvCache& in, const KvCache& out, const std::vector<uint8_t>& file_bytes, uint32_t bits,
                           uint32_t group) {
  const KvcFile file = ReadKvc(file_bytes).value();
  const KvShape& shape = in.shape();
  const size_t tokens = shape.n_tokens;
  const size_t channels = shape.row_elems();
  const size_t elems = shape.layer_elems();
  if (elems == 0) return;
  const float levels = static_cast<float>((1u << bits) - 1);
  const double dtype_rel = in.dtype() == DType::kF16 ? 1.0 / 2048 : in.dtype() == DType::kBF16 ? 1.0 / 256 : 0;
  std::vector<float> x(elems);
  std::vector<float> y(elems);
  for (KvKind kind : shape.kinds()) {
    const bool key = kind == KvKind::kKey;
    const size_t n_groups = key ? CeilDiv(tokens, group) * channels : tokens * CeilDiv(channels, group);
    const size_t block = n_groups * 4 + CeilDiv(elems * bits, 8);
    const auto section = file.sections[key ? 0 : 1].bytes;
    ASSERT_EQ(section.size(), block * shape.n_layers);
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      in.ReadRowsF32(kind, l, 0, shape.n_tokens, x.data());
      out.ReadRowsF32(kind, l, 0, shape.n_tokens, y.data());
      const uint8_t* stats = section.data() + l * block;
      // Group of element (t, c), then its bound.
      std::vector<double> lo(n_groups, INFINITY);
      std::vector<double> hi(n_groups, -INFINITY);
      auto group_of = [&](size_t t, size_t c) {
        return key ? (t / group) * channels + c : t * CeilDiv(channels, group) + c / group;
      };
      for (size_t t = 0; t < tokens; ++t) {
        for (size_t c = 0; c < channels; ++c) {
          const size_t g = group_of(t, c);
          lo[g] = std::min<double>(lo[g], x[t * channels + c]);
          hi[g] = std::max<double>(hi[g], x[t * channels + c]);
        }
      }
      for (size_t t = 0; t < tokens; ++t) {
        for (size_t c = 0; c < channels; ++c) {
          const size_t g = group_of(t, c);
          const uint8_t* st = stats + 4 * g;
          const double m = Fp16ToFp32(static_cast<uint16_t>(st[0] | st[1] << 8));
          const double s = Fp16ToFp32(static_cast<uint16_t>(st[2] | st[3] << 8));
          const double xi = x[t * channels + c];
          const double yi = y[t * channels + c];
          // The restored dtype rounds the fp32 reconstruction: half an ulp of |y| at most.
          const double bound = s / 2 + 1e-6 * (std::abs(m) + levels * s) + dtype_rel * std::abs(yi) + 1e-7;
          ASSERT_LE(std::abs(yi - xi), bound)
              << KvKindName(kind) << " layer " << l << " token " << t << " channel " << c << " scale " << s;
          const double tight = ((hi[g] - lo[g]) + std::abs(lo[g]) / 1024 + 6e-8) / levels * 1.002 + 6e-8;
          ASSERT_LE(s, tight) << KvKindName(kind) << " group " << g << " scale is loose";
          ASSERT_LE(m, lo[g]);
        }
      }
    }
  }
}

struct Case {
  const char* name;
  KvShape shape;
  uint32_t group;
  DType dtype;
};

class QuantRoundTrip : public ::testing::TestWithParam<std::tuple<Case, uint32_t>> {};

TEST_P(QuantRoundTrip, ErrorWithinHalfScale) {
  const auto& [c, bits] = GetParam();
  const KvCache cache = MakeCache(c.shape, c.dtype, 11 + bits);
  const EncodeOptions options{.level = std::to_string(bits), .params = {{"group_size", std::to_string(c.group)}}};
  auto bytes = Encode(cache, options);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto decoded = DecodeKvc(*bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->shape(), c.shape);
  ASSERT_EQ(decoded->dtype(), c.dtype);
  ExpectWithinHalfScale(cache, *decoded, *bytes, bits, c.group);
}

const Case kCases[] = {
    {"tokens_not_multiple_of_group", {2, 2, 64, 300}, 128, DType::kF16},
    {"fp32_source", {2, 2, 64, 200}, 64, DType::kF32},
    {"bf16_source", {1, 2, 32, 90}, 32, DType::kBF16},
    {"group_size_1", {2, 1, 8, 9}, 1, DType::kF16},
    {"one_token", {3, 2, 16, 1}, 128, DType::kF16},
    {"one_layer", {1, 4, 32, 77}, 16, DType::kF32},
    {"odd_channels_and_elems", {2, 3, 5, 7}, 4, DType::kF16},
    {"group_larger_than_everything", {2, 2, 8, 13}, 65536, DType::kF32},
    {"zero_tokens", {2, 2, 8, 0}, 128, DType::kF16},
    {"zero_tokens_fp32", {2, 2, 8, 0}, 128, DType::kF32},
    // Keys-only caches (an MLA latent, an indexer's keys): a 'K' section alone.
    {"keys_only", {2, 2, 64, 300, true}, 128, DType::kF16},
    {"keys_only_fp32_odd", {2, 3, 5, 7, true}, 4, DType::kF32},
    {"keys_only_zero_tokens", {2, 2, 8, 0, true}, 128, DType::kF16},
    // MLA: one 576-wide head (512 latent + 64 rope dims), which no value group of 128 divides.
    {"mla_keys_only", {2, 1, 576, 150, true}, 128, DType::kF16},
    {"mla_keys_only_bf16", {1, 1, 576, 40, true}, 32, DType::kBF16},
    {"mla_with_values", {2, 1, 576, 50}, 128, DType::kF32},
    {"one_head_128_keys_only", {3, 1, 128, 65, true}, 64, DType::kF16},
};

INSTANTIATE_TEST_SUITE_P(Shapes, QuantRoundTrip,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(8u, 4u)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "bit";
                         });

TEST(QuantCodec, Info) {
  const CodecInfo& info = QuantCodec().info();
  EXPECT_EQ(info.name, "quant");
  EXPECT_EQ(info.id, 2);
  EXPECT_EQ(info.default_level, "8");
  EXPECT_EQ(info.levels, (std::vector<std::string>{"8", "4"}));
}

TEST(QuantCodec, DefaultsAreEightBitsGroup128) {
  const KvCache cache = MakeCache({1, 1, 8, 4}, DType::kF16, 1);
  const auto bytes = Encode(cache, {}).value();
  const KvcFile file = ReadKvc(bytes).value();
  EXPECT_EQ(file.header.level, "8");
  EXPECT_EQ(file.header.codec_params, (std::vector<uint8_t>{8, 128, 0, 0, 0}));
}

TEST(QuantCodec, CompressionRatio) {
  const KvShape shape{6, 2, 64, 1024};
  const KvCache cache = MakeCache(shape, DType::kF16, 5);
  for (const auto& [level, target] : {std::pair{"8", 1.9}, std::pair{"4", 3.5}}) {
    const auto bytes = Encode(cache, {.level = level}).value();
    const double ratio = static_cast<double>(shape.fp16_bytes()) / static_cast<double>(bytes.size());
    RecordProperty(std::string("ratio_") + level + "bit", std::to_string(ratio));
    std::printf("quant level %s: %zu bytes, ratio %.4fx vs fp16\n", level, bytes.size(), ratio);
    EXPECT_GE(ratio, target) << level;
  }
}

// The documented layout, on a case small enough to compute by hand: one channel, two tokens
// 0 and 15 in one key group -> min 0, scale 1, codes 0 and 15 packed low nibble first.
TEST(QuantCodec, FourBitLayout) {
  KvCache cache = KvCache::Create({1, 1, 1, 2}, DType::kF32).value();
  const float k[2] = {0.0f, 15.0f};
  cache.WriteRowsF32(KvKind::kKey, 0, 0, 2, k);
  const auto bytes = Encode(cache, {.level = "4", .params = {{"group_size", "2"}}}).value();
  const KvcFile file = ReadKvc(bytes).value();
  ASSERT_EQ(file.sections.size(), 2u);
  EXPECT_EQ(file.sections[0].tag, 0x4Bu);
  EXPECT_EQ(file.sections[1].tag, 0x56u);
  const std::vector<uint8_t> key(file.sections[0].bytes.begin(), file.sections[0].bytes.end());
  EXPECT_EQ(key, (std::vector<uint8_t>{0x00, 0x00, 0x00, 0x3c, 0xF0}));
  // Values: two one-element groups of constant 0: scale 0, codes 0.
  const std::vector<uint8_t> value(file.sections[1].bytes.begin(), file.sections[1].bytes.end());
  EXPECT_EQ(value, (std::vector<uint8_t>(9, 0)));
}

TEST(QuantCodec, ConstantGroupsAreExactOrWithinRounding) {
  KvCache cache = KvCache::Create({1, 2, 4, 10}, DType::kF32).value();
  std::vector<float> buf(cache.shape().layer_elems(), 0.1f);  // 0.1 is not an fp16
  cache.WriteRowsF32(KvKind::kKey, 0, 0, 10, buf.data());
  std::fill(buf.begin(), buf.end(), 2.5f);  // exact in fp16: scale 0, exact result
  cache.WriteRowsF32(KvKind::kValue, 0, 0, 10, buf.data());
  for (const char* level : {"8", "4"}) {
    const auto bytes = Encode(cache, {.level = level}).value();
    const KvCache out = DecodeKvc(bytes).value();
    ExpectWithinHalfScale(cache, out, bytes, level[0] - '0', 128);
    std::vector<float> v(buf.size());
    out.ReadRowsF32(KvKind::kValue, 0, 0, 10, v.data());
    for (float f : v) EXPECT_EQ(f, 2.5f);
  }
}

TEST(QuantCodec, ExtremeMagnitudesStayFinite) {
  KvCache cache = KvCache::Create({1, 1, 16, 16}, DType::kF16).value();
  std::vector<float> buf(256);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = (i % 3 == 0) ? 65504.0f : (i % 3 == 1 ? -65504.0f : 1e-7f);
  for (KvKind kind : kKvKinds) cache.WriteRowsF32(kind, 0, 0, 16, buf.data());
  for (const char* level : {"8", "4"}) {
    const auto bytes = Encode(cache, {.level = level, .params = {{"group_size", "5"}}}).value();
    const KvCache out = DecodeKvc(bytes).value();
    ExpectWithinHalfScale(cache, out, bytes, level[0] - '0', 5);
    std::vector<float> y(256);
    for (KvKind kind : kKvKinds) {
      out.ReadRowsF32(kind, 0, 0, 16, y.data());
      for (float f : y) ASSERT_TRUE(std::isfinite(f));
    }
  }
}

TEST(QuantCodec, NonFiniteOrOutOfRangeInputIsInvalidArgument) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -70000.0f}) {
    KvCache cache = MakeCache({2, 1, 8, 8}, DType::kF32, 3);
    std::memcpy(cache.Bytes(KvKind::kValue).data() + size_t{4} * 77, &bad, 4);
    auto bytes = Encode(cache, {});
    ASSERT_FALSE(bytes.ok()) << bad;
    EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bytes.status().message().find("V layer 1"), std::string::npos) << bytes.status().ToString();
  }
}

TEST(QuantCodec, BadOptionsAreClearErrors) {
  const KvCache cache = MakeCache({1, 1, 8, 8}, DType::kF16, 4);
  const std::vector<std::pair<EncodeOptions, const char*>> cases = {
      {{.level = "2"}, "unknown level '2' (quant levels: 8, 4)"},
      {{.level = "fp16"}, "unknown level 'fp16'"},
      {{.params = {{"group", "8"}}}, "unknown parameter 'group' (known: group_size)"},
      {{.params = {{"group_size", "0"}}}, "group_size=0 outside 1..65536"},
      {{.params = {{"group_size", "65537"}}}, "group_size=65537 outside 1..65536"},
      {{.params = {{"group_size", "12x"}}}, "not a decimal integer"},
  };
  for (const auto& [options, message] : cases) {
    auto bytes = Encode(cache, options);
    ASSERT_FALSE(bytes.ok()) << message;
    EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bytes.status().message().find(message), std::string::npos) << bytes.status().ToString();
  }
}

TEST(QuantCodec, DamagedFilesAreCorrupt) {
  const KvShape shape{2, 1, 6, 5};
  const auto good4 = Encode(MakeCache(shape, DType::kF16, 8), {.level = "4", .params = {{"group_size", "4"}}}).value();
  const auto good8 = Encode(MakeCache(shape, DType::kF16, 8), {.level = "8", .params = {{"group_size", "4"}}}).value();
  using Edit = std::function<void(KvcHeader&, std::vector<KvcSection>&)>;
  const std::vector<std::tuple<const char*, const std::vector<uint8_t>*, Edit>> edits = {
      {"short K", &good4, [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.pop_back(); }},
      {"long V", &good8, [](KvcHeader&, std::vector<KvcSection>& s) { s[1].bytes.push_back(0); }},
      {"missing V", &good8, [](KvcHeader&, std::vector<KvcSection>& s) { s.pop_back(); }},
      {"extra section", &good8,
       [](KvcHeader&, std::vector<KvcSection>& s) {
         s.push_back({0x56, {}});
       }},
      {"swapped tags", &good8, [](KvcHeader&, std::vector<KvcSection>& s) { std::swap(s[0].tag, s[1].tag); }},
      {"no params", &good8, [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params.clear(); }},
      {"long params", &good8, [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params.push_back(0); }},
      {"bits 5", &good8,
       [](KvcHeader& h, std::vector<KvcSection>&) {
         h.codec_params[0] = 5;
         h.level = "5";
       }},
      {"group 0", &good8, [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params[1] = 0; }},
      {"group 2^32-1", &good8,
       [](KvcHeader& h, std::vector<KvcSection>&) { std::fill_n(&h.codec_params[1], 4, 0xff); }},
      {"level says 4", &good8, [](KvcHeader& h, std::vector<KvcSection>&) { h.level = "4"; }},
      {"bits say 8", &good4, [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params[0] = 8; }},
      {"group 5", &good8, [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params[1] = 5; }},
      {"more tokens", &good4, [](KvcHeader& h, std::vector<KvcSection>&) { ++h.shape.n_tokens; }},
      {"inf min", &good8,
       [](KvcHeader&, std::vector<KvcSection>& s) {
         s[0].bytes[1] = 0x7c;
         s[0].bytes[0] = 0;
       }},
      {"NaN scale", &good8, [](KvcHeader&, std::vector<KvcSection>& s) { s[1].bytes[7] = 0x7e; }},
      {"negative scale", &good8, [](KvcHeader&, std::vector<KvcSection>& s) { s[1].bytes[3] |= 0x80; }},
      // 6 channels x 5 tokens = 30 codes per layer: even, so use a one-layer odd case below.
  };
  for (const auto& [name, good, edit] : edits) {
    ExpectEditIsCorrupt(*good, name, edit);
  }

  // 3 x 5 = 15 codes: the last byte of each layer's code block has a padding nibble.
  const auto odd = Encode(MakeCache({1, 1, 3, 5}, DType::kF16, 9), {.level = "4"}).value();
  ASSERT_TRUE(DecodeKvc(odd).ok());
  auto damaged = DecodeKvc(Rewrite(odd, [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.back() |= 0x10; }));
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(damaged.status().message().find("padding"), std::string::npos) << damaged.status().ToString();
}

TEST(QuantCodec, KeysOnlyFileHoldsKAloneAndDecodesKeysOnly) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 256, .keys_only = true};
  const KvCache cache = MakeCache(shape, DType::kF16, 21);
  for (const char* level : {"8", "4"}) {
    const auto bytes = Encode(cache, {.level = level}).value();
    const KvcFile file = ReadKvc(bytes).value();
    EXPECT_TRUE(file.header.shape.keys_only);
    ASSERT_EQ(file.sections.size(), 1u);
    EXPECT_EQ(file.sections[0].tag, 0x4Bu);
    auto decoded = DecodeKvc(bytes, &kFp, {}, DecodeExpect().Shape(shape));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->shape(), file.header.shape);
    EXPECT_TRUE(decoded->Bytes(KvKind::kValue).empty());
    // The ratio is against K alone (fp16_bytes counts only the kinds the cache has).
    const double ratio = static_cast<double>(shape.fp16_bytes()) / static_cast<double>(bytes.size());
    EXPECT_GE(ratio, level[0] == '8' ? 1.9 : 3.5) << level;
  }
}

// A keys-only section is the K section of the same keys with V: V never shapes how K is coded.
TEST(QuantCodec, KeysOnlySectionIsTheFullFilesK) {
  const KvShape shape{2, 2, 16, 45};
  const KvCache full = MakeCache(shape, DType::kF16, 22);
  KvShape keys_shape = shape;
  keys_shape.keys_only = true;
  KvCache keys = KvCache::Create(keys_shape, DType::kF16).value();
  std::ranges::copy(full.Bytes(KvKind::kKey), keys.Bytes(KvKind::kKey).begin());
  for (const char* level : {"8", "4"}) {
    const EncodeOptions options{.level = level, .params = {{"group_size", "8"}}};
    const auto full_bytes = Encode(full, options).value();
    const auto keys_bytes = Encode(keys, options).value();
    EXPECT_TRUE(std::ranges::equal(ReadKvc(full_bytes)->sections[0].bytes, ReadKvc(keys_bytes)->sections[0].bytes))
        << level;
  }
}

TEST(QuantCodec, KeysOnlyKindMismatchesAreCorrupt) {
  const KvShape shape{2, 1, 6, 5, true};
  const auto keys = Encode(MakeCache(shape, DType::kF16, 23), {.level = "4", .params = {{"group_size", "4"}}}).value();
  KvShape both_shape = shape;
  both_shape.keys_only = false;
  const auto both = Encode(MakeCache(both_shape, DType::kF16, 23), {.level = "8"}).value();
  ASSERT_TRUE(DecodeKvc(keys).ok());
  using Edit = std::function<void(KvcHeader&, std::vector<KvcSection>&)>;
  const std::vector<std::tuple<const char*, const std::vector<uint8_t>*, Edit>> edits = {
      {"keys-only NaN scale", &keys, [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes[3] = 0x7e; }},
  };
  for (const auto& [name, good, edit] : edits) {
    ExpectEditIsCorrupt(*good, name, edit);
  }
  ExpectKindMismatchesAreCorrupt(keys, both);
}

}  // namespace
}  // namespace kvc
