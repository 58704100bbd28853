#include "codecs/rotquant/rotquant_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <random>
#include <tuple>

#include "base/half.h"
#include "base/vector_isa.h"
#include "codecs/quant/quant_codec.h"
#include "codecs/rotquant/rotquant_kernels.h"
#include "codecs/test_kv.h"
#include "tensor/synthetic_kv.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kFp{6, 5, 4};

Result<std::vector<uint8_t>> Encode(const KvCache& cache, const EncodeOptions& options) {
  return EncodeKvc(*FindCodec("rotquant"), cache.View(), options, kFp, 0);
}

// Squared error over squared signal, K and V together (K alone for a keys-only cache).
double RelativeError(const KvCache& a, const KvCache& b) {
  double err = 0, energy = 0;
  std::vector<float> x(a.shape().layer_elems()), y(x.size());
  for (KvKind kind : a.shape().kinds()) {
    for (uint32_t l = 0; l < a.shape().n_layers; ++l) {
      a.View().ReadLayerF32(kind, l, x.data());
      b.View().ReadLayerF32(kind, l, y.data());
      for (size_t i = 0; i < x.size(); ++i) {
        err += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
        energy += double{x[i]} * x[i];
      }
    }
  }
  return energy > 0 ? err / energy : err;
}

// The Lloyd-Max quantiser's mean squared error on N(0, 1) at 2, 3, 4 bits: what a rotated
// vector against its own RMS should lose, plus the scale code's rounding and fp16 output.
constexpr double kLloydMaxMse[] = {0, 0, 0.1175, 0.03455, 0.009501};

class RotQuantLevels : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(RotQuantLevels, ErrorIsTheGaussianQuantisersWhateverTheChannelStructure) {
  const auto [bits, dim] = GetParam();
  const KvShape shape{.n_layers = 2, .n_kv_heads = 3, .head_dim = dim, .n_tokens = 200};
  // Keys with loud channels and offsets, values correlated in time: after the rotation both
  // look Gaussian to the quantiser.
  const KvCache cache = MakeCache(shape, 5);
  auto bytes = Encode(cache, {.level = std::to_string(bits), .params = {}});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto decoded = DecodeKvc(*bytes, &kFp);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const double rel = RelativeError(cache, *decoded);
  // A power-of-two dimension mixes every channel; others mix within their power-of-two blocks.
  const double slack = (dim & (dim - 1)) == 0 ? 1.2 : 1.5;
  EXPECT_LT(rel, kLloydMaxMse[bits] * slack) << bits << " bits, dim " << dim;
  EXPECT_GT(rel, kLloydMaxMse[bits] * 0.6) << bits << " bits, dim " << dim;
  // bits per value: the codes, one scale byte per vector, two bytes per layer, the container.
  const double fp16 = 2.0 * shape.elems() * 2;
  const double payload = 2.0 * shape.n_layers * (2 + 200.0 * 3 + std::ceil(200.0 * 3 * dim * bits / 8));
  EXPECT_GT(fp16 / bytes->size(), 0.97 * fp16 / payload);
}

INSTANTIATE_TEST_SUITE_P(BitsAndHeadDims, RotQuantLevels,
                         ::testing::Combine(::testing::Values(2u, 3u, 4u),
                                            ::testing::Values(64u, 128u, 96u, 24u, 576u)));

// Keys-only caches (an MLA latent, an indexer's keys) at MLA's 576 (blocks of 512 and 64) and at a
// single 128-wide head: the same error as K and V, and a 'K' section alone.
class RotQuantKeysOnly : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(RotQuantKeysOnly, ErrorIsTheGaussianQuantisersAndOnlyKIsStored) {
  const auto [bits, dim] = GetParam();
  const KvShape shape{.n_layers = 2, .n_kv_heads = 1, .head_dim = dim, .n_tokens = 300, .keys_only = true};
  const KvCache cache = MakeCache(shape, 5);
  auto bytes = Encode(cache, {.level = std::to_string(bits), .params = {}});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const KvcFile file = ReadKvc(*bytes).value();
  EXPECT_EQ(file.header.shape, shape);
  ASSERT_EQ(file.sections.size(), 1u);
  EXPECT_EQ(file.sections[0].tag, KvSectionTag(KvKind::kKey));
  const double payload = shape.n_layers * (2 + 300.0 + std::ceil(300.0 * dim * bits / 8));
  EXPECT_EQ(file.sections[0].bytes.size(), payload);
  auto decoded = DecodeKvc(*bytes, &kFp);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->shape(), shape);
  EXPECT_TRUE(decoded->Bytes(KvKind::kValue).empty());
  const double rel = RelativeError(cache, *decoded);
  const double slack = (dim & (dim - 1)) == 0 ? 1.2 : 1.5;
  EXPECT_LT(rel, kLloydMaxMse[bits] * slack) << bits << " bits, dim " << dim;
  EXPECT_GT(rel, kLloydMaxMse[bits] * 0.6) << bits << " bits, dim " << dim;
  const double fp16 = static_cast<double>(shape.fp16_bytes());
  EXPECT_GT(fp16 / bytes->size(), 0.97 * fp16 / payload);
}

