#include "engine/calibrate.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/progress.h"
#include "engine/model_files.h"
#include "kvtc/basis_layout.h"
#include "kvtc/bit_allocation.h"
#include "kvtc/pca.h"
#include "kvtc/quantizer.h"
#include "kvtc/water_filling.h"
#include "tensor/rope.h"

namespace kvc {
namespace {

using Clock = std::chrono::steady_clock;

// The (kind, layer) tensor a basis belongs to, for weighting errors by that tensor's variance;
// a basis spanning every layer is one tensor per kind.
uint32_t TensorOf(const KvtcCalibration& c, uint32_t basis_index) {
  const uint32_t n_bases = c.n_bases();
  const uint32_t kind = basis_index / n_bases, basis = basis_index % n_bases;
  switch (c.grouping) {
    case KvtcGrouping::kLayerHead: return kind * c.n_layers + basis / c.n_kv_heads;
    case KvtcGrouping::kLayer: return kind * c.n_layers + basis;
    case KvtcGrouping::kAll: return kind;
  }
  return 0;
}

}  // namespace

Result<CalibrateReport> RunCalibrate(const CalibrateOptions& options, KvtcCalibration* out) {
  const auto t_start = Clock::now();
  if (options.window < options.sinks + 16) return InvalidArgument("--window must exceed the sink tokens by 16 or more");
  if (options.group_size == 0 || options.group_size > 4096) return InvalidArgument("--group-size must be in 1..4096");
  if (!(options.heldout_fraction > 0 && options.heldout_fraction < 1)) return InvalidArgument("held-out fraction must be in (0, 1)");
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(options.model_path));
  const ModelInfo& info = model->info();
  ASSIGN_OR_RETURN(std::string text,
                   ReadTextFile(BesideModel(options.model_path, "calib.txt", options.text_path)));
  ASSIGN_OR_RETURN(std::vector<int32_t> stream, model->Tokenize(text, false));
  if (options.max_tokens > 0 && stream.size() > options.max_tokens) stream.resize(options.max_tokens);
  const size_t body = options.window - 1;
  const size_t n_windows = stream.size() / body;
  if (n_windows < 2) return InvalidArgument(FormatMessage("calibration text has %zu tokens: need at least two windows of %u", stream.size(), options.window));
  const size_t n_heldout_windows = std::max<size_t>(1, static_cast<size_t>(std::lround(n_windows * options.heldout_fraction)));
  const size_t n_fit_windows = n_windows - n_heldout_windows;

  KvtcCalibration& cal = *out;
  cal = KvtcCalibration{};
  cal.model_fingerprint = model->fingerprint();
  cal.n_layers = info.n_layers;
  cal.n_kv_heads = info.n_kv_heads;
  cal.head_dim = info.head_dim;
  cal.rope = info.rope;
  cal.keys_rope_undone = true;
  cal.grouping = options.grouping;
  cal.group_size = options.group_size;
  const uint32_t n_bases = cal.n_bases();
  const uint32_t dim = cal.basis_dim();
  const size_t row = size_t{info.n_kv_heads} * info.head_dim;

  SessionOptions so = options.session;
  so.n_ctx = options.window + 8;
  so.n_batch = 512;
  ASSIGN_OR_RETURN(auto session, LlamaSession::Create(*model, so));

  std::vector<CovarianceAccumulator> acc;
  for (uint32_t i = 0; i < 2 * n_bases; ++i) acc.emplace_back(dim);
  // Held-back rows per kind and layer, for measuring quantisation error.
  std::array<std::vector<std::vector<float>>, 2> heldout;
  for (auto& h : heldout) h.assign(info.n_layers, {});
  size_t heldout_tokens = 0, fit_tokens = 0;

  ProgressBar progress("calibrate", n_windows, options.progress);
  const uint32_t kept = options.window - options.sinks;
  const RopeTable rope(info.rope, info.head_dim, static_cast<int32_t>(options.sinks), kept);
  std::vector<int32_t> doc(options.window);
  std::vector<float> x(size_t{kept} * dim);
  for (size_t w = 0; w < n_windows; ++w) {
    doc[0] = model->bos_token();
    std::copy(stream.begin() + w * body, stream.begin() + (w + 1) * body, doc.begin() + 1);
    session->Clear();
    RETURN_IF_ERROR(session->Eval(doc, false));
    ASSIGN_OR_RETURN(KvCache kv, session->ExtractKv());
    std::array<std::vector<std::vector<float>>, 2> rows;
    for (KvKind kind : kKvKinds) {
      auto& layers = rows[static_cast<int>(kind)];
      layers.assign(info.n_layers, std::vector<float>(kept * row));
      for (uint32_t l = 0; l < info.n_layers; ++l) {
        kv.ReadRowsF32(kind, l, options.sinks, kept, layers[l].data());
        if (kind == KvKind::kKey) rope.Rotate(layers[l].data(), info.n_kv_heads, true);
      }
    }
    if (w < n_fit_windows) {
      for (uint32_t i = 0; i < 2 * n_bases; ++i) {
        GatherBasis(cal, i % n_bases, rows[i / n_bases], kept, x.data());
        acc[i].Add(x.data(), kept);
      }
      fit_tokens += kept;
    } else {
      for (int k = 0; k < 2; ++k)
        for (uint32_t l = 0; l < info.n_layers; ++l)
          heldout[k][l].insert(heldout[k][l].end(), rows[k][l].begin(), rows[k][l].end());
      heldout_tokens += kept;
    }
    progress.Advance();
  }
  progress.Finish();

  CalibrateReport report;
  report.grouping = KvtcGroupingName(options.grouping);
  report.group_size = options.group_size;
  report.fit_tokens = static_cast<uint32_t>(fit_tokens);
  report.heldout_tokens = static_cast<uint32_t>(heldout_tokens);
  cal.fit_tokens = report.fit_tokens;
  cal.heldout_tokens = report.heldout_tokens;

  cal.bases.resize(2 * n_bases);
  for (uint32_t i = 0; i < 2 * n_bases; ++i) {
    ASSIGN_OR_RETURN(cal.bases[i], acc[i].Fit(dim));
    double total = 0, top = 0;
    for (uint32_t c = 0; c < cal.bases[i].n_components; ++c) {
      total += cal.bases[i].eigenvalues[c];
      if (c < 8) top += cal.bases[i].eigenvalues[c];
    }
    (i < n_bases ? report.key_variance_top8 : report.value_variance_top8) += total > 0 ? top / total / n_bases : 0;
  }

  // Errors of every component group at every width, on the held-back tokens.
  std::vector<AllocationGroup> groups;
  std::vector<uint32_t> group_basis;
  std::vector<float> coeffs(heldout_tokens * dim), hx(heldout_tokens * dim);
  for (uint32_t i = 0; i < 2 * n_bases; ++i) {
    GatherBasis(cal, i % n_bases, heldout[i / n_bases], heldout_tokens, hx.data());
    Project(cal.bases[i], hx.data(), heldout_tokens, dim, coeffs.data());
    const auto errors = MeasureGroupErrors(coeffs.data(), static_cast<uint32_t>(heldout_tokens), dim, options.group_size);
    for (uint32_t g = 0; g < errors.size(); ++g) {
      AllocationGroup group;
      group.n_components = std::min(options.group_size, dim - g * options.group_size);
      group.error = errors[g];
      groups.push_back(group);
      group_basis.push_back(i);
    }
  }
  // Weight each group's error by 1 / its tensor's held-back energy: raw squared error would
  // spend every bit on whichever tensor has the largest values (keys, here) and starve V.
  const uint32_t n_tensors = cal.grouping == KvtcGrouping::kAll ? 2 : 2 * info.n_layers;
  std::vector<double> tensor_energy(n_tensors, 0);
  for (size_t g = 0; g < groups.size(); ++g) tensor_energy[TensorOf(cal, group_basis[g])] += groups[g].error[0];
  std::vector<AllocationGroup> weighted = groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    const double e = tensor_energy[TensorOf(cal, group_basis[g])];
    for (double& v : weighted[g].error) v = e > 0 ? v / e : 0;
  }

  const double values_per_token = 2.0 * info.n_layers * row;
  for (float ratio : options.ratios) {
    const uint64_t budget = static_cast<uint64_t>(values_per_token * 16.0 / ratio);
    ASSIGN_OR_RETURN(std::vector<uint8_t> bits, AllocateBits(weighted, budget));
    BitAllocation alloc;
    alloc.target_ratio = ratio;
    alloc.bits = bits;
    CalibrationRung rung;
    rung.target_ratio = ratio;
    uint64_t used = 0;
    double rel = 0, sq = 0;
    std::vector<double> basis_error(2 * n_bases, 0);
    for (size_t g = 0; g < groups.size(); ++g) {
      const uint8_t b = bits[g];
      if (b > 0) used += uint64_t{b} * groups[g].n_components + 16;
      rel += weighted[g].error[b];
      sq += groups[g].error[b];
      basis_error[group_basis[g]] += groups[g].error[b];
    }
    alloc.heldout_rel_mse = rel / n_tensors;
    double rwf = 0;
    for (uint32_t i = 0; i < 2 * n_bases; ++i) {
      const auto& eig = cal.bases[i].eigenvalues;
      std::vector<double> lambda(eig.begin(), eig.end());
      rwf += ReverseWaterFillingRate(lambda, basis_error[i]);
    }
    rung.allocated_bits_per_value = static_cast<double>(used) / values_per_token;
    rung.heldout_rel_mse = alloc.heldout_rel_mse;
    rung.heldout_mse_per_value = sq / values_per_token;
    rung.rwf_bits_per_value = rwf / values_per_token;
    cal.allocations.push_back(std::move(alloc));
    report.rungs.push_back(rung);
  }
  RETURN_IF_ERROR(ValidateCalibration(cal));
  report.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return report;
}

std::string CalibrateReportJson(const CalibrateReport& r) {
  nlohmann::ordered_json j;
  j["grouping"] = r.grouping;
  j["group_size"] = r.group_size;
  j["fit_tokens"] = r.fit_tokens;
  j["heldout_tokens"] = r.heldout_tokens;
  j["key_variance_top8"] = r.key_variance_top8;
  j["value_variance_top8"] = r.value_variance_top8;
  j["rungs"] = nlohmann::ordered_json::array();
  for (const auto& g : r.rungs) {
    j["rungs"].push_back({{"target_ratio", g.target_ratio},
                          {"allocated_bits_per_value", g.allocated_bits_per_value},
                          {"heldout_rel_mse", g.heldout_rel_mse},
                          {"heldout_mse_per_value", g.heldout_mse_per_value},
                          {"rwf_bits_per_value", g.rwf_bits_per_value}});
  }
  j["seconds"] = r.seconds;
  return j.dump(2);
}

}  // namespace kvc
