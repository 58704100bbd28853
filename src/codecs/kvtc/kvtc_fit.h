// Fitting a KVTC calibration from K and V windows of any source: what `kvcodec calibrate` does
// with the windows it prefills in llama.cpp (src/quality/calibrate.h), and what the Python
// package's kvcodec.calibrate does with tensors a user collected from their own engine.
//
// How the choice is made (nothing here is tuned to one model):
// 1. Fit windows (keys rotated back to position 0 when their RoPE is known and is one kvcodec
//    undoes) are folded into the covariance of every basis of every grouping considered as
//    they arrive; held-back windows are kept (up to kMaxStatTokens tokens of them).
// 2. For each candidate (quantiser x grouping x group size), the error of every component
//    group at every width is measured on the held-back tokens, weighted by 1 / the energy of
//    its (K or V, layer) tensor so that K and V, and every layer, count alike on any model.
// 3. At each probe ratio the allocation is searched whose kvtc files, encoded by the codec
//    itself on held-back chunks of `chunk_tokens`, are that many times smaller than fp16; the
//    candidate with the least mean log relative error over the probes wins.
// 4. The winner's allocations for the whole ladder are made the same way and written, with the
//    candidates' scores as the reason, into the calibration.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/container.h"
#include "tensor/kv_cache.h"
#include "tensor/rope.h"
#include "transform_coding/calibration.h"

namespace kvc {

// What a calibration is for: the model (its fingerprint names it in every .kvc made with it),
// its KV geometry (keys alone or keys and values), and the RoPE its keys carry.
struct KvtcFitModel {
  ModelFingerprint fingerprint{};
  uint32_t n_layers = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  // Unset: the keys are fitted as they are stored (keys_rope_undone = 0), which costs ratio on
  // a model whose keys carry RoPE; a basis fits keys at position 0 far better. A kind kvcodec
  // does not rotate (RopeRotatesKeys: none, sectioned) is fitted as stored too, and recorded.
  std::optional<RopeParams> rope;
  // The cache keeps keys alone (KvShape::keys_only: an MLA latent cache, an indexer's): only K
  // is fitted and allocated, and every window must be keys-only too.
  bool keys_only = false;
};

struct KvtcFitOptions {
  std::optional<KvtcGrouping> grouping;    // unset: choose among layer and layer-head
  std::optional<KvtcQuantizer> quantizer;  // unset: choose among token-group and component
  uint32_t group_size = 0;                 // token-group components per scale; 0: choose among 8, 16, 32
  // Tokens per chunk the sizes are measured at; at most the longest held-back window's tokens
  // past the sinks (fewer are used then, and reported).
  uint32_t chunk_tokens = 256;
  std::vector<float> ratios = {4, 8, 12, 16, 20, 24, 32, 48, 64};
  uint32_t sinks = 4;  // positions below this are left out of the fit (attention sinks can be outliers)
  int n_threads = 0;   // 0: one per core
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

// One configuration the fit tried: its relative error at each probe ratio.
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
  uint32_t window = 0;  // tokens of the longest window given
  uint32_t chunk_tokens = 0;
  uint32_t fit_tokens = 0;
  uint32_t heldout_tokens = 0;
  double key_variance_top8 = 0;    // share of key variance in the 8 largest components (mean over bases)
  double value_variance_top8 = 0;  // 0 for a keys-only model
  std::string choice;              // what was chosen and why (also in the .kvcal)
  std::vector<CalibrationCandidate> candidates;
  std::vector<CalibrationRung> rungs;
  double seconds = 0;
};

std::string CalibrateReportJson(const CalibrateReport& report);

// Windows in, one calibration out. Every window must have the model's geometry and kinds; its
// tokens at positions below `sinks` are skipped. Not thread-safe; Finish once.
class KvtcFitter {
 public:
  // Held-back tokens the error tables are measured on, and chunks the coded sizes are measured
  // on: enough for stable figures, few enough that calibrating stays minutes on 2 cores.
  static constexpr uint32_t kMaxStatTokens = 8192;
  static constexpr uint32_t kMaxMeasureChunks = 24;

  static Result<std::unique_ptr<KvtcFitter>> Create(const KvtcFitModel& model, const KvtcFitOptions& options);
  ~KvtcFitter();

  // A window the bases are fitted on: folded in now, not kept.
  Status AddFitWindow(const KvView& kv);
  // A window the choice and the allocations are measured on: copied while fewer than
  // kMaxStatTokens held-back tokens are kept, ignored after.
  Status AddHeldoutWindow(const KvView& kv);

  // Fits, chooses and allocates; `out` gets the calibration (validated).
  Result<CalibrateReport> Finish(KvtcCalibration* out);

 private:
  struct State;
  explicit KvtcFitter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvc
