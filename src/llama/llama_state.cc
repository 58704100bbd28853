#include "llama/llama_state.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "base/byte_io.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvc {

Result<DType> DTypeFromGgml(int32_t type) {
  switch (type) {
    case kGgmlTypeF32:
      return DType::kF32;
    case kGgmlTypeF16:
      return DType::kF16;
    case kGgmlTypeBF16:
      return DType::kBF16;
    default:
      return Unsupported(
          FormatMessage("KV cache type %d (ggml_type) is not supported; use an f16, bf16 or f32 cache", type));
  }
}

int32_t GgmlFromDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return kGgmlTypeF32;
    case DType::kF16:
      return kGgmlTypeF16;
    case DType::kBF16:
      return kGgmlTypeBF16;
  }
  return -1;
}

Result<KvCache> ParseLlamaSeqState(std::span<const uint8_t> blob, uint32_t n_kv_heads, LlamaStateLayout* layout) {
  ByteReader r(blob);
  uint32_t magic, n_stream;
  int32_t seq_id;
  RETURN_IF_ERROR(r.U32(&magic, "state magic"));
  KVC_CHECK_CORRUPT(magic == kLlamaStateMagic, "not a llama.cpp sequence state (magic 0x%08x)", magic);
  RETURN_IF_ERROR(r.I32(&seq_id, "seq_id"));
  RETURN_IF_ERROR(r.U32(&n_stream, "n_stream"));
  KVC_CHECK_CORRUPT(n_stream >= 1 && n_stream <= 4096, "n_stream %u out of range", n_stream);
  KVC_CHECK_CORRUPT(n_kv_heads >= 1, "n_kv_heads must be positive");

  bool found = false;
  KvCache out;
  LlamaStateLayout parsed{.n_stream = n_stream, .seq_id = seq_id};
  for (uint32_t s = 0; s < n_stream; ++s) {
    uint32_t cell_count;
    RETURN_IF_ERROR(r.U32(&cell_count, "cell_count"));
    if (cell_count == 0) continue;
    KVC_CHECK_CORRUPT(!found, "sequence has cells in more than one stream");
    found = true;
    parsed.stream = s;
    KVC_CHECK_CORRUPT(cell_count <= kMaxTokens, "cell_count %u exceeds %u", cell_count, kMaxTokens);
    // Each cell's metadata is at least 12 bytes: reject counts the blob cannot hold before
    // allocating for them.
    KVC_CHECK_CORRUPT(uint64_t{cell_count} * 12 <= r.remaining(), "cell_count %u larger than the state", cell_count);
    std::vector<int32_t> pos(cell_count);
    for (uint32_t i = 0; i < cell_count; ++i) {
      uint32_t n_seq;
      RETURN_IF_ERROR(r.I32(&pos[i], "cell pos"));
      RETURN_IF_ERROR(r.U32(&n_seq, "cell n_seq_id"));
      KVC_CHECK_CORRUPT(n_seq == 1, "cell %u belongs to %u sequences (expected 1)", i, n_seq);
      int32_t cell_seq;
      RETURN_IF_ERROR(r.I32(&cell_seq, "cell seq_id"));
    }
    // Cells may sit anywhere in the ring; order them by position.
    std::vector<uint32_t> order(cell_count);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return pos[a] < pos[b]; });
    for (uint32_t i = 1; i < cell_count; ++i) {
      KVC_CHECK_CORRUPT(pos[order[i]] == pos[order[i - 1]] + 1,
                        "positions are not consecutive (%d then %d); only contiguous sequences are supported",
                        pos[order[i - 1]], pos[order[i]]);
    }

    uint32_t v_trans, n_layer;
    RETURN_IF_ERROR(r.U32(&v_trans, "v_trans"));
    RETURN_IF_ERROR(r.U32(&n_layer, "n_layer"));
    KVC_CHECK_CORRUPT(v_trans <= 1, "v_trans %u is not 0 or 1", v_trans);
    KVC_CHECK_CORRUPT(n_layer >= 1 && n_layer <= kMaxLayers, "n_layer %u out of range", n_layer);
    parsed.v_trans = v_trans == 1;

    DType dtype = DType::kF16;
    size_t row_elems = 0;
    for (KvKind kind : kKvKinds) {
      for (uint32_t l = 0; l < n_layer; ++l) {
        int32_t type;
        RETURN_IF_ERROR(r.I32(&type, "tensor type"));
        ASSIGN_OR_RETURN(DType layer_dtype, DTypeFromGgml(type));
        const size_t elem = DTypeSize(layer_dtype);
        uint64_t row_bytes;
        const bool transposed = kind == KvKind::kValue && v_trans;
        if (transposed) {
          uint32_t elem_bytes, n_embd;
          RETURN_IF_ERROR(r.U32(&elem_bytes, "V element size"));
          RETURN_IF_ERROR(r.U32(&n_embd, "V embedding size"));
          KVC_CHECK_CORRUPT(elem_bytes == elem, "V element size %u does not match its type", elem_bytes);
          row_bytes = uint64_t{n_embd} * elem;
        } else {
          RETURN_IF_ERROR(r.U64(&row_bytes, "row size"));
        }
        KVC_CHECK_CORRUPT(row_bytes % elem == 0 && row_bytes > 0, "row size %llu not a multiple of the element size",
                          static_cast<unsigned long long>(row_bytes));
        const uint64_t elems = row_bytes / elem;
        KVC_CHECK_CORRUPT(elems % n_kv_heads == 0 && elems / n_kv_heads <= kMaxHeadDim,
                          "row of %llu values does not split into %u heads", static_cast<unsigned long long>(elems),
                          n_kv_heads);
        if (kind == KvKind::kKey && l == 0) {
          dtype = layer_dtype;
          row_elems = elems;
          const KvShape shape{n_layer, n_kv_heads, static_cast<uint32_t>(elems / n_kv_heads), cell_count};
          RETURN_IF_ERROR(ValidateShape(shape, dtype).WithContext("sequence state"));
          ASSIGN_OR_RETURN(out, KvCache::Create(shape, dtype, cell_count ? pos[order[0]] : 0));
        }
        KVC_CHECK_CORRUPT(layer_dtype == dtype && elems == row_elems,
                          "layer %u %s has another type or width than layer 0 K", l, KvKindName(kind));
        std::span<const uint8_t> data;
        RETURN_IF_ERROR(r.Bytes(row_bytes * cell_count, &data, "tensor data"));
        if (!transposed) {
          for (uint32_t i = 0; i < cell_count; ++i) {
            std::memcpy(out.RowBytes(kind, l, i, 1).data(), data.data() + size_t{order[i]} * row_bytes, row_bytes);
          }
        } else {
          // Transposed: element j of every cell, then element j+1 ...
          auto dst = out.RowBytes(kind, l, 0, cell_count);
          for (uint64_t j = 0; j < elems; ++j) {
            for (uint32_t i = 0; i < cell_count; ++i) {
              std::memcpy(dst.data() + (size_t{i} * elems + j) * elem, data.data() + (j * cell_count + order[i]) * elem,
                          elem);
            }
          }
        }
      }
    }
  }
  KVC_CHECK_CORRUPT(found, "sequence state holds no cells");
  KVC_CHECK_CORRUPT(r.empty(), "%zu unexpected bytes after the sequence state", r.remaining());
  parsed.dtype = out.dtype();
  if (layout != nullptr) *layout = parsed;
  return out;
}

