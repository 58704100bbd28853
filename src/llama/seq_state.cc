#include "llama/seq_state.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <type_traits>

#include "base/byte_io.h"
#include "llama/llama_state.h"
#include "tensor/kv_cache.h"

namespace kvc {
namespace {

// Bounds no state llama.cpp writes comes near; each keeps a hostile header from asking for more.
constexpr int32_t kMaxGgmlType = 63;  // ggml_type ids are below GGML_TYPE_COUNT (about 40)
constexpr uint64_t kMaxRowBytes = uint64_t{1} << 26;
constexpr uint32_t kMaxStreams = 4096;
constexpr uint32_t kMaxSeqIdsPerCell = 256;  // LLAMA_MAX_SEQ
constexpr size_t kMaxSections = 6;           // the most a memory writes is three
constexpr size_t kCellBytes = 12;            // i32 pos, u32 n_seq_id = 1, i32 seq_id

// How a section was read: the parse tries each and keeps the path that accounts for every byte.
struct Reading {
  bool recurrent = false;
  bool cell_ext = false;  // attention: cells carry the 12-byte extension
  bool with_v = true;     // attention: V follows K (MLA has none)
  size_t end = 0;         // the offset just past the section
};

Status CheckType(int32_t type) {
  KVC_CHECK_CORRUPT(type >= 0 && type <= kMaxGgmlType, "tensor type %d is not a ggml type", type);
  return Status::Ok();
}

// A recurrent state may have an empty part (MiniMax-01's lightning attention keeps no rolling
// state: its R rows are 0 bytes); an attention row never is.
Status CheckRowBytes(uint64_t row_bytes, bool may_be_empty) {
  KVC_CHECK_CORRUPT((row_bytes > 0 || may_be_empty) && row_bytes <= kMaxRowBytes, "row of %llu bytes out of range",
                    static_cast<unsigned long long>(row_bytes));
  return Status::Ok();
}

// One tensor's header and rows. `transposed`: (i32 type, u32 element bytes, u32 values per row)
// then value j of every cell, value j+1 of every cell, ...; else (i32 type, u64 row bytes), rows.
struct TensorRead {
  int32_t type = 0;
  uint32_t elem_bytes = 0;
  uint64_t row_bytes = 0;
  std::span<const uint8_t> data;
};

Status ReadTensor(ByteReader& r, uint32_t n_cells, bool transposed, bool may_be_empty, TensorRead* t) {
  RETURN_IF_ERROR(r.I32(&t->type, "tensor type"));
  RETURN_IF_ERROR(CheckType(t->type));
  if (transposed) {
    uint32_t n_values;
    RETURN_IF_ERROR(r.U32(&t->elem_bytes, "V element size"));
    KVC_CHECK_CORRUPT(t->elem_bytes == 1 || t->elem_bytes == 2 || t->elem_bytes == 4 || t->elem_bytes == 8,
                      "V element size %u out of range", t->elem_bytes);
    RETURN_IF_ERROR(r.U32(&n_values, "V values per row"));
    t->row_bytes = uint64_t{t->elem_bytes} * n_values;
  } else {
    t->elem_bytes = 0;
    RETURN_IF_ERROR(r.U64(&t->row_bytes, "row size"));
  }
  RETURN_IF_ERROR(CheckRowBytes(t->row_bytes, may_be_empty));
  KVC_CHECK_CORRUPT(t->row_bytes * n_cells <= r.remaining(), "a tensor of %u rows of %llu bytes larger than the state",
                    n_cells, static_cast<unsigned long long>(t->row_bytes));
  return r.Bytes(t->row_bytes * n_cells, &t->data, "tensor data");
}

// The rows of `t` in position order (`order[i]`: the written index of the i-th cell by position).
StateTensor TakeRows(const TensorRead& t, std::span<const uint32_t> order) {
  StateTensor out;
  out.ggml_type = t.type;
  out.elem_bytes = t.elem_bytes;
  out.row_bytes = t.row_bytes;
  const size_t n_cells = order.size();
  out.rows.resize(t.row_bytes * n_cells);
  if (t.elem_bytes == 0) {
    for (size_t i = 0; i < n_cells; ++i) {
      std::memcpy(out.rows.data() + i * t.row_bytes, t.data.data() + order[i] * t.row_bytes, t.row_bytes);
    }
  } else {
    const uint64_t n_values = t.row_bytes / t.elem_bytes;
    for (uint64_t j = 0; j < n_values; ++j) {
      for (size_t i = 0; i < n_cells; ++i) {
        std::memcpy(out.rows.data() + i * t.row_bytes + j * t.elem_bytes,
                    t.data.data() + (j * n_cells + order[i]) * t.elem_bytes, t.elem_bytes);
      }
    }
  }
  return out;
}

// Reads one attention section as `reading` says; fills `out` unless it is null (a trial).
Status ReadAttention(ByteReader& r, int32_t seq_id, const Reading& reading, AttentionSection* out) {
  uint32_t n_stream;
  RETURN_IF_ERROR(r.U32(&n_stream, "n_stream"));
  KVC_CHECK_CORRUPT(n_stream >= 1 && n_stream <= kMaxStreams, "n_stream %u out of range", n_stream);
  if (out != nullptr) *out = AttentionSection{.n_stream = n_stream};
  bool found = false;
  for (uint32_t s = 0; s < n_stream; ++s) {
    uint32_t n_cells;
    RETURN_IF_ERROR(r.U32(&n_cells, "cell_count"));
    if (n_cells == 0) continue;
    if (found) return Unsupported("the sequence has cells in more than one stream");
    found = true;
    const uint32_t ext_bytes = reading.cell_ext ? kCellExtBytes : 0;
    const size_t record = kCellBytes + ext_bytes;
    KVC_CHECK_CORRUPT(n_cells <= kMaxTokens, "cell_count %u exceeds %u", n_cells, kMaxTokens);
    KVC_CHECK_CORRUPT(uint64_t{n_cells} * record <= r.remaining(), "cell_count %u larger than the state", n_cells);
    std::span<const uint8_t> cells;
    RETURN_IF_ERROR(r.Bytes(n_cells * record, &cells, "cells"));
    std::vector<int32_t> pos(n_cells);
    for (uint32_t i = 0; i < n_cells; ++i) {
      ByteReader cell(cells.subspan(i * record, record));
      uint32_t n_seq;
      int32_t cell_seq;
      RETURN_IF_ERROR(cell.I32(&pos[i], "cell pos"));
      KVC_CHECK_CORRUPT(pos[i] >= 0, "cell %u has negative position %d", i, pos[i]);
      RETURN_IF_ERROR(cell.U32(&n_seq, "cell n_seq_id"));
      KVC_CHECK_CORRUPT(n_seq == 1, "cell %u belongs to %u sequences (expected 1)", i, n_seq);
      RETURN_IF_ERROR(cell.Skip(ext_bytes, "cell extension"));
      RETURN_IF_ERROR(cell.I32(&cell_seq, "cell seq_id"));
      KVC_CHECK_CORRUPT(cell_seq == seq_id, "cell %u belongs to sequence %d, the state to %d", i, cell_seq, seq_id);
    }
    // A ring buffer may hold the cells in any order; they are kept by position.
    std::vector<uint32_t> order(n_cells);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return pos[a] < pos[b]; });
    for (uint32_t i = 1; i < n_cells; ++i) {
      if (pos[order[i]] != pos[order[i - 1]] + 1) {
        return Unsupported(
            FormatMessage("positions are not consecutive (%d then %d)", pos[order[i - 1]], pos[order[i]]));
      }
    }
    uint32_t v_trans, n_layer;
    RETURN_IF_ERROR(r.U32(&v_trans, "v_trans"));
    KVC_CHECK_CORRUPT(v_trans <= 1, "v_trans %u is not 0 or 1", v_trans);
    RETURN_IF_ERROR(r.U32(&n_layer, "n_layer"));
    // A cache may hold cells for no layer at all (LFM2's attention cache in its fixture).
    KVC_CHECK_CORRUPT(n_layer <= kMaxLayers, "n_layer %u out of range", n_layer);
    // Every layer writes at least its 12-byte header.
    KVC_CHECK_CORRUPT(uint64_t{n_layer} * 12 <= r.remaining(), "n_layer %u larger than the state", n_layer);
    if (out != nullptr) {
      out->stream = s;
      out->pos_begin = pos[order[0]];
      out->n_cells = n_cells;
      out->cell_ext_bytes = ext_bytes;
      out->cell_ext.resize(size_t{n_cells} * ext_bytes);
      for (uint32_t i = 0; i < n_cells && ext_bytes > 0; ++i) {
        std::memcpy(out->cell_ext.data() + size_t{i} * ext_bytes, cells.data() + order[i] * record + 8, ext_bytes);
      }
      out->v_trans = v_trans == 1;
    }
    for (const bool value : {false, true}) {
      if (value && !reading.with_v) break;
      for (uint32_t l = 0; l < n_layer; ++l) {
        TensorRead t;
        RETURN_IF_ERROR(ReadTensor(r, n_cells, value && v_trans == 1, false, &t));
        if (out != nullptr) (value ? out->v : out->k).push_back(TakeRows(t, order));
      }
    }
  }
  return Status::Ok();
}

