#include "codecs/kvtc/kvtc_fit.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "base/progress.h"
#include "base/report_json.h"
#include "base/thread_pool.h"
#include "codecs/codec.h"
#include "transform_coding/basis_layout.h"
#include "transform_coding/bit_allocation.h"
#include "transform_coding/calibration_registry.h"
#include "transform_coding/component_quantizer.h"
#include "transform_coding/kvcal.h"
#include "transform_coding/pca.h"
#include "transform_coding/quantizer.h"
#include "transform_coding/water_filling.h"

namespace kvc {
namespace {

using Clock = std::chrono::steady_clock;

// Candidates are compared at these ratios: a low, a middle and a high rung.
constexpr float kProbeRatios[] = {8, 16, 32};
constexpr uint32_t kTokenGroupSizes[] = {8, 16, 32};
// A rung's coded size is searched to within this fraction of its target.
constexpr double kCodedSizeTolerance = 0.01;
constexpr int kMaxSizeSearchSteps = 8;

// The (kind, layer) tensor a basis belongs to, for weighting errors by that tensor's energy;
// a basis spanning every layer is one tensor per kind. Kinds are the calibration's (K alone
// when keys-only).
uint32_t TensorOf(const KvtcCalibration& c, uint32_t basis_index) {
  const uint32_t n_bases = c.n_bases();
  const uint32_t kind = basis_index / n_bases, basis = basis_index % n_bases;
  switch (c.grouping) {
    case KvtcGrouping::kLayerHead:
      return kind * c.n_layers + basis / c.n_kv_heads;
    case KvtcGrouping::kLayer:
      return kind * c.n_layers + basis;
    case KvtcGrouping::kAll:
      return kind;
  }
  return 0;
}

uint32_t TensorCount(const KvtcCalibration& c) {
  return c.n_kinds() * (c.grouping == KvtcGrouping::kAll ? 1 : c.n_layers);
}

std::string RatioName(float ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", ratio);
  return buf;
}

// Bases fitted for one grouping, and the held-back tokens projected onto them.
struct GroupingFit {
  KvtcCalibration skeleton;                // header and bases; no allocations, no multipliers
  std::vector<std::vector<float>> coeffs;  // per basis: [n_stat][dim]
  uint32_t n_stat = 0;
};

// One unit of allocation (a token-group component group, or one component) and its errors.
struct Unit {
  uint32_t basis = 0;
  uint32_t n_components = 1;
  std::array<double, 9> error{};     // squared error per token at each width
  std::array<double, 9> weighted{};  // error / its tensor's energy
};

// One candidate configuration with its measured tables, able to allocate at a budget.
class CandidateModel {
 public:
  CandidateModel(const GroupingFit& fit, KvtcQuantizer quantizer, uint32_t group_size, uint32_t chunk_tokens,
                 ThreadPool* pool)
      : cal_(fit.skeleton) {
    cal_.quantizer = quantizer;
    cal_.group_size = quantizer == KvtcQuantizer::kComponent ? 1 : group_size;
    cal_.chunk_tokens = quantizer == KvtcQuantizer::kComponent ? chunk_tokens : 0;
    const uint32_t n_bases = static_cast<uint32_t>(cal_.bases.size());
    const uint32_t dim = cal_.basis_dim();
    std::vector<std::vector<Unit>> per_basis(n_bases);
    std::vector<std::vector<std::array<double, 9>>> rates(n_bases);
    ParallelForOrSerial(pool, n_bases, [&](size_t i) {
      const float* x = fit.coeffs[i].data();
      if (quantizer == KvtcQuantizer::kComponent) {
        PcaBasis& basis = cal_.bases[i];
        basis.step_multipliers.assign(size_t{basis.n_components} * kKvtcWidths, 1.0f);
        for (uint32_t c = 0; c < basis.n_components; ++c) {
          const ComponentStats s = MeasureComponent(x + c, dim, fit.n_stat, chunk_tokens);
          std::copy(s.multipliers.begin(), s.multipliers.end(),
                    basis.step_multipliers.begin() + size_t{c} * kKvtcWidths);
          per_basis[i].push_back({static_cast<uint32_t>(i), 1, s.error, {}});
          std::array<double, 9> rate{};
          for (uint32_t b = 1; b <= 8; ++b) rate[b] = s.entropy_bits[b] + 16.0 / chunk_tokens;
          rates[i].push_back(rate);
        }
      } else {
        const auto errors = MeasureGroupErrors(x, fit.n_stat, dim, cal_.group_size);
        for (uint32_t k = 0; k < errors.size(); ++k) {
          const uint32_t len = std::min(cal_.group_size, dim - k * cal_.group_size);
          per_basis[i].push_back({static_cast<uint32_t>(i), len, errors[k], {}});
        }
      }
    });
    for (uint32_t i = 0; i < n_bases; ++i) {
      units_.insert(units_.end(), per_basis[i].begin(), per_basis[i].end());
      rates_.insert(rates_.end(), rates[i].begin(), rates[i].end());
    }
    // Weight each unit's error by 1 / its tensor's held-back energy: raw squared error would
    // spend every bit on whichever tensor has the largest values and starve the others.
    std::vector<double> energy(TensorCount(cal_), 0);
    for (const Unit& u : units_) energy[TensorOf(cal_, u.basis)] += u.error[0];
    for (Unit& u : units_) {
      const double e = energy[TensorOf(cal_, u.basis)];
      for (uint32_t b = 0; b < 9; ++b) u.weighted[b] = e > 0 ? u.error[b] / e : 0;
    }
  }