INSTANTIATE_TEST_SUITE_P(BitsAndHeadDims, RotQuantKeysOnly,
                         ::testing::Combine(::testing::Values(2u, 3u, 4u), ::testing::Values(576u, 128u)));

// The codes of rotated vectors ([vector][dim]) against their scales, packed LSB first, as the
// format defines them: each value over its vector's scale gets the number of thresholds below it.
std::vector<uint8_t> ReferenceCodes(const rotquant::LayerCoder& coder, const std::vector<float>& rotated, uint32_t dim,
                                    const std::vector<uint8_t>& scales, float top) {
  const uint32_t bits = std::bit_width(coder.levels().size()) - 1;
  std::vector<uint8_t> codes(coder.CodeBytes(scales.size()));
  uint64_t at = 0;
  for (size_t vi = 0; vi < scales.size(); ++vi) {
    const float scale = rotquant::ScaleOf(top, scales[vi]);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (uint32_t c = 0; c < dim; ++c, at += bits) {
      const float u = rotated[vi * dim + c] * inv;
      uint32_t q = 0;
      for (float t : coder.thresholds()) q += u > t ? 1u : 0u;
      for (uint32_t k = 0; k < bits; ++k) codes[(at + k) / 8] |= static_cast<uint8_t>(((q >> k) & 1) << ((at + k) % 8));
    }
  }
  return codes;
}

