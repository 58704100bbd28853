#include "llama/seq_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/byte_io.h"
#include "llama/llama_state.h"

namespace kvc {
namespace {

StateTensor Tensor(int32_t type, uint64_t row_bytes, uint32_t n_cells, uint32_t seed, uint32_t elem_bytes = 0) {
  StateTensor t;
  t.ggml_type = type;
  t.row_bytes = row_bytes;
  t.elem_bytes = elem_bytes;
  t.rows.resize(row_bytes * n_cells);
  std::mt19937 rng(seed);
  for (uint8_t& b : t.rows) b = static_cast<uint8_t>(rng());
  return t;
}

// Layers of different widths, as a model whose head counts vary by layer writes them.
AttentionSection Attention(uint32_t n_cells, int32_t pos_begin, bool with_v, bool v_trans, bool ext,
                           uint32_t n_layer = 3, uint32_t seed = 1) {
  AttentionSection a;
  a.pos_begin = pos_begin;
  a.n_cells = n_cells;
  a.v_trans = v_trans;
  if (ext) {
    a.cell_ext_bytes = kCellExtBytes;
    a.cell_ext.resize(size_t{n_cells} * kCellExtBytes);
    for (size_t i = 0; i < a.cell_ext.size(); ++i) a.cell_ext[i] = static_cast<uint8_t>(i * 7);
  }
  for (uint32_t l = 0; l < n_layer; ++l) {
    a.k.push_back(Tensor(kGgmlTypeF16, 2 * (16 + 8 * l), n_cells, seed + l));
    if (with_v) {
      a.v.push_back(v_trans ? Tensor(kGgmlTypeF16, 2 * (8 + 4 * l), n_cells, seed + 100 + l, 2)
                            : Tensor(kGgmlTypeF16, 2 * (8 + 4 * l), n_cells, seed + 100 + l));
    }
  }
  return a;
}

// A recurrent section as llama_memory_recurrent writes one sequence's state: one cell, s_trans 0,
// then R and S for each of `recurrent_layers` of `n_layer` layers.
RecurrentSection Recurrent(uint32_t n_layer, uint32_t recurrent_layers, int32_t pos, uint64_t r_row, uint64_t s_row) {
  ByteWriter w;
  w.U32(1);
  w.I32(pos);
  w.U32(0);
  w.U32(0);
  w.U32(n_layer);
  std::mt19937 rng(pos);
  for (const uint64_t row : {r_row, s_row}) {
    for (uint32_t l = 0; l < recurrent_layers; ++l) {
      w.I32(kGgmlTypeF32);
      w.U64(row);
      for (uint64_t i = 0; i < row; ++i) w.U8(static_cast<uint8_t>(rng()));
    }
  }
  RecurrentSection r;
  r.bytes = w.Take();
  r.n_cells = 1;
  r.pos = pos;
  r.n_layer = n_layer;
  r.n_recurrent_layers = recurrent_layers;
  r.r_row_bytes = r_row;
  r.s_row_bytes = s_row;
  return r;
}

void ExpectRoundTrip(const SeqState& state, const std::string& kinds) {
  auto blob = WriteSeqState(state);
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  EXPECT_EQ(blob->size(), SeqStateBytes(state).value());
  auto parsed = ParseSeqState(*blob);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, state);
  EXPECT_EQ(SeqStateKinds(*parsed), kinds);
  EXPECT_EQ(WriteSeqState(*parsed).value(), *blob);
  // A truncation is an error, or (cut at a section's end, or after an MLA layer's K) another
  // state that writes back to exactly the bytes left: never a crash, never bytes unaccounted for.
  for (size_t cut = 0; cut < blob->size(); cut += std::max<size_t>(1, blob->size() / 97)) {
    const auto head = std::span(*blob).first(cut);
    auto shorter = ParseSeqState(head);
    if (!shorter.ok()) continue;
    EXPECT_NE(*shorter, state) << "cut at " << cut;
    const auto rewritten = WriteSeqState(*shorter);
    ASSERT_TRUE(rewritten.ok());
    EXPECT_TRUE(std::equal(head.begin(), head.end(), rewritten->begin(), rewritten->end())) << "cut at " << cut;
  }
}

struct Case {
  const char* name;
  SeqState state;
  const char* kinds;
};

std::vector<Case> EveryMemoryKind() {
  return {
      {"unified, V transposed", {0, {Attention(5, 0, true, true, false)}}, "attention"},
      {"unified, flash attention", {0, {Attention(5, 0, true, false, false)}}, "attention"},
      {"MLA: K only", {0, {Attention(5, 0, false, false, false)}}, "attention"},
      {"MLA, V transposed context", {0, {Attention(5, 0, false, true, false)}}, "attention"},
      {"M-RoPE cell extension", {0, {Attention(4, 2, true, true, true)}}, "attention"},
      {"iSWA: base then window",
       {0, {Attention(9, 0, true, true, false), Attention(3, 6, true, true, false, 2, 9)}},
       "attention+attention"},
      {"hybrid", {0, {Attention(6, 0, true, true, false, 1), Recurrent(4, 3, 5, 24, 64)}}, "attention+recurrent"},
      {"hybrid with an indexer",
       {0,
        {Attention(6, 0, true, true, false, 1), Recurrent(4, 3, 5, 24, 64), Attention(6, 0, false, true, false, 1, 5)}},
       "attention+recurrent+attention"},
      {"hybrid iSWA",
       {0, {Attention(7, 0, true, true, false, 1), Attention(2, 5, true, true, false, 1, 3), Recurrent(4, 2, 6, 8, 8)}},
       "attention+attention+recurrent"},
      {"recurrent", {0, {Recurrent(3, 3, 11, 48, 32)}}, "recurrent"},
      {"no memory", {0, {}}, "none"},
      {"second sequence", {3, {Attention(2, 0, true, true, false)}}, "attention"},
  };
}

TEST(SeqState, EveryMemoryKindRoundTripsByteForByte) {
  for (const Case& c : EveryMemoryKind()) {
    SCOPED_TRACE(c.name);
    ExpectRoundTrip(c.state, c.kinds);
  }
}

TEST(SeqState, AnEmptySequenceAndOtherStreams) {
  AttentionSection empty;
  empty.n_stream = 4;
  ExpectRoundTrip({1, {empty}}, "attention");
  AttentionSection third = Attention(3, 0, true, true, false);
  third.n_stream = 4;
  third.stream = 2;
  ExpectRoundTrip({2, {third}}, "attention");
}

// A state restored into another sequence: its id on every cell, and its own stream.
TEST(SeqState, WrittenAsAnotherSequence) {
  AttentionSection a = Attention(3, 0, true, true, false);
  a.n_stream = 4;
  a.stream = 1;
  const SeqState state{1, {a, Recurrent(4, 3, 2, 8, 8)}};
  auto blob = WriteSeqState(state, 3);
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  auto moved = ParseSeqState(*blob);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->seq_id, 3);
  EXPECT_EQ(std::get<AttentionSection>(moved->sections[0]).stream, 3u);
  EXPECT_EQ(std::get<AttentionSection>(moved->sections[0]).k, a.k);
  EXPECT_EQ(WriteSeqState(state, 4).status().code(), StatusCode::kInvalidArgument);  // no stream 4
}

