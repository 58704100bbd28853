// `kvcodec calibrate`: runs a model over calibration text, fits KVTC's PCA bases on the KV it
// produces (keys rotated back to position 0), chooses by measurement on held-back tokens the
// quantiser, basis grouping and group size that lose least for this model, and finds for every
// target ratio of the ladder the bit allocation whose entropy-coded size meets it.
//
// How the choice is made (nothing here is tuned to one model):
// 1. Windows of `window` tokens are prefilled; the first 1 - heldout_fraction of them fit the
//    bases of every grouping considered, the rest are held back.
// 2. For each candidate (quantiser x grouping x group size), the error of every component
//    group at every width is measured on the held-back tokens, weighted by 1 / the energy of
//    its (K or V, layer) tensor so that K and V, and every layer, count alike on any model.
// 3. At each probe ratio the allocation is searched whose kvtc files, encoded by the codec
//    itself on held-back chunks of `chunk_tokens`, are that many times smaller than fp16; the
//    candidate with the least mean log relative error over the probes wins.
// 4. The winner's allocations for the whole ladder are made the same way and written, with the
//    candidates' scores as the reason, into the .kvcal.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvtc/calibration.h"
#include "llama/llama_engine.h"

namespace kvc {

struct CalibrateOptions {
  std::string model_path;
  std::string text_path;    // empty: calib.txt beside the model
  std::string token_path;   // instead of text: one document per line of space-separated token ids
  uint32_t max_tokens = 0;  // 0: the whole text
  uint32_t window = 0;      // tokens per prefill (BOS included); 0: min(1024, the model's training context)
  uint32_t sinks = 4;       // leading positions left out of the fit (attention sinks can be outliers)
  double heldout_fraction = 0.2;
  std::optional<KvtcGrouping> grouping;    // unset: choose among layer and layer-head
  std::optional<KvtcQuantizer> quantizer;  // unset: choose among token-group and component
  uint32_t group_size = 0;                 // token-group components per scale; 0: choose among 8, 16, 32
  uint32_t chunk_tokens = 256;             // tokens per chunk the sizes are measured at
  std::vector<float> ratios = {4, 8, 12, 16, 20, 24, 32, 48, 64};
  SessionOptions session;
  bool progress = true;
};

struct CalibrationRung {
  float target_ratio = 0;
  double allocated_bits_per_value = 0;  // the allocation's own cost model, before entropy coding
  double coded_bits_per_value = 0;      // codes + scales of held-back chunks as the codec writes them
  double coded_ratio = 0;               // 16 / coded_bits_per_value
  double heldout_rel_mse = 0;           // mean over tensors of error / variance
  double heldout_mse_per_value = 0;
  // Gaussian reverse water-filling rate for the same squared error per basis, from the
  // calibration eigenvalues: what an ideal coder of Gaussian coefficients would need.
  double rwf_bits_per_value = 0;
};

// One configuration calibrate tried: its relative error at each probe ratio.
struct CalibrationCandidate {
  std::string quantizer;
  std::string grouping;
  uint32_t group_size = 0;
  std::vector<float> probe_ratios;
  std::vector<double> probe_rel_mse;
  double score = 0;  // mean ln(rel MSE) over the probes; least wins
};

struct CalibrateReport {
  std::string quantizer;
  std::string grouping;
  uint32_t group_size = 0;
  uint32_t window = 0;
  uint32_t chunk_tokens = 0;
  uint32_t fit_tokens = 0;
  uint32_t heldout_tokens = 0;
  double key_variance_top8 = 0;  // share of key variance in the 8 largest components (mean over bases)
  double value_variance_top8 = 0;
  std::string choice;  // what was chosen and why (also in the .kvcal)
  std::vector<CalibrationCandidate> candidates;
  std::vector<CalibrationRung> rungs;
  double seconds = 0;
};

Result<CalibrateReport> RunCalibrate(const CalibrateOptions& options, KvtcCalibration* calibration);
std::string CalibrateReportJson(const CalibrateReport& report);

}  // namespace kvc
