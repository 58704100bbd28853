// `kvcodec calibrate`: runs a model over calibration text, fits KVTC's PCA bases on the KV it
// produces (keys rotated back to position 0) and chooses, by dynamic programming on held-back
// tokens, a bit allocation for every target ratio of the ladder.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "engine/llama_engine.h"
#include "kvtc/calibration.h"

namespace kvc {

struct CalibrateOptions {
  std::string model_path;
  std::string text_path;   // empty: calib.txt beside the model
  uint32_t max_tokens = 0;  // 0: the whole text
  uint32_t window = 1024;   // tokens per prefill (BOS included)
  uint32_t sinks = 4;       // leading positions kvtc keeps in fp16; not fitted
  double heldout_fraction = 0.2;
  KvtcGrouping grouping = KvtcGrouping::kLayer;
  uint32_t group_size = 16;
  std::vector<float> ratios = {4, 8, 12, 16, 20, 24, 32, 48, 64};
  SessionOptions session;
  bool progress = true;
};

struct CalibrationRung {
  float target_ratio = 0;
  double allocated_bits_per_value = 0;  // codes + scales, before entropy coding
  double heldout_rel_mse = 0;           // mean over tensors of error / variance
  double heldout_mse_per_value = 0;
  // Gaussian reverse water-filling rate for the same squared error per basis, from the
  // calibration eigenvalues: what an ideal coder of Gaussian coefficients would need.
  double rwf_bits_per_value = 0;
};

struct CalibrateReport {
  std::string grouping;
  uint32_t group_size = 0;
  uint32_t fit_tokens = 0;
  uint32_t heldout_tokens = 0;
  double key_variance_top8 = 0;  // share of key variance in the 8 largest components (mean over bases)
  double value_variance_top8 = 0;
  std::vector<CalibrationRung> rungs;
  double seconds = 0;
};

Result<CalibrateReport> RunCalibrate(const CalibrateOptions& options, KvtcCalibration* calibration);
std::string CalibrateReportJson(const CalibrateReport& report);

}  // namespace kvc
