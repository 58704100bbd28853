#include "llama/chunk_state_json.h"

#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <variant>

#include "base/report_json.h"
#include "llama/chunk_state.h"
#include "llama/llama_state.h"
#include "llama/seq_state.h"

namespace kvc {
namespace {

constexpr uint8_t kTokenMagic[4] = {'K', 'V', 'S', 'C'};

bool StartsWith(std::span<const uint8_t> bytes, const uint8_t (&magic)[4]) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), magic, 4) == 0;
}

bool StartsWithLlamaState(std::span<const uint8_t> bytes) {
  const uint8_t magic[4] = {static_cast<uint8_t>(kLlamaStateMagic), static_cast<uint8_t>(kLlamaStateMagic >> 8),
                            static_cast<uint8_t>(kLlamaStateMagic >> 16), static_cast<uint8_t>(kLlamaStateMagic >> 24)};
  return StartsWith(bytes, magic);
}

ReportJson TensorJson(const StateTensor& t, bool with_elem_bytes) {
  ReportJson j = {{"type", t.ggml_type}, {"type_name", GgmlTypeName(t.ggml_type)}, {"row_bytes", t.row_bytes}};
  if (with_elem_bytes) j["elem_bytes"] = t.elem_bytes;
  return j;
}

ReportJson SectionJson(const StateSection& section) {
  if (const auto* r = std::get_if<RecurrentSection>(&section)) {
    ReportJson j;  // ordered: the fields as listed
    j["kind"] = "recurrent";
    j["bytes"] = r->bytes.size();
    j["cells"] = r->n_cells;
    j["pos"] = r->pos;
    j["n_layer"] = r->n_layer;
    j["n_recurrent_layers"] = r->n_recurrent_layers;
    j["r_row_bytes"] = r->r_row_bytes;
    j["history_row_bytes"] = r->history_row_bytes;
    j["s_row_bytes"] = r->s_row_bytes;
    return j;
  }
  const auto& a = std::get<AttentionSection>(section);
  ReportJson layers = ReportJson::array();
  for (size_t l = 0; l < a.k.size(); ++l) {
    // The parser gives V for every layer or for none (MLA, an indexer cache).
    layers.push_back({{"k", TensorJson(a.k[l], false)},
                      {"v", l < a.v.size() ? TensorJson(a.v[l], a.v_trans) : ReportJson(nullptr)}});
  }
  ReportJson j;
  j["kind"] = "attention";
  j["n_stream"] = a.n_stream;
  j["stream"] = a.stream;
  j["cells"] = a.n_cells;
  j["pos_begin"] = a.pos_begin;
  j["cell_ext_bytes"] = a.cell_ext_bytes;
  j["v_trans"] = a.v_trans;
  j["keys_only"] = a.v.empty();
  j["layers"] = std::move(layers);
  return j;
}

ReportJson SectionsJson(const SeqState& state) {
  ReportJson sections = ReportJson::array();
  for (const StateSection& section : state.sections) sections.push_back(SectionJson(section));
  return sections;
}

}  // namespace

bool LooksLikeChunkState(std::span<const uint8_t> bytes) {
  return StartsWith(bytes, kTokenMagic) || StartsWithLlamaState(bytes);
}

Result<std::string> InspectChunkStateJson(std::span<const uint8_t> bytes) {
  if (StartsWith(bytes, kTokenMagic)) {
    ASSIGN_OR_RETURN(const ChunkState chunk, ReadChunkTokens(bytes));
    ReportJson layout = ReportJson::array();
    for (const bool b : chunk.at_boundary) layout.push_back(b ? "boundary" : "tokens");
    const ReportJson j = {{"kind", "state chunk tokens"},
                          {"file_bytes", bytes.size()},
                          {"seq_id", chunk.tokens.seq_id},
                          {"pos_begin", chunk.pos_begin},
                          {"n_tokens", chunk.n_tokens},
                          {"has_boundary", HasBoundary(chunk)},
                          {"layout", layout},
                          {"memory", SeqStateKinds(chunk.tokens)},
                          {"sections", SectionsJson(chunk.tokens)}};
    return DumpReport(j);
  }
  if (StartsWithLlamaState(bytes)) {
    // Alone, a boundary object is checked as llama.cpp's state bytes: which chunk's layout it
    // completes only its token object says (ReadChunkBoundary).
    auto state = ParseSeqState(bytes);
    if (!state.ok()) return state.status().WithContext("state chunk boundary");
    // A memory without snapshot sections stores no boundary object. (One cut between two of its
    // sections still reads as a shorter state: how many it has only the token object says.)
    if (state->sections.empty()) return Corrupt("state chunk boundary: no sections");
    const ReportJson j = {{"kind", "state chunk boundary"},
                          {"file_bytes", bytes.size()},
                          {"seq_id", state->seq_id},
                          {"memory", SeqStateKinds(*state)},
                          {"sections", SectionsJson(*state)}};
    return DumpReport(j);
  }
  return Corrupt("not a state chunk: neither a token object (\"KVSC\") nor a boundary object (llama.cpp state bytes)");
}

std::string GgmlTypeName(int32_t ggml_type) {
  // ggml.h's enum ggml_type (ids of removed types are left empty).
  static constexpr const char* kNames[] = {
      "f32",   "f16",    "q4_0",  "q4_1", "",     "",        "q5_0",   "q5_1",    "q8_0",  "q8_1",   "q2_K",
      "q3_K",  "q4_K",   "q5_K",  "q6_K", "q8_K", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s",
      "iq2_s", "iq4_xs", "i8",    "i16",  "i32",  "i64",     "f64",    "iq1_m",   "bf16",  "",       "",
      "",      "tq1_0",  "tq2_0", "",     "",     "",        "mxfp4",  "nvfp4",   "q1_0",  "q2_0"};
  if (ggml_type >= 0 && static_cast<size_t>(ggml_type) < std::size(kNames) && kNames[ggml_type][0] != '\0') {
    return kNames[ggml_type];
  }
  return "type " + std::to_string(ggml_type);
}

}  // namespace kvc
