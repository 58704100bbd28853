#include "codecs/kvtc/kvtc_codec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "codecs/kvtc/kvtc_test_calibration.h"
#include "codecs/test_kv.h"
#include "transform_coding/calibration_registry.h"
#include "transform_coding/code_stream.h"
#include "transform_coding/component_quantizer.h"
#include "transform_coding/kvcal.h"

namespace kvc {
namespace {

using kvtc_test::kTestFingerprint;
using kvtc_test::MakeTestCache;
using kvtc_test::MakeTestCalibration;
using kvtc_test::TestCalibrationSpec;

constexpr uint32_t kTagExempt = 0x58;  // 'X'
constexpr uint32_t kTagScales = 0x53;  // 'S'
constexpr uint32_t kTagCodes = 0x43;   // 'C'

const Codec& Kvtc() { return *FindCodec("kvtc"); }

// The calibrations the round-trip tests run over: every grouping, both RoPE layouts, partial
// rotation, keys fitted with and without RoPE undone, a group size that does not divide the
// basis dimension.
const TestCalibrationSpec kSpecs[] = {
    {.grouping = KvtcGrouping::kLayer, .seed = 1},
    {.grouping = KvtcGrouping::kLayerHead,
     .rope = {.type = RopeType::kNeox, .n_rot = 4, .freq_base = 500000.0f, .freq_scale = 0.5f},
     .seed = 2},
    {.grouping = KvtcGrouping::kAll, .keys_rope_undone = false, .seed = 3},
    {.grouping = KvtcGrouping::kAll, .group_size = 3, .seed = 4},
    {.grouping = KvtcGrouping::kLayer, .seed = 5, .quantizer = KvtcQuantizer::kComponent},
    {.grouping = KvtcGrouping::kLayerHead,
     .rope = {.type = RopeType::kNeox, .n_rot = 4, .freq_base = 500000.0f, .freq_scale = 0.5f},
     .seed = 6,
     .quantizer = KvtcQuantizer::kComponent},
    // A model without RoPE (GPT-2, BLOOM): keys coded as stored.
    {.grouping = KvtcGrouping::kLayer, .rope = {.type = RopeType::kNone}, .keys_rope_undone = false, .seed = 7},
    // Caches of keys alone (an MLA latent cache, an indexer's): K bases and bits only.
    {.grouping = KvtcGrouping::kLayer,
     .rope = {.type = RopeType::kNone},
     .keys_rope_undone = false,
     .seed = 9,
     .keys_only = true},
    {.grouping = KvtcGrouping::kLayerHead,
     .rope = {.type = RopeType::kNeox, .n_rot = 4, .freq_base = 500000.0f, .freq_scale = 0.5f},
     .seed = 10,
     .quantizer = KvtcQuantizer::kComponent,
     .keys_only = true},
    {.grouping = KvtcGrouping::kAll, .group_size = 3, .seed = 11, .keys_only = true},
};
const char* const kSpecNames[] = {"layer",
                                  "layer_head_neox",
                                  "all_no_rope",
                                  "all_group3",
                                  "component_layer",
                                  "component_layer_head_neox",
                                  "layer_rope_none",
                                  "keys_only_layer_rope_none",
                                  "keys_only_component_layer_head_neox",
                                  "keys_only_all_group3"};
static_assert(std::size(kSpecNames) == std::size(kSpecs));

// One calibration in a registry, and contexts over it.
class Env {
 public:
  explicit Env(const TestCalibrationSpec& spec) : Env(MakeTestCalibration(spec)) {}
  explicit Env(const KvtcCalibration& cal) { loaded_ = registry_.Add(cal).value(); }
  const KvtcCalibration& cal() const { return loaded_->calibration; }
  const Hash128& hash() const { return loaded_->hash; }
  CalibrationRegistry* registry() { return &registry_; }
  CodecContext context(ThreadPool* pool = nullptr) { return {&registry_, &fingerprint_, pool}; }

  Result<std::vector<uint8_t>> Encode(const KvView& kv, const EncodeOptions& options, ThreadPool* pool = nullptr,
                                      uint32_t token_begin = 0) {
    return EncodeKvc(Kvtc(), kv, options, kTestFingerprint, token_begin, context(pool));
  }
  Result<KvCache> Decode(std::span<const uint8_t> bytes, ThreadPool* pool = nullptr) {
    return DecodeKvc(bytes, &fingerprint_, context(pool));
  }

 private:
  CalibrationRegistry registry_;
  std::shared_ptr<const LoadedCalibration> loaded_;
  ModelFingerprint fingerprint_ = kTestFingerprint;
};

EncodeOptions Options(const std::string& level, uint32_t sinks, uint32_t window, const std::string& entropy = "rans") {
  return {.level = level,
          .params = {{"sinks", std::to_string(sinks)}, {"window", std::to_string(window)}, {"entropy", entropy}}};
}

std::vector<KvcSection> SectionsOf(std::span<const uint8_t> bytes) {
  std::vector<KvcSection> sections;
  Rewrite(bytes, [&](KvcHeader&, std::vector<KvcSection>& s) { sections = s; });
  return sections;
}

// The exempt-token rule (docs/format.md, kvtc): positions below `sinks` and the last `window`
// tokens.
struct Exempt {
  uint32_t prefix, suffix;
};
Exempt ExemptOf(uint32_t n_tokens, int32_t pos_begin, uint32_t sinks, uint32_t window) {
  const int64_t sink_tokens = std::clamp<int64_t>(int64_t{sinks} - pos_begin, 0, n_tokens);
  const uint32_t prefix = static_cast<uint32_t>(sink_tokens);
  return {prefix, std::min(window, n_tokens - prefix)};
}

// Exempt rows come back as the fp16 rounding of the input: bit for bit for an fp16 cache.
void ExpectExemptExact(const KvCache& in, const KvCache& out, Exempt ex) {
  const KvShape& s = in.shape();
  const size_t row = s.row_elems();
  for (KvKind kind : s.kinds()) {
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      for (uint32_t t = 0; t < s.n_tokens; ++t) {
        if (t >= ex.prefix && t < s.n_tokens - ex.suffix) continue;
        if (in.dtype() == DType::kF16) {
          const auto a = in.RowBytes(kind, l, t, 1);
          const auto b = out.RowBytes(kind, l, t, 1);
          ASSERT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()))
              << KvKindName(kind) << " layer " << l << " exempt token " << t << " is not bit-exact";
        } else if (in.dtype() == DType::kF32) {
          std::vector<float> x(row), y(row);
          in.ReadRowsF32(kind, l, t, 1, x.data());
          out.ReadRowsF32(kind, l, t, 1, y.data());
          for (size_t i = 0; i < row; ++i) {
            ASSERT_EQ(y[i], Fp16ToFp32(Fp32ToFp16(x[i]))) << KvKindName(kind) << " layer " << l << " token " << t;
          }
        }
      }
    }
  }
}

struct ErrorStats {
  double err2 = 0;     // squared error of the coded tokens
  double signal2 = 0;  // their squared distance from the calibration mean
  double rel() const { return signal2 > 0 ? err2 / signal2 : 0; }
};

