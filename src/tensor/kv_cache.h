// The canonical KV cache: what every codec encodes and the engine restores.
//
// Memory layout, for each of K and V: [layer][token][kv_head][channel], row-major. Token-major
// within a layer (as llama.cpp stores K) keeps any token range of a layer contiguous, so a
// KvView over a chunk of tokens needs no copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kvc {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);
Result<DType> ParseDType(std::string_view name);
bool IsValidDType(uint8_t value);

enum class KvKind : uint8_t { kKey = 0, kValue = 1 };
inline constexpr KvKind kKvKinds[] = {KvKind::kKey, KvKind::kValue};
inline constexpr KvKind kKeysOnly[] = {KvKind::kKey};
const char* KvKindName(KvKind kind);

struct KvShape {
  uint32_t n_layers = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t n_tokens = 0;
  // A cache of keys alone, V absent: what MLA keeps (a latent per token that K and V are both
  // projected from) and what an indexer cache keeps. Every V accessor of such a cache is empty,
  // and codecs code only what kinds() lists.
  bool keys_only = false;

  // Values per token per layer (kv_heads * head_dim).
  size_t row_elems() const { return size_t{n_kv_heads} * head_dim; }
  size_t layer_elems() const { return row_elems() * n_tokens; }
  // Values in K (or in V).
  size_t elems() const { return layer_elems() * n_layers; }
  // K, then V unless keys_only.
  std::span<const KvKind> kinds() const {
    return keys_only ? std::span<const KvKind>(kKeysOnly) : std::span<const KvKind>(kKvKinds);
  }
  size_t n_kinds() const { return keys_only ? 1 : 2; }
  // Bytes of the cache (K and V, or K alone) stored as fp16: the numerator of every compression ratio.
  size_t fp16_bytes() const { return n_kinds() * elems() * 2; }
  bool operator==(const KvShape&) const = default;
};

// Rejects shapes a decoder must never allocate: zero dimensions where not allowed, or sizes
// past the limits below. Hostile headers are checked with this before any allocation.
inline constexpr uint32_t kMaxLayers = 1024;
inline constexpr uint32_t kMaxKvHeads = 1024;
inline constexpr uint32_t kMaxHeadDim = 4096;
inline constexpr uint32_t kMaxTokens = 1u << 22;
inline constexpr uint64_t kMaxKvBytes = uint64_t{16} << 30;
Status ValidateShape(const KvShape& shape, DType dtype);

class KvView;
class KvSlice;

// Converting copy of n values stored as `dtype` to fp32 (every row read converts through it).
void BytesToF32(DType dtype, const uint8_t* bytes, size_t n, float* out);

class KvCache {
 public:
  KvCache() = default;
  // Zero-filled cache; fails on invalid shapes (see ValidateShape).
  static Result<KvCache> Create(const KvShape& shape, DType dtype, int32_t pos_begin = 0);
  // A cache whose values are unspecified until written: for a buffer the caller overwrites
  // range by range anyway (a fetched prefix), where zero-filling it first is a pass over memory
  // that the restore path pays for nothing.
  static Result<KvCache> CreateForOverwrite(const KvShape& shape, DType dtype, int32_t pos_begin = 0);

  const KvShape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  // Position (in the sequence) of token 0; tokens occupy consecutive positions.
  int32_t pos_begin() const { return pos_begin_; }
  void set_pos_begin(int32_t pos) { pos_begin_ = pos; }

  std::span<uint8_t> Bytes(KvKind kind) { return kind == KvKind::kKey ? std::span(k_) : std::span(v_); }
  std::span<const uint8_t> Bytes(KvKind kind) const { return kind == KvKind::kKey ? std::span(k_) : std::span(v_); }
  // The rows of `n_tokens` tokens from `token` in one layer, as stored. Only for the kinds the
  // shape has (V of a keys-only cache holds no bytes).
  std::span<uint8_t> RowBytes(KvKind kind, uint32_t layer, uint32_t token, uint32_t n_tokens);
  std::span<const uint8_t> RowBytes(KvKind kind, uint32_t layer, uint32_t token, uint32_t n_tokens) const;

  // Converting copies of n_tokens rows ([token][head][channel]) of one layer.
  void ReadRowsF32(KvKind kind, uint32_t layer, uint32_t token, uint32_t n_tokens, float* out) const;
  void WriteRowsF32(KvKind kind, uint32_t layer, uint32_t token, uint32_t n_tokens, const float* in);

  KvView View() const;
  Result<KvView> View(uint32_t token_begin, uint32_t n_tokens) const;
  // A writable token range: where a codec decodes a chunk of a longer cache in place.
  KvSlice Slice();
  Result<KvSlice> Slice(uint32_t token_begin, uint32_t n_tokens);

  Result<KvCache> ConvertTo(DType dtype) const;

  bool operator==(const KvCache& other) const;

