// A KVTC calibration: the PCA bases (with means) that kvtc projects K and V onto, and the bit
// allocations the dynamic programme chose for each target ratio. Made once per model by
// `kvcodec calibrate`, stored as a .kvcal file (docs/format.md), named by .kvc files by hash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/hash.h"
#include "base/status.h"
#include "format/container.h"
#include "tensor/kv_cache.h"
#include "tensor/rope.h"

namespace kvc {

// Which features share one PCA basis.
enum class KvtcGrouping : uint8_t {
  kLayerHead = 0,  // one basis per (layer, KV head), basis b = (layer b / n_kv_heads, head b % n_kv_heads)
  kLayer = 1,      // one basis per layer: a token's heads concatenated (n_kv_heads * head_dim)
  kAll = 2,        // one basis for the model: a token's layers concatenated (n_layers * heads * head_dim)
};

const char* KvtcGroupingName(KvtcGrouping grouping);
Result<KvtcGrouping> ParseKvtcGrouping(std::string_view name);

// How PCA coefficients are quantised (src/transform_coding/quantizer.h, src/transform_coding/component_quantizer.h).
enum class KvtcQuantizer : uint8_t {
  // Per token, `group_size` consecutive components share one fp16 max-abs scale and a width.
  kTokenGroup = 0,
  // Per component and chunk: one fp16 RMS scale over the chunk's tokens, a Gaussian-optimal
  // uniform step times the calibrated multiplier for the component and width; a width per
  // component (group_size is 1).
  kComponent = 1,
};

const char* KvtcQuantizerName(KvtcQuantizer quantizer);
Result<KvtcQuantizer> ParseKvtcQuantizer(std::string_view name);

inline constexpr uint32_t kKvtcWidths = 8;  // code widths 1..8 bits

struct PcaBasis {
  uint32_t dim = 0;                // features per vector
  uint32_t n_components = 0;       // stored components, by decreasing variance (<= dim)
  std::vector<float> mean;         // [dim]
  std::vector<float> components;   // [n_components][dim], orthonormal rows
  std::vector<float> eigenvalues;  // [n_components], variance of each coefficient on the fit data
  // kComponent only: [n_components][kKvtcWidths], the step of component c at b bits is
  // rms * GaussianStep(b) * step_multipliers[c * 8 + b - 1]; empty for kTokenGroup.
  std::vector<float> step_multipliers;

  bool operator==(const PcaBasis&) const = default;
};

struct BitAllocation {
  // fp16 bits / coded bits of codes and scales: in format version 1 counted before entropy
  // coding (allocated bits), from version 2 measured on the entropy-coded bytes of held-back
  // chunks (coded_bits_per_value).
  float target_ratio = 0;
  // Bits (0..8) per component group: every basis's groups one after another, K bases first,
  // then V (none in a keys-only calibration); basis i has n_groups(i) =
  // ceil(n_components / group_size) of them.
  std::vector<uint8_t> bits;
  double heldout_rel_mse = 0;       // mean over tensors of (squared error / variance) on held-back tokens
  double coded_bits_per_value = 0;  // version 2: codes + scales after entropy coding, held-back chunks

  bool operator==(const BitAllocation&) const = default;
};

struct KvtcCalibration {
  // .kvcal layout it is written in (docs/format.md): 1 token-group only, 2 K and V, 3 exactly
  // when keys_only.
  uint32_t format_version = 2;
  ModelFingerprint model_fingerprint{};
  uint32_t n_layers = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  // For a cache of keys alone (KvShape::keys_only: MLA's latent, an indexer's keys): bases and
  // allocations cover K only, and the codec takes only keys-only caches with it.
  bool keys_only = false;
  RopeParams rope;
  bool keys_rope_undone = true;  // K was rotated back to position 0 before fitting
  KvtcGrouping grouping = KvtcGrouping::kLayer;
  uint32_t group_size = 16;  // consecutive components sharing one scale and width
  KvtcQuantizer quantizer = KvtcQuantizer::kTokenGroup;
  uint32_t chunk_tokens = 0;               // kComponent: tokens per chunk the allocations were measured at
  std::string choice;                      // why calibrate chose this quantiser, grouping and group size
  uint32_t fit_tokens = 0;                 // tokens the bases were fitted on
  uint32_t heldout_tokens = 0;             // tokens the allocations were measured on
  std::vector<PcaBasis> bases;             // K bases then V bases (n_bases() each; K alone if keys_only)
  std::vector<BitAllocation> allocations;  // by increasing target_ratio

  // The kinds the bases cover, as KvShape::kinds() lists a cache's: bases[k * n_bases() + b] is
  // basis b of kinds()[k].
  std::span<const KvKind> kinds() const {
    return keys_only ? std::span<const KvKind>(kKeysOnly) : std::span<const KvKind>(kKvKinds);
  }
  uint32_t n_kinds() const { return keys_only ? 1 : 2; }
  uint32_t n_bases() const;    // bases per kind (K or V) for the grouping
  uint32_t basis_dim() const;  // features per vector for the grouping
  uint32_t n_groups(uint32_t basis_index) const;
  bool operator==(const KvtcCalibration&) const = default;
};

// Checks internal consistency (sizes, orthonormal-enough bases, bits in range); a reader
// calls it on everything it parses.
Status ValidateCalibration(const KvtcCalibration& calibration);

}  // namespace kvc