  const KvtcCalibration& calibration() const { return cal_; }
  std::string Name() const {
    std::string name = std::string(KvtcQuantizerName(cal_.quantizer)) + "/" + KvtcGroupingName(cal_.grouping);
    if (cal_.quantizer == KvtcQuantizer::kTokenGroup) name += "/" + std::to_string(cal_.group_size);
    return name;
  }

  // Widths within `budget` bits per token of the cost model (allocated bits for token-group,
  // measured code entropy plus amortised scales for component).
  Result<std::vector<uint8_t>> Allocate(double budget) const {
    if (cal_.quantizer == KvtcQuantizer::kComponent) {
      std::vector<RateGroup> groups(units_.size());
      for (size_t g = 0; g < units_.size(); ++g) groups[g] = {rates_[g], units_[g].weighted};
      return AllocateBitsByRate(groups, budget);
    }
    std::vector<AllocationGroup> groups(units_.size());
    for (size_t g = 0; g < units_.size(); ++g) groups[g] = {units_[g].n_components, units_[g].weighted};
    return AllocateBits(groups, static_cast<uint64_t>(std::max(0.0, budget)));
  }

  double AllocatedBitsPerToken(const std::vector<uint8_t>& bits) const {
    double total = 0;
    for (size_t g = 0; g < units_.size(); ++g) {
      if (bits[g] == 0) continue;
      const double scale_bits = cal_.quantizer == KvtcQuantizer::kComponent ? 16.0 / cal_.chunk_tokens : 16.0;
      total += static_cast<double>(bits[g]) * units_[g].n_components + scale_bits;
    }
    return total;
  }

  double RelMse(const std::vector<uint8_t>& bits) const {
    double total = 0;
    for (size_t g = 0; g < units_.size(); ++g) total += units_[g].weighted[bits[g]];
    return total / TensorCount(cal_);
  }

  double SquaredError(const std::vector<uint8_t>& bits) const {
    double total = 0;
    for (size_t g = 0; g < units_.size(); ++g) total += units_[g].error[bits[g]];
    return total;
  }

  std::vector<double> BasisErrors(const std::vector<uint8_t>& bits) const {
    std::vector<double> out(cal_.bases.size(), 0);
    for (size_t g = 0; g < units_.size(); ++g) out[units_[g].basis] += units_[g].error[bits[g]];
    return out;
  }

