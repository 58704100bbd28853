#include "codecs/kvtc/kvtc_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "codecs/codec.h"
#include "codecs/kvtc/kvtc_test_calibration.h"
#include "tensor/synthetic_kv.h"
#include "transform_coding/calibration_registry.h"
#include "transform_coding/kvcal.h"

namespace kvc {
namespace {

using kvtc_test::kTestFingerprint;

constexpr KvShape kGeometry{.n_layers = 2, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 0};
constexpr RopeParams kRope{.type = RopeType::kNeox, .n_rot = 0, .freq_base = 10000.0f, .freq_scale = 1.0f};

// KV of rank 3 per (kind, layer) before RoPE, as a model's keys are near low rank at position 0,
// with `rope` (when given) applied to the keys at the window's positions (as an engine's cache
// holds them). Keys alone for a keys-only shape.
KvCache LowRankKv(KvShape shape, uint32_t n_tokens, int32_t pos_begin, uint32_t seed, const RopeParams* rope) {
  shape.n_tokens = n_tokens;
  kvtc_test::TestRng directions(7);  // the same subspace in every window
  const size_t row = shape.row_elems();
  std::vector<float> basis(2 * shape.n_layers * 3 * row);
  for (float& b : basis) b = static_cast<float>(directions.Uniform());
  kvtc_test::TestRng rng(seed);
  std::vector<float> coeff(3);
  KvCache kv = FillKv(shape, DType::kF16, pos_begin, [&](KvKind kind, uint32_t l, uint32_t, size_t c) {
    if (c == 0) {
      for (float& x : coeff) x = static_cast<float>(2 * rng.Uniform());
    }
    const float* b = basis.data() + (size_t{static_cast<uint32_t>(kind)} * shape.n_layers + l) * 3 * row;
    return coeff[0] * b[c] + coeff[1] * b[row + c] + coeff[2] * b[2 * row + c] +
           0.01f * static_cast<float>(rng.Uniform());
  });
  for (uint32_t l = 0; l < shape.n_layers && rope != nullptr; ++l) {
    std::vector<float> rows(size_t{n_tokens} * row);
    kv.ReadRowsF32(KvKind::kKey, l, 0, n_tokens, rows.data());
    RotateRows(*rope, rows.data(), n_tokens, shape.n_kv_heads, shape.head_dim, pos_begin, false);
    kv.WriteRowsF32(KvKind::kKey, l, 0, n_tokens, rows.data());
  }
  return kv;
}

KvCache LowRankWindow(uint32_t n_tokens, int32_t pos_begin, uint32_t seed) {
  return LowRankKv(kGeometry, n_tokens, pos_begin, seed, &kRope);
}

KvtcFitModel Model(bool with_rope) {
  return {.fingerprint = kTestFingerprint,
          .n_layers = kGeometry.n_layers,
          .n_kv_heads = kGeometry.n_kv_heads,
          .head_dim = kGeometry.head_dim,
          .rope = with_rope ? std::optional(kRope) : std::nullopt};
}

KvtcFitOptions SmallOptions() {
  KvtcFitOptions o;
  o.grouping = KvtcGrouping::kLayer;
  o.quantizer = KvtcQuantizer::kTokenGroup;
  o.group_size = 8;
  o.chunk_tokens = 64;
  o.ratios = {4, 8};
  o.n_threads = 1;
  o.progress = false;
  return o;
}

// Fits on `n_fit` windows then holds back two; windows start at increasing positions, so RoPE
// is undone at positions other than 0 and the sinks cut only the first.
Result<CalibrateReport> Fit(const KvtcFitModel& model, KvtcCalibration* out, uint32_t n_fit = 6) {
  ASSIGN_OR_RETURN(auto fitter, KvtcFitter::Create(model, SmallOptions()));
  for (uint32_t w = 0; w < n_fit + 2; ++w) {
    const KvCache kv = LowRankWindow(128, static_cast<int32_t>(w * 128), 100 + w);
    RETURN_IF_ERROR(w < n_fit ? fitter->AddFitWindow(kv.View()) : fitter->AddHeldoutWindow(kv.View()));
  }
  return fitter->Finish(out);
}
Result<CalibrateReport> Fit(bool with_rope, KvtcCalibration* out, uint32_t n_fit = 6) {
  return Fit(Model(with_rope), out, n_fit);
}

TEST(KvtcFit, FitsACalibrationTheCodecUsesAtItsRatios) {
  KvtcCalibration cal;
  auto report = Fit(true, &cal);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->fit_tokens, 6u * 128 - 4);  // the first window's sinks left out
  EXPECT_EQ(report->heldout_tokens, 2u * 128);
  EXPECT_EQ(report->window, 128u);
  EXPECT_EQ(report->chunk_tokens, 64u);
  EXPECT_TRUE(cal.keys_rope_undone);
  EXPECT_EQ(cal.rope, kRope);
  EXPECT_EQ(cal.model_fingerprint, kTestFingerprint);
  ASSERT_EQ(report->rungs.size(), 2u);
  for (const CalibrationRung& r : report->rungs) {
    EXPECT_NEAR(r.coded_ratio, r.target_ratio, 0.015 * r.target_ratio) << r.target_ratio;
  }
  // Rank 3 of 32 features per layer: nearly all the variance is in the top 8 components.
  EXPECT_GT(report->key_variance_top8, 0.99);
  EXPECT_GT(report->value_variance_top8, 0.99);
  ASSERT_TRUE(ReadKvcal(WriteKvcal(cal).value()).ok());

