// What a stored state chunk says about itself (chunk_state.h): `kvcodec inspect`,
// kvc_inspect_json(), kvcodec.inspect() on the objects a store keeps for memories that are not
// one uniform KV cache (sliding-window pairs, MLA, hybrid, recurrent).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace kvc {

// Whether `bytes` start as a state chunk object does: the token object's "KVSC", or llama.cpp's
// sequence-state magic, which the boundary object (WriteChunkBoundary: the snapshot sections as
// llama.cpp's state bytes) starts with. Only the start is looked at; nothing is validated.
bool LooksLikeChunkState(std::span<const uint8_t> bytes);

// The object as JSON, read through ReadChunkTokens / ParseSeqState (every size checked: a
// hostile object is an error, never a crash):
//   kind             "state chunk tokens" or "state chunk boundary"
//   file_bytes, seq_id
//   pos_begin, n_tokens        the chunk's cells (token object only: a boundary object holds
//                              snapshots, which do not say which chunk they end)
//   layout           (token object) the memory's sections in order, each "tokens" (its cells
//                    are in this object) or "boundary" (its snapshot is in the boundary object)
//   memory           the kinds of this object's sections (SeqStateKinds: "attention+recurrent")
//   sections         per section: kind "attention" (n_stream, stream, cells, pos_begin,
//                    cell_ext_bytes, v_trans, keys_only, layers: [{k: {type, type_name,
//                    row_bytes}, v: {type, type_name, row_bytes, elem_bytes} or null}]) or
//                    "recurrent" (bytes, cells, pos, n_layer, n_recurrent_layers, r_row_bytes,
//                    history_row_bytes, s_row_bytes)
// A boundary object is llama.cpp's sequence-state bytes, so any such bytes of at least one
// section read as one (none: kCorrupt, no memory stores an empty boundary).
Result<std::string> InspectChunkStateJson(std::span<const uint8_t> bytes);

// ggml's name of a tensor type id ("f16", "q8_0"), or "type N" for one it does not know.
std::string GgmlTypeName(int32_t ggml_type);

}  // namespace kvc