// Every vector path gives the portable path's bits: rotated values and RMS, codes, and decoded
// values, at every width and at head dims with one block, several, and none a multiple of 8.
TEST(RotQuantKernels, EveryPathGivesTheSameBits) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (VectorIsa isa : SupportedVectorIsas()) {
    for (uint32_t dim : {3u, 8u, 16u, 24u, 64u, 96u, 128u, 256u, 576u}) {
      for (uint32_t bits : {2u, 3u, 4u}) {
        SCOPED_TRACE(testing::Message() << VectorIsaName(isa) << " dim " << dim << " bits " << bits);
        const uint32_t heads = 3;
        const uint64_t n = 20 * heads;
        rotquant::LayerCoder coder(dim, heads, bits);
        coder.SetSigns(7, 1, 5);
        std::vector<float> x(n * dim);
        for (float& v : x) v = 3 * normal(rng) + (rng() % 7 == 0 ? 40.0f : 0.0f);
        std::vector<uint16_t> x16(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          x16[i] = Fp32ToFp16(x[i]);
          x[i] = Fp16ToFp32(x16[i]);  // values an fp16 cache holds, so both inputs agree
        }
        std::vector<float> a = x, b = x;
        std::vector<double> rms_a(n), rms_b(n);
        coder.Rotate(a.data(), n, rms_a.data(), VectorIsa::kPortable);
        coder.Rotate(b.data(), n, rms_b.data(), isa);
        ASSERT_EQ(a, b);
        ASSERT_EQ(rms_a, rms_b);
        const float top = Fp16ToFp32(Fp32ToFp16Up(static_cast<float>(*std::max_element(rms_a.begin(), rms_a.end()))));
        std::vector<uint8_t> scales(n);
        for (uint64_t i = 0; i < n; ++i) scales[i] = rotquant::ScaleCode(rms_a[i], top);
        const std::vector<uint8_t> codes_a = ReferenceCodes(coder, a, dim, scales, top);
        // The encoder's one pass: the same bits on every path and from fp16, and the codes of
        // the rotated values but for a rare last-bit difference in a value's scaling.
        std::vector<uint8_t> one_scales_a(n), one_scales_b(n), one_scales_c(n);
        std::vector<uint8_t> one_a(codes_a.size()), one_b(codes_a.size()), one_c(codes_a.size());
        const uint16_t top_a = coder.Code(x.data(), n, one_scales_a.data(), one_a.data(), VectorIsa::kPortable);
        ASSERT_EQ(coder.Code(x.data(), n, one_scales_b.data(), one_b.data(), isa), top_a);
        ASSERT_EQ(coder.CodeFp16(x16.data(), n, one_scales_c.data(), one_c.data(), isa), top_a);
        ASSERT_EQ(one_scales_a, one_scales_b);
        ASSERT_EQ(one_scales_a, one_scales_c);
        ASSERT_EQ(one_a, one_b);
        ASSERT_EQ(one_a, one_c);
        EXPECT_EQ(Fp16ToFp32(top_a), top);
        size_t same_scales = 0, same_bytes = 0;
        for (uint64_t i = 0; i < n; ++i) same_scales += one_scales_a[i] == scales[i];
        for (size_t i = 0; i < one_a.size(); ++i) same_bytes += one_a[i] == codes_a[i];
        EXPECT_GE(same_scales, n - 2);
        EXPECT_GE(same_bytes, one_a.size() * 99 / 100);
        std::vector<float> y_a(n * dim), y_b(n * dim);
        coder.Reconstruct(codes_a.data(), n, scales.data(), top, y_a.data(), VectorIsa::kPortable);
        coder.Reconstruct(codes_a.data(), n, scales.data(), top, y_b.data(), isa);
        ASSERT_EQ(y_a, y_b);
        std::vector<uint16_t> h_a(n * dim), h_b(n * dim);
        coder.ReconstructFp16(codes_a.data(), n, scales.data(), top, h_a.data(), VectorIsa::kPortable);
        coder.ReconstructFp16(codes_a.data(), n, scales.data(), top, h_b.data(), isa);
        ASSERT_EQ(h_a, h_b);
        for (size_t i = 0; i < h_a.size(); ++i) ASSERT_EQ(h_a[i], Fp32ToFp16(y_a[i])) << i;
      }
    }
  }
}

// fp16 caches are read and written in the rotation's own pass; other dtypes through fp32 rows.
// Both give the same codes and, rounded to fp16, the same values, at every head dim kind.
TEST(RotQuantCodec, Fp16AndFp32CachesCodeAndDecodeAlike) {
  for (uint32_t dim : {64u, 96u, 256u, 12u, 576u}) {
    SCOPED_TRACE(dim);
    const KvCache half = MakeCache({.n_layers = 2, .n_kv_heads = 2, .head_dim = dim, .n_tokens = 33}, 4);
    const KvCache single = half.ConvertTo(DType::kF32).value();
    const std::vector<uint8_t> bytes_half = Encode(half, {}).value(), bytes_single = Encode(single, {}).value();
    const KvcFile file_half = ReadKvc(bytes_half).value(), file_single = ReadKvc(bytes_single).value();
    ASSERT_EQ(file_half.sections.size(), file_single.sections.size());
    for (size_t i = 0; i < file_half.sections.size(); ++i)
      EXPECT_TRUE(std::ranges::equal(file_half.sections[i].bytes, file_single.sections[i].bytes)) << i;
    const KvCache back_half = DecodeKvc(bytes_half).value();
    const KvCache back_single = DecodeKvc(bytes_single).value();
    EXPECT_EQ(back_half.dtype(), DType::kF16);
    EXPECT_EQ(back_single.dtype(), DType::kF32);
    EXPECT_TRUE(back_single.ConvertTo(DType::kF16).value() == back_half);
  }
}

TEST(RotQuantCodec, InfoAndRatios) {
  const CodecInfo& info = FindCodec("rotquant")->info();
  EXPECT_EQ(info.id, RotQuantCodec::kId);
  EXPECT_EQ(info.levels, (std::vector<std::string>{"4", "3", "2"}));
  EXPECT_FALSE(info.needs_calibration);
  // 3 bits at head_dim 64: 64 * 3 + 8 bits per vector, 5.12x of fp16 before the container.
  const KvCache cache = MakeCache({.n_layers = 2, .n_kv_heads = 2, .head_dim = 64, .n_tokens = 256}, 1);
  const double fp16 = 2.0 * cache.shape().elems() * 2;
  EXPECT_GT(fp16 / Encode(cache, {.level = "3"}).value().size(), 5.0);
  EXPECT_GT(fp16 / Encode(cache, {.level = "4"}).value().size(), 3.85);  // 4 + 8 / 64 bits
  EXPECT_GT(fp16 / Encode(cache, {.level = "2"}).value().size(), 7.5);
  EXPECT_EQ(Encode(cache, {}).value(), Encode(cache, {.level = "3"}).value());
}

