// Small sections of a sequence state for the tests of chunk states and of what inspect says of
// them: cells of two attention layers, and a one-layer recurrent snapshot.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "base/byte_io.h"
#include "llama/seq_state.h"

namespace kvc::test_data {

// Two layers of cells: K f16 x 16 B/row, V (transposed, 2-byte values) f16 x 8 B/row unless keys
// only (MLA's cache: no V, and nothing transposed).
inline AttentionSection Cells(int32_t pos_begin, uint32_t n_cells, uint32_t seed, bool with_v = true) {
  AttentionSection a;
  a.pos_begin = pos_begin;
  a.n_cells = n_cells;
  a.v_trans = with_v;
  std::mt19937 rng(seed);
  for (uint32_t l = 0; l < 2; ++l) {
    StateTensor k{.ggml_type = 1, .elem_bytes = 0, .row_bytes = 16, .rows = std::vector<uint8_t>(16 * n_cells)};
    for (uint8_t& b : k.rows) b = static_cast<uint8_t>(rng());
    a.k.push_back(k);
    if (with_v) {
      StateTensor v{.ggml_type = 1, .elem_bytes = 2, .row_bytes = 8, .rows = std::vector<uint8_t>(8 * n_cells)};
      for (uint8_t& b : v.rows) b = static_cast<uint8_t>(rng());
      a.v.push_back(v);
    }
  }
  return a;
}

// One recurrent layer's state at `pos`: R and S of 4 bytes each.
inline RecurrentSection Snapshot(int32_t pos) {
  ByteWriter w;
  w.U32(1);
  w.I32(pos);
  w.U32(0);
  w.U32(0);
  w.U32(1);
  for (int i = 0; i < 2; ++i) {
    w.I32(0);
    w.U64(4);
    w.U32(static_cast<uint32_t>(pos * 7 + i));
  }
  RecurrentSection r;
  r.bytes = w.Take();
  r.n_cells = 1;
  r.pos = pos;
  r.n_layer = 1;
  r.n_recurrent_layers = 1;
  r.r_row_bytes = 4;
  r.s_row_bytes = 4;
  return r;
}

}  // namespace kvc::test_data