// Checks every coded token against the error transform coding allows, per basis slice (the
// features one basis codes for one token): with coefficients a_c of the (RoPE-undone) input on
// the basis and r the part outside its span, the reconstruction error is
//   ||x - x^||^2 = ||r||^2 + sum over dropped components a_c^2
//                          + sum over quantised groups of len * (M / 2^bits)^2 at most,
// M the group's largest |a_c| (its scale) and M / 2^bits half a quantiser step. RoPE is a
// rotation, so the error has the same norm before and after it. Slack: the output dtype's
// rounding, and fp32 arithmetic.
ErrorStats ExpectWithinTransformBound(const KvtcCalibration& c, float ratio, const KvCache& in, const KvCache& out,
                                      Exempt ex) {
  ErrorStats stats;
  const BitAllocation* alloc = nullptr;
  for (const auto& a : c.allocations)
    if (a.target_ratio == ratio) alloc = &a;
  EXPECT_NE(alloc, nullptr);
  if (alloc == nullptr) return stats;
  const KvShape& s = in.shape();
  const uint32_t n = s.n_tokens - ex.prefix - ex.suffix;
  if (n == 0) return stats;
  const size_t row = s.row_elems();
  const uint32_t n_bases = c.n_bases();
  const uint32_t dim = c.basis_dim();
  const double dtype_rel = out.dtype() == DType::kF16 ? 1.0 / 2048 : out.dtype() == DType::kBF16 ? 1.0 / 256 : 0;
  std::vector<size_t> group_offset(c.bases.size() + 1, 0);
  for (uint32_t i = 0; i < c.bases.size(); ++i) group_offset[i + 1] = group_offset[i] + c.n_groups(i);

  int failures = 0;
  for (KvKind kind : s.kinds()) {
    const bool key = kind == KvKind::kKey;
    std::vector<std::vector<float>> x_in(s.n_layers, std::vector<float>(row * n));
    std::vector<std::vector<float>> x_fit(s.n_layers), y_out(s.n_layers, std::vector<float>(row * n));
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      in.ReadRowsF32(kind, l, ex.prefix, n, x_in[l].data());
      out.ReadRowsF32(kind, l, ex.prefix, n, y_out[l].data());
      x_fit[l] = x_in[l];
      if (key && c.keys_rope_undone) {
        RotateRows(c.rope, x_fit[l].data(), n, s.n_kv_heads, s.head_dim,
                   in.pos_begin() + static_cast<int32_t>(ex.prefix), true);
      }
    }
    for (uint32_t b = 0; b < n_bases; ++b) {
      const uint32_t index = (key ? 0 : n_bases) + b;
      const PcaBasis& basis = c.bases[index];
      const std::span<const uint8_t> bits(alloc->bits.data() + group_offset[index], c.n_groups(index));
      std::vector<double> centred(dim), coef(basis.n_components);
      // Component quantiser: each component's step comes from its RMS over the chunk's tokens.
      std::vector<double> component_step(basis.n_components, 0);
      if (c.quantizer == KvtcQuantizer::kComponent) {
        std::vector<double> sum2(basis.n_components, 0), x(dim);
        for (uint32_t t = 0; t < n; ++t) {
          for (uint32_t d = 0; d < dim; ++d) {
            const auto [layer, feature] = kvtc_test::TestFeatureOf(c, b, d);
            x[d] = double{x_fit[layer][size_t{t} * row + feature]} - basis.mean[d];
          }
          for (uint32_t k = 0; k < basis.n_components; ++k) {
            const float* comp = &basis.components[size_t{k} * dim];
            double a = 0;
            for (uint32_t d = 0; d < dim; ++d) a += x[d] * comp[d];
            sum2[k] += a * a;
          }
        }
        for (uint32_t k = 0; k < basis.n_components && k < bits.size(); ++k) {
          if (bits[k] == 0) continue;
          component_step[k] = std::sqrt(sum2[k] / n) * GaussianStep(bits[k]) *
                              basis.step_multipliers[size_t{k} * kKvtcWidths + bits[k] - 1];
        }
      }
      for (uint32_t t = 0; t < n; ++t) {
        double err2 = 0, y2 = 0, x2 = 0;
        for (uint32_t d = 0; d < dim; ++d) {
          const auto [layer, feature] = kvtc_test::TestFeatureOf(c, b, d);
          const size_t at = size_t{t} * row + feature;
          centred[d] = double{x_fit[layer][at]} - basis.mean[d];
          const double e = double{y_out[layer][at]} - x_in[layer][at];
          err2 += e * e;
          y2 += double{y_out[layer][at]} * y_out[layer][at];
          x2 += double{x_in[layer][at]} * x_in[layer][at];
        }
        std::vector<double> residual = centred;
        for (uint32_t k = 0; k < basis.n_components; ++k) {
          const float* comp = &basis.components[size_t{k} * dim];
          double a = 0;
          for (uint32_t d = 0; d < dim; ++d) a += centred[d] * comp[d];
          coef[k] = a;
          for (uint32_t d = 0; d < dim; ++d) residual[d] -= a * comp[d];
        }
        double bound2 = 0, signal2 = 0;
        for (double r : residual) bound2 += r * r;
        for (double v : centred) signal2 += v * v;
        for (uint32_t g = 0; g < bits.size() && c.quantizer == KvtcQuantizer::kComponent; ++g) {
          if (bits[g] == 0) {
            bound2 += coef[g] * coef[g];
            continue;
          }
          // Half a step inside the range, the overshoot past the outermost level outside it;
          // the stored scale is the RMS rounded to fp16 (2^-11 relative).
          const double step = component_step[g] * (1 + 2e-3) + 1e-6;
          const double edge = ((1u << (bits[g] - 1)) - 0.5) * step;
          const double e = std::max(step / 2, std::abs(coef[g]) - edge + step * 1e-3);
          bound2 += e * e;
        }
        for (uint32_t g = 0; g < bits.size() && c.quantizer == KvtcQuantizer::kTokenGroup; ++g) {
          const uint32_t k0 = g * c.group_size;
          const uint32_t len = std::min(c.group_size, basis.n_components - k0);
          if (bits[g] == 0) {
            for (uint32_t k = k0; k < k0 + len; ++k) bound2 += coef[k] * coef[k];
            continue;
          }
          double m = 0;
          for (uint32_t k = k0; k < k0 + len; ++k) m = std::max(m, std::abs(coef[k]));
          const double half_step = (m * (1 + 2e-3) + 1e-6) / (1u << bits[g]);
          bound2 += len * half_step * half_step;
        }
        const double bound = std::sqrt(bound2) * (1 + 1e-3) + dtype_rel * std::sqrt(y2) + 1e-4 * (std::sqrt(x2) + 1);
        const double err = std::sqrt(err2);
        if (!(err <= bound) && ++failures <= 5) {
          ADD_FAILURE() << KvKindName(kind) << " basis " << b << " token " << ex.prefix + t << ": error " << err
                        << " exceeds the transform-coding bound " << bound << " (signal " << std::sqrt(signal2) << ")";
        }
        stats.err2 += err2;
        stats.signal2 += signal2;
      }
    }
  }
  return stats;
}