TEST(RotQuantCodec, BeatsUnrotatedFourBitsOnOutlierKeys) {
  // Loud fixed channels are what KIVI's per-channel groups are for; the rotation spreads them.
  const KvShape shape{.n_layers = 1, .n_kv_heads = 2, .head_dim = 64, .n_tokens = 256};
  const KvCache keys = OutlierKeysKv(shape, DType::kF16, 3);
  const auto rot = DecodeKvc(Encode(keys, {.level = "4"}).value()).value();
  const auto kivi =
      DecodeKvc(EncodeKvc(*FindCodec("quant"), keys.View(), {.level = "4", .params = {}}, kFp, 0).value()).value();
  EXPECT_LT(RelativeError(keys, rot), RelativeError(keys, kivi));
}

TEST(RotQuantCodec, TheSeedPicksTheRotation) {
  const KvCache cache = MakeCache({.n_layers = 1, .n_kv_heads = 2, .head_dim = 32, .n_tokens = 64}, 2);
  const auto a = Encode(cache, {.level = "3", .params = {{"seed", "1"}}}).value();
  const auto b = Encode(cache, {.level = "3", .params = {{"seed", "2"}}}).value();
  EXPECT_NE(a, b);
  EXPECT_EQ(a, Encode(cache, {.level = "3", .params = {{"seed", "1"}}}).value());
  const double ea = RelativeError(cache, DecodeKvc(a).value());
  const double eb = RelativeError(cache, DecodeKvc(b).value());
  EXPECT_NEAR(ea, eb, 0.3 * ea);
}

TEST(RotQuantCodec, ZerosAndEmptyCaches) {
  KvCache zeros = KvCache::Create({.n_layers = 2, .n_kv_heads = 1, .head_dim = 8, .n_tokens = 5}, DType::kF16).value();
  auto decoded = DecodeKvc(Encode(zeros, {.level = "2"}).value());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == zeros);
  const KvCache empty =
      KvCache::Create({.n_layers = 2, .n_kv_heads = 1, .head_dim = 8, .n_tokens = 0}, DType::kF16).value();
  auto decoded_empty = DecodeKvc(Encode(empty, {.level = "4"}).value());
  ASSERT_TRUE(decoded_empty.ok()) << decoded_empty.status().ToString();
  EXPECT_EQ(decoded_empty->shape().n_tokens, 0u);
}

TEST(RotQuantCodec, ExtremeMagnitudesStayFinite) {
  const KvShape shape{.n_layers = 1, .n_kv_heads = 1, .head_dim = 16, .n_tokens = 8};
  const KvCache loud = FillKv(
      shape, DType::kF16, 0, [](KvKind, uint32_t, uint32_t t, size_t c) { return (c + t) % 2 ? 65504.0f : -65504.0f; });
  auto decoded = DecodeKvc(Encode(loud, {.level = "2"}).value());
  ASSERT_TRUE(decoded.ok());
  std::vector<float> x(shape.layer_elems());
  decoded->View().ReadLayerF32(KvKind::kKey, 0, x.data());
  for (float v : x) EXPECT_TRUE(std::isfinite(v));
}

TEST(RotQuantCodec, BadOptionsAreClearErrors) {
  const KvCache cache = MakeCache({.n_layers = 1, .n_kv_heads = 1, .head_dim = 8, .n_tokens = 4}, 1);
  const std::vector<std::pair<EncodeOptions, std::string>> cases = {
      {{.level = "8"}, "rotquant levels: 4, 3, 2"},
      {{.level = "3", .params = {{"seed", "-1"}}}, "seed"},
      {{.level = "3", .params = {{"group_size", "4"}}}, "group_size"},
  };
  for (const auto& [options, message] : cases) {
    auto bytes = Encode(cache, options);
    ASSERT_FALSE(bytes.ok()) << message;
    EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bytes.status().message().find(message), std::string::npos) << bytes.status().ToString();
  }
}