 private:
  KvtcCalibration cal_;
  std::vector<Unit> units_;
  std::vector<std::array<double, 9>> rates_;  // component only
};

// Held-back windows' KV as given, and which chunks of them sizes are measured on.
struct MeasureSet {
  std::vector<KvCache> windows;
  std::vector<std::pair<uint32_t, uint32_t>> chunks;  // (window, first token), each chunk_tokens long
  uint32_t chunk_tokens = 0;
  ModelFingerprint model{};
};

// Bits per KV value (codes, scales, headers: whole .kvc files) of the held-back chunks encoded
// by the kvtc codec with `bits` as the allocation of `ratio`.
Result<double> CodedBitsPerValue(const KvtcCalibration& base, float ratio, const std::vector<uint8_t>& bits,
                                 const MeasureSet& set, ThreadPool* pool) {
  KvtcCalibration cal = base;
  cal.allocations.clear();
  BitAllocation alloc;
  alloc.target_ratio = ratio;
  alloc.bits = bits;
  cal.allocations.push_back(std::move(alloc));
  CalibrationRegistry registry;
  ASSIGN_OR_RETURN(auto loaded, registry.Add(std::move(cal)));
  const Codec* codec = FindCodec("kvtc");
  if (codec == nullptr) return Internal("kvtc codec not registered");
  EncodeOptions options;
  options.level = RatioName(ratio);
  CodecContext context;
  context.calibrations = &registry;
  context.model = &set.model;
  std::vector<uint64_t> bytes(set.chunks.size(), 0);
  std::vector<Status> statuses(set.chunks.size());
  ParallelForOrSerial(pool, set.chunks.size(), [&](size_t k) {
    const auto [w, first] = set.chunks[k];
    const KvView view(&set.windows[w], first, set.chunk_tokens);
    auto file = EncodeKvc(*codec, view, options, set.model, static_cast<uint32_t>(view.pos_begin()), context);
    if (!file.ok()) {
      statuses[k] = file.status();
      return;
    }
    bytes[k] = file->size();
  });
  for (const Status& s : statuses) RETURN_IF_ERROR(s.WithContext("measuring a kvtc rung"));
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  const KvShape shape = set.windows.front().shape();
  const double values = static_cast<double>(set.chunks.size()) * set.chunk_tokens *
                        static_cast<double>(shape.n_kinds()) * shape.n_layers * shape.n_kv_heads * shape.head_dim;
  return 8.0 * static_cast<double>(total) / values;
}

struct FittedRung {
  std::vector<uint8_t> bits;
  double coded_bits_per_value = 0;
};

// The allocation whose coded size is closest to 16 / ratio bits per value without exceeding it
// by more than the tolerance: the cost model guesses the budget, the codec's bytes correct it.
Result<FittedRung> FitRung(const CandidateModel& model, float ratio, const MeasureSet& set, double values_per_token,
                           ThreadPool* pool) {
  const double target = 16.0 / ratio;
  double budget = target * values_per_token;
  std::vector<std::pair<double, double>> tried;  // (budget, coded bits per value)
  FittedRung best;
  bool have = false;
  auto better = [&](double coded) {
    if (!have) return true;
    const bool fits = coded <= target * (1 + kCodedSizeTolerance);
    const bool best_fits = best.coded_bits_per_value <= target * (1 + kCodedSizeTolerance);
    if (fits != best_fits) return fits;
    return fits ? coded > best.coded_bits_per_value : coded < best.coded_bits_per_value;
  };
  for (int step = 0; step < kMaxSizeSearchSteps; ++step) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bits, model.Allocate(budget));
    ASSIGN_OR_RETURN(const double coded, CodedBitsPerValue(model.calibration(), ratio, bits, set, pool));
    if (better(coded)) {
      best = {std::move(bits), coded};
      have = true;
    }
    if (std::fabs(coded - target) <= kCodedSizeTolerance * target) break;
    tried.emplace_back(budget, coded);
    double next = budget * target / std::max(coded, 1e-9);
    if (tried.size() >= 2) {
      const auto [b0, c0] = tried[tried.size() - 2];
      const auto [b1, c1] = tried.back();
      if (c1 != c0) next = b1 + (target - c1) * (b1 - b0) / (c1 - c0);
    }
    // The coded size is a step function of the budget: stay within a factor of 2 per step.
    next = std::clamp(next, budget * 0.5, budget * 2.0);
    if (std::fabs(next - budget) < 1e-6 * budget) break;
    budget = next;
  }
  return best;
}

