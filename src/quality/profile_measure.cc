#include "quality/profile_measure.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "base/hash.h"
#include "base/progress.h"
#include "codecs/codec.h"
#include "quality/bootstrap_bound.h"
#include "quality/evaluator.h"
#include "transform_coding/calibration_registry.h"

namespace kvc {
namespace {

constexpr uint32_t kScoredTokens = kProfileWindows.back();

std::string ListOf(const std::vector<uint32_t>& v) {
  std::string s;
  for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

Result<ProfileGeometry> PlanProfile(const ProfileOptions& o, const ModelInfo& model) {
  if (!(o.confidence >= 0.5 && o.confidence < 1)) return InvalidArgument("--confidence must be in [0.5, 1)");
  if (o.resamples > 100000) return InvalidArgument("--resamples must be at most 100000");
  ProfileGeometry g;
  const uint32_t train_ctx = model.n_ctx_train > 0 ? model.n_ctx_train : 1024;
  g.window = o.window != 0 ? o.window : std::min(1024u, train_ctx);
  RETURN_IF_ERROR(CheckWithinTrainingContext(model, g.window, "a profile's document (--window)"));
  const uint32_t longest = g.window > kScoredTokens + 1 ? g.window - kScoredTokens - 1 : 0;
  if (o.prefix_lengths.empty()) {
    // Evenly spaced, far enough apart that each prefix's scored tokens end before the next
    // prefix does (one base run per document serves them all).
    const uint32_t n = std::min(kMaxDefaultPrefixLengths, longest / kScoredTokens);
    if (n < 2) {
      return InvalidArgument(FormatMessage(
          "a profile's documents need at least %u tokens (two prefix lengths, each followed by %u scored tokens); "
          "--window is %u",
          2 * kScoredTokens + kScoredTokens + 1, kScoredTokens, g.window));
    }
    for (uint32_t j = 1; j <= n; ++j) {
      g.prefix_lengths.push_back(static_cast<uint32_t>(std::lround(static_cast<double>(longest) * j / n)));
    }
  } else {
    if (o.prefix_lengths.size() > kMaxPrefixLengths) {
      return InvalidArgument(FormatMessage("at most %zu prefix lengths", kMaxPrefixLengths));
    }
    for (size_t j = 0; j < o.prefix_lengths.size(); ++j) {
      const uint32_t l = o.prefix_lengths[j];
      const uint32_t min = j == 0 ? 1 : o.prefix_lengths[j - 1] + kScoredTokens;
      if (l < min) {
        return InvalidArgument(FormatMessage(
            "--prefix-lengths %s: each must be at least 1 and at least %u past the one before (its scored tokens)",
            ListOf(o.prefix_lengths).c_str(), kScoredTokens));
      }
    }
    if (o.prefix_lengths.back() > longest) {
      return InvalidArgument(
          FormatMessage("--prefix-lengths %s: the longest must leave %u tokens of the %u-token window",
                        ListOf(o.prefix_lengths).c_str(), kScoredTokens + 1, g.window));
    }
    g.prefix_lengths = o.prefix_lengths;
  }
  if (o.docs == 1) return InvalidArgument("--docs must be at least 2 (the bounds are resampled over documents)");
  const uint64_t per_doc = uint64_t{kProfileWindows.front()} * g.prefix_lengths.size();
  g.docs = o.docs != 0 ? o.docs : static_cast<uint32_t>((kProfileMinPositions + per_doc - 1) / per_doc);
  return g;
}

Result<ModelProfile> MeasureProfile(const ProfileOptions& o) {
  if (o.text_path.empty() == o.token_path.empty()) {
    return InvalidArgument(
        "a profile is measured on text like your prompts: give --text FILE or --token-file FILE (one of them)");
  }
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(o.model_path));
  RETURN_IF_ERROR(model->CheckKeepsKv());
  ASSIGN_OR_RETURN(const ProfileGeometry g, PlanProfile(o, model->info()));
  CalibrationRegistry calibrations;
  RETURN_IF_ERROR(LoadModelCalibration(calibrations, o.model_path, o.calibration));
  const auto kvcal = calibrations.FindForModel(model->fingerprint());
  const CodecContext codec_context{&calibrations, &model->fingerprint(), nullptr};

  struct Rung {
    const Codec* codec;
    EncodeOptions encode;
    uint64_t bytes_fp16 = 0, bytes_stored = 0;
    std::vector<std::vector<DocumentSums>> sums;  // [window][document]
  };
  std::vector<Rung> rungs;
  for (const Codec* c : AllCodecs()) {
    if (c->info().needs_calibration && kvcal == nullptr) continue;
    for (const std::string& level : c->info().levels) {
      rungs.push_back(
          {c,
           {.level = level, .params = {}},
           0,
           0,
           std::vector<std::vector<DocumentSums>>(kProfileWindows.size(), std::vector<DocumentSums>(g.docs))});
    }
  }

  const DocumentSource source{.text_path = o.text_path, .token_path = o.token_path, .max_tokens = o.max_tokens};
  auto docs = LoadDocuments(*model, source, g.docs, g.window, /*from_end=*/true);
  if (docs.status().code() == StatusCode::kInvalidArgument) {  // the source is too short
    return InvalidArgument(FormatMessage(
        "%s: a profile takes %u documents of %u tokens (%zu prefix lengths x %u scored tokens each, for %llu "
        "positions); give a longer text or fewer --docs",
        docs.status().message().c_str(), g.docs, g.window, g.prefix_lengths.size(), kProfileWindows.front(),
        static_cast<unsigned long long>(uint64_t{g.docs} * g.prefix_lengths.size() * kProfileWindows.front())));
  }
  if (!docs.ok()) return docs.status();

  SessionOptions so = o.session;
  so.n_ctx = g.window + 16;
  so.n_batch = std::max<uint32_t>(512, kScoredTokens);
  so.require_kv = true;
  ASSIGN_OR_RETURN(auto base, LlamaSession::Create(*model, so));
  ASSIGN_OR_RETURN(auto restored, LlamaSession::Create(*model, so));

  ProgressBar progress("profile", uint64_t{g.docs} * g.prefix_lengths.size(), o.progress);
  for (uint32_t d = 0; d < g.docs; ++d) {
    const std::vector<int32_t>& doc = (*docs)[d];
    base->Clear();
    uint32_t done = 0;  // tokens of the document the base run holds
    for (const uint32_t prefix : g.prefix_lengths) {
      const std::span<const int32_t> tokens(doc);
      RETURN_IF_ERROR(base->Eval(tokens.subspan(done, prefix - done), false));
      ASSIGN_OR_RETURN(KvCache kv, base->ExtractKv());
      const auto scored_in = tokens.subspan(prefix, kScoredTokens);
      const auto targets = tokens.subspan(prefix + 1, kScoredTokens);
      RETURN_IF_ERROR(base->Eval(scored_in, true));
      const auto base_rows = CopyReferenceRows(*base, kScoredTokens);
      done = prefix + kScoredTokens;
      for (Rung& rung : rungs) {
        ASSIGN_OR_RETURN(std::vector<uint8_t> file,
                         EncodeKvc(*rung.codec, kv.View(), rung.encode, model->fingerprint(), 0, codec_context));
        ASSIGN_OR_RETURN(KvCache decoded, DecodeKvc(file, &model->fingerprint(), codec_context));
        rung.bytes_fp16 += kv.shape().fp16_bytes();
        rung.bytes_stored += file.size();
        restored->Clear();
        RETURN_IF_ERROR(restored->RestoreKv(decoded));
        RETURN_IF_ERROR(restored->Eval(scored_in, true));
        const std::vector<PositionScore> scores = ScoreRows(base_rows, *restored, targets);
        for (size_t w = 0; w < kProfileWindows.size(); ++w) {
          for (uint32_t i = 0; i < kProfileWindows[w]; ++i) rung.sums[w][d].Add(scores[i]);
        }
      }
      progress.Advance();
    }
  }
  progress.Finish();

  ModelProfile p;
  p.model = model->fingerprint();
  p.calibration = kvcal ? HexString(kvcal->hash) : "";
  const std::string& named = o.token_path.empty() ? o.text_path : o.token_path;
  p.text = FormatMessage("%s, its last %u windows of %u tokens", std::filesystem::path(named).filename().c_str(),
                         g.docs, g.window);
  p.docs = g.docs;
  p.prefix_lengths = g.prefix_lengths;
  p.windows.assign(kProfileWindows.begin(), kProfileWindows.end());
  p.resamples = o.resamples;
  p.confidence = o.confidence;
  for (const Rung& rung : rungs) {
    ProfileRung r{.codec = rung.codec->info().name,
                  .level = rung.encode.level,
                  .ratio = static_cast<double>(rung.bytes_fp16) / static_cast<double>(rung.bytes_stored),
                  .windows = {}};
    for (size_t w = 0; w < kProfileWindows.size(); ++w) {
      r.windows.push_back(BoundedWindowScore(kProfileWindows[w], rung.sums[w], o.resamples, o.confidence));
    }
    p.rungs.push_back(std::move(r));
  }
  return p;
}

}  // namespace kvc
