#include "quality/profile_measure.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "base/hash.h"
#include "codecs/codec.h"
#include "llama/model_files.h"
#include "quality/evaluator.h"
#include "transform_coding/calibration_registry.h"

namespace kvc {

Result<ModelProfile> MeasureProfile(const ProfileOptions& o) {
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(o.model_path));
  const uint32_t train_ctx = model->info().n_ctx_train > 0 ? model->info().n_ctx_train : 1024;
  const uint32_t cont = o.cont != 0 ? o.cont : std::max(1u, std::min(128u, train_ctx / 4));
  const uint32_t ctx = o.ctx != 0 ? o.ctx : std::min(1024u, train_ctx) - cont - 1;
  const uint32_t docs = o.docs != 0 ? o.docs : std::max(8u, (1024 + cont - 1) / cont);
  CalibrationRegistry calibrations;
  RETURN_IF_ERROR(LoadModelCalibration(calibrations, o.model_path, o.calibration));
  const auto kvcal = calibrations.FindForModel(model->fingerprint());

  std::vector<EvalRung> rungs;
  for (const Codec* c : AllCodecs()) {
    if (c->info().needs_calibration && kvcal == nullptr) continue;
    for (const std::string& level : c->info().levels) rungs.push_back({c->info().name, {.level = level, .params = {}}});
  }
  EvalOptions eo;
  eo.model_path = o.model_path;
  if (!o.token_path.empty()) {
    eo.token_path = o.token_path;
  } else {
    eo.text_path = BesideModel(o.model_path, "calib.txt", o.text_path);
  }
  eo.calibration = kvcal ? kvcal->path : "";
  eo.n_docs = docs;
  eo.ctx = ctx;
  eo.cont = cont;
  eo.docs_from_end = true;
  eo.session = o.session;
  eo.progress = o.progress;
  ASSIGN_OR_RETURN(std::vector<EvalReport> reports, RunEvalRungs(eo, rungs));

  ModelProfile p;
  p.model = model->fingerprint();
  p.calibration = kvcal ? HexString(kvcal->hash) : "";
  const std::string& source = o.token_path.empty() ? eo.text_path : eo.token_path;
  p.text = std::filesystem::path(source).filename().string() + ", its last windows (held back by calibrate)";
  p.docs = docs;
  p.ctx = ctx;
  p.cont = cont;
  for (size_t k = 0; k < rungs.size(); ++k) {
    const EvalReport& r = reports[k];
    p.rungs.push_back({.codec = r.codec,
                       .level = r.level,
                       .ratio = r.compression_ratio,
                       .ppl_delta_pct = r.ppl_delta_pct,
                       .top1_agreement = r.top1_agreement,
                       .kl_mean = r.kl_mean});
  }
  return p;
}

}  // namespace kvc