std::string Percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

}  // namespace

struct KvtcFitter::State {
  KvtcFitModel model;
  KvtcFitOptions options;
  std::vector<KvtcGrouping> groupings;
  std::vector<GroupingFit> fits;                        // per grouping: header and, at Finish, bases
  std::vector<std::vector<CovarianceAccumulator>> acc;  // per grouping, per basis (K bases, then any V)
  MeasureSet set;
  std::vector<uint32_t> heldout_skip;  // per kept held-back window: its leading tokens inside the sinks
  uint64_t fit_tokens = 0;
  uint64_t heldout_kept = 0;
  uint32_t window = 0;
  std::optional<RopeTable> rope_table;  // the last window's, reused while windows share positions
  int32_t rope_pos = 0;
  uint32_t rope_tokens = 0;
  Clock::time_point start = Clock::now();

  size_t row() const { return size_t{model.n_kv_heads} * model.head_dim; }
  // Keys are fitted at position 0 only for a RoPE kvcodec can undo (rope.h); the rest as stored.
  bool UndoesRope() const { return model.rope.has_value() && RopeRotatesKeys(model.rope->type); }

  Status CheckWindow(const KvView& kv, const char* what) const {
    const KvShape s = kv.shape();
    if (s.n_layers != model.n_layers || s.n_kv_heads != model.n_kv_heads || s.head_dim != model.head_dim) {
      return InvalidArgument(FormatMessage("a %s window has %u layers, %u KV heads of %u; the model has %u, %u of %u",
                                           what, s.n_layers, s.n_kv_heads, s.head_dim, model.n_layers, model.n_kv_heads,
                                           model.head_dim));
    }
    // The bases are fitted per kind: a keys-only window has no V for them, and V of a full one
    // would go unfitted in a keys-only calibration that the codec then refuses such caches with.
    if (s.keys_only != model.keys_only) {
      return InvalidArgument(FormatMessage("a %s window holds %s; the model keeps %s", what,
                                           s.keys_only ? "keys only" : "keys and values",
                                           model.keys_only ? "keys only" : "keys and values"));
    }
    if (kv.pos_begin() < 0) return InvalidArgument(FormatMessage("a %s window starts at a negative position", what));
    return Status::Ok();
  }

  // Tokens of `kv` that lie inside the sinks (skipped).
  uint32_t Skip(const KvView& kv) const {
    const int64_t inside = int64_t{options.sinks} - kv.pos_begin();
    return static_cast<uint32_t>(std::clamp<int64_t>(inside, 0, kv.n_tokens()));
  }

  // Rows [skip, n) of every layer of one kind as fp32, keys rotated back to position 0.
  void ReadRows(const KvView& kv, KvKind kind, uint32_t skip, std::vector<std::vector<float>>* layers,
                size_t offset_tokens) {
    const uint32_t kept = kv.n_tokens() - skip;
    const bool rotate = kind == KvKind::kKey && UndoesRope();
    if (rotate) {
      const int32_t pos = kv.pos_begin() + static_cast<int32_t>(skip);
      if (!rope_table || rope_pos != pos || rope_tokens != kept) {
        rope_table.emplace(*model.rope, model.head_dim, pos, kept);
        rope_pos = pos;
        rope_tokens = kept;
      }
    }
    for (uint32_t l = 0; l < model.n_layers; ++l) {
      float* dst = (*layers)[l].data() + offset_tokens * row();
      kv.ReadRowsF32(kind, l, skip, kept, dst);
      if (rotate) rope_table->Rotate(dst, model.n_kv_heads, true);
    }
  }
};

