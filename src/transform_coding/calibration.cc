#include "transform_coding/calibration.h"

#include <cinttypes>
#include <cmath>
#include <limits>
#include <string>

#include "base/utf8.h"
#include "tensor/kv_cache.h"
#include "transform_coding/kvcal.h"

namespace kvc {
namespace {

bool IsKnownGrouping(KvtcGrouping grouping) {
  return static_cast<uint8_t>(grouping) <= static_cast<uint8_t>(KvtcGrouping::kAll);
}

// Computed in 64 bits: with kAll and out-of-limit dimensions the products overflow 32, and a
// validator must see the true size rather than a wrapped one that looks acceptable.
uint64_t NBases64(const KvtcCalibration& c) {
  switch (c.grouping) {
    case KvtcGrouping::kLayerHead:
      return uint64_t{c.n_layers} * c.n_kv_heads;
    case KvtcGrouping::kLayer:
      return c.n_layers;
    case KvtcGrouping::kAll:
      return 1;
  }
  return 0;
}

uint64_t BasisDim64(const KvtcCalibration& c) {
  switch (c.grouping) {
    case KvtcGrouping::kLayerHead:
      return c.head_dim;
    case KvtcGrouping::kLayer:
      return uint64_t{c.n_kv_heads} * c.head_dim;
    case KvtcGrouping::kAll:
      return uint64_t{c.n_layers} * c.n_kv_heads * c.head_dim;
  }
  return 0;
}

uint32_t Saturate32(uint64_t v) {
  return v > std::numeric_limits<uint32_t>::max() ? std::numeric_limits<uint32_t>::max() : static_cast<uint32_t>(v);
}

uint64_t BasisFloats(uint64_t dim, uint64_t n_components) { return dim + n_components * dim + n_components; }

bool AllFinite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

Status ValidateBasis(const PcaBasis& b, uint32_t expected_dim, KvtcQuantizer quantizer) {
  if (b.dim != expected_dim) {
    return InvalidArgument(FormatMessage("dim %u differs from the grouping's basis dimension %u", b.dim, expected_dim));
  }
  if (b.n_components == 0 || b.n_components > b.dim) {
    return InvalidArgument(FormatMessage("n_components %u outside 1..%u", b.n_components, b.dim));
  }
  if (b.mean.size() != b.dim)
    return InvalidArgument(FormatMessage("mean has %zu values, expected %u", b.mean.size(), b.dim));
  const uint64_t n_comp_values = uint64_t{b.n_components} * b.dim;
  if (b.components.size() != n_comp_values) {
    return InvalidArgument(FormatMessage("components has %zu values, expected %" PRIu64 " (%u x %u)",
                                         b.components.size(), n_comp_values, b.n_components, b.dim));
  }
  if (b.eigenvalues.size() != b.n_components) {
    return InvalidArgument(
        FormatMessage("eigenvalues has %zu values, expected %u", b.eigenvalues.size(), b.n_components));
  }
  if (!AllFinite(b.mean)) return InvalidArgument("mean holds a non-finite value");
  if (!AllFinite(b.components)) return InvalidArgument("components holds a non-finite value");
  if (!AllFinite(b.eigenvalues)) return InvalidArgument("eigenvalues holds a non-finite value");
  const uint64_t n_multipliers = quantizer == KvtcQuantizer::kComponent ? uint64_t{b.n_components} * kKvtcWidths : 0;
  if (b.step_multipliers.size() != n_multipliers) {
    return InvalidArgument(FormatMessage("step_multipliers has %zu values, expected %" PRIu64 " for quantizer %s",
                                         b.step_multipliers.size(), n_multipliers, KvtcQuantizerName(quantizer)));
  }
  for (size_t i = 0; i < b.step_multipliers.size(); ++i) {
    const float m = b.step_multipliers[i];
    if (!(m >= kKvtcMinStepMultiplier && m <= kKvtcMaxStepMultiplier)) {
      return InvalidArgument(FormatMessage("step multiplier %zu is %g, outside [%g, %g]", i, m, kKvtcMinStepMultiplier,
                                           kKvtcMaxStepMultiplier));
    }
  }

  // Norms catch a scaled or zeroed row; the dot product of neighbouring rows catches a row
  // written twice. Full orthogonality would cost O(n_components^2 * dim), too much for a
  // check that runs on every load.
  const size_t dim = b.dim;
  for (uint32_t i = 0; i < b.n_components; ++i) {
    const float* row = b.components.data() + size_t{i} * dim;
    double norm2 = 0;
    for (size_t j = 0; j < dim; ++j) norm2 += double{row[j]} * row[j];
    const double norm = std::sqrt(norm2);
    if (!(std::fabs(norm - 1.0) <= kKvtcUnitNormTolerance)) {
      return InvalidArgument(FormatMessage("component %u has norm %.6g, not 1", i, norm));
    }
    if (i > 0) {
      const float* prev = row - dim;
      double dot = 0;
      for (size_t j = 0; j < dim; ++j) dot += double{prev[j]} * row[j];
      if (!(std::fabs(dot) <= kKvtcAdjacentDotTolerance)) {
        return InvalidArgument(FormatMessage("components %u and %u are not orthogonal (dot %.6g)", i - 1, i, dot));
      }
    }
  }

  // Variances of the coefficients on the fit data: PCA returns them by decreasing size, up to
  // rounding, which the slack allows for (relative to the neighbour, plus a sliver of the
  // largest for the tail, where rounding in the large components dominates).
  const double largest = b.eigenvalues[0];
  for (uint32_t i = 0; i < b.n_components; ++i) {
    const double e = b.eigenvalues[i];
    if (e < 0) return InvalidArgument(FormatMessage("eigenvalue %u is negative (%.6g)", i, e));
    if (i > 0) {
      const double prev = b.eigenvalues[i - 1];
      if (e > prev + kKvtcEigenvalueRelSlack * prev + kKvtcEigenvalueAbsSlack * largest) {
        return InvalidArgument(
            FormatMessage("eigenvalue %u (%.9g) exceeds eigenvalue %u (%.9g): not sorted by "
                          "decreasing variance",
                          i, e, i - 1, prev));
      }
    }
  }
  return Status::Ok();
}

std::string BasisName(const KvtcCalibration& c, size_t index) {
  const uint32_t n = c.n_bases();
  // A keys-only calibration has no V bases, so every index within it names a K basis.
  const char* kind = index < n || c.keys_only ? "K" : "V";
  const size_t within = index < n || c.keys_only ? index : index - n;
  return FormatMessage("%s basis %zu", kind, within);
}

}  // namespace

const char* KvtcGroupingName(KvtcGrouping grouping) {
  switch (grouping) {
    case KvtcGrouping::kLayerHead:
      return "layer-head";
    case KvtcGrouping::kLayer:
      return "layer";
    case KvtcGrouping::kAll:
      return "all";
  }
  return "?";
}

const char* KvtcQuantizerName(KvtcQuantizer quantizer) {
  switch (quantizer) {
    case KvtcQuantizer::kTokenGroup:
      return "token-group";
    case KvtcQuantizer::kComponent:
      return "component";
  }
  return "?";
}

Result<KvtcQuantizer> ParseKvtcQuantizer(std::string_view name) {
  if (name == "token-group") return KvtcQuantizer::kTokenGroup;
  if (name == "component") return KvtcQuantizer::kComponent;
  return InvalidArgument("unknown kvtc quantizer '" + std::string(name) + "' (expected token-group or component)");
}

Result<KvtcGrouping> ParseKvtcGrouping(std::string_view name) {
  if (name == "layer-head" || name == "layer_head") return KvtcGrouping::kLayerHead;
  if (name == "layer") return KvtcGrouping::kLayer;
  if (name == "all") return KvtcGrouping::kAll;
  return InvalidArgument("unknown kvtc grouping '" + std::string(name) + "' (expected layer-head, layer or all)");
}

uint32_t KvtcCalibration::n_bases() const { return Saturate32(NBases64(*this)); }

uint32_t KvtcCalibration::basis_dim() const { return Saturate32(BasisDim64(*this)); }

uint32_t KvtcCalibration::n_groups(uint32_t basis_index) const {
  if (basis_index >= bases.size() || group_size == 0) return 0;
  return static_cast<uint32_t>((uint64_t{bases[basis_index].n_components} + group_size - 1) / group_size);
}

Status ValidateCalibrationHeader(const KvtcCalibration& c) {
  if (c.n_layers == 0 || c.n_layers > kMaxLayers) {
    return InvalidArgument(FormatMessage("n_layers %u outside 1..%u", c.n_layers, kMaxLayers));
  }
  if (c.n_kv_heads == 0 || c.n_kv_heads > kMaxKvHeads) {
    return InvalidArgument(FormatMessage("n_kv_heads %u outside 1..%u", c.n_kv_heads, kMaxKvHeads));
  }
  if (c.head_dim == 0 || c.head_dim > kMaxHeadDim) {
    return InvalidArgument(FormatMessage("head_dim %u outside 1..%u", c.head_dim, kMaxHeadDim));
  }
  if (!IsKnownGrouping(c.grouping)) {
    return InvalidArgument(FormatMessage("unknown grouping %u", static_cast<unsigned>(c.grouping)));
  }
  if (c.format_version < 1 || c.format_version > kKvcalMaxFormatVersion) {
    return InvalidArgument(FormatMessage("format_version %u outside 1..%u", c.format_version, kKvcalMaxFormatVersion));
  }
  // One version per kind of calibration keeps the encoding canonical, and keeps a keys-only
  // calibration out of the versions older readers take for K and V.
  if (c.keys_only && c.format_version != kKvcalKeysOnlyFormatVersion) {
    return InvalidArgument(FormatMessage("a keys-only calibration is format version %u, not %u",
                                         kKvcalKeysOnlyFormatVersion, c.format_version));
  }
  if (!c.keys_only && c.format_version == kKvcalKeysOnlyFormatVersion) {
    return InvalidArgument(
        FormatMessage("format version %u holds only keys-only calibrations", kKvcalKeysOnlyFormatVersion));
  }
  if (c.group_size == 0 || c.group_size > kMaxKvtcGroupSize) {
    return InvalidArgument(FormatMessage("group_size %u outside 1..%u", c.group_size, kMaxKvtcGroupSize));
  }
  if (static_cast<uint8_t>(c.quantizer) > static_cast<uint8_t>(KvtcQuantizer::kComponent)) {
    return InvalidArgument(FormatMessage("unknown quantizer %u", static_cast<unsigned>(c.quantizer)));
  }
  if (c.format_version == 1 &&
      (c.quantizer != KvtcQuantizer::kTokenGroup || c.chunk_tokens != 0 || !c.choice.empty())) {
    return InvalidArgument("format version 1 holds only token-group calibrations without chunk_tokens or choice");
  }
  if (c.quantizer == KvtcQuantizer::kComponent && c.group_size != 1) {
    return InvalidArgument(FormatMessage("quantizer component needs group_size 1, not %u", c.group_size));
  }
  if (c.chunk_tokens > kMaxTokens) {
    return InvalidArgument(FormatMessage("chunk_tokens %u exceeds %u", c.chunk_tokens, kMaxTokens));
  }
  if (c.choice.size() > kMaxKvtcChoiceBytes) {
    return InvalidArgument(FormatMessage("choice is %zu bytes, over %u", c.choice.size(), kMaxKvtcChoiceBytes));
  }
  if (!IsValidUtf8(c.choice) || PrintableOneLine(c.choice) != c.choice) {
    return InvalidArgument("choice is not one line of printable UTF-8");
  }
  const auto rope_type = static_cast<uint8_t>(c.rope.type);
  if (rope_type > static_cast<uint8_t>(kLastRopeType)) {
    return InvalidArgument(FormatMessage("unknown rope type %u", rope_type));
  }
  // The codec rotates only kinds it knows how to undo (RopeRotatesKeys, rope.h); one meaning
  // per byte pair keeps a file from claiming an undo that never happened.
  if (c.keys_rope_undone && !RopeRotatesKeys(c.rope.type)) {
    return InvalidArgument(
        FormatMessage("keys_rope_undone is set, but rope type %s is not undone", RopeTypeName(c.rope.type)));
  }
  // RoPE rotates channel pairs, so an odd count has no meaning.
  if (c.rope.n_rot > c.head_dim || c.rope.n_rot % 2 != 0) {
    return InvalidArgument(
        FormatMessage("rope n_rot %u is not an even count within head_dim %u", c.rope.n_rot, c.head_dim));
  }
  if (!std::isfinite(c.rope.freq_base) || !(c.rope.freq_base > 0)) {
    return InvalidArgument(FormatMessage("rope freq_base %g is not finite and positive", c.rope.freq_base));
  }
  if (!std::isfinite(c.rope.freq_scale) || !(c.rope.freq_scale > 0)) {
    return InvalidArgument(FormatMessage("rope freq_scale %g is not finite and positive", c.rope.freq_scale));
  }
  const uint64_t dim = BasisDim64(c);
  if (dim > kMaxKvtcBasisDim) {
    return InvalidArgument(FormatMessage("basis dimension %" PRIu64 " (grouping %s) exceeds the limit %u", dim,
                                         KvtcGroupingName(c.grouping), kMaxKvtcBasisDim));
  }
  // Every basis holds at least a mean and one component, so this bounds the smallest file
  // of this shape before anything is read or allocated.
  const uint64_t total_bases = c.n_kinds() * NBases64(c);
  const uint64_t min_floats = total_bases * BasisFloats(dim, 1);
  if (min_floats > kMaxKvtcFloats) {
    return InvalidArgument(FormatMessage("%" PRIu64 " bases of dimension %" PRIu64 " need at least %" PRIu64
                                         " floats, over the limit %" PRIu64,
                                         total_bases, dim, min_floats, kMaxKvtcFloats));
  }
  return Status::Ok();
}

Status ValidateCalibration(const KvtcCalibration& c) {
  RETURN_IF_ERROR(ValidateCalibrationHeader(c));
  const uint64_t expected_bases = uint64_t{c.n_kinds()} * c.n_bases();
  if (c.bases.size() != expected_bases) {
    return InvalidArgument(FormatMessage("%zu bases, expected %" PRIu64 " (%s, %u each for grouping %s)",
                                         c.bases.size(), expected_bases, c.keys_only ? "K only" : "K and V",
                                         c.n_bases(), KvtcGroupingName(c.grouping)));
  }
  const uint32_t dim = c.basis_dim();
  uint64_t floats = 0;
  uint64_t total_groups = 0;
  for (size_t i = 0; i < c.bases.size(); ++i) {
    const PcaBasis& b = c.bases[i];
    if (Status s = ValidateBasis(b, dim, c.quantizer); !s.ok()) return s.WithContext(BasisName(c, i));
    floats += BasisFloats(b.dim, b.n_components) + b.step_multipliers.size();
    if (floats > kMaxKvtcFloats) {
      return InvalidArgument(FormatMessage("bases hold more than %" PRIu64 " floats", kMaxKvtcFloats));
    }
    total_groups += c.n_groups(static_cast<uint32_t>(i));
  }

  if (c.allocations.size() > kMaxKvtcAllocations) {
    return InvalidArgument(
        FormatMessage("%zu allocations exceed the limit %u", c.allocations.size(), kMaxKvtcAllocations));
  }
  if (c.allocations.size() * total_groups > kMaxKvtcAllocationBits) {
    return InvalidArgument(FormatMessage("%zu allocations of %" PRIu64 " groups exceed the limit of %" PRIu64
                                         " bit widths",
                                         c.allocations.size(), total_groups, kMaxKvtcAllocationBits));
  }
  for (size_t j = 0; j < c.allocations.size(); ++j) {
    const BitAllocation& a = c.allocations[j];
    const std::string where = FormatMessage("allocation %zu", j);
    if (!std::isfinite(a.target_ratio) || !(a.target_ratio > 0)) {
      return InvalidArgument(
          FormatMessage("%s: target_ratio %g is not finite and positive", where.c_str(), a.target_ratio));
    }
    // Strictly increasing, so a ratio picks one allocation and the order is canonical.
    if (j > 0 && !(a.target_ratio > c.allocations[j - 1].target_ratio)) {
      return InvalidArgument(FormatMessage("%s: target_ratio %g does not exceed the previous one (%g)", where.c_str(),
                                           a.target_ratio, c.allocations[j - 1].target_ratio));
    }
    if (!std::isfinite(a.heldout_rel_mse) || a.heldout_rel_mse < 0) {
      return InvalidArgument(
          FormatMessage("%s: heldout_rel_mse %g is not finite and non-negative", where.c_str(), a.heldout_rel_mse));
    }
    if (!std::isfinite(a.coded_bits_per_value) || a.coded_bits_per_value < 0 ||
        (c.format_version == 1 && a.coded_bits_per_value != 0)) {
      return InvalidArgument(
          FormatMessage("%s: coded_bits_per_value %g is not finite and non-negative (0 in version 1)", where.c_str(),
                        a.coded_bits_per_value));
    }
    if (a.bits.size() != total_groups) {
      return InvalidArgument(FormatMessage("%s: %zu bit widths, expected %" PRIu64 " (one per component group)",
                                           where.c_str(), a.bits.size(), total_groups));
    }
    for (size_t g = 0; g < a.bits.size(); ++g) {
      if (a.bits[g] > kMaxKvtcBits) {
        return InvalidArgument(
            FormatMessage("%s: group %zu has %u bits, more than %u", where.c_str(), g, a.bits[g], kMaxKvtcBits));
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvc
