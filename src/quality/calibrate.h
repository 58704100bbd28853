// `kvcodec calibrate`: runs a model over calibration text, fits KVTC's PCA bases on the KV it
// produces (keys rotated back to position 0), chooses by measurement on held-back tokens the
// quantiser, basis grouping and group size that lose least for this model, and finds for every
// target ratio of the ladder the bit allocation whose entropy-coded size meets it.
//
// The fit itself, on the windows prefilled here, is KvtcFitter (src/codecs/kvtc/kvtc_fit.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "codecs/kvtc/kvtc_fit.h"
#include "llama/llama_session.h"
#include "transform_coding/calibration.h"

namespace kvc {

struct CalibrateOptions {
  std::string model_path;
  // The source, one of the two (nothing beside the model is read in their place): a text, or one
  // document per line of space-separated token ids. Its last windows are held back from the fit
  // (heldout_fraction, and at least what the quality profile reads: quality/profile_measure.h).
  std::string text_path;
  std::string token_path;
  uint32_t max_tokens = 0;  // 0: the whole text
  uint32_t window = 0;      // tokens per prefill (any BOS included); 0: min(1024, the model's training context)
  uint32_t sinks = 4;       // leading positions left out of the fit (attention sinks can be outliers)
  double heldout_fraction = 0.2;
  bool hold_back_for_profile = true;       // false: a profile will not be measured on this text's end
  std::optional<KvtcGrouping> grouping;    // unset: choose among layer and layer-head
  std::optional<KvtcQuantizer> quantizer;  // unset: choose among token-group and component
  uint32_t group_size = 0;                 // token-group components per scale; 0: choose among 8, 16, 32
  uint32_t chunk_tokens = 256;             // tokens per chunk the sizes are measured at
  std::vector<float> ratios = {4, 8, 12, 16, 20, 24, 32, 48, 64};
  SessionOptions session;
  bool progress = true;
};

Result<CalibrateReport> RunCalibrate(const CalibrateOptions& options, KvtcCalibration* calibration);

}  // namespace kvc