KvtcFitter::KvtcFitter(std::unique_ptr<State> state) : state_(std::move(state)) {}
KvtcFitter::~KvtcFitter() = default;

Result<std::unique_ptr<KvtcFitter>> KvtcFitter::Create(const KvtcFitModel& model, const KvtcFitOptions& options) {
  if (model.n_layers == 0 || model.n_kv_heads == 0 || model.head_dim == 0 || model.n_layers > kMaxLayers ||
      model.n_kv_heads > kMaxKvHeads || model.head_dim > kMaxHeadDim) {
    return InvalidArgument(FormatMessage("a KV geometry of %u layers, %u KV heads of %u is out of range",
                                         model.n_layers, model.n_kv_heads, model.head_dim));
  }
  if (model.rope) {
    const RopeParams& r = *model.rope;
    if (static_cast<uint8_t>(r.type) > static_cast<uint8_t>(kLastRopeType)) return InvalidArgument("unknown rope type");
    if (r.n_rot % 2 != 0 || r.n_rot > model.head_dim)
      return InvalidArgument("rope n_rot must be even and at most head_dim (0: head_dim)");
    if (!(std::isfinite(r.freq_base) && r.freq_base > 0 && std::isfinite(r.freq_scale) && r.freq_scale > 0))
      return InvalidArgument("rope base and scale must be finite and above 0");
  }
  if (options.group_size > 4096) return InvalidArgument("group size must be in 1..4096");
  if (options.chunk_tokens < 16) return InvalidArgument("chunks must be 16 tokens or more");
  if (options.ratios.empty()) return InvalidArgument("no target ratios");
  for (float r : options.ratios) {
    if (!(std::isfinite(r) && r >= 1 && r <= 1024)) return InvalidArgument("target ratios must be in 1..1024");
  }

  auto s = std::make_unique<State>();
  s->model = model;
  s->options = options;
  if (options.grouping)
    s->groupings = {*options.grouping};
  else if (model.n_kv_heads == 1)
    s->groupings = {KvtcGrouping::kLayer};  // layer-head would be the same bases
  else
    s->groupings = {KvtcGrouping::kLayer, KvtcGrouping::kLayerHead};

  KvtcCalibration header;
  header.format_version = model.keys_only ? kKvcalKeysOnlyFormatVersion : 2;
  header.model_fingerprint = model.fingerprint;
  header.n_layers = model.n_layers;
  header.n_kv_heads = model.n_kv_heads;
  header.head_dim = model.head_dim;
  header.keys_only = model.keys_only;
  header.rope = model.rope.value_or(RopeParams{});
  header.keys_rope_undone = s->UndoesRope();
  s->fits.resize(s->groupings.size());
  s->acc.resize(s->groupings.size());
  for (size_t gi = 0; gi < s->groupings.size(); ++gi) {
    s->fits[gi].skeleton = header;
    s->fits[gi].skeleton.grouping = s->groupings[gi];
    const KvtcCalibration& skeleton = s->fits[gi].skeleton;
    for (uint32_t i = 0; i < skeleton.n_kinds() * skeleton.n_bases(); ++i)
      s->acc[gi].emplace_back(skeleton.basis_dim());
  }
  s->set.model = model.fingerprint;
  return std::unique_ptr<KvtcFitter>(new KvtcFitter(std::move(s)));
}