// ---- Round trips ---------------------------------------------------------------------------

struct ExemptCase {
  uint32_t n_tokens;
  int32_t pos_begin;
  uint32_t sinks, window;
};
const ExemptCase kExemptCases[] = {
    {40, 0, 4, 0},    // sinks only
    {37, 2, 4, 5},    // a chunk starting at position 2: only positions 2 and 3 are sinks
    {30, 700, 4, 3},  // far from the start: no sinks, a window
    {25, 0, 0, 0},    // nothing exempt
};

// (index in kSpecs, level). Plain ints: gtest_discover_tests cannot run names whose printed
// parameters hold quotes.
class KvtcRoundTrip : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(KvtcRoundTrip, ErrorWithinBoundAndExemptTokensExact) {
  const auto& [spec_index, level_number] = GetParam();
  const std::string level = std::to_string(level_number);
  Env env(kSpecs[spec_index]);
  for (const ExemptCase& ec : kExemptCases) {
    SCOPED_TRACE(::testing::Message() << "n_tokens " << ec.n_tokens << " pos_begin " << ec.pos_begin << " sinks "
                                      << ec.sinks << " window " << ec.window);
    const KvCache cache = MakeTestCache(env.cal(), ec.n_tokens, ec.pos_begin, 100 + spec_index);
    auto bytes = env.Encode(cache.View(), Options(level, ec.sinks, ec.window));
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto decoded = env.Decode(*bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_EQ(decoded->shape(), cache.shape());
    ASSERT_EQ(decoded->dtype(), cache.dtype());
    ASSERT_EQ(decoded->pos_begin(), cache.pos_begin());

    const Exempt ex = ExemptOf(ec.n_tokens, ec.pos_begin, ec.sinks, ec.window);
    const auto sections = SectionsOf(*bytes);
    ASSERT_EQ(sections.size(), 3u);
    EXPECT_EQ(sections[0].tag, kTagExempt);
    EXPECT_EQ(sections[1].tag, kTagScales);
    EXPECT_EQ(sections[2].tag, kTagCodes);
    EXPECT_EQ(sections[0].bytes.size(), cache.shape().n_kinds() * cache.shape().n_layers * (ex.prefix + ex.suffix) *
                                            cache.shape().row_elems() * 2);
    ExpectExemptExact(cache, *decoded, ex);
    const ErrorStats stats = ExpectWithinTransformBound(env.cal(), std::stof(level), cache, *decoded, ex);
    // A coarse check on top of the per-token bound: the test allocations' error at each level
    // (per component they drop more: the patterns' zeros hit single large components).
    if (env.cal().quantizer == KvtcQuantizer::kComponent) {
      EXPECT_LT(stats.rel(), level == "4" ? 0.3 : level == "8" ? 0.6 : level == "16" ? 0.9 : 1.5);
    } else {
      EXPECT_LT(stats.rel(), level == "4" ? 0.15 : level == "8" ? 0.25 : level == "16" ? 0.9 : 1.5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kvtc, KvtcRoundTrip,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kSpecs))),
                                            ::testing::Values(4, 8, 16, 64)),
                         [](const auto& info) {
                           return std::string(kSpecNames[std::get<0>(info.param)]) + "_level" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(KvtcCodec, OtherSourceDTypes) {
  Env env(kSpecs[0]);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const KvCache cache = MakeTestCache(env.cal(), 21, 1, 7, dtype);
    const auto bytes = env.Encode(cache.View(), Options("4", 4, 2)).value();
    auto decoded = env.Decode(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_EQ(decoded->dtype(), dtype);
    const Exempt ex = ExemptOf(21, 1, 4, 2);
    ExpectExemptExact(cache, *decoded, ex);
    ExpectWithinTransformBound(env.cal(), 4, cache, *decoded, ex);
  }
}

// A chunk decoded into its place in a prefix buffer that holds anything is the chunk decoded on
// its own, sinks, window and RoPE positions included, and nothing around it is touched.
TEST(KvtcCodec, DecodesIntoItsSliceOfAPrefix) {
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    SCOPED_TRACE(kSpecNames[i]);
    Env env(kSpecs[i]);
    const KvCache chunk = MakeTestCache(env.cal(), 32, 32, 9);
    for (const EncodeOptions& options : {Options("8", 4, 2), Options("16", 40, 0)}) {
      const auto bytes = env.Encode(chunk.View(), options, nullptr, 32).value();
      const KvCache alone = env.Decode(bytes).value();
      KvShape prefix_shape = chunk.shape();
      prefix_shape.n_tokens = 96;
      KvCache prefix = KvCache::Create(prefix_shape, chunk.dtype()).value();
      for (KvKind kind : prefix_shape.kinds()) std::fill(prefix.Bytes(kind).begin(), prefix.Bytes(kind).end(), 0x5A);
      const Status s = DecodeKvcInto(bytes, prefix.Slice(32, 32).value(), &kTestFingerprint, env.context());
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(prefix.View(32, 32).value().Copy().value() == alone);
      for (KvKind kind : prefix_shape.kinds()) {
        for (uint8_t b : prefix.RowBytes(kind, 0, 31, 1)) ASSERT_EQ(b, 0x5A);
        for (uint8_t b : prefix.RowBytes(kind, prefix_shape.n_layers - 1, 64, 1)) ASSERT_EQ(b, 0x5A);
      }
    }
  }
}

// Fewer bits, more error and fewer bytes: the test allocations never give a group more bits at
// a higher ratio.
TEST(KvtcCodec, HigherRatiosLoseMore) {
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    Env env(kSpecs[i]);
    const KvCache cache = MakeTestCache(env.cal(), 64, 0, 5);
    double previous = -1;
    size_t previous_size = SIZE_MAX;
    for (const char* level : {"4", "8", "16", "64"}) {
      const auto bytes = env.Encode(cache.View(), Options(level, 0, 0)).value();
      const KvCache decoded = env.Decode(bytes).value();
      const double rel = ExpectWithinTransformBound(env.cal(), std::stof(level), cache, decoded, {0, 0}).rel();
      EXPECT_GT(rel, previous) << kSpecNames[i] << " level " << level;
      EXPECT_LT(bytes.size(), previous_size) << kSpecNames[i] << " level " << level;
      previous = rel;
      previous_size = bytes.size();
    }
  }
}