// llama.cpp writes a ring buffer's cells in slot order; they are read back in position order,
// with their extensions.
TEST(SeqState, CellsOfAWrappedRingAreReadInPositionOrder) {
  const AttentionSection ordered = Attention(3, 10, true, true, true, 1);
  // Slots hold positions 12, 10, 11.
  const uint32_t slot_of[3] = {1, 2, 0};  // position index -> slot
  ByteWriter w;
  w.U32(kLlamaStateMagic);
  w.I32(0);
  w.U32(1);
  w.U32(3);
  for (uint32_t slot = 0; slot < 3; ++slot) {
    const uint32_t i = slot == 0 ? 2 : slot - 1;
    ASSERT_EQ(slot_of[i], slot);
    w.I32(10 + static_cast<int32_t>(i));
    w.U32(1);
    w.Bytes(ordered.cell_ext.data() + i * kCellExtBytes, kCellExtBytes);
    w.I32(0);
  }
  w.U32(1);
  w.U32(1);
  const StateTensor& k = ordered.k[0];
  w.I32(k.ggml_type);
  w.U64(k.row_bytes);
  for (uint32_t slot = 0; slot < 3; ++slot) {
    const uint32_t i = slot == 0 ? 2 : slot - 1;
    w.Bytes(k.rows.data() + i * k.row_bytes, k.row_bytes);
  }
  const StateTensor& v = ordered.v[0];
  w.I32(v.ggml_type);
  w.U32(2);
  w.U32(static_cast<uint32_t>(v.row_bytes / 2));
  for (uint64_t j = 0; j < v.row_bytes / 2; ++j) {
    for (uint32_t slot = 0; slot < 3; ++slot) {
      const uint32_t i = slot == 0 ? 2 : slot - 1;
      w.Bytes(v.rows.data() + i * v.row_bytes + j * 2, 2);
    }
  }
  auto parsed = ParseSeqState(w.bytes());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->sections.size(), 1u);
  EXPECT_EQ(std::get<AttentionSection>(parsed->sections[0]), ordered);
}