namespace {

// Writes V's rows ([token][channel]) transposed to [channel][token] at `out`, as llama.cpp
// stores V without flash attention. Element by element, in tiles so both sides stay in cache.
template <typename Elem>
void TransposeTile(const uint8_t* rows, uint32_t n_tokens, size_t channels, uint32_t t0, uint32_t t1, size_t c0,
                   size_t c1, uint8_t* out) {
  for (size_t c = c0; c < c1; ++c) {
    for (uint32_t t = t0; t < t1; ++t) {
      Elem v;
      std::memcpy(&v, rows + (size_t{t} * channels + c) * sizeof(Elem), sizeof(Elem));
      std::memcpy(out + (c * n_tokens + t) * sizeof(Elem), &v, sizeof(Elem));
    }
  }
}

#if defined(__SSE2__)
// 8 tokens x 8 channels of 16-bit values through registers: three rounds of interleaves turn
// 8 rows into 8 columns (SSE2, which every x86-64 has). A restore writes every V value this
// way, so the element loop's 2-byte loads and stores were a third of the restore.
void Transpose8x8U16(const uint8_t* in, size_t in_stride, uint8_t* out, size_t out_stride) {
  __m128i r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i * in_stride));
  const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
  const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
  const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
  const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
  const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
  const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
  const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
  const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
  const __m128i c[8] = {_mm_unpacklo_epi64(b0, b4), _mm_unpackhi_epi64(b0, b4), _mm_unpacklo_epi64(b1, b5),
                        _mm_unpackhi_epi64(b1, b5), _mm_unpacklo_epi64(b2, b6), _mm_unpackhi_epi64(b2, b6),
                        _mm_unpacklo_epi64(b3, b7), _mm_unpackhi_epi64(b3, b7)};
  for (int i = 0; i < 8; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * out_stride), c[i]);
}
#endif