TEST(RotQuantCodec, DamagedFilesAreCorrupt) {
  // 5 tokens x 1 head x 3 dims x 3 bits = 45 bits: each layer's last code byte has 3 padding bits.
  const auto good =
      Encode(MakeCache({.n_layers = 2, .n_kv_heads = 1, .head_dim = 3, .n_tokens = 5}, 4), {.level = "3"}).value();
  ASSERT_TRUE(DecodeKvc(good).ok());
  using Edit = std::function<void(KvcHeader&, std::vector<KvcSection>&)>;
  const std::vector<std::pair<const char*, Edit>> edits = {
      {"short K", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.pop_back(); }},
      {"long V", [](KvcHeader&, std::vector<KvcSection>& s) { s[1].bytes.push_back(0); }},
      {"missing V", [](KvcHeader&, std::vector<KvcSection>& s) { s.pop_back(); }},
      {"no params", [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params.clear(); }},
      {"long params", [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params.push_back(0); }},
      {"bits 5",
       [](KvcHeader& h, std::vector<KvcSection>&) {
         h.codec_params[0] = 5;
         h.level = "5";
       }},
      {"level says 4", [](KvcHeader& h, std::vector<KvcSection>&) { h.level = "4"; }},
      {"more tokens", [](KvcHeader& h, std::vector<KvcSection>&) { ++h.shape.n_tokens; }},
      {"inf top", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes[1] = 0x7c; }},
      {"negative top", [](KvcHeader&, std::vector<KvcSection>& s) { s[1].bytes[1] |= 0x80; }},
      {"padding bits", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.back() |= 0x80; }},
  };
  for (const auto& [name, edit] : edits) {
    ExpectEditIsCorrupt(good, name, edit);
  }
}

// A keys-only section is the K section of the same keys with V: the rotation's signs and the
// layer's top depend on K alone.
TEST(RotQuantCodec, KeysOnlySectionIsTheFullFilesK) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 20};
  const KvCache full = MakeCache(shape, 7);
  KvShape keys_shape = shape;
  keys_shape.keys_only = true;
  KvCache keys = KvCache::Create(keys_shape, DType::kF16).value();
  std::ranges::copy(full.Bytes(KvKind::kKey), keys.Bytes(KvKind::kKey).begin());
  for (const char* level : {"4", "3", "2"}) {
    const auto full_bytes = Encode(full, {.level = level, .params = {}}).value();
    const auto keys_bytes = Encode(keys, {.level = level, .params = {}}).value();
    EXPECT_TRUE(std::ranges::equal(ReadKvc(full_bytes)->sections[0].bytes, ReadKvc(keys_bytes)->sections[0].bytes))
        << level;
    // And it decodes to the same keys.
    const KvCache a = DecodeKvc(full_bytes).value();
    const KvCache b = DecodeKvc(keys_bytes).value();
    EXPECT_TRUE(std::ranges::equal(a.Bytes(KvKind::kKey), b.Bytes(KvKind::kKey))) << level;
  }
}

TEST(RotQuantCodec, KeysOnlyKindMismatchesAreCorrupt) {
  // 5 tokens x 1 head x 3 dims x 3 bits = 45 bits: each layer's last code byte has 3 padding bits.
  const auto keys =
      Encode(MakeCache({.n_layers = 2, .n_kv_heads = 1, .head_dim = 3, .n_tokens = 5, .keys_only = true}, 4),
             {.level = "3"})
          .value();
  const auto both =
      Encode(MakeCache({.n_layers = 2, .n_kv_heads = 1, .head_dim = 3, .n_tokens = 5}, 4), {.level = "3"}).value();
  ASSERT_TRUE(DecodeKvc(keys).ok());
  using Edit = std::function<void(KvcHeader&, std::vector<KvcSection>&)>;
  const std::vector<std::tuple<const char*, const std::vector<uint8_t>*, Edit>> edits = {
      {"keys-only padding bits", &keys, [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.back() |= 0x80; }},
      {"keys-only negative top", &keys, [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes[1] |= 0x80; }},
  };
  for (const auto& [name, good, edit] : edits) {
    ExpectEditIsCorrupt(*good, name, edit);
  }
  ExpectKindMismatchesAreCorrupt(keys, both);
}

}  // namespace
}  // namespace kvc