// A recurrent section's cells, s_trans and n_layer, up to its first layer.
struct RecurrentHead {
  uint32_t n_cells = 0;
  int32_t pos = -1;
  uint32_t n_layer = 0;
};

Status ReadRecurrentHead(ByteReader& r, RecurrentHead* head) {
  RETURN_IF_ERROR(r.U32(&head->n_cells, "recurrent cell_count"));
  // A sequence owns one recurrent cell.
  KVC_CHECK_CORRUPT(head->n_cells <= 1, "recurrent cell_count %u for one sequence", head->n_cells);
  for (uint32_t i = 0; i < head->n_cells; ++i) {
    uint32_t n_seq;
    RETURN_IF_ERROR(r.I32(&head->pos, "recurrent cell pos"));
    RETURN_IF_ERROR(r.U32(&n_seq, "recurrent cell n_seq_id"));
    KVC_CHECK_CORRUPT(n_seq <= kMaxSeqIdsPerCell, "recurrent cell with %u sequences", n_seq);
    RETURN_IF_ERROR(r.Skip(size_t{n_seq} * 4, "recurrent cell seq_ids"));
  }
  uint32_t s_trans;
  RETURN_IF_ERROR(r.U32(&s_trans, "s_trans"));
  KVC_CHECK_CORRUPT(s_trans == 0, "s_trans %u (llama.cpp writes 0)", s_trans);
  RETURN_IF_ERROR(r.U32(&head->n_layer, "recurrent n_layer"));
  KVC_CHECK_CORRUPT(head->n_layer >= 1 && head->n_layer <= kMaxLayers, "recurrent n_layer %u out of range",
                    head->n_layer);
  return Status::Ok();
}

// What a recurrent section holds after its head: R for each recurrent layer (followed, in a
// model with a per-layer-embedding conv history, by that history's row: u64 row bytes, rows, no
// type), then S for each. n_layer counts every layer of the model, but only those with a
// recurrent state write one (a hybrid model's attention layers write nothing), so the count is
// found from the tensors: k R of one row size, then k S of another.
struct RecurrentLayers {
  uint32_t n_recurrent = 0;
  uint64_t r_row_bytes = 0;
  uint64_t p_row_bytes = 0;  // 0: no conv history rows
  uint64_t s_row_bytes = 0;
  size_t end = 0;
};

// An untyped row tensor (u64 row bytes, rows): the conv history after an R.
Status ReadUntypedRows(ByteReader& r, uint32_t n_cells, uint64_t* row_bytes) {
  RETURN_IF_ERROR(r.U64(row_bytes, "history row size"));
  RETURN_IF_ERROR(CheckRowBytes(*row_bytes, false));
  KVC_CHECK_CORRUPT(*row_bytes * n_cells <= r.remaining(), "history rows larger than the state");
  return r.Skip(*row_bytes * n_cells, "history rows");
}

// Every count of recurrent layers that reads as such from `r`'s position, most layers first,
// without conv history rows and then with them.
std::vector<RecurrentLayers> RecurrentLayerReadings(const ByteReader& start, const RecurrentHead& head) {
  std::vector<RecurrentLayers> out;
  for (const bool with_history : {false, true}) {
    // The R (and history) rows of as many layers as read, each one's end offset.
    ByteReader r = start;
    std::vector<RecurrentLayers> prefixes;
    while (prefixes.size() < head.n_layer) {
      TensorRead t;
      uint64_t p_row = 0;
      if (!ReadTensor(r, head.n_cells, false, true, &t).ok()) break;
      if (with_history && !ReadUntypedRows(r, head.n_cells, &p_row).ok()) break;
      if (!prefixes.empty() && (t.row_bytes != prefixes[0].r_row_bytes || p_row != prefixes[0].p_row_bytes)) break;
      prefixes.push_back({static_cast<uint32_t>(prefixes.size() + 1), t.row_bytes, p_row, 0, r.offset()});
    }
    for (auto k = prefixes.rbegin(); k != prefixes.rend(); ++k) {
      // Then exactly k S rows of one size.
      ByteReader s(start);
      (void)s.Skip(k->end - start.offset(), "R rows");
      RecurrentLayers reading = *k;
      uint32_t n = 0;
      for (; n < reading.n_recurrent; ++n) {
        TensorRead t;
        if (!ReadTensor(s, head.n_cells, false, true, &t).ok()) break;
        if (n > 0 && t.row_bytes != reading.s_row_bytes) break;
        reading.s_row_bytes = t.row_bytes;
      }
      if (n != reading.n_recurrent) continue;
      reading.end = s.offset();
      out.push_back(reading);
    }
  }
  return out;
}

// The readings of a section starting at `at`, each with the offset it ends at.
std::vector<Reading> Readings(std::span<const uint8_t> blob, size_t at, int32_t seq_id) {
  std::vector<Reading> out;
  for (const bool with_v : {true, false}) {
    for (const bool cell_ext : {false, true}) {
      ByteReader r(blob);
      Reading reading{.cell_ext = cell_ext, .with_v = with_v};
      if (r.Skip(at, "section").ok() && ReadAttention(r, seq_id, reading, nullptr).ok()) {
        reading.end = r.offset();
        out.push_back(reading);
      }
    }
  }
  ByteReader r(blob);
  RecurrentHead head;
  if (r.Skip(at, "section").ok() && ReadRecurrentHead(r, &head).ok()) {
    for (const RecurrentLayers& layers : RecurrentLayerReadings(r, head)) {
      out.push_back({.recurrent = true, .end = layers.end});
    }
  }
  return out;
}

// Finds readings of the sections from `at` to the end of the blob; offsets known to lead nowhere
// are remembered, so a crafted blob cannot make the search revisit them.
bool FindPath(std::span<const uint8_t> blob, size_t at, int32_t seq_id, std::vector<Reading>* path,
              std::set<size_t>* dead) {
  if (at == blob.size()) return true;
  if (path->size() == kMaxSections || dead->count(at) > 0) return false;
  for (const Reading& reading : Readings(blob, at, seq_id)) {
    if (reading.end <= at) continue;
    path->push_back(reading);
    if (FindPath(blob, reading.end, seq_id, path, dead)) return true;
    path->pop_back();
  }
  dead->insert(at);
  return false;
}

Result<RecurrentSection> ReadRecurrent(std::span<const uint8_t> blob, size_t at, size_t end) {
  ByteReader r(blob);
  RETURN_IF_ERROR(r.Skip(at, "section"));
  RecurrentHead head;
  RETURN_IF_ERROR(ReadRecurrentHead(r, &head));
  for (const RecurrentLayers& layers : RecurrentLayerReadings(r, head)) {
    if (layers.end != end) continue;
    RecurrentSection out;
    out.bytes.assign(blob.begin() + static_cast<ptrdiff_t>(at), blob.begin() + static_cast<ptrdiff_t>(end));
    out.n_cells = head.n_cells;
    out.pos = head.pos;
    out.n_layer = head.n_layer;
    out.n_recurrent_layers = layers.n_recurrent;
    out.r_row_bytes = layers.r_row_bytes;
    out.history_row_bytes = layers.p_row_bytes;
    out.s_row_bytes = layers.s_row_bytes;
    return out;
  }
  return Internal("a recurrent section read differently the second time");
}

