#include "llama/chunk_state.h"

#include <algorithm>

#include "base/byte_io.h"
#include "tensor/kv_cache.h"

namespace kvc {
namespace {

constexpr uint8_t kChunkMagic[4] = {'K', 'V', 'S', 'C'};
constexpr uint32_t kChunkVersion = 1;
constexpr uint32_t kMaxChunkSections = 16;

size_t CountBoundary(const std::vector<bool>& at_boundary) {
  return static_cast<size_t>(std::count(at_boundary.begin(), at_boundary.end(), true));
}

// Whether two attention sections are cells of one cache: the same streams, cell extension,
// V layout and layers (types and row sizes).
bool SameLayout(const AttentionSection& a, const AttentionSection& b) {
  if (a.n_stream != b.n_stream || a.stream != b.stream || a.cell_ext_bytes != b.cell_ext_bytes ||
      a.v_trans != b.v_trans || a.k.size() != b.k.size() || a.v.size() != b.v.size()) {
    return false;
  }
  for (const auto& [x, y] : {std::pair{&a.k, &b.k}, std::pair{&a.v, &b.v}}) {
    for (size_t l = 0; l < x->size(); ++l) {
      const StateTensor &s = (*x)[l], &t = (*y)[l];
      if (s.ggml_type != t.ggml_type || s.row_bytes != t.row_bytes || s.elem_bytes != t.elem_bytes) return false;
    }
  }
  return true;
}

}  // namespace

Status CheckChunkState(const ChunkState& chunk, bool with_boundary) {
  const size_t n_boundary = CountBoundary(chunk.at_boundary);
  if (chunk.at_boundary.size() != chunk.tokens.sections.size() + n_boundary ||
      (with_boundary && n_boundary != chunk.boundary.sections.size())) {
    return InvalidArgument("a chunk's layout does not name its sections");
  }
  if (chunk.at_boundary.size() > kMaxChunkSections) return InvalidArgument("a chunk of too many sections");
  if (chunk.n_tokens == 0 || chunk.n_tokens > kMaxTokens || chunk.pos_begin < 0) {
    return InvalidArgument("a chunk's token range is out of range");
  }
  for (const StateSection& section : chunk.tokens.sections) {
    const auto* a = std::get_if<AttentionSection>(&section);
    if (a == nullptr) return InvalidArgument("a recurrent state is not a chunk's own cells");
    if (a->n_cells != chunk.n_tokens || a->pos_begin != chunk.pos_begin) {
      return InvalidArgument(FormatMessage("a token section holds cells %d..%d, the chunk %d..%d", a->pos_begin,
                                           a->pos_begin + static_cast<int32_t>(a->n_cells), chunk.pos_begin,
                                           chunk.pos_begin + static_cast<int32_t>(chunk.n_tokens)));
    }
  }
  return Status::Ok();
}

namespace {

// What identifies a section of a memory whatever cells it holds: its kind and layers.
std::vector<uint64_t> SectionSignature(const StateSection& section) {
  if (const auto* r = std::get_if<RecurrentSection>(&section)) {
    return {1, r->n_layer, r->n_recurrent_layers, r->r_row_bytes, r->history_row_bytes, r->s_row_bytes};
  }
  const auto& a = std::get<AttentionSection>(section);
  std::vector<uint64_t> sig = {0, a.n_stream, a.cell_ext_bytes, a.v_trans, a.k.size(), a.v.size()};
  for (const auto* tensors : {&a.k, &a.v}) {
    for (const StateTensor& t : *tensors) {
      sig.insert(sig.end(), {static_cast<uint64_t>(static_cast<uint32_t>(t.ggml_type)), t.row_bytes, t.elem_bytes});
    }
  }
  return sig;
}

}  // namespace

Result<std::vector<bool>> MatchSnapshotSections(const SeqState& whole, const SeqState& snapshot) {
  std::vector<bool> at_boundary(whole.sections.size(), false);
  ptrdiff_t j = static_cast<ptrdiff_t>(snapshot.sections.size()) - 1;
  for (ptrdiff_t i = static_cast<ptrdiff_t>(whole.sections.size()) - 1; i >= 0 && j >= 0; --i) {
    if (SectionSignature(whole.sections[i]) == SectionSignature(snapshot.sections[j])) {
      at_boundary[i] = true;
      --j;
    }
  }
  if (j >= 0) return InvalidArgument("the memory's partial state is not part of its whole state");
  return at_boundary;
}

Result<ChunkState> SliceChunk(const SeqState& whole, const std::vector<bool>& at_boundary, const SeqState& snapshot,
                              uint32_t index, uint32_t chunk_tokens) {
  if (at_boundary.size() != whole.sections.size()) return InvalidArgument("a layout of other sections");
  const uint64_t begin = uint64_t{index} * chunk_tokens;
  if (chunk_tokens == 0 || begin + chunk_tokens > kMaxTokens) return InvalidArgument("a chunk out of range");
  ChunkState chunk;
  chunk.pos_begin = static_cast<int32_t>(begin);
  chunk.n_tokens = chunk_tokens;
  chunk.at_boundary = at_boundary;
  chunk.tokens.seq_id = whole.seq_id;
  chunk.boundary = snapshot;
  for (size_t i = 0; i < whole.sections.size(); ++i) {
    if (at_boundary[i]) continue;
    const auto* a = std::get_if<AttentionSection>(&whole.sections[i]);
    if (a == nullptr) return InvalidArgument("a recurrent state is not a chunk's own cells");
    if (a->pos_begin > chunk.pos_begin || uint64_t(a->pos_begin) + a->n_cells < begin + chunk_tokens) {
      return InvalidArgument(FormatMessage("section %zu holds cells %d..%d, not all of chunk %u's", i, a->pos_begin,
                                           a->pos_begin + static_cast<int32_t>(a->n_cells), index));
    }
    const size_t first = static_cast<size_t>(begin - static_cast<uint64_t>(a->pos_begin));
    // The chunk's rows only: a sequence is cut into chunks without copying it whole again.
    AttentionSection cells{.n_stream = a->n_stream,
                           .stream = a->stream,
                           .pos_begin = chunk.pos_begin,
                           .n_cells = chunk_tokens,
                           .cell_ext_bytes = a->cell_ext_bytes,
                           .cell_ext = {},
                           .v_trans = a->v_trans,
                           .k = {},
                           .v = {}};
    cells.cell_ext.assign(a->cell_ext.begin() + static_cast<ptrdiff_t>(first * a->cell_ext_bytes),
                          a->cell_ext.begin() + static_cast<ptrdiff_t>((first + chunk_tokens) * a->cell_ext_bytes));
    for (const auto& [from, into] : {std::pair{&a->k, &cells.k}, std::pair{&a->v, &cells.v}}) {
      for (const StateTensor& t : *from) {
        into->push_back(
            {t.ggml_type, t.elem_bytes, t.row_bytes,
             std::vector<uint8_t>(t.rows.begin() + static_cast<ptrdiff_t>(first * t.row_bytes),
                                  t.rows.begin() + static_cast<ptrdiff_t>((first + chunk_tokens) * t.row_bytes))});
      }
    }
    chunk.tokens.sections.push_back(std::move(cells));
  }
  RETURN_IF_ERROR(CheckChunkState(chunk, true));
  return chunk;
}

Result<SeqState> ComposePrefixState(std::span<const ChunkState> chunks) {
  if (chunks.empty()) return InvalidArgument("no chunks to compose");
  for (const ChunkState& chunk : chunks) RETURN_IF_ERROR(CheckChunkState(chunk, &chunk == &chunks.back()));
  const ChunkState& first = chunks.front();
  const ChunkState& last = chunks.back();
  int32_t next = first.pos_begin;
  uint64_t cells = 0;
  for (const ChunkState& chunk : chunks) {
    if (chunk.pos_begin != next || chunk.at_boundary != first.at_boundary) {
      return InvalidArgument("the chunks do not follow one another in one memory layout");
    }
    next += static_cast<int32_t>(chunk.n_tokens);
    cells += chunk.n_tokens;
  }
  if (cells > kMaxTokens) return InvalidArgument("a prefix longer than any cache");
  SeqState out;
  out.seq_id = last.tokens.seq_id;
  size_t token_index = 0, boundary_index = 0;
  for (const bool at_boundary : first.at_boundary) {
    if (at_boundary) {
      out.sections.push_back(last.boundary.sections[boundary_index++]);
      continue;
    }
    AttentionSection joined = std::get<AttentionSection>(first.tokens.sections[token_index]);
    for (size_t c = 1; c < chunks.size(); ++c) {
      const auto& next_cells = std::get<AttentionSection>(chunks[c].tokens.sections[token_index]);
      if (!SameLayout(joined, next_cells)) return InvalidArgument("a token section's layout differs between chunks");
      joined.n_cells += next_cells.n_cells;
      joined.cell_ext.insert(joined.cell_ext.end(), next_cells.cell_ext.begin(), next_cells.cell_ext.end());
      for (const auto& [into, from] : {std::pair{&joined.k, &next_cells.k}, std::pair{&joined.v, &next_cells.v}}) {
        for (size_t l = 0; l < into->size(); ++l) {
          (*into)[l].rows.insert((*into)[l].rows.end(), (*from)[l].rows.begin(), (*from)[l].rows.end());
        }
      }
    }
    out.sections.push_back(std::move(joined));
    ++token_index;
  }
  return out;
}

Result<std::vector<uint8_t>> WriteChunkTokens(const ChunkState& chunk) {
  RETURN_IF_ERROR(CheckChunkState(chunk));
  ASSIGN_OR_RETURN(const std::vector<uint8_t> state, WriteSeqState(chunk.tokens));
  ByteWriter w;
  w.Bytes(kChunkMagic, sizeof kChunkMagic);
  w.U32(kChunkVersion);
  w.I32(chunk.pos_begin);
  w.U32(chunk.n_tokens);
  w.U32(static_cast<uint32_t>(chunk.at_boundary.size()));
  for (const bool b : chunk.at_boundary) w.U8(b ? 1 : 0);
  w.U64(state.size());
  w.Bytes(state);
  return w.Take();
}

Result<std::vector<uint8_t>> WriteChunkBoundary(const ChunkState& chunk) {
  RETURN_IF_ERROR(CheckChunkState(chunk));
  return WriteSeqState(chunk.boundary);
}

namespace {

struct ChunkHead {
  int32_t pos_begin = 0;
  uint32_t n_tokens = 0;
  std::vector<bool> at_boundary;
  std::span<const uint8_t> state;
};

Result<ChunkHead> ReadChunkHead(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  RETURN_IF_ERROR(ExpectMagicAndVersion(r, kChunkMagic, kChunkVersion, "state chunk"));
  ChunkHead head;
  uint32_t n_sections;
  uint64_t state_bytes;
  RETURN_IF_ERROR(r.I32(&head.pos_begin, "pos_begin"));
  RETURN_IF_ERROR(r.U32(&head.n_tokens, "n_tokens"));
  RETURN_IF_ERROR(r.U32(&n_sections, "section count"));
  KVC_CHECK_CORRUPT(n_sections <= kMaxChunkSections, "%u sections in a chunk", n_sections);
  for (uint32_t i = 0; i < n_sections; ++i) {
    uint8_t flag;
    RETURN_IF_ERROR(r.U8(&flag, "section kind"));
    KVC_CHECK_CORRUPT(flag <= 1, "section kind %u", flag);
    head.at_boundary.push_back(flag == 1);
  }
  RETURN_IF_ERROR(r.U64(&state_bytes, "state size"));
  KVC_CHECK_CORRUPT(state_bytes == r.remaining(), "a state of %llu bytes where %zu are left",
                    static_cast<unsigned long long>(state_bytes), r.remaining());
  RETURN_IF_ERROR(r.Bytes(r.remaining(), &head.state, "state"));
  return head;
}

}  // namespace

Result<ChunkState> ReadChunkTokens(std::span<const uint8_t> tokens) {
  ASSIGN_OR_RETURN(ChunkHead head, ReadChunkHead(tokens));
  ChunkState chunk;
  chunk.pos_begin = head.pos_begin;
  chunk.n_tokens = head.n_tokens;
  chunk.at_boundary = std::move(head.at_boundary);
  ASSIGN_OR_RETURN(chunk.tokens, ParseSeqState(head.state));
  if (const Status s = CheckChunkState(chunk, false); !s.ok()) return Corrupt("state chunk: " + s.message());
  return chunk;
}

Status ReadChunkBoundary(std::span<const uint8_t> boundary, ChunkState* chunk) {
  ASSIGN_OR_RETURN(chunk->boundary, ParseSeqState(boundary));
  if (const Status s = CheckChunkState(*chunk, true); !s.ok()) return Corrupt("state chunk boundary: " + s.message());
  return Status::Ok();
}

}  // namespace kvc
