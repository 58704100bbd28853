// A memory's attention caches as the KV caches every codec takes, whatever the memory.
//
// A sequence's state (seq_state.h) holds one or more attention caches (the standard cache, both
// halves of an iSWA pair, MLA's latent cache, an indexer cache) beside any recurrent state. Their
// layers need not share one shape: MLA keeps K alone, one row per token as wide as the latent;
// an indexer keeps narrower rows than the main cache; head counts may vary by layer. A plane is a
// run of consecutive layers of one attention cache whose K rows (and V rows, or no V) have one
// type and width: a KvCache of its own shape, keys-only where V is absent. So each layer is coded
// with its own shape, and a codec only ever sees a uniform cache.
//
// Recurrent sections and caches of other element types (a quantised KV cache) form no plane:
// they are kept as written.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "format/container.h"
#include "llama/seq_state.h"
#include "tensor/kv_cache.h"

namespace kvc {

struct KvPlane {
  uint32_t section = 0;      // index into SeqState::sections (an AttentionSection)
  uint32_t layer_begin = 0;  // the section's first layer in this plane
  // Whether the rows are the model's own per-head K and V (the model's head count and width),
  // where RoPE is applied as the model says. Any other plane (an MLA latent, an indexer) holds
  // rows whose RoPE covers only part of each, or none: coded as stored.
  bool model_heads = false;
  KvCache kv;  // shape (layers of the run, heads, head_dim, the section's cells, keys_only)
  bool operator==(const KvPlane&) const = default;
};

// How a row is split into heads: the model's KV head count and head width. A row of exactly
// n_kv_heads * head_dim values is that; a K and V row of a multiple of head_dim values (a layer
// with its own head count) is that many heads; any other row, and a keys-only row (a latent
// whose parts are not heads), is one head as wide as the row.
struct PlaneHeads {
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
};

// The planes of every attention section of `state` with cells, in section then layer order.
// Sections of non-float element types are skipped. kInvalidArgument when a section's tensors
// do not hold its cells (not a state ParseSeqState made).
Result<std::vector<KvPlane>> SplitPlanes(const SeqState& state, const PlaneHeads& heads);

// Writes each plane's rows back into the layers of `state` it came from (converted to the
// section's element type): what a restore of decoded planes does. kInvalidArgument when a
// plane does not fit the section it names (another shape, type, cell count or V presence).
Status MergePlanes(std::span<const KvPlane> planes, SeqState* state);

// The fingerprint a plane's .kvc files and calibration are bound to: the model's own for plane
// 0 (so a model whose memory is one uniform cache keeps its fingerprint), one derived from the
// model's and the plane's index for the others, so each plane finds its own calibration.
ModelFingerprint PlaneFingerprint(const ModelFingerprint& model, uint32_t plane_index);

}  // namespace kvc