 private:
  KvShape shape_;
  DType dtype_ = DType::kF16;
  int32_t pos_begin_ = 0;
  // Bytes a resize leaves as they are (the allocator default-initialises), so that
  // CreateForOverwrite touches no page; Create fills them.
  template <typename T>
  struct DefaultInitAllocator : std::allocator<T> {
    template <typename U>
    struct rebind {
      using other = DefaultInitAllocator<U>;
    };
    DefaultInitAllocator() = default;
    template <typename U>
    DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
    template <typename U>
    void construct(U* p) noexcept {
      ::new (static_cast<void*>(p)) U;
    }
    template <typename U, typename... Args>
    void construct(U* p, Args&&... args) {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  };
  using Storage = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;
  static Result<KvCache> Allocate(const KvShape& shape, DType dtype, int32_t pos_begin, bool zero);
  Storage k_;
  Storage v_;
};

// A token range of a KvCache; cheap to copy; the cache must outlive it.
class KvView {
 public:
  KvView() = default;
  KvView(const KvCache* cache, uint32_t token_begin, uint32_t n_tokens)
      : cache_(cache), token_begin_(token_begin), n_tokens_(n_tokens) {}

  // A view of K and V held elsewhere, laid out as a KvCache holds them ([layer][token][kv_head]
  // [channel], `dtype`), all of `shape`'s tokens: how arrays from outside (the Python package's)
  // are encoded without a copy. The bytes must stay alive and unchanged while the view, or a copy
  // of it, is used. kInvalidArgument for an invalid shape or spans of the wrong size.
  static Result<KvView> Over(const KvShape& shape, DType dtype, int32_t pos_begin, std::span<const uint8_t> k,
                             std::span<const uint8_t> v);

  KvShape shape() const;
  DType dtype() const { return cache_ ? cache_->dtype() : outside_.dtype; }
  int32_t pos_begin() const {
    return (cache_ ? cache_->pos_begin() : outside_.pos_begin) + static_cast<int32_t>(token_begin_);
  }
  uint32_t token_begin() const { return token_begin_; }
  uint32_t n_tokens() const { return n_tokens_; }

  // Rows of this view's tokens [token, token + n) (relative to the view) in one layer.
  std::span<const uint8_t> RowBytes(KvKind kind, uint32_t layer, uint32_t token, uint32_t n) const {
    if (cache_) return cache_->RowBytes(kind, layer, token_begin_ + token, n);
    return OutsideRowBytes(kind, layer, token_begin_ + token, n);
  }
  std::span<const uint8_t> LayerBytes(KvKind kind, uint32_t layer) const { return RowBytes(kind, layer, 0, n_tokens_); }
  void ReadRowsF32(KvKind kind, uint32_t layer, uint32_t token, uint32_t n, float* out) const {
    if (cache_) return cache_->ReadRowsF32(kind, layer, token_begin_ + token, n, out);
    const size_t values = size_t{n} * outside_.shape.row_elems();
    if (values > 0)
      BytesToF32(outside_.dtype, OutsideRowBytes(kind, layer, token_begin_ + token, n).data(), values, out);
  }
  void ReadLayerF32(KvKind kind, uint32_t layer, float* out) const { ReadRowsF32(kind, layer, 0, n_tokens_, out); }

  // Tokens [token_begin, token_begin + n_tokens) of this view (positions follow). kInvalidArgument
  // for a range past its end.
  Result<KvView> View(uint32_t token_begin, uint32_t n_tokens) const;

  // An owning copy of the range.
  Result<KvCache> Copy() const;

 private:
  // The bytes of a view made by Over: the whole shape, as a KvCache would hold it.
  struct Outside {
    KvShape shape;
    DType dtype = DType::kF16;
    int32_t pos_begin = 0;
    const uint8_t* k = nullptr;
    const uint8_t* v = nullptr;
  };
  std::span<const uint8_t> OutsideRowBytes(KvKind kind, uint32_t layer, uint32_t token, uint32_t n) const;

  const KvCache* cache_ = nullptr;  // null for a view made by Over
  Outside outside_;
  uint32_t token_begin_ = 0;
  uint32_t n_tokens_ = 0;
};

// A writable token range of a KvCache: a codec decodes a chunk straight into the prefix's
// buffer through one, so a decoded chunk is never copied again. Cheap to copy; the cache must
// outlive it.
class KvSlice {
 public:
  KvSlice() = default;
  KvSlice(KvCache* cache, uint32_t token_begin, uint32_t n_tokens)
      : cache_(cache), token_begin_(token_begin), n_tokens_(n_tokens) {}

  KvShape shape() const;
  DType dtype() const { return cache_->dtype(); }
  int32_t pos_begin() const { return cache_->pos_begin() + static_cast<int32_t>(token_begin_); }
  uint32_t n_tokens() const { return n_tokens_; }

  // Rows of this slice's tokens [token, token + n) (relative to the slice) in one layer.
  std::span<uint8_t> RowBytes(KvKind kind, uint32_t layer, uint32_t token, uint32_t n) const {
    return cache_->RowBytes(kind, layer, token_begin_ + token, n);
  }
  void WriteRowsF32(KvKind kind, uint32_t layer, uint32_t token, uint32_t n, const float* in) const {
    cache_->WriteRowsF32(kind, layer, token_begin_ + token, n, in);
  }
  KvView View() const { return KvView(cache_, token_begin_, n_tokens_); }

 private:
  KvCache* cache_ = nullptr;
  uint32_t token_begin_ = 0;
  uint32_t n_tokens_ = 0;
};

// Copies `from`'s rows into `to`, which must have its shape and dtype (the caller checked);
// positions are the caller's to mind.
void CopyKvInto(const KvView& from, const KvSlice& to);

}  // namespace kvc