// With no RoPE to undo (kNone), or one kvcodec does not undo (vision), keys go through exactly
// the path values do: given V's bases and bits and a cache whose keys equal its values, every
// decoded key equals its value bit for bit, at any position. With normal RoPE undone the same
// setup decodes keys differently (they are rotated back and forth), which shows the test sees
// a rotation where there is one.
TEST(KvtcCodec, KeysWithoutRopeToUndoCodeAsValues) {
  struct Case {
    RopeType type;
    bool undone;
  };
  for (const Case& k : {Case{RopeType::kNone, false}, Case{RopeType::kVision, false}, Case{RopeType::kNormal, true}}) {
    SCOPED_TRACE(RopeTypeName(k.type));
    KvtcCalibration cal = MakeTestCalibration(
        {.grouping = KvtcGrouping::kLayer, .rope = {.type = k.type}, .keys_rope_undone = k.undone, .seed = 8});
    const uint32_t n_bases = cal.n_bases();
    uint32_t key_groups = 0;
    for (uint32_t b = 0; b < n_bases; ++b) {
      cal.bases[n_bases + b] = cal.bases[b];
      key_groups += cal.n_groups(b);
    }
    for (BitAllocation& a : cal.allocations) {
      std::copy_n(a.bits.begin(), key_groups, a.bits.begin() + key_groups);
    }
    Env env(cal);
    KvCache cache = MakeTestCache(env.cal(), 48, 700, 31);
    std::vector<float> rows(cache.shape().row_elems() * 48);
    for (uint32_t l = 0; l < cache.shape().n_layers; ++l) {
      cache.ReadRowsF32(KvKind::kKey, l, 0, 48, rows.data());
      cache.WriteRowsF32(KvKind::kValue, l, 0, 48, rows.data());
    }
    for (const char* level : {"4", "8", "16"}) {
      SCOPED_TRACE(level);
      const auto bytes = env.Encode(cache.View(), Options(level, 4, 4)).value();
      const KvCache decoded = env.Decode(bytes).value();
      bool keys_equal_values = true;
      double key_err2 = 0, value_err2 = 0;
      std::vector<float> in(rows.size()), key(rows.size()), value(rows.size());
      for (uint32_t l = 0; l < cache.shape().n_layers; ++l) {
        const auto k_bytes = decoded.RowBytes(KvKind::kKey, l, 0, 48);
        const auto v_bytes = decoded.RowBytes(KvKind::kValue, l, 0, 48);
        keys_equal_values &= std::equal(k_bytes.begin(), k_bytes.end(), v_bytes.begin(), v_bytes.end());
        cache.ReadRowsF32(KvKind::kKey, l, 0, 48, in.data());
        decoded.ReadRowsF32(KvKind::kKey, l, 0, 48, key.data());
        decoded.ReadRowsF32(KvKind::kValue, l, 0, 48, value.data());
        for (size_t i = 0; i < in.size(); ++i) {
          key_err2 += (double{key[i]} - in[i]) * (double{key[i]} - in[i]);
          value_err2 += (double{value[i]} - in[i]) * (double{value[i]} - in[i]);
        }
      }
      EXPECT_GT(value_err2, 0);  // lossy: the comparison is not trivially of exact copies
      if (k.undone) {
        EXPECT_FALSE(keys_equal_values);
      } else {
        EXPECT_TRUE(keys_equal_values) << "keys were coded differently from equal values";
        EXPECT_EQ(key_err2, value_err2);
      }
      ExpectWithinTransformBound(env.cal(), std::stof(level), cache, decoded, ExemptOf(48, 700, 4, 4));
    }
  }
}

// ---- Keys only -----------------------------------------------------------------------------

// The round-trip limits of the test allocations at each level (as KvtcRoundTrip's).
double RelLimit(const KvtcCalibration& c, const std::string& level) {
  if (c.quantizer == KvtcQuantizer::kComponent) return level == "4" ? 0.3 : level == "8" ? 0.6 : 0.9;
  return level == "4" ? 0.15 : level == "8" ? 0.25 : 0.9;
}