size_t AttentionBytes(const AttentionSection& a) {
  size_t n = 4 + size_t{4} * a.n_stream;
  if (a.n_cells == 0) return n;
  n += size_t{a.n_cells} * (kCellBytes + a.cell_ext_bytes) + 8;
  for (const auto* tensors : {&a.k, &a.v}) {
    for (const StateTensor& t : *tensors) n += 12 + t.rows.size();
  }
  return n;
}

Status CheckAttention(const AttentionSection& a) {
  if (a.n_stream == 0 || a.stream >= a.n_stream) return InvalidArgument("stream index out of range");
  if (a.n_cells == 0) return Status::Ok();
  if (a.cell_ext_bytes != 0 && a.cell_ext_bytes != kCellExtBytes) return InvalidArgument("bad cell extension size");
  if (a.cell_ext.size() != size_t{a.n_cells} * a.cell_ext_bytes) return InvalidArgument("cell extensions missing");
  if (!a.v.empty() && a.v.size() != a.k.size()) {
    return InvalidArgument("an attention section has V for no layer or for each");
  }
  for (const auto* tensors : {&a.k, &a.v}) {
    for (const StateTensor& t : *tensors) {
      if (t.rows.size() != t.row_bytes * a.n_cells) return InvalidArgument("a tensor's rows differ from its cells");
      if (t.elem_bytes != 0 && (t.row_bytes % t.elem_bytes != 0 || tensors == &a.k || !a.v_trans)) {
        return InvalidArgument("only a transposed V has an element size");
      }
      if (tensors == &a.v && a.v_trans && t.elem_bytes == 0)
        return InvalidArgument("a transposed V needs its element size");
    }
  }
  return Status::Ok();
}

class Writer {
 public:
  explicit Writer(std::span<uint8_t> out) : out_(out) {}
  template <typename T>
  void Put(T value) {
    const auto bits = static_cast<std::make_unsigned_t<T>>(value);
    for (size_t i = 0; i < sizeof bits; ++i) out_[at_++] = static_cast<uint8_t>(bits >> (8 * i));
  }
  void PutBytes(std::span<const uint8_t> bytes) {
    if (!bytes.empty()) std::memcpy(out_.data() + at_, bytes.data(), bytes.size());
    at_ += bytes.size();
  }
  uint8_t* Here() { return out_.data() + at_; }
  void Advance(size_t n) { at_ += n; }
  size_t at() const { return at_; }

 private:
  std::span<uint8_t> out_;
  size_t at_ = 0;
};

void WriteAttention(const AttentionSection& a, int32_t seq_id, uint32_t stream, Writer& w) {
  w.Put(a.n_stream);
  for (uint32_t s = 0; s < a.n_stream; ++s) {
    if (s != stream || a.n_cells == 0) {
      w.Put(uint32_t{0});
      continue;
    }
    w.Put(a.n_cells);
    for (uint32_t i = 0; i < a.n_cells; ++i) {
      w.Put(a.pos_begin + static_cast<int32_t>(i));
      w.Put(uint32_t{1});
      w.PutBytes(std::span(a.cell_ext).subspan(size_t{i} * a.cell_ext_bytes, a.cell_ext_bytes));
      w.Put(seq_id);
    }
    w.Put(uint32_t{a.v_trans ? 1u : 0u});
    w.Put(static_cast<uint32_t>(a.k.size()));
    for (const StateTensor& t : a.k) {
      w.Put(t.ggml_type);
      w.Put(t.row_bytes);
      w.PutBytes(t.rows);
    }
    for (const StateTensor& t : a.v) {
      w.Put(t.ggml_type);
      if (!a.v_trans) {
        w.Put(t.row_bytes);
        w.PutBytes(t.rows);
        continue;
      }
      w.Put(t.elem_bytes);
      w.Put(static_cast<uint32_t>(t.row_bytes / t.elem_bytes));
      const uint64_t n_values = t.row_bytes / t.elem_bytes;
      uint8_t* dst = w.Here();
      for (uint64_t j = 0; j < n_values; ++j) {
        for (uint32_t i = 0; i < a.n_cells; ++i) {
          std::memcpy(dst + (j * a.n_cells + i) * t.elem_bytes, t.rows.data() + i * t.row_bytes + j * t.elem_bytes,
                      t.elem_bytes);
        }
      }
      w.Advance(t.rows.size());
    }
  }
}

}  // namespace

