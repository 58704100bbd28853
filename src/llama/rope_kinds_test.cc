// Models whose keys carry no RoPE kvcodec undoes: without RoPE (ALiBi or learned positions:
// GPT-2, BLOOM) and with sectioned RoPE (Qwen2-VL's M-RoPE, Qwen3-VL's interleaved one). On
// llama.cpp's random-weight fixtures of those architectures (scripts/setup-llama.sh writes them):
// the model loads and reports its kind, and kvtc calibrates, encodes and decodes KV of its
// geometry with keys as stored. The KV is synthetic: the sequence state of sectioned-RoPE models
// carries per-cell positions the state parser in this folder covers on its own.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "codecs/kvtc/kvtc_fit.h"
#include "kvtc/calibration_registry.h"
#include "llama/archs_fixtures.h"
#include "llama/llama_engine.h"
#include "tensor/rope.h"
#include "tensor/synthetic_kv.h"

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

}  // namespace
}  // namespace kvc