Status KvtcFitter::AddFitWindow(const KvView& kv) {
  State& s = *state_;
  RETURN_IF_ERROR(s.CheckWindow(kv, "fit"));
  const uint32_t skip = s.Skip(kv);
  const uint32_t kept = kv.n_tokens() - skip;
  s.window = std::max(s.window, kv.n_tokens());
  if (kept == 0) return Status::Ok();
  std::array<std::vector<std::vector<float>>, 2> rows;  // by kind; V's empty for keys only
  for (KvKind kind : kv.shape().kinds()) {
    auto& layers = rows[static_cast<int>(kind)];
    layers.assign(s.model.n_layers, std::vector<float>(kept * s.row()));
    s.ReadRows(kv, kind, skip, &layers, 0);
  }
  for (size_t gi = 0; gi < s.groupings.size(); ++gi) {
    const KvtcCalibration& c = s.fits[gi].skeleton;
    std::vector<float> x(size_t{kept} * c.basis_dim());
    for (uint32_t i = 0; i < c.n_kinds() * c.n_bases(); ++i) {
      GatherBasis(c, i % c.n_bases(), rows[i / c.n_bases()], kept, x.data());
      RETURN_IF_ERROR(s.acc[gi][i].Add(x.data(), kept));
    }
  }
  s.fit_tokens += kept;
  return Status::Ok();
}

Status KvtcFitter::AddHeldoutWindow(const KvView& kv) {
  State& s = *state_;
  RETURN_IF_ERROR(s.CheckWindow(kv, "held-back"));
  s.window = std::max(s.window, kv.n_tokens());
  const uint32_t skip = s.Skip(kv);
  if (skip == kv.n_tokens() || s.heldout_kept >= kMaxStatTokens) return Status::Ok();
  ASSIGN_OR_RETURN(KvCache copy, kv.Copy());
  s.set.windows.push_back(std::move(copy));
  s.heldout_skip.push_back(skip);
  s.heldout_kept += kv.n_tokens() - skip;
  return Status::Ok();
}