std::string SeqStateKinds(const SeqState& state) {
  if (state.sections.empty()) return "none";
  std::string out;
  for (const StateSection& section : state.sections) {
    if (!out.empty()) out += "+";
    out += std::holds_alternative<RecurrentSection>(section) ? "recurrent" : "attention";
  }
  return out;
}

Result<SeqState> ParseSeqState(std::span<const uint8_t> blob) {
  ByteReader r(blob);
  uint32_t magic;
  SeqState state;
  RETURN_IF_ERROR(r.U32(&magic, "state magic"));
  KVC_CHECK_CORRUPT(magic == kLlamaStateMagic, "not a llama.cpp sequence state (magic 0x%08x)", magic);
  RETURN_IF_ERROR(r.I32(&state.seq_id, "seq_id"));
  std::vector<Reading> path;
  std::set<size_t> dead;
  if (!FindPath(blob, r.offset(), state.seq_id, &path, &dead)) {
    // Name what a single attention section's reading stopped at: the likeliest layout.
    Reading plain;
    ByteReader first(blob);
    RETURN_IF_ERROR(first.Skip(r.offset(), "sections"));
    const Status attention = ReadAttention(first, state.seq_id, plain, nullptr);
    if (!attention.ok()) return attention;
    return Corrupt(
        FormatMessage("%zu bytes of the sequence state read as no cache llama.cpp writes", first.remaining()));
  }
  size_t at = r.offset();
  for (const Reading& reading : path) {
    if (reading.recurrent) {
      ASSIGN_OR_RETURN(RecurrentSection section, ReadRecurrent(blob, at, reading.end));
      state.sections.emplace_back(std::move(section));
    } else {
      ByteReader section_reader(blob);
      RETURN_IF_ERROR(section_reader.Skip(at, "section"));
      AttentionSection section;
      RETURN_IF_ERROR(ReadAttention(section_reader, state.seq_id, reading, &section));
      state.sections.emplace_back(std::move(section));
    }
    at = reading.end;
  }
  return state;
}

Result<size_t> SeqStateBytes(const SeqState& state) {
  size_t n = 8;
  for (const StateSection& section : state.sections) {
    if (const auto* a = std::get_if<AttentionSection>(&section)) {
      RETURN_IF_ERROR(CheckAttention(*a));
      n += AttentionBytes(*a);
    } else {
      n += std::get<RecurrentSection>(section).bytes.size();
    }
  }
  return n;
}

Result<std::vector<uint8_t>> WriteSeqState(const SeqState& state, std::optional<int32_t> as_seq) {
  ASSIGN_OR_RETURN(const size_t bytes, SeqStateBytes(state));
  const int32_t seq_id = as_seq.value_or(state.seq_id);
  std::vector<uint8_t> out(bytes);
  Writer w(out);
  w.Put(kLlamaStateMagic);
  w.Put(seq_id);
  for (const StateSection& section : state.sections) {
    if (const auto* a = std::get_if<AttentionSection>(&section)) {
      uint32_t stream = a->stream;
      if (as_seq && a->n_stream > 1) {
        if (*as_seq < 0 || static_cast<uint32_t>(*as_seq) >= a->n_stream) {
          return InvalidArgument("the sequence has no stream of its own in this state");
        }
        stream = static_cast<uint32_t>(*as_seq);
      }
      WriteAttention(*a, seq_id, stream, w);
    } else {
      w.PutBytes(std::get<RecurrentSection>(section).bytes);
    }
  }
  if (w.at() != bytes) return Internal("the state writer's size disagrees with its bytes");
  return out;
}

}  // namespace kvc