// The caches that keep keys alone: an MLA latent cache (one "head" of 576: the 512-wide latent
// and the 64 rotary channels, coded as stored since no RoPE is undone on it) and an indexer
// cache (one head of 128, NeoX RoPE undone). Only K is coded; V comes back empty.
TEST(KvtcKeysOnly, MlaAndIndexerShapesRoundTrip) {
  struct Case {
    const char* name;
    TestCalibrationSpec spec;
  };
  const Case cases[] = {
      {"mla_token_group",
       {.grouping = KvtcGrouping::kLayer,
        .n_layers = 2,
        .n_kv_heads = 1,
        .head_dim = 576,
        .group_size = 16,
        .rope = {.type = RopeType::kNone},
        .keys_rope_undone = false,
        .seed = 21,
        .keys_only = true}},
      {"mla_component",
       {.grouping = KvtcGrouping::kLayer,
        .n_layers = 2,
        .n_kv_heads = 1,
        .head_dim = 576,
        .rope = {.type = RopeType::kNone},
        .keys_rope_undone = false,
        .seed = 22,
        .quantizer = KvtcQuantizer::kComponent,
        .keys_only = true}},
      {"indexer",
       {.grouping = KvtcGrouping::kLayer,
        .n_layers = 2,
        .n_kv_heads = 1,
        .head_dim = 128,
        .group_size = 8,
        .rope = {.type = RopeType::kNeox, .n_rot = 64, .freq_base = 10000.0f, .freq_scale = 1.0f},
        .seed = 23,
        .keys_only = true}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Env env(c.spec);
    ASSERT_TRUE(env.cal().keys_only);
    ASSERT_EQ(env.cal().bases.size(), env.cal().n_bases());
    const KvCache cache = MakeTestCache(env.cal(), 64, 100, 31);
    ASSERT_TRUE(cache.shape().keys_only);
    for (const char* level : {"4", "8", "16"}) {
      SCOPED_TRACE(level);
      for (const auto& [sinks, window] : {std::pair{0u, 0u}, std::pair{104u, 3u}}) {
        const auto bytes = env.Encode(cache.View(), Options(level, sinks, window));
        ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
        EXPECT_TRUE(ReadKvc(*bytes).value().header.shape.keys_only);
        // Smaller than K alone in fp16, which is all the cache holds.
        EXPECT_LT(bytes->size() * 2, cache.shape().fp16_bytes());
        auto decoded = env.Decode(*bytes);
        ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
        ASSERT_EQ(decoded->shape(), cache.shape());
        EXPECT_TRUE(decoded->Bytes(KvKind::kValue).empty());
        const Exempt ex = ExemptOf(64, 100, sinks, window);
        ExpectExemptExact(cache, *decoded, ex);
        const double rel = ExpectWithinTransformBound(env.cal(), std::stof(level), cache, *decoded, ex).rel();
        EXPECT_LT(rel, RelLimit(env.cal(), level));
      }
    }
  }
}

// A keys-only cache is coded from K alone: a view over K bytes with no V behind it at all
// encodes as the cache does.
TEST(KvtcKeysOnly, NeverReadsValues) {
  Env env(kSpecs[7]);
  ASSERT_TRUE(env.cal().keys_only);
  const KvCache cache = MakeTestCache(env.cal(), 40, 0, 33);
  const auto view = KvView::Over(cache.shape(), cache.dtype(), cache.pos_begin(), cache.Bytes(KvKind::kKey), {});
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const auto from_view = env.Encode(*view, Options("8", 4, 2));
  ASSERT_TRUE(from_view.ok()) << from_view.status().ToString();
  EXPECT_EQ(*from_view, env.Encode(cache.View(), Options("8", 4, 2)).value());
}

// A cache and its calibration must cover the same kinds, both ways, on encode and decode.
TEST(KvtcKeysOnly, CalibrationAndShapeMustAgree) {
  Env full(kSpecs[0]);
  Env keys(kSpecs[7]);
  ASSERT_FALSE(full.cal().keys_only);
  ASSERT_TRUE(keys.cal().keys_only);
  ASSERT_EQ(full.cal().n_layers, keys.cal().n_layers);
  ASSERT_EQ(full.cal().head_dim, keys.cal().head_dim);
  const KvCache full_cache = MakeTestCache(full.cal(), 20, 0, 35);
  const KvCache keys_cache = MakeTestCache(keys.cal(), 20, 0, 37);

  auto r = full.Encode(keys_cache.View(), Options("4", 4, 0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("the KV holds keys only, but the calibration is for keys and values"),
            std::string::npos)
      << r.status().ToString();
  r = keys.Encode(full_cache.View(), Options("4", 4, 0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("the KV holds keys and values, but the calibration is for keys only"),
            std::string::npos)
      << r.status().ToString();

  // A file whose header claims other kinds than the calibration it names covers is damaged.
  const auto keys_file = keys.Encode(keys_cache.View(), Options("4", 4, 2)).value();
  const auto full_file = full.Encode(full_cache.View(), Options("4", 4, 2)).value();
  for (const auto& [name, bytes, env] : {std::tuple{"keys-only file relabelled", keys_file, &keys},
                                         std::tuple{"full file relabelled", full_file, &full}}) {
    SCOPED_TRACE(name);
    const auto bad =
        Rewrite(bytes, [](KvcHeader& h, std::vector<KvcSection>&) { h.shape.keys_only = !h.shape.keys_only; });
    auto decoded = env->Decode(bad);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorrupt) << decoded.status().ToString();
    EXPECT_NE(decoded.status().message().find("the header disagrees with the calibration the file names"),
              std::string::npos)
        << decoded.status().ToString();
    EXPECT_TRUE(env->Decode(bytes).ok());
  }
}

// A model may keep a cache with V and one without (or several without, of other widths), each
// with its calibration: encoding by model alone picks the one that fits the cache, whichever
// was loaded last.
TEST(KvtcKeysOnly, ModelWithBothKindsFindsTheFittingCalibration) {
  for (bool keys_last : {false, true}) {
    SCOPED_TRACE(keys_last ? "keys-only loaded last" : "full loaded last");
    CalibrationRegistry registry;
    std::shared_ptr<const LoadedCalibration> full, keys;
    if (keys_last) {
      full = registry.Add(MakeTestCalibration(kSpecs[0])).value();
      keys = registry.Add(MakeTestCalibration(kSpecs[7])).value();
    } else {
      keys = registry.Add(MakeTestCalibration(kSpecs[7])).value();
      full = registry.Add(MakeTestCalibration(kSpecs[0])).value();
    }
    const CodecContext context{&registry, &kTestFingerprint, nullptr};
    for (const auto& loaded : {full, keys}) {
      const KvCache cache = MakeTestCache(loaded->calibration, 16, 0, 39);
      const auto bytes = EncodeKvc(Kvtc(), cache.View(), Options("8", 0, 0), kTestFingerprint, 0, context);
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      const KvcFile file = ReadKvc(*bytes).value();
      EXPECT_TRUE(std::equal(loaded->hash.begin(), loaded->hash.end(), file.header.codec_params.begin() + 1));
      auto decoded = DecodeKvc(*bytes, &kTestFingerprint, context);
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_EQ(decoded->shape(), cache.shape());
    }
  }
}

// ---- Determinism ---------------------------------------------------------------------------

TEST(KvtcCodec, EncodeIsDeterministicAcrossRunsAndThreads) {
  ThreadPool pool(4);
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    Env env(kSpecs[i]);
    const KvCache cache = MakeTestCache(env.cal(), 50, 3, 9);
    for (const char* entropy : {"rans", "deflate", "none"}) {
      SCOPED_TRACE(::testing::Message() << kSpecNames[i] << " " << entropy);
      const EncodeOptions options = Options("8", 4, 6, entropy);
      const auto a = env.Encode(cache.View(), options).value();
      const auto b = env.Encode(cache.View(), options).value();
      const auto c = env.Encode(cache.View(), options, &pool).value();
      EXPECT_EQ(a, b) << "encoding twice gave different bytes";
      EXPECT_EQ(a, c) << "encoding with a thread pool gave different bytes";
      const KvCache serial = env.Decode(a).value();
      const KvCache parallel = env.Decode(a, &pool).value();
      EXPECT_TRUE(serial == parallel) << "decoding with a thread pool gave a different cache";
    }
  }
}

// The codes are lossless, so the entropy stage cannot change what decodes.
TEST(KvtcCodec, EntropyMethodsDecodeIdentically) {
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    Env env(kSpecs[i]);
    const KvCache cache = MakeTestCache(env.cal(), 120, 0, 21);
    for (const char* level : {"4", "8", "16", "64"}) {
      SCOPED_TRACE(::testing::Message() << kSpecNames[i] << " level " << level);
      const auto none = env.Encode(cache.View(), Options(level, 4, 8, "none")).value();
      const auto deflate = env.Encode(cache.View(), Options(level, 4, 8, "deflate")).value();
      const auto rans = env.Encode(cache.View(), Options(level, 4, 8, "rans")).value();
      const auto rans_codes = env.Encode(cache.View(), Options(level, 4, 8, "rans-codes")).value();
      const KvCache reference = env.Decode(none).value();
      EXPECT_TRUE(env.Decode(deflate).value() == reference);
      EXPECT_TRUE(env.Decode(rans).value() == reference);
      EXPECT_TRUE(env.Decode(rans_codes).value() == reference);
      // Only the codes section differs, and never grows past the bit-packed form.
      const auto s_none = SectionsOf(none), s_deflate = SectionsOf(deflate), s_rans = SectionsOf(rans);
      EXPECT_EQ(s_none[0].bytes, s_rans[0].bytes);
      EXPECT_EQ(s_none[1].bytes, s_rans[1].bytes);
      EXPECT_EQ(s_none[1].bytes, s_deflate[1].bytes);
      EXPECT_EQ(s_none[2].bytes[0], 0);  // method 0: bit-packed
      EXPECT_LE(s_deflate[2].bytes.size(), s_none[2].bytes.size());
      EXPECT_LE(s_rans[2].bytes.size(), s_none[2].bytes.size());
      EXPECT_TRUE(s_deflate[2].bytes[0] == 0 || s_deflate[2].bytes[0] == 1);
      EXPECT_TRUE(s_rans[2].bytes[0] == 0 || s_rans[2].bytes[0] == 4);
      const auto s_rans_codes = SectionsOf(rans_codes);
      EXPECT_LE(s_rans_codes[2].bytes.size(), s_none[2].bytes.size());
      EXPECT_TRUE(s_rans_codes[2].bytes[0] == 0 || s_rans_codes[2].bytes[0] == 2);
      if (std::string(level) == "64") {  // nothing coded: an empty stored block and method 0
        EXPECT_EQ(s_rans[1].bytes, (std::vector<uint8_t>{0, 0}));
        EXPECT_EQ(s_rans[2].bytes, (std::vector<uint8_t>{0}));
      }
    }
  }
}

// ---- Token ranges --------------------------------------------------------------------------

