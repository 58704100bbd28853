// Models whose keys carry no RoPE kvcodec undoes: without RoPE (ALiBi or learned positions:
// GPT-2, BLOOM) and with sectioned RoPE (Qwen2-VL's M-RoPE, Qwen3-VL's interleaved one). On
// llama.cpp's random-weight fixtures of those architectures (scripts/setup-llama.sh writes them):
// the model loads and reports its kind, and kvtc calibrates, encodes and decodes KV of its
// geometry with keys as stored. The KV is synthetic: the sequence state of sectioned-RoPE models
// carries per-cell positions the state parser in this folder covers on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "codecs/kvtc/kvtc_fit.h"
#include "llama/archs_fixtures.h"
#include "llama/kv_planes.h"
#include "llama/llama_session.h"
#include "tensor/rope.h"
#include "tensor/synthetic_kv.h"
#include "transform_coding/calibration_registry.h"

namespace kvc {
namespace {

struct Case {
  const char* fixture;
  RopeType rope;
};
// llama.cpp's llama_model_rope_type for each architecture; llama (normal RoPE) for contrast.
const Case kCases[] = {
    {"gpt2-dense", RopeType::kNone},     {"bloom-dense", RopeType::kNone},     {"mpt-dense", RopeType::kNone},
    {"qwen2vl-dense", RopeType::kMrope}, {"qwen3vl-dense", RopeType::kImrope}, {"llama-dense", RopeType::kNormal},
};

// Rank-3 KV per (kind, layer), keys then given the model's RoPE at their positions as an engine
// caches them (nothing for a kind kvcodec does not rotate).
KvCache LowRankKv(const ModelInfo& info, uint32_t n_tokens, int32_t pos_begin, uint32_t seed) {
  const KvShape shape{info.n_layers, info.n_kv_heads, info.head_dim, n_tokens};
  const size_t row = shape.row_elems();
  std::mt19937 directions(7);  // the same subspace in every window
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> basis(2 * size_t{shape.n_layers} * 3 * row);
  for (float& b : basis) b = uniform(directions);
  std::mt19937 rng(seed);
  float coeff[3] = {};
  KvCache kv = FillKv(shape, DType::kF16, pos_begin, [&](KvKind kind, uint32_t l, uint32_t, size_t c) {
    if (c == 0) {
      for (float& x : coeff) x = 2 * uniform(rng);
    }
    const float* b = basis.data() + (size_t{static_cast<uint32_t>(kind)} * shape.n_layers + l) * 3 * row;
    return coeff[0] * b[c] + coeff[1] * b[row + c] + coeff[2] * b[2 * row + c] + 0.01f * uniform(rng);
  });
  std::vector<float> rows(size_t{n_tokens} * row);
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    kv.ReadRowsF32(KvKind::kKey, l, 0, n_tokens, rows.data());
    RotateRows(info.rope, rows.data(), n_tokens, shape.n_kv_heads, shape.head_dim, pos_begin, false);
    kv.WriteRowsF32(KvKind::kKey, l, 0, n_tokens, rows.data());
  }
  return kv;
}

class RopeKinds : public ::testing::TestWithParam<Case> {};

TEST_P(RopeKinds, LoadsReportsItsRopeAndKvtcCodesItsKv) {
  const Case& c = GetParam();
  KVC_SKIP_WITHOUT_FIXTURE(c.fixture);
  const std::filesystem::path path = archs::Path(c.fixture);
  auto model = LlamaModel::Load(path.string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelInfo& info = (*model)->info();
  EXPECT_EQ(info.rope.type, c.rope) << "reported " << RopeTypeName(info.rope.type);
  ASSERT_GT(info.n_layers, 0u);
  ASSERT_GT(info.head_dim, 0u);

  const KvtcFitModel fit_model{.fingerprint = (*model)->fingerprint(),
                               .n_layers = info.n_layers,
                               .n_kv_heads = info.n_kv_heads,
                               .head_dim = info.head_dim,
                               .rope = info.rope};
  KvtcFitOptions options;
  options.grouping = KvtcGrouping::kLayer;
  options.quantizer = KvtcQuantizer::kTokenGroup;
  options.group_size = 8;
  options.chunk_tokens = 64;
  options.ratios = {4, 8};
  options.n_threads = 1;
  options.progress = false;
  auto fitter = KvtcFitter::Create(fit_model, options);
  ASSERT_TRUE(fitter.ok()) << fitter.status().ToString();
  for (uint32_t w = 0; w < 6; ++w) {
    const KvCache kv = LowRankKv(info, 128, static_cast<int32_t>(w * 128), 100 + w);
    const Status added = w < 4 ? (*fitter)->AddFitWindow(kv.View()) : (*fitter)->AddHeldoutWindow(kv.View());
    ASSERT_TRUE(added.ok()) << added.ToString();
  }
  KvtcCalibration cal;
  auto report = (*fitter)->Finish(&cal);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(cal.rope.type, c.rope);
  EXPECT_EQ(cal.keys_rope_undone, RopeRotatesKeys(c.rope));

  CalibrationRegistry registry;
  ASSERT_TRUE(registry.Add(cal).ok());
  const ModelFingerprint& fingerprint = (*model)->fingerprint();
  const CodecContext context{&registry, &fingerprint, nullptr};
  const KvCache unseen = LowRankKv(info, 128, 3000, 999);
  EncodeOptions encode;
  encode.level = "8";
  auto file = EncodeKvc(*FindCodec("kvtc"), unseen.View(), encode, fingerprint, 3000, context);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto decoded = DecodeKvc(*file, &fingerprint, context);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  for (KvKind kind : kKvKinds) {
    double err = 0, energy = 0;
    std::vector<float> a(unseen.shape().row_elems() * 128), b(a.size());
    for (uint32_t l = 0; l < info.n_layers; ++l) {
      unseen.ReadRowsF32(kind, l, 0, 128, a.data());
      decoded->ReadRowsF32(kind, l, 0, 128, b.data());
      for (size_t i = 0; i < a.size(); ++i) {
        err += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
        energy += double{a[i]} * a[i];
      }
    }
    // Rank 3 plus 1% noise: either keys are undone where RoPE is, or there is none to undo.
    EXPECT_LT(err / energy, 0.01) << KvKindName(kind);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RopeKinds, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string name = info.param.fixture;
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
});

// Sectioned RoPE on text: each section of M-RoPE (and of IM-RoPE's interleaving) rotates by one
// component of a 3-D position, and a text token's components are all its position, so on text the
// rotation is NeoX's over the same channels. Checked on the model: layer 0's keys before RoPE depend
// on the token alone, so for one token repeated, rotating the cached keys back as NeoX must give
// the same row at every position; rotating back as normal (GPT-J) RoPE must not.
class SectionedRope : public ::testing::TestWithParam<const char*> {};

double PositionSpread(const std::vector<float>& keys, uint32_t n_tokens, size_t row) {
  double spread = 0, scale = 0;
  for (size_t c = 0; c < row; ++c) scale = std::max(scale, std::fabs(double{keys[c]}));
  for (uint32_t t = 1; t < n_tokens; ++t) {
    for (size_t c = 0; c < row; ++c) spread = std::max(spread, std::fabs(double{keys[t * row + c]} - keys[c]));
  }
  return spread / std::max(scale, 1e-9);
}

TEST_P(SectionedRope, OnTextItIsNeoxRope) {
  KVC_SKIP_WITHOUT_FIXTURE(GetParam());
  auto model = LlamaModel::Load(archs::Path(GetParam()).string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelInfo& info = (*model)->info();
  ASSERT_TRUE(info.rope.type == RopeType::kMrope || info.rope.type == RopeType::kImrope)
      << RopeTypeName(info.rope.type);
  SessionOptions options;
  options.n_ctx = 128;
  options.n_threads = 1;
  auto session = LlamaSession::Create(**model, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  constexpr uint32_t kTokens = 48;
  const std::vector<int32_t> same(kTokens, 7);
  ASSERT_TRUE((*session)->Eval(same, false).ok());
  auto state = (*session)->ExtractState();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  auto planes = SplitPlanes(*state, {.n_kv_heads = info.n_kv_heads, .head_dim = info.head_dim});
  ASSERT_TRUE(planes.ok()) << planes.status().ToString();
  ASSERT_FALSE(planes->empty());
  const KvPlane& plane = planes->front();
  ASSERT_TRUE(plane.model_heads);
  const size_t row = plane.kv.shape().row_elems();
  std::vector<float> stored(kTokens * row);
  plane.kv.ReadRowsF32(KvKind::kKey, 0, 0, kTokens, stored.data());
  double spread[3] = {};
  const RopeType as[] = {RopeType::kNeox, RopeType::kNormal, RopeType::kNone};
  for (int i = 0; i < 3; ++i) {
    std::vector<float> keys = stored;
    RopeParams rope = info.rope;
    rope.type = as[i];
    RotateRows(rope, keys.data(), kTokens, info.n_kv_heads, info.head_dim, plane.kv.pos_begin(), true);
    spread[i] = PositionSpread(keys, kTokens, row);
    RecordProperty(std::string("spread_as_") + RopeTypeName(as[i]), std::to_string(spread[i]));
  }
  std::printf(
      "%s (%s): layer 0 keys of one token at %u positions, rotated back as neox: spread %.2e; as normal: "
      "%.2e; as stored: %.2e\n",
      GetParam(), RopeTypeName(info.rope.type), kTokens, spread[0], spread[1], spread[2]);
  EXPECT_LT(spread[0], 0.01) << "sectioned RoPE on text is not NeoX's rotation";
  EXPECT_GT(spread[1], 0.1);
  EXPECT_GT(spread[2], 0.1);
  EXPECT_TRUE(RopeRotatesKeys(info.rope.type));
}

// What undoing it buys kvtc on the model's own keys: a calibration fitted with keys rotated back
// against one fitted on keys as stored, the same windows of random tokens, the same level. The
// keys' error is recorded for both (the fixture's weights are random, so the figure says how the
// two compare on this model, not on a trained one).
TEST_P(SectionedRope, KvtcCodesKeysRotatedBackAtLeastAsWellAsStored) {
  KVC_SKIP_WITHOUT_FIXTURE(GetParam());
  auto model = LlamaModel::Load(archs::Path(GetParam()).string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelInfo& info = (*model)->info();
  SessionOptions options;
  options.n_ctx = 128;
  options.n_threads = 1;
  auto session = LlamaSession::Create(**model, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  constexpr uint32_t kWindow = 96;
  std::vector<KvCache> windows;
  for (uint32_t w = 0; w < 6; ++w) {
    std::mt19937 rng(500 + w);
    std::vector<int32_t> tokens(kWindow);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % info.n_vocab);
    (*session)->Clear();
    ASSERT_TRUE((*session)->Eval(tokens, false).ok());
    auto planes = SplitPlanes((*session)->ExtractState().value(), {info.n_kv_heads, info.head_dim});
    ASSERT_TRUE(planes.ok() && !planes->empty());
    windows.push_back(std::move(planes->front().kv));
  }
  const KvShape shape = windows.front().shape();
  double key_error[2] = {};
  for (int undone = 0; undone < 2; ++undone) {
    std::optional<RopeParams> rope;
    if (undone) rope = info.rope;
    KvtcFitOptions fit;
    fit.grouping = KvtcGrouping::kLayer;
    fit.quantizer = KvtcQuantizer::kTokenGroup;
    fit.group_size = 8;
    fit.chunk_tokens = kWindow;
    fit.ratios = {8};
    fit.n_threads = 1;
    fit.progress = false;
    auto fitter = KvtcFitter::Create({.fingerprint = (*model)->fingerprint(),
                                      .n_layers = shape.n_layers,
                                      .n_kv_heads = shape.n_kv_heads,
                                      .head_dim = shape.head_dim,
                                      .rope = rope},
                                     fit);
    ASSERT_TRUE(fitter.ok()) << fitter.status().ToString();
    for (uint32_t w = 0; w < 5; ++w) {
      ASSERT_TRUE(
          (w < 4 ? (*fitter)->AddFitWindow(windows[w].View()) : (*fitter)->AddHeldoutWindow(windows[w].View())).ok());
    }
    KvtcCalibration cal;
    ASSERT_TRUE((*fitter)->Finish(&cal).ok());
    EXPECT_EQ(cal.keys_rope_undone, undone == 1);
    CalibrationRegistry registry;
    ASSERT_TRUE(registry.Add(cal).ok());
    const ModelFingerprint& fingerprint = (*model)->fingerprint();
    const CodecContext context{&registry, &fingerprint, nullptr};
    const KvCache& coded = windows.back();
    auto file = EncodeKvc(*FindCodec("kvtc"), coded.View(), {.level = "8", .params = {}}, fingerprint, 0, context);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto decoded = DecodeKvc(*file, &fingerprint, context);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    double err = 0, energy = 0;
    std::vector<float> a(shape.layer_elems()), b(a.size());
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      coded.ReadRowsF32(KvKind::kKey, l, 0, shape.n_tokens, a.data());
      decoded->ReadRowsF32(KvKind::kKey, l, 0, shape.n_tokens, b.data());
      for (size_t i = 0; i < a.size(); ++i) {
        err += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
        energy += double{a[i]} * a[i];
      }
    }
    key_error[undone] = err / energy;
  }
  RecordProperty("key_rel_error_as_stored", std::to_string(key_error[0]));
  RecordProperty("key_rel_error_rotated_back", std::to_string(key_error[1]));
  std::printf("%s: kvtc 8, keys' relative squared error: as stored %.4g, rotated back as NeoX %.4g\n", GetParam(),
              key_error[0], key_error[1]);
  EXPECT_LE(key_error[1], key_error[0] * 1.1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SectionedRope,
                         ::testing::Values("qwen2vl-dense", "qwen3vl-dense", "glm4-dense", "qwen35-dense"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace kvc