TEST(SeqState, HostileHeadersAreErrors) {
  const std::vector<uint8_t> good = WriteSeqState({0, {Attention(4, 0, true, true, false)}}).value();
  auto with = [&](size_t offset, uint32_t value) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + offset, &value, 4);
    return ParseSeqState(b);
  };
  EXPECT_EQ(with(0, 0x12345678).status().code(), StatusCode::kCorrupt);   // magic
  EXPECT_FALSE(with(8, 0).ok());                                          // no streams
  EXPECT_FALSE(with(12, 0xffffffffu).ok());                               // cell count
  EXPECT_EQ(with(16 + 12, 7).status().code(), StatusCode::kUnsupported);  // a gap in positions
  EXPECT_FALSE(with(16 + 4, 2).ok());                                     // a cell of two sequences
  EXPECT_FALSE(with(16 + 4 * 12, 5).ok());                                // v_trans
  EXPECT_FALSE(with(16 + 4 * 12 + 4, 0x7fffffff).ok());                   // layers
  EXPECT_FALSE(with(16 + 4 * 12 + 8 + 4, 0xffffffffu).ok());              // a K row size
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_EQ(ParseSeqState(longer).status().code(), StatusCode::kCorrupt);
}

TEST(SeqState, WriterRefusesInconsistentSections) {
  AttentionSection a = Attention(3, 0, true, true, false);
  a.v.pop_back();  // V for some layers only
  EXPECT_EQ(WriteSeqState({0, {a}}).status().code(), StatusCode::kInvalidArgument);
  AttentionSection b = Attention(3, 0, true, true, false);
  b.k[1].rows.pop_back();
  EXPECT_EQ(WriteSeqState({0, {b}}).status().code(), StatusCode::kInvalidArgument);
  AttentionSection c = Attention(3, 0, true, true, false);
  c.stream = 1;
  EXPECT_EQ(WriteSeqState({0, {c}}).status().code(), StatusCode::kInvalidArgument);
}

// Writes the fuzz corpus (fuzz/corpus/seq_state): run with --gtest_also_run_disabled_tests
// --gtest_filter=*WriteFuzzCorpus.
TEST(SeqState, DISABLED_WriteFuzzCorpus) {
  int i = 0;
  for (const Case& c : EveryMemoryKind()) {
    const std::string path = std::string(KVCODEC_SOURCE_DIR) + "/fuzz/corpus/seq_state/" + std::to_string(i++);
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    const auto blob = WriteSeqState(c.state).value();
    std::fwrite(blob.data(), 1, blob.size(), f);
    std::fclose(f);
  }
}

}  // namespace
}  // namespace kvc
