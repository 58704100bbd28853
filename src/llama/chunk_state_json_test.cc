#include "llama/chunk_state_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "base/byte_io.h"
#include "base/utf8.h"
#include "llama/chunk_state.h"
#include "llama/chunk_state_test_data.h"
#include "llama/llama_state.h"

namespace kvc {
namespace {

using nlohmann::json;

using test_data::Cells;
using test_data::Snapshot;

// A memory of K+V cells, keys-only cells (MLA's) and a recurrent state at the chunk's end.
ChunkState Chunk(int32_t pos_begin, uint32_t n_tokens) {
  ChunkState c;
  c.pos_begin = pos_begin;
  c.n_tokens = n_tokens;
  c.at_boundary = {false, false, true};
  c.tokens.sections.push_back(Cells(pos_begin, n_tokens, 1, true));
  c.tokens.sections.push_back(Cells(pos_begin, n_tokens, 2, false));
  c.boundary.sections.push_back(Snapshot(pos_begin + static_cast<int32_t>(n_tokens) - 1));
  return c;
}

json Inspect(std::span<const uint8_t> bytes) {
  auto text = InspectChunkStateJson(bytes);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  if (!text.ok()) return {};
  EXPECT_TRUE(IsValidUtf8(*text));
  return json::parse(*text);
}

TEST(ChunkStateJson, TheTokenObjectSaysItsChunkAndSections) {
  const auto bytes = WriteChunkTokens(Chunk(16, 8));
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_TRUE(LooksLikeChunkState(*bytes));
  const json j = Inspect(*bytes);
  EXPECT_EQ(j["kind"], "state chunk tokens");
  EXPECT_EQ(j["file_bytes"], bytes->size());
  EXPECT_EQ(j["pos_begin"], 16);
  EXPECT_EQ(j["n_tokens"], 8);
  EXPECT_EQ(j["has_boundary"], true);
  EXPECT_EQ(j["layout"], json({"tokens", "tokens", "boundary"}));
  EXPECT_EQ(j["memory"], "attention+attention");
  ASSERT_EQ(j["sections"].size(), 2u);
  const json& kv = j["sections"][0];
  EXPECT_EQ(kv["kind"], "attention");
  EXPECT_EQ(kv["cells"], 8);
  EXPECT_EQ(kv["pos_begin"], 16);
  EXPECT_EQ(kv["cell_ext_bytes"], 0);
  EXPECT_EQ(kv["v_trans"], true);
  EXPECT_EQ(kv["keys_only"], false);
  ASSERT_EQ(kv["layers"].size(), 2u);
  for (const json& layer : kv["layers"]) {
    EXPECT_EQ(layer["k"]["type"], 1);
    EXPECT_EQ(layer["k"]["type_name"], "f16");
    EXPECT_EQ(layer["k"]["row_bytes"], 16);
    EXPECT_EQ(layer["v"]["type_name"], "f16");
    EXPECT_EQ(layer["v"]["row_bytes"], 8);
    EXPECT_EQ(layer["v"]["elem_bytes"], 2);
  }
  const json& k_only = j["sections"][1];
  EXPECT_EQ(k_only["keys_only"], true);
  EXPECT_EQ(k_only["v_trans"], false);
  ASSERT_EQ(k_only["layers"].size(), 2u);
  EXPECT_TRUE(k_only["layers"][1]["v"].is_null());
  EXPECT_EQ(k_only["layers"][1]["k"]["row_bytes"], 16);
}

TEST(ChunkStateJson, TheBoundaryObjectSaysItsSnapshots) {
  const auto bytes = WriteChunkBoundary(Chunk(16, 8));
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_TRUE(LooksLikeChunkState(*bytes));
  const json j = Inspect(*bytes);
  EXPECT_EQ(j["kind"], "state chunk boundary");
  EXPECT_EQ(j["file_bytes"], bytes->size());
  EXPECT_FALSE(j.contains("pos_begin"));
  EXPECT_EQ(j["memory"], "recurrent");
  ASSERT_EQ(j["sections"].size(), 1u);
  const json& r = j["sections"][0];
  EXPECT_EQ(r["kind"], "recurrent");
  EXPECT_EQ(r["bytes"], Snapshot(23).bytes.size());
  EXPECT_EQ(r["cells"], 1);
  EXPECT_EQ(r["pos"], 23);
  EXPECT_EQ(r["n_layer"], 1);
  EXPECT_EQ(r["n_recurrent_layers"], 1);
  EXPECT_EQ(r["r_row_bytes"], 4);
  EXPECT_EQ(r["s_row_bytes"], 4);
  EXPECT_EQ(r["history_row_bytes"], 0);
}

// Hostile objects: every truncation is a kCorrupt error, never a crash (a boundary object of one
// section: one of several cut between two reads as a shorter state); every byte flipped is an
// error or valid JSON.
TEST(ChunkStateJson, HostileObjectsAreErrors) {
  for (const auto& object : {WriteChunkTokens(Chunk(4, 3)), WriteChunkBoundary(Chunk(4, 3))}) {
    ASSERT_TRUE(object.ok());
    const std::vector<uint8_t>& bytes = *object;
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      const auto r = InspectChunkStateJson(std::span(bytes).first(cut));
      ASSERT_FALSE(r.ok()) << cut;
      EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << cut << ": " << r.status().ToString();
      EXPECT_FALSE(r.status().message().empty());
    }
    for (size_t at = 0; at < bytes.size(); ++at) {
      for (const uint8_t flip : {0x01, 0x80, 0xff}) {
        std::vector<uint8_t> bad = bytes;
        bad[at] ^= flip;
        const auto r = InspectChunkStateJson(bad);
        if (r.ok()) {
          EXPECT_TRUE(IsValidUtf8(*r) && json::accept(*r)) << at;
        }
      }
    }
  }
  // llama.cpp's state of a memory without sections is no boundary object.
  ByteWriter empty;
  empty.U32(kLlamaStateMagic);
  empty.I32(0);
  EXPECT_EQ(InspectChunkStateJson(empty.Take()).status().code(), StatusCode::kCorrupt);
  const std::vector<uint8_t> other = {'K', 'V', 'C', '1', 0, 0, 0, 0};
  EXPECT_FALSE(LooksLikeChunkState(other));
  EXPECT_EQ(InspectChunkStateJson(other).status().code(), StatusCode::kCorrupt);
}

TEST(ChunkStateJson, GgmlTypesAreNamed) {
  EXPECT_EQ(GgmlTypeName(0), "f32");
  EXPECT_EQ(GgmlTypeName(1), "f16");
  EXPECT_EQ(GgmlTypeName(8), "q8_0");
  EXPECT_EQ(GgmlTypeName(30), "bf16");
  EXPECT_EQ(GgmlTypeName(42), "q2_0");
  EXPECT_EQ(GgmlTypeName(4), "type 4");
  EXPECT_EQ(GgmlTypeName(43), "type 43");
  EXPECT_EQ(GgmlTypeName(-1), "type -1");
}

}  // namespace
}  // namespace kvc