// A chunk from the middle of a sequence: no sinks, and RoPE at positions 700 onwards.
TEST(KvtcCodec, ChunkAtPosition700) {
  Env env(kSpecs[0]);
  const KvCache whole = MakeTestCache(env.cal(), 760, 0, 31);
  const KvView chunk = whole.View(700, 48).value();
  ASSERT_EQ(chunk.pos_begin(), 700);
  const auto bytes = env.Encode(chunk, Options("4", 4, 0), nullptr, 700).value();
  const KvcFile file = ReadKvc(bytes).value();
  EXPECT_EQ(file.header.token_begin, 700u);
  EXPECT_EQ(file.header.pos_begin, 700);
  EXPECT_TRUE(file.sections[0].bytes.empty()) << "no token of the chunk is a sink";
  auto decoded = env.Decode(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->pos_begin(), 700);
  const KvCache expected = chunk.Copy().value();
  ExpectWithinTransformBound(env.cal(), 4, expected, *decoded, {0, 0});

  // The same tokens in a cache of their own starting at position 700 give the same sections.
  KvCache own = expected;
  ASSERT_EQ(own.pos_begin(), 700);
  const auto own_bytes = env.Encode(own.View(), Options("4", 4, 0), nullptr, 700).value();
  EXPECT_EQ(own_bytes, bytes);
}

TEST(KvtcCodec, FewerTokensThanSinks) {
  Env env(kSpecs[1]);
  for (uint32_t n : {0u, 1u, 3u}) {
    for (int32_t pos : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << n << " tokens at " << pos);
      const KvCache cache = MakeTestCache(env.cal(), n, pos, 41);
      const auto bytes = env.Encode(cache.View(), Options("8", 4, 2)).value();
      auto decoded = env.Decode(bytes);
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_TRUE(*decoded == cache) << "every token is exempt, so the cache must come back exactly";
    }
  }
}

TEST(KvtcCodec, NoMiddleTokens) {
  Env env(kSpecs[2]);
  struct Case {
    uint32_t n;
    int32_t pos;
    uint32_t sinks, window;
  };
  for (const Case& c : {Case{7, 0, 4, 3}, Case{5, 100, 4, 5}, Case{4, 100, 4, 9}, Case{6, 1, 3, 4}}) {
    SCOPED_TRACE(::testing::Message() << c.n << " tokens at " << c.pos);
    const KvCache cache = MakeTestCache(env.cal(), c.n, c.pos, 43);
    for (const char* entropy : {"rans", "deflate", "none"}) {
      const auto bytes = env.Encode(cache.View(), Options("4", c.sinks, c.window, entropy)).value();
      auto decoded = env.Decode(bytes);
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_TRUE(*decoded == cache);
    }
  }
}

// ---- Errors --------------------------------------------------------------------------------