  // A window it never saw, at a later position, encodes near the target and decodes close.
  CalibrationRegistry registry;
  ASSERT_TRUE(registry.Add(cal).ok());
  const CodecContext context{&registry, &kTestFingerprint, nullptr};
  const KvCache unseen = LowRankWindow(256, 5000, 999);
  EncodeOptions options;
  options.level = "8";
  options.params["window"] = "0";
  auto file = EncodeKvc(*FindCodec("kvtc"), unseen.View(), options, kTestFingerprint, 5000, context);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto decoded = DecodeKvc(*file, &kTestFingerprint, context);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  double err = 0, energy = 0;
  std::vector<float> a(kGeometry.row_elems() * 256), b(a.size());
  for (KvKind kind : kKvKinds) {
    for (uint32_t l = 0; l < kGeometry.n_layers; ++l) {
      unseen.ReadRowsF32(kind, l, 0, 256, a.data());
      decoded->ReadRowsF32(kind, l, 0, 256, b.data());
      for (size_t i = 0; i < a.size(); ++i) {
        err += (a[i] - b[i]) * (a[i] - b[i]);
        energy += a[i] * a[i];
      }
    }
  }
  EXPECT_LT(err / energy, 0.01);
}

TEST(KvtcFit, KnowingTheRopeFitsKeysBetter) {
  KvtcCalibration with, without;
  auto a = Fit(true, &with);
  auto b = Fit(false, &without);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(without.keys_rope_undone);
  // RoPE spreads rank-3 keys over every rotated pair: as stored they need far more components.
  EXPECT_GT(a->key_variance_top8, b->key_variance_top8 + 0.05);
  EXPECT_LT(a->rungs[1].heldout_rel_mse, b->rungs[1].heldout_rel_mse);
}

// A model without RoPE (GPT-2, BLOOM) or with a RoPE kvcodec does not undo (vision encoders'
// 2-D RoPE; RopeRotatesKeys) has its keys fitted as stored: the same calibration as with no
// RoPE given, bit for bit, but for the kind it records.
TEST(KvtcFit, RopeKindsKvcodecDoesNotUndoFitKeysAsStored) {
  KvtcCalibration as_stored;
  ASSERT_TRUE(Fit(false, &as_stored).ok());
  for (uint8_t t = 0; t <= static_cast<uint8_t>(kLastRopeType); ++t) {
    const auto type = static_cast<RopeType>(t);
    if (RopeRotatesKeys(type)) continue;
    SCOPED_TRACE(RopeTypeName(type));
    KvtcFitModel model = Model(true);
    model.rope->type = type;
    KvtcCalibration cal;
    auto report = Fit(model, &cal);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_FALSE(cal.keys_rope_undone);
    EXPECT_EQ(cal.rope, *model.rope);
    KvtcCalibration expected = as_stored;
    expected.rope = *model.rope;
    EXPECT_TRUE(cal == expected) << "the fit differs from the fit of keys as stored";
    auto read = ReadKvcal(WriteKvcal(cal).value());
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(read->rope.type, type);
  }
  KvtcFitModel unknown = Model(true);
  unknown.rope->type = static_cast<RopeType>(6);
  EXPECT_EQ(KvtcFitter::Create(unknown, SmallOptions()).status().code(), StatusCode::kInvalidArgument);
}

// ---- Keys only ----

// Caches of keys alone: MLA's latent cache (one "head" of 576, its RoPE not one kvcodec undoes,
// so coded as stored) and an indexer's (one head of 128, NeoX RoPE undone).
struct KeysOnlyCase {
  const char* name;
  KvShape geometry;
  RopeParams rope;
  bool choose = false;  // let the fit choose quantiser and group size
};
const KeysOnlyCase kKeysOnlyCases[] = {
    {"mla",
     {.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 0, .keys_only = true},
     {.type = RopeType::kNone}},
    {"indexer",
     {.n_layers = 2, .n_kv_heads = 1, .head_dim = 128, .n_tokens = 0, .keys_only = true},
     {.type = RopeType::kNeox, .n_rot = 64, .freq_base = 10000.0f, .freq_scale = 1.0f},
     true},
};

KvtcFitModel KeysOnlyModel(const KeysOnlyCase& c) {
  return {.fingerprint = kTestFingerprint,
          .n_layers = c.geometry.n_layers,
          .n_kv_heads = c.geometry.n_kv_heads,
          .head_dim = c.geometry.head_dim,
          .rope = c.rope,
          .keys_only = true};
}

TEST(KvtcFit, KeysOnlyFitsAndAllocatesKAlone) {
  for (const KeysOnlyCase& c : kKeysOnlyCases) {
    SCOPED_TRACE(c.name);
    KvtcFitOptions options = SmallOptions();
    options.ratios = {4, 8, 16};
    if (c.choose) {
      options.quantizer.reset();
      options.group_size = 0;
    }
    auto fitter = KvtcFitter::Create(KeysOnlyModel(c), options);
    ASSERT_TRUE(fitter.ok()) << fitter.status().ToString();
    for (uint32_t w = 0; w < 8; ++w) {
      const KvCache kv = LowRankKv(c.geometry, 128, static_cast<int32_t>(w * 128), 200 + w, &c.rope);
      ASSERT_TRUE(kv.shape().keys_only);
      const Status added = w < 6 ? (*fitter)->AddFitWindow(kv.View()) : (*fitter)->AddHeldoutWindow(kv.View());
      ASSERT_TRUE(added.ok()) << added.ToString();
    }
    KvtcCalibration cal;
    auto report = (*fitter)->Finish(&cal);
    ASSERT_TRUE(report.ok()) << report.status().ToString();

    EXPECT_TRUE(cal.keys_only);
    EXPECT_EQ(cal.format_version, 3u);
    EXPECT_EQ(cal.rope, c.rope);
    EXPECT_EQ(cal.keys_rope_undone, RopeRotatesKeys(c.rope.type));
    ASSERT_EQ(cal.bases.size(), cal.n_bases());
    uint32_t groups = 0;
    for (uint32_t i = 0; i < cal.bases.size(); ++i) groups += cal.n_groups(i);
    ASSERT_EQ(cal.allocations.size(), 3u);
    for (const BitAllocation& a : cal.allocations) EXPECT_EQ(a.bits.size(), groups);
    // Rank 3 per layer: nearly all the key variance is in the top 8 components; there is no V.
    EXPECT_GT(report->key_variance_top8, 0.99);
    EXPECT_EQ(report->value_variance_top8, 0);
    ASSERT_EQ(report->rungs.size(), 3u);
    for (const CalibrationRung& r : report->rungs) {
      // The sizes are measured on K alone, as the files hold it.
      EXPECT_NEAR(r.coded_ratio, r.target_ratio, 0.015 * r.target_ratio) << r.target_ratio;
    }

    // Written as version 3 and read back as it was, byte for byte.
    const std::vector<uint8_t> bytes = WriteKvcal(cal).value();
    auto read = ReadKvcal(bytes);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(*read == cal);
    EXPECT_EQ(WriteKvcal(*read).value(), bytes);

    // A window it never saw, at a later position, round-trips close at every level.
    CalibrationRegistry registry;
    ASSERT_TRUE(registry.Add(cal).ok());
    const CodecContext context{&registry, &kTestFingerprint, nullptr};
    const KvCache unseen = LowRankKv(c.geometry, 256, 5000, 999, &c.rope);
    for (const char* level : {"4", "8", "16"}) {
      SCOPED_TRACE(level);
      EncodeOptions encode;
      encode.level = level;
      auto file = EncodeKvc(*FindCodec("kvtc"), unseen.View(), encode, kTestFingerprint, 5000, context);
      ASSERT_TRUE(file.ok()) << file.status().ToString();
      const double ratio = static_cast<double>(unseen.shape().fp16_bytes()) / static_cast<double>(file->size());
      EXPECT_GT(ratio, 0.8 * std::stod(level));
      auto decoded = DecodeKvc(*file, &kTestFingerprint, context);
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      ASSERT_EQ(decoded->shape(), unseen.shape());
      double err = 0, energy = 0;
      std::vector<float> a(c.geometry.row_elems() * 256), b(a.size());
      for (uint32_t l = 0; l < c.geometry.n_layers; ++l) {
        unseen.ReadRowsF32(KvKind::kKey, l, 0, 256, a.data());
        decoded->ReadRowsF32(KvKind::kKey, l, 0, 256, b.data());
        for (size_t i = 0; i < a.size(); ++i) {
          err += (a[i] - b[i]) * (a[i] - b[i]);
          energy += a[i] * a[i];
        }
      }
      EXPECT_LT(err / energy, 0.01);
    }
  }
}

// A keys-only model takes keys-only windows only, and a model of K and V windows with V.
TEST(KvtcFit, WindowsMustHaveTheModelsKinds) {
  const KeysOnlyCase& indexer = kKeysOnlyCases[1];
  auto keys_fitter = KvtcFitter::Create(KeysOnlyModel(indexer), SmallOptions());
  ASSERT_TRUE(keys_fitter.ok()) << keys_fitter.status().ToString();
  KvShape with_values = indexer.geometry;
  with_values.keys_only = false;
  const KvCache full = LowRankKv(with_values, 64, 0, 1, &indexer.rope);
  for (bool heldout : {false, true}) {
    const Status s =
        heldout ? (*keys_fitter)->AddHeldoutWindow(full.View()) : (*keys_fitter)->AddFitWindow(full.View());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("window holds keys and values; the model keeps keys only"), std::string::npos)
        << s.message();
  }