template <typename Elem>
void WriteTransposed(std::span<const uint8_t> rows, uint32_t n_tokens, size_t channels, uint8_t* out) {
  constexpr uint32_t kTile = 32;
  for (uint32_t t0 = 0; t0 < n_tokens; t0 += kTile) {
    const uint32_t t1 = std::min(n_tokens, t0 + kTile);
    size_t c_done = 0;
#if defined(__SSE2__)
    if constexpr (sizeof(Elem) == 2) {
      const uint32_t t_blocks = t0 + (t1 - t0) / 8 * 8;
      c_done = channels / 8 * 8;
      for (size_t c = 0; c < c_done; c += 8) {
        for (uint32_t t = t0; t < t_blocks; t += 8) {
          Transpose8x8U16(rows.data() + (size_t{t} * channels + c) * 2, channels * 2, out + (c * n_tokens + t) * 2,
                          size_t{n_tokens} * 2);
        }
      }
      TransposeTile<Elem>(rows.data(), n_tokens, channels, t_blocks, t1, 0, c_done, out);
    }
#endif
    TransposeTile<Elem>(rows.data(), n_tokens, channels, t0, t1, c_done, channels, out);
  }
}

constexpr size_t kLayerHeaderBytes = 12;  // i32 type, then u64 row bytes or u32 elem bytes + u32 values per row

// Bytes before the tensors: magic, seq id, stream count, empty streams before ours, the cell
// count and each cell (position, one sequence id), v_trans and the layer count.
size_t MetaBytes(uint32_t n_tokens, const LlamaStateLayout& layout) {
  return 4 * 3 + size_t{4} * layout.stream + 4 + size_t{n_tokens} * 12 + 4 + 4;
}

}  // namespace

Result<size_t> LlamaSeqStateBytes(const KvShape& shape, const LlamaStateLayout& layout) {
  if (layout.stream >= layout.n_stream) return InvalidArgument("stream index out of range");
  if (shape.n_tokens == 0) return InvalidArgument("nothing to restore (0 tokens)");
  // Every writer sizes its buffer here first: a cache with no V (an MLA latent) never reaches
  // the V rows it does not hold.
  if (shape.keys_only) return Unsupported("a cache of keys alone has no llama.cpp KV state (it has no V)");
  const size_t layer_bytes = size_t{shape.n_tokens} * shape.row_elems() * DTypeSize(layout.dtype);
  const uint32_t streams_after = layout.n_stream - 1 - layout.stream;
  return MetaBytes(shape.n_tokens, layout) + size_t{2} * shape.n_layers * (kLayerHeaderBytes + layer_bytes) +
         size_t{4} * streams_after;
}

Status WriteLlamaSeqState(const KvView& kv, const LlamaStateLayout& layout, std::span<uint8_t> out) {
  if (kv.dtype() != layout.dtype) return InvalidArgument("KV dtype differs from the context's cache type");
  const KvShape s = kv.shape();
  ASSIGN_OR_RETURN(const size_t total, LlamaSeqStateBytes(s, layout));
  if (out.size() != total) return InvalidArgument("the state buffer's size differs from the state's");
  const size_t elem = DTypeSize(kv.dtype());
  const size_t row_elems = s.row_elems();
  const size_t layer_bytes = size_t{s.n_tokens} * row_elems * elem;
  size_t at = 0;
  auto put = [&](auto value) {  // little-endian
    const auto bits = static_cast<std::make_unsigned_t<decltype(value)>>(value);
    for (size_t i = 0; i < sizeof bits; ++i) out[at++] = static_cast<uint8_t>(bits >> (8 * i));
  };
  put(kLlamaStateMagic);
  put(layout.seq_id);
  put(layout.n_stream);
  for (uint32_t st = 0; st < layout.stream; ++st) put(uint32_t{0});  // empty streams before ours
  put(s.n_tokens);
  for (uint32_t i = 0; i < s.n_tokens; ++i) {
    put(kv.pos_begin() + static_cast<int32_t>(i));
    put(uint32_t{1});
    put(layout.seq_id);
  }
  put(uint32_t{layout.v_trans ? 1u : 0u});
  put(s.n_layers);
  const int32_t type = GgmlFromDType(kv.dtype());
  for (KvKind kind : kKvKinds) {
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      put(type);
      const auto rows = kv.RowBytes(kind, l, 0, s.n_tokens);
      if (kind == KvKind::kValue && layout.v_trans) {
        put(static_cast<uint32_t>(elem));
        put(static_cast<uint32_t>(row_elems));
        if (elem == 2) {
          WriteTransposed<uint16_t>(rows, s.n_tokens, row_elems, out.data() + at);
        } else {
          WriteTransposed<uint32_t>(rows, s.n_tokens, row_elems, out.data() + at);
        }
      } else {
        put(static_cast<uint64_t>(row_elems * elem));
        std::memcpy(out.data() + at, rows.data(), rows.size());
      }
      at += layer_bytes;
    }
  }
  for (uint32_t st = layout.stream + 1; st < layout.n_stream; ++st) put(uint32_t{0});  // and after it
  return Status::Ok();
}

Result<std::vector<uint8_t>> BuildLlamaSeqState(const KvView& kv, const LlamaStateLayout& layout) {
  ASSIGN_OR_RETURN(const size_t bytes, LlamaSeqStateBytes(kv.shape(), layout));
  std::vector<uint8_t> blob(bytes);
  RETURN_IF_ERROR(WriteLlamaSeqState(kv, layout, blob));
  return blob;
}

}  // namespace kvc