TEST(KvtcCodec, MissingCalibrationIsNotFoundNamingTheHash) {
  Env env(kSpecs[0]);
  const KvCache cache = MakeTestCache(env.cal(), 12, 0, 51);
  const auto bytes = env.Encode(cache.View(), Options("4", 4, 0)).value();

  CalibrationRegistry empty;
  auto r = DecodeKvc(bytes, nullptr, {&empty, nullptr, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  EXPECT_NE(r.status().message().find(HexString(env.hash())), std::string::npos) << r.status().ToString();
  // DecodeKvc names the codec once (docs/format.md: "kvtc: calibration <hex> is not loaded").
  EXPECT_EQ(r.status().message().rfind("kvtc: calibration " + HexString(env.hash()) + " is not loaded", 0), 0u)
      << r.status().ToString();

  // Another calibration for the same model is not the one the file names.
  CalibrationRegistry other;
  ASSERT_TRUE(other.Add(MakeTestCalibration({.seed = 77})).ok());
  r = DecodeKvc(bytes, nullptr, {&other, nullptr, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();

  r = DecodeKvc(bytes);  // no registry at all
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
}

TEST(KvtcCodec, FindsTheCalibrationByModelOrFile) {
  Env env(kSpecs[0]);
  const KvCache cache = MakeTestCache(env.cal(), 12, 0, 53);
  // No model and no calibration= parameter: nothing to go on. (EncodeKvc always supplies the
  // model it writes into the header, so this is the codec called on its own.)
  auto direct = Kvtc().Encode(cache.View(), Options("4", 4, 0), {env.registry(), nullptr, nullptr});
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), StatusCode::kInvalidArgument);
  // EncodeKvc finds the calibration by the fingerprint the file will carry.
  EXPECT_TRUE(
      EncodeKvc(Kvtc(), cache.View(), Options("4", 4, 0), kTestFingerprint, 0, {env.registry(), nullptr, nullptr})
          .ok());
  // A model no calibration was loaded for.
  const ModelFingerprint stranger{1, 2, 3};
  auto r = EncodeKvc(Kvtc(), cache.View(), Options("4", 4, 0), stranger, 0, {env.registry(), &stranger, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  // calibration=FILE loads it; the file names it by the hash of those bytes.
  const auto path =
      std::filesystem::temp_directory_path() / ("kvtc_codec_test_" + std::to_string(::getpid()) + ".kvcal");
  ASSERT_TRUE(SaveKvcal(MakeTestCalibration({.seed = 5}), path.string()).ok());
  CalibrationRegistry registry;
  EncodeOptions options = Options("8", 4, 0);
  options.params["calibration"] = path.string();
  // ... but not for a model it was not made for.
  r = EncodeKvc(Kvtc(), cache.View(), options, stranger, 0, {&registry, &stranger, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("another model"), std::string::npos) << r.status().ToString();
  const auto bytes = EncodeKvc(Kvtc(), cache.View(), options, kTestFingerprint, 0, {&registry, nullptr, nullptr});
  std::filesystem::remove(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const KvcFile file = ReadKvc(*bytes).value();
  const auto loaded = registry.Load(path.string()).value();  // already loaded: found by path
  EXPECT_TRUE(std::equal(loaded->hash.begin(), loaded->hash.end(), file.header.codec_params.begin() + 1));
  EXPECT_TRUE(DecodeKvc(*bytes, nullptr, {&registry, nullptr, nullptr}).ok());
}

TEST(KvtcCodec, WrongShapeIsInvalidArgument) {
  Env env(kSpecs[0]);
  const KvCache ok_cache = MakeTestCache(env.cal(), 10, 0, 55);
  for (const KvShape& shape : {KvShape{2, 2, 4, 10}, KvShape{3, 2, 8, 10}, KvShape{2, 1, 8, 10}}) {
    const KvCache cache = KvCache::Create(shape, DType::kF16).value();
    auto r = env.Encode(cache.View(), Options("4", 4, 0));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find("does not match"), std::string::npos) << r.status().ToString();
  }
  // A file whose header shape disagrees with the calibration it names is damaged.
  const auto bytes = env.Encode(ok_cache.View(), Options("4", 4, 0)).value();
  const auto bad = Rewrite(bytes, [](KvcHeader& h, std::vector<KvcSection>&) { h.shape.head_dim = 4; });
  EXPECT_EQ(env.Decode(bad).status().code(), StatusCode::kCorrupt);
}

TEST(KvtcCodec, UnknownLevelListsTheAvailableOnes) {
  Env env(kSpecs[0]);
  const KvCache cache = MakeTestCache(env.cal(), 10, 0, 57);
  auto r = env.Encode(cache.View(), Options("5", 4, 0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("4, 8, 16, 64"), std::string::npos) << r.status().ToString();
  for (const char* level : {"abc", "4x", "", " 4"}) {
    r = env.Encode(cache.View(), Options(level, 4, 0));
    if (std::string(level).empty()) {
      // Empty means the codec's default level, 16, which this calibration has.
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(ReadKvc(*r).value().header.level, "16");
      continue;
    }
    ASSERT_FALSE(r.ok()) << "level '" << level << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(KvtcCodec, UnknownParamsAndValuesRejected) {
  Env env(kSpecs[0]);
  const KvCache cache = MakeTestCache(env.cal(), 10, 0, 59);
  EncodeOptions options = Options("4", 4, 0);
  options.params["group_size"] = "8";
  auto r = env.Encode(cache.View(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("group_size"), std::string::npos) << r.status().ToString();
  for (const auto& [key, value] : {std::pair{"entropy", "zstd"}, std::pair{"sinks", "-1"}, std::pair{"window", "x"},
                                   std::pair{"window", "99999999"}}) {
    options = Options("4", 4, 0);
    options.params[key] = value;
    r = env.Encode(cache.View(), options);
    ASSERT_FALSE(r.ok()) << key << "=" << value;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(KvtcCodec, NonFiniteOrOutOfRangeInputRejected) {
  Env env(kSpecs[0]);
  KvCache cache = MakeTestCache(env.cal(), 10, 0, 61, DType::kF32);
  std::vector<float> row(cache.shape().row_elems());
  cache.ReadRowsF32(KvKind::kValue, 1, 6, 1, row.data());
  row[3] = NAN;
  cache.WriteRowsF32(KvKind::kValue, 1, 6, 1, row.data());
  auto r = env.Encode(cache.View(), Options("4", 4, 0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();

  cache = MakeTestCache(env.cal(), 10, 0, 61, DType::kF32);
  cache.ReadRowsF32(KvKind::kKey, 0, 1, 1, row.data());
  row[0] = 1e6f;  // in a sink token, stored as fp16
  cache.WriteRowsF32(KvKind::kKey, 0, 1, 1, row.data());
  r = env.Encode(cache.View(), Options("4", 4, 0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
}

// ---- Hostile files -------------------------------------------------------------------------

std::vector<uint8_t> SmallFile(Env& env, const char* entropy) {
  const KvCache cache = MakeTestCache(env.cal(), 12, 1, 63);
  return env.Encode(cache.View(), Options("4", 2, 2, entropy)).value();
}

TEST(KvtcCodec, EveryFlippedByteFails) {
  Env env(kSpecs[0]);
  const auto good = SmallFile(env, "rans");
  ASSERT_TRUE(env.Decode(good).ok());
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0xFF;
    ASSERT_FALSE(env.Decode(bad).ok()) << "flipping byte " << i << " went unnoticed";
  }
  for (size_t n = 0; n < good.size(); ++n) ASSERT_FALSE(env.Decode(std::span(good).first(n)).ok()) << n;
}

// Damage past the CRCs (the file rebuilt with WriteKvc around a changed byte) reaches the
// codec's own parsing: it must fail cleanly or decode to the header's shape, never crash (ASan
// builds check the "never").
TEST(KvtcCodec, CorruptedSectionsNeverCrash) {
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    Env env(kSpecs[i]);
    for (const char* entropy : {"rans", "deflate", "none"}) {
      SCOPED_TRACE(::testing::Message() << kSpecNames[i] << " " << entropy);
      const auto good = SmallFile(env, entropy);
      const KvcFile file = ReadKvc(good).value();
      size_t accepted = 0, tried = 0;
      auto check = [&](const std::vector<uint8_t>& bytes) {
        const KvcFile f = ReadKvc(bytes).value();
        auto r = Kvtc().Decode(f, env.context());
        ++tried;
        if (!r.ok()) return;
        ++accepted;
        ASSERT_EQ(r->shape(), f.header.shape);
        ASSERT_EQ(r->dtype(), f.header.dtype);
        ASSERT_EQ(r->pos_begin(), f.header.pos_begin);
      };
      for (size_t s = 0; s < file.sections.size(); ++s) {
        for (size_t at = 0; at < file.sections[s].bytes.size(); ++at) {
          for (uint8_t mask : {0x01, 0x10, 0x80, 0xFF}) {
            check(Rewrite(good, [&](KvcHeader&, std::vector<KvcSection>& sections) { sections[s].bytes[at] ^= mask; }));
          }
        }
        // Every section has an exact length, so one byte more or less never decodes.
        const auto longer =
            Rewrite(good, [&](KvcHeader&, std::vector<KvcSection>& sections) { sections[s].bytes.push_back(0); });
        EXPECT_FALSE(Kvtc().Decode(ReadKvc(longer).value(), env.context()).ok()) << "section " << s << " + 1 byte";
        if (!file.sections[s].bytes.empty()) {
          const auto shorter =
              Rewrite(good, [&](KvcHeader&, std::vector<KvcSection>& sections) { sections[s].bytes.pop_back(); });
          EXPECT_FALSE(Kvtc().Decode(ReadKvc(shorter).value(), env.context()).ok()) << "section " << s << " - 1 byte";
        }
      }
      for (size_t at = 0; at < file.header.codec_params.size(); ++at) {
        for (uint8_t mask : {0x01, 0x80, 0xFF}) {
          check(Rewrite(good, [&](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params[at] ^= mask; }));
        }
      }
      // Sections missing, doubled, reordered; params truncated.
      check(Rewrite(good, [](KvcHeader&, std::vector<KvcSection>& s) { s.pop_back(); }));
      check(Rewrite(good, [](KvcHeader&, std::vector<KvcSection>& s) { s.push_back(s.back()); }));
      check(Rewrite(good, [](KvcHeader&, std::vector<KvcSection>& s) { std::swap(s[1], s[2]); }));
      check(Rewrite(good, [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params.pop_back(); }));
      check(Rewrite(good, [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params.push_back(0); }));
      EXPECT_GT(tried, 1000u);
      // X bytes are fp16 values, so most of their mutations still decode; that the test
      // reaches success paths at all is what this checks.
      EXPECT_GT(accepted, 0u);
    }
  }
}

// ---- The real calibration ------------------------------------------------------------------

TEST(KvtcRealCalibration, KvtinyRatiosAtLevels16And32) {
  CalibrationRegistry registry;
  auto loaded = registry.Load(std::string(KVCODEC_SOURCE_DIR) + "/models/kvtiny/kvtiny.kvcal");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const KvtcCalibration& cal = (*loaded)->calibration;
  ASSERT_EQ(cal.n_layers, 6u);
  ASSERT_EQ(cal.n_kv_heads, 2u);
  ASSERT_EQ(cal.head_dim, 64u);
  for (const std::string& level : Kvtc().info().levels) {
    EXPECT_TRUE(std::any_of(cal.allocations.begin(), cal.allocations.end(),
                            [&](const BitAllocation& a) { return a.target_ratio == std::stof(level); }))
        << "kvtiny.kvcal has no allocation for the advertised level " << level;
  }
  const ModelFingerprint fingerprint = cal.model_fingerprint;
  const CodecContext context{&registry, &fingerprint, nullptr};
  const KvCache cache = MakeTestCache(cal, 1024, 0, 71, DType::kF16, 0.0);
  double previous_rel = 0;
  for (const char* level : {"16", "32"}) {
    SCOPED_TRACE(level);
    auto bytes = EncodeKvc(Kvtc(), cache.View(), {.level = level, .params = {}}, fingerprint, 0, context);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    const double ratio = static_cast<double>(cache.shape().fp16_bytes()) / bytes->size();
    std::printf("kvtiny.kvcal level %s: %zu bytes for %zu fp16 bytes, ratio %.2f\n", level, bytes->size(),
                cache.shape().fp16_bytes(), ratio);
    EXPECT_GE(ratio, 0.8 * std::stod(level));
    auto decoded = DecodeKvc(*bytes, &fingerprint, context);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_EQ(decoded->shape(), cache.shape());
    const Exempt ex = ExemptOf(1024, 0, 0, 0);  // the default: no sinks
    ExpectExemptExact(cache, *decoded, ex);
    const double rel = ExpectWithinTransformBound(cal, std::stof(level), cache, *decoded, ex).rel();
    std::printf("kvtiny.kvcal level %s: relative squared error %.4f\n", level, rel);
    EXPECT_LT(rel, 1.0);
    EXPECT_GT(rel, previous_rel);
    previous_rel = rel;
  }
}

// ---- Fuzz corpus ---------------------------------------------------------------------------

const std::filesystem::path kCorpus = std::filesystem::path(KVCODEC_SOURCE_DIR) / "fuzz/corpus/kvtc";

std::vector<uint8_t> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The registry kvtc_fuzz.cc builds.
struct FuzzRegistry {
  FuzzRegistry() {
    for (auto& c : kvtc_test::FuzzCalibrations()) entries.push_back(registry.Add(std::move(c)).value());
  }
  CalibrationRegistry registry;
  std::vector<std::shared_ptr<const LoadedCalibration>> entries;
};

// The seeds are only useful while they are valid: a format change must regenerate them.
TEST(KvtcFuzzCorpus, SeedsDecode) {
  FuzzRegistry fuzz;
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus)) {
    if (entry.path().extension() != ".kvc") continue;
    const auto bytes = ReadFile(entry.path());
    auto r = DecodeKvc(bytes, nullptr, {&fuzz.registry, nullptr, nullptr});
    EXPECT_TRUE(r.ok()) << entry.path() << ": " << r.status().ToString()
                        << " (regenerate: codecs_test --gtest_also_run_disabled_tests "
                           "--gtest_filter=KvtcFuzzCorpus.DISABLED_Regenerate)";
    ++n;
  }
  EXPECT_GE(n, 4u);
}

// Rewrites fuzz/corpus/kvtc/ in the source tree: a .kvc per seed and its direct-mode twin.
TEST(KvtcFuzzCorpus, DISABLED_Regenerate) {
  FuzzRegistry fuzz;
  struct Seed {
    const char* name;
    uint8_t calibration;  // index in FuzzCalibrations()
    DType dtype;
    uint32_t n_tokens;
    int32_t pos_begin;
    EncodeOptions options;
  };
  const Seed seeds[] = {
      {"layer_rans", 0, DType::kF16, 24, 0, Options("4", 4, 2, "rans")},
      {"layer_none_pos700", 0, DType::kF16, 9, 700, Options("16", 4, 0, "none")},
      {"layerhead_deflate_f32", 1, DType::kF32, 20, 3, Options("8", 4, 1, "deflate")},
      {"layerhead_rans_bf16", 1, DType::kBF16, 14, 0, Options("16", 0, 3, "rans")},
      {"all_rans", 2, DType::kF16, 16, 2, Options("8", 4, 0, "rans")},
      {"all_sinks_only", 2, DType::kF16, 3, 0, Options("4", 4, 0, "rans")},
      {"layer_no_tokens", 0, DType::kF16, 0, 5, Options("4", 4, 0, "rans")},
      {"component_rans", 3, DType::kF16, 24, 0, Options("8", 4, 2, "rans")},
      {"component_deflate_pos700_f32", 3, DType::kF32, 30, 700, Options("16", 4, 0, "deflate")},
      // Long enough that the wide rANS stream (its 128-byte header) beats bit-packing.
      {"component_rans_wide", 3, DType::kF16, 400, 0, Options("4", 0, 0, "rans")},
  };
  std::filesystem::create_directories(kCorpus);
  for (const Seed& seed : seeds) {
    // The fuzz calibrations share a model, and encoding picks the newest for the model, so
    // each seed is encoded from a registry holding only its own (the same bytes, so the same hash).
    CalibrationRegistry own;
    const auto loaded = own.Add(kvtc_test::FuzzCalibrations()[seed.calibration]).value();
    ASSERT_EQ(loaded->hash, fuzz.entries[seed.calibration]->hash);
    const KvCache cache =
        MakeTestCache(loaded->calibration, seed.n_tokens, seed.pos_begin, 1000 + seed.calibration, seed.dtype);
    const auto kvc =
        EncodeKvc(Kvtc(), cache.View(), seed.options, kTestFingerprint, 0, {&own, &kTestFingerprint, nullptr});
    ASSERT_TRUE(kvc.ok()) << seed.name << ": " << kvc.status().ToString();
    ASSERT_EQ(ReadKvc(*kvc).value().header.codec_params.size(), 30u);
    ASSERT_TRUE(
        std::equal(loaded->hash.begin(), loaded->hash.end(), ReadKvc(*kvc).value().header.codec_params.begin() + 1));
    std::ofstream(kCorpus / (std::string(seed.name) + ".kvc"), std::ios::binary)
        .write(reinterpret_cast<const char*>(kvc->data()), static_cast<std::streamsize>(kvc->size()));

    const KvcFile file = ReadKvc(*kvc).value();
    if (std::string(seed.name) == "component_rans_wide") {
      ASSERT_EQ(file.sections.back().bytes[0], static_cast<uint8_t>(KvtcCodesMethod::kRansTuplesWide));
    }
    std::vector<KvcSection> sections;
    for (const auto& s : file.sections) sections.push_back({s.tag, {s.bytes.begin(), s.bytes.end()}});
    const uint8_t dtype_bits = seed.dtype == DType::kF16 ? 0 : seed.dtype == DType::kF32 ? 1 : 2;
    const uint8_t selector = static_cast<uint8_t>(seed.calibration | dtype_bits << 2);
    const auto direct = kvtc_test::FuzzDirectInput(selector, static_cast<uint16_t>(seed.n_tokens), seed.pos_begin,
                                                   file.header.codec_params, sections);
    std::ofstream(kCorpus / (std::string("direct_") + seed.name + ".bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(direct.data()), static_cast<std::streamsize>(direct.size()));
  }
}

}  // namespace
}  // namespace kvc