Result<CalibrateReport> KvtcFitter::Finish(KvtcCalibration* out) {
  State& s = *state_;
  const KvtcFitOptions& options = s.options;
  if (s.fit_tokens < 2) return InvalidArgument("no tokens to fit the bases on (every fit window was inside the sinks)");
  if (s.set.windows.empty()) return InvalidArgument("no held-back tokens to measure on");
  uint32_t longest_heldout = 0;
  for (size_t w = 0; w < s.set.windows.size(); ++w)
    longest_heldout = std::max(longest_heldout, s.set.windows[w].shape().n_tokens - s.heldout_skip[w]);
  const uint32_t chunk_tokens = std::min(options.chunk_tokens, longest_heldout);
  if (chunk_tokens < 16) {
    return InvalidArgument(
        FormatMessage("the longest held-back window has %u tokens past the sinks: the sizes need chunks of 16 or more",
                      longest_heldout));
  }
  MeasureSet& set = s.set;
  set.chunk_tokens = chunk_tokens;
  for (uint32_t w = 0; w < set.windows.size(); ++w) {
    const uint32_t n = set.windows[w].shape().n_tokens;
    for (uint32_t t = s.heldout_skip[w]; t + chunk_tokens <= n && set.chunks.size() < kMaxMeasureChunks;
         t += chunk_tokens) {
      set.chunks.emplace_back(w, t);
    }
  }

  // Held-back rows (keys rotated back), projected onto every grouping's bases.
  const uint32_t n_stat = static_cast<uint32_t>(s.heldout_kept);
  const KvtcCalibration& skeleton = s.fits.front().skeleton;
  std::array<std::vector<std::vector<float>>, 2> heldout;  // by kind; V's empty for keys only
  for (KvKind kind : skeleton.kinds()) {
    heldout[static_cast<int>(kind)].assign(s.model.n_layers, std::vector<float>(size_t{n_stat} * s.row()));
  }
  size_t offset = 0;
  for (uint32_t w = 0; w < set.windows.size(); ++w) {
    const KvView view = set.windows[w].View();
    for (KvKind kind : skeleton.kinds())
      s.ReadRows(view, kind, s.heldout_skip[w], &heldout[static_cast<int>(kind)], offset);
    offset += view.n_tokens() - s.heldout_skip[w];
  }

  CalibrateReport report;
  report.window = s.window;
  report.chunk_tokens = chunk_tokens;
  report.fit_tokens = static_cast<uint32_t>(std::min<uint64_t>(s.fit_tokens, UINT32_MAX));
  report.heldout_tokens = n_stat;
  for (size_t gi = 0; gi < s.groupings.size(); ++gi) {
    GroupingFit& fit = s.fits[gi];
    KvtcCalibration& c = fit.skeleton;
    c.fit_tokens = report.fit_tokens;
    c.heldout_tokens = n_stat;
    const uint32_t n_bases = c.n_bases(), dim = c.basis_dim();
    const uint32_t total_bases = c.n_kinds() * n_bases;
    c.bases.resize(total_bases);
    fit.coeffs.resize(total_bases);
    fit.n_stat = n_stat;
    std::vector<float> hx(size_t{n_stat} * dim);
    for (uint32_t i = 0; i < total_bases; ++i) {
      ASSIGN_OR_RETURN(c.bases[i], s.acc[gi][i].Fit(dim));
      GatherBasis(c, i % n_bases, heldout[i / n_bases], n_stat, hx.data());
      fit.coeffs[i].resize(size_t{n_stat} * dim);
      RETURN_IF_ERROR(Project(c.bases[i], hx.data(), n_stat, dim, fit.coeffs[i].data()));
    }
  }
  for (auto& h : heldout) h.clear();

  std::vector<KvtcQuantizer> quantizers;
  if (options.quantizer)
    quantizers = {*options.quantizer};
  else
    quantizers = {KvtcQuantizer::kTokenGroup, KvtcQuantizer::kComponent};
  std::vector<uint32_t> group_sizes;
  if (options.group_size != 0)
    group_sizes = {options.group_size};
  else
    group_sizes.assign(std::begin(kTokenGroupSizes), std::end(kTokenGroupSizes));

  ThreadPool pool(options.n_threads > 0 ? static_cast<size_t>(options.n_threads) : 0);
  const double values_per_token = static_cast<double>(skeleton.n_kinds()) * s.model.n_layers * s.row();

  // Every candidate at the probe ratios.
  struct Tried {
    std::unique_ptr<CandidateModel> model;
    CalibrationCandidate summary;
  };
  std::vector<Tried> tried;
  size_t n_candidates = 0;
  for (KvtcQuantizer q : quantizers)
    n_candidates += s.groupings.size() * (q == KvtcQuantizer::kComponent ? 1 : group_sizes.size());
  ProgressBar choosing("calibrate: choosing", n_candidates, options.progress);
  for (size_t gi = 0; gi < s.groupings.size(); ++gi) {
    for (KvtcQuantizer q : quantizers) {
      const std::vector<uint32_t> sizes = q == KvtcQuantizer::kComponent ? std::vector<uint32_t>{1} : group_sizes;
      for (uint32_t gs : sizes) {
        Tried t;
        t.model = std::make_unique<CandidateModel>(s.fits[gi], q, gs, chunk_tokens, &pool);
        t.summary.quantizer = KvtcQuantizerName(q);
        t.summary.grouping = KvtcGroupingName(s.groupings[gi]);
        t.summary.group_size = t.model->calibration().group_size;
        for (float ratio : kProbeRatios) {
          ASSIGN_OR_RETURN(FittedRung r, FitRung(*t.model, ratio, set, values_per_token, &pool));
          const double rel = t.model->RelMse(r.bits);
          t.summary.probe_ratios.push_back(ratio);
          t.summary.probe_rel_mse.push_back(rel);
          t.summary.score += std::log(std::max(rel, 1e-12)) / std::size(kProbeRatios);
        }
        tried.push_back(std::move(t));
        choosing.Advance();
      }
    }
  }
  choosing.Finish();
  size_t best = 0;
  for (size_t k = 1; k < tried.size(); ++k) {
    if (tried[k].summary.score < tried[best].summary.score) best = k;
  }
  const CandidateModel& winner = *tried[best].model;
  std::string choice = winner.Name() + ": least held-out relative error at equal coded size (rel. MSE at ";
  for (size_t p = 0; p < std::size(kProbeRatios); ++p) choice += (p ? "/" : "") + RatioName(kProbeRatios[p]);
  choice += "x)";
  for (const Tried& t : tried) {
    choice += "; " + t.model->Name() + " ";
    for (size_t p = 0; p < t.summary.probe_rel_mse.size(); ++p)
      choice += (p ? "/" : "") + Percent(t.summary.probe_rel_mse[p]);
  }
  if (choice.size() > kMaxKvtcChoiceBytes) choice.resize(kMaxKvtcChoiceBytes);
  for (const Tried& t : tried) report.candidates.push_back(t.summary);

  KvtcCalibration& cal = *out;
  cal = winner.calibration();
  cal.choice = choice;
  std::vector<float> ratios = options.ratios;
  std::sort(ratios.begin(), ratios.end());
  ratios.erase(std::unique(ratios.begin(), ratios.end()), ratios.end());
  ProgressBar ladder("calibrate: ladder", ratios.size(), options.progress);
  for (float ratio : ratios) {
    ASSIGN_OR_RETURN(FittedRung r, FitRung(winner, ratio, set, values_per_token, &pool));
    BitAllocation alloc;
    alloc.target_ratio = ratio;
    alloc.bits = r.bits;
    alloc.heldout_rel_mse = winner.RelMse(r.bits);
    alloc.coded_bits_per_value = r.coded_bits_per_value;
    CalibrationRung rung;
    rung.target_ratio = ratio;
    rung.allocated_bits_per_value = winner.AllocatedBitsPerToken(r.bits) / values_per_token;
    rung.coded_bits_per_value = r.coded_bits_per_value;
    rung.coded_ratio = r.coded_bits_per_value > 0 ? 16.0 / r.coded_bits_per_value : 0;
    rung.heldout_rel_mse = alloc.heldout_rel_mse;
    rung.heldout_mse_per_value = winner.SquaredError(r.bits) / values_per_token;
    const std::vector<double> basis_error = winner.BasisErrors(r.bits);
    double rwf = 0;
    for (size_t i = 0; i < cal.bases.size(); ++i) {
      const auto& eig = cal.bases[i].eigenvalues;
      rwf += ReverseWaterFillingRate(std::vector<double>(eig.begin(), eig.end()), basis_error[i]);
    }
    rung.rwf_bits_per_value = rwf / values_per_token;
    cal.allocations.push_back(std::move(alloc));
    report.rungs.push_back(rung);
    ladder.Advance();
  }
  ladder.Finish();
  RETURN_IF_ERROR(ValidateCalibration(cal));

  report.quantizer = KvtcQuantizerName(cal.quantizer);
  report.grouping = KvtcGroupingName(cal.grouping);
  report.group_size = cal.group_size;
  report.choice = cal.choice;
  const uint32_t n_bases = cal.n_bases();
  for (uint32_t i = 0; i < cal.n_kinds() * n_bases; ++i) {
    double total = 0, top = 0;
    for (uint32_t c = 0; c < cal.bases[i].n_components; ++c) {
      total += cal.bases[i].eigenvalues[c];
      if (c < 8) top += cal.bases[i].eigenvalues[c];
    }
    (i < n_bases ? report.key_variance_top8 : report.value_variance_top8) += total > 0 ? top / total / n_bases : 0;
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - s.start).count();
  return report;
}

KVC_REPORT_JSON(CalibrationCandidate, quantizer, grouping, group_size, probe_ratios, probe_rel_mse, score)
KVC_REPORT_JSON(CalibrationRung, target_ratio, allocated_bits_per_value, coded_bits_per_value, coded_ratio,
                heldout_rel_mse, heldout_mse_per_value, rwf_bits_per_value)
KVC_REPORT_JSON(CalibrateReport, quantizer, grouping, group_size, window, chunk_tokens, fit_tokens, heldout_tokens,
                key_variance_top8, value_variance_top8, choice, candidates, rungs, seconds)

std::string CalibrateReportJson(const CalibrateReport& r) { return DumpReport(r); }

}  // namespace kvc