  auto full_fitter = KvtcFitter::Create(Model(true), SmallOptions());
  ASSERT_TRUE(full_fitter.ok());
  KvShape keys_geometry = kGeometry;
  keys_geometry.keys_only = true;
  const KvCache keys = LowRankKv(keys_geometry, 64, 0, 2, &kRope);
  for (bool heldout : {false, true}) {
    const Status s =
        heldout ? (*full_fitter)->AddHeldoutWindow(keys.View()) : (*full_fitter)->AddFitWindow(keys.View());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("window holds keys only; the model keeps keys and values"), std::string::npos)
        << s.message();
  }
}

TEST(KvtcFit, ReportJsonCarriesTheRungs) {
  KvtcCalibration cal;
  auto report = Fit(true, &cal);
  ASSERT_TRUE(report.ok());
  const auto j = nlohmann::json::parse(CalibrateReportJson(*report));
  EXPECT_EQ(j["rungs"].size(), 2u);
  EXPECT_EQ(j["quantizer"], "token-group");
  EXPECT_EQ(j["fit_tokens"], report->fit_tokens);
}

TEST(KvtcFit, ClearErrors) {
  KvtcFitModel bad = Model(true);
  bad.rope->n_rot = 3;
  EXPECT_EQ(KvtcFitter::Create(bad, SmallOptions()).status().code(), StatusCode::kInvalidArgument);
  bad = Model(true);
  bad.head_dim = 0;
  EXPECT_EQ(KvtcFitter::Create(bad, SmallOptions()).status().code(), StatusCode::kInvalidArgument);
  KvtcFitOptions o = SmallOptions();
  o.ratios = {0.5f};
  EXPECT_EQ(KvtcFitter::Create(Model(true), o).status().code(), StatusCode::kInvalidArgument);

  auto fitter = KvtcFitter::Create(Model(true), SmallOptions());
  ASSERT_TRUE(fitter.ok());
  KvShape other = kGeometry;
  other.n_tokens = 32;
  other.head_dim = 8;
  const KvCache wrong = NoiseKv(other, DType::kF16, 1);
  const Status s = (*fitter)->AddFitWindow(wrong.View());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the model has 2, 2 of 16"), std::string::npos) << s.message();
  KvtcCalibration cal;
  EXPECT_NE((*fitter)->Finish(&cal).status().message().find("no tokens to fit"), std::string::npos);

  // Held-back windows too short for a 16-token chunk past the sinks.
  auto short_heldout = KvtcFitter::Create(Model(true), SmallOptions());
  ASSERT_TRUE(short_heldout.ok());
  ASSERT_TRUE((*short_heldout)->AddFitWindow(LowRankWindow(128, 0, 1).View()).ok());
  ASSERT_TRUE((*short_heldout)->AddHeldoutWindow(LowRankWindow(12, 0, 2).View()).ok());
  const Status short_status = (*short_heldout)->Finish(&cal).status();
  EXPECT_NE(short_status.message().find("chunks of 16 or more"), std::string::npos) << short_status.message();
}

}  // namespace
}  // namespace kvc
