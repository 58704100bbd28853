#include "quality/calibrate.h"

#include <algorithm>
#include <cmath>

#include "base/clock.h"
#include "base/progress.h"
#include "quality/evaluator.h"
#include "quality/profile_measure.h"

namespace kvc {

Result<CalibrateReport> RunCalibrate(const CalibrateOptions& options, KvtcCalibration* out) {
  const auto t_start = SteadyClock::now();
  if (options.text_path.empty() == options.token_path.empty()) {
    return InvalidArgument(
        "calibrate fits the model's KV on text like your prompts: give --text FILE or --token-file FILE (one of them)");
  }
  if (options.group_size > 4096) return InvalidArgument("--group-size must be in 1..4096");
  if (options.chunk_tokens < 16) return InvalidArgument("--chunk must be 16 tokens or more");
  if (!(options.heldout_fraction > 0 && options.heldout_fraction < 1))
    return InvalidArgument("held-out fraction must be in (0, 1)");
  if (options.ratios.empty()) return InvalidArgument("no target ratios");
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(options.model_path));
  RETURN_IF_ERROR(model->CheckKeepsKv());
  const ModelInfo& info = model->info();
  const uint32_t window =
      options.window != 0 ? options.window : std::min<uint32_t>(1024, info.n_ctx_train > 0 ? info.n_ctx_train : 1024);
  if (window < options.sinks + 16) return InvalidArgument("--window must exceed the sink tokens by 16 or more");

  // Read as the profile reads it (LoadDocuments), so its last windows are the ones held back here.
  ASSIGN_OR_RETURN(const std::vector<int32_t> stream, LoadTokenStream(*model, {.text_path = options.text_path,
                                                                               .token_path = options.token_path,
                                                                               .max_tokens = options.max_tokens}));
  // Each window is what eval's documents are: the model's BOS, if it has one, then the text.
  const size_t n_bos = model->has_bos() ? 1 : 0;
  const size_t body = window - n_bos;
  const size_t n_windows = stream.size() / body;
  if (n_windows < 2) {
    return InvalidArgument(
        FormatMessage("calibration text has %zu tokens: need at least two windows of %u", stream.size(), window));
  }
  // The profile measured after the fit reads the text's last windows: they are held back from
  // the fit too, or kvtc would be scored on what it was fitted to.
  ASSIGN_OR_RETURN(const ProfileGeometry profile, PlanProfile(ProfileOptions{}, info));
  const uint64_t profile_tokens = options.hold_back_for_profile ? profile.SourceTokens(model->has_bos()) : 0;
  const size_t profile_windows = (profile_tokens + body - 1) / body;
  const size_t n_heldout_windows =
      std::max<size_t>({1, static_cast<size_t>(std::lround(n_windows * options.heldout_fraction)), profile_windows});
  if (n_heldout_windows >= n_windows) {
    return InvalidArgument(FormatMessage(
        "calibration text has %zu tokens: %zu windows of %u, all held back for the quality profile (%llu tokens "
        "from its end); give a longer text (at least twice that) or --no-profile",
        stream.size(), n_windows, window, static_cast<unsigned long long>(profile_tokens)));
  }
  const size_t n_fit_windows = n_windows - n_heldout_windows;

  KvtcFitOptions fo;
  fo.grouping = options.grouping;
  fo.quantizer = options.quantizer;
  fo.group_size = options.group_size;
  fo.chunk_tokens = std::min(options.chunk_tokens, window - options.sinks);
  fo.ratios = options.ratios;
  fo.sinks = options.sinks;
  fo.n_threads = options.session.n_threads;
  fo.progress = options.progress;
  const KvtcFitModel fit_model{.fingerprint = model->fingerprint(),
                               .n_layers = info.n_layers,
                               .n_kv_heads = info.n_kv_heads,
                               .head_dim = info.head_dim,
                               .rope = info.rope};
  ASSIGN_OR_RETURN(std::unique_ptr<KvtcFitter> fitter, KvtcFitter::Create(fit_model, fo));

  SessionOptions so = options.session;
  so.n_ctx = window + 8;
  so.n_batch = 512;
  so.require_kv = true;
  ASSIGN_OR_RETURN(auto session, LlamaSession::Create(*model, so));
  ProgressBar progress("calibrate: prefill", n_windows, options.progress);
  std::vector<int32_t> doc(window);
  for (size_t w = 0; w < n_windows; ++w) {
    if (n_bos > 0) doc[0] = model->bos_token();
    std::copy(stream.begin() + w * body, stream.begin() + (w + 1) * body, doc.begin() + n_bos);
    session->Clear();
    RETURN_IF_ERROR(session->Eval(doc, false));
    ASSIGN_OR_RETURN(KvCache kv, session->ExtractKv());
    RETURN_IF_ERROR(w < n_fit_windows ? fitter->AddFitWindow(kv.View()) : fitter->AddHeldoutWindow(kv.View()));
    progress.Advance();
  }
  progress.Finish();
  ASSIGN_OR_RETURN(CalibrateReport report, fitter->Finish(out));
  report.seconds = SecondsSince(t_start);
  return report;
}

}  // namespace kvc
