#include "tensor/kv_cache.h"

#include <cstring>

#include "base/half.h"

namespace kvc {

size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "fp32") return DType::kF32;
  if (name == "f16" || name == "fp16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  return InvalidArgument("unknown dtype '" + std::string(name) + "' (expected f32, f16 or bf16)");
}

bool IsValidDType(uint8_t value) { return value <= static_cast<uint8_t>(DType::kBF16); }

const char* KvKindName(KvKind kind) { return kind == KvKind::kKey ? "K" : "V"; }

Status ValidateShape(const KvShape& s, DType dtype) {
  if (s.n_layers == 0 || s.n_layers > kMaxLayers)
    return InvalidArgument(FormatMessage("n_layers %u outside 1..%u", s.n_layers, kMaxLayers));
  if (s.n_kv_heads == 0 || s.n_kv_heads > kMaxKvHeads)
    return InvalidArgument(FormatMessage("n_kv_heads %u outside 1..%u", s.n_kv_heads, kMaxKvHeads));
  if (s.head_dim == 0 || s.head_dim > kMaxHeadDim)
    return InvalidArgument(FormatMessage("head_dim %u outside 1..%u", s.head_dim, kMaxHeadDim));
  if (s.n_tokens > kMaxTokens) return InvalidArgument(FormatMessage("n_tokens %u exceeds %u", s.n_tokens, kMaxTokens));
  // Each factor is bounded above, so the product cannot overflow 64 bits.
  const uint64_t bytes = uint64_t{s.n_kinds()} * s.n_layers * s.n_kv_heads * s.head_dim * s.n_tokens * DTypeSize(dtype);
  if (bytes > kMaxKvBytes)
    return InvalidArgument(FormatMessage("KV cache of %llu bytes exceeds the %llu-byte limit",
                                         static_cast<unsigned long long>(bytes),
                                         static_cast<unsigned long long>(kMaxKvBytes)));
  return Status::Ok();
}

Result<KvCache> KvCache::Allocate(const KvShape& shape, DType dtype, int32_t pos_begin, bool zero) {
  if (!IsValidDType(static_cast<uint8_t>(dtype))) return InvalidArgument("invalid dtype");
  RETURN_IF_ERROR(ValidateShape(shape, dtype));
  KvCache cache;
  cache.shape_ = shape;
  cache.dtype_ = dtype;
  cache.pos_begin_ = pos_begin;
  const size_t bytes = shape.elems() * DTypeSize(dtype);
  const size_t v_bytes = shape.keys_only ? 0 : bytes;
  if (zero) {
    cache.k_.assign(bytes, 0);
    cache.v_.assign(v_bytes, 0);
  } else {
    cache.k_.resize(bytes);
    cache.v_.resize(v_bytes);
  }
  return cache;
}

Result<KvCache> KvCache::Create(const KvShape& shape, DType dtype, int32_t pos_begin) {
  return Allocate(shape, dtype, pos_begin, true);
}

Result<KvCache> KvCache::CreateForOverwrite(const KvShape& shape, DType dtype, int32_t pos_begin) {
  return Allocate(shape, dtype, pos_begin, false);
}

std::span<uint8_t> KvCache::RowBytes(KvKind kind, uint32_t layer, uint32_t token, uint32_t n_tokens) {
  const size_t row = shape_.row_elems() * DTypeSize(dtype_);
  const size_t offset = (size_t{layer} * shape_.n_tokens + token) * row;
  return Bytes(kind).subspan(offset, size_t{n_tokens} * row);
}

std::span<const uint8_t> KvCache::RowBytes(KvKind kind, uint32_t layer, uint32_t token, uint32_t n_tokens) const {
  const size_t row = shape_.row_elems() * DTypeSize(dtype_);
  const size_t offset = (size_t{layer} * shape_.n_tokens + token) * row;
  return Bytes(kind).subspan(offset, size_t{n_tokens} * row);
}

void BytesToF32(DType dtype, const uint8_t* bytes, size_t n, float* out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, bytes, n * 4);
      break;
    case DType::kF16:
      Fp16ToFp32(reinterpret_cast<const uint16_t*>(bytes), out, n);
      break;
    case DType::kBF16:
      Bf16ToFp32(reinterpret_cast<const uint16_t*>(bytes), out, n);
      break;
  }
}

void KvCache::ReadRowsF32(KvKind kind, uint32_t layer, uint32_t token, uint32_t n_tokens, float* out) const {
  const auto bytes = RowBytes(kind, layer, token, n_tokens);
  const size_t n = size_t{n_tokens} * shape_.row_elems();
  if (n == 0) return;  // empty spans may hold null pointers, which memcpy must not see
  BytesToF32(dtype_, bytes.data(), n, out);
}

void KvCache::WriteRowsF32(KvKind kind, uint32_t layer, uint32_t token, uint32_t n_tokens, const float* in) {
  const auto bytes = RowBytes(kind, layer, token, n_tokens);
  const size_t n = size_t{n_tokens} * shape_.row_elems();
  if (n == 0) return;
  switch (dtype_) {
    case DType::kF32:
      std::memcpy(bytes.data(), in, n * 4);
      break;
    case DType::kF16:
      Fp32ToFp16(in, reinterpret_cast<uint16_t*>(bytes.data()), n);
      break;
    case DType::kBF16:
      Fp32ToBf16(in, reinterpret_cast<uint16_t*>(bytes.data()), n);
      break;
  }
}

KvView KvCache::View() const { return KvView(this, 0, shape_.n_tokens); }

namespace {
Status CheckTokenRange(uint32_t token_begin, uint32_t n_tokens, uint32_t cache_tokens) {
  if (token_begin > cache_tokens || n_tokens > cache_tokens - token_begin) {
    return InvalidArgument(FormatMessage("token range [%u, %u) outside the cache's %u tokens", token_begin,
                                         token_begin + n_tokens, cache_tokens));
  }
  return Status::Ok();
}
}  // namespace

Result<KvView> KvCache::View(uint32_t token_begin, uint32_t n_tokens) const {
  RETURN_IF_ERROR(CheckTokenRange(token_begin, n_tokens, shape_.n_tokens));
  return KvView(this, token_begin, n_tokens);
}

KvSlice KvCache::Slice() { return KvSlice(this, 0, shape_.n_tokens); }

Result<KvSlice> KvCache::Slice(uint32_t token_begin, uint32_t n_tokens) {
  RETURN_IF_ERROR(CheckTokenRange(token_begin, n_tokens, shape_.n_tokens));
  return KvSlice(this, token_begin, n_tokens);
}

Result<KvCache> KvCache::ConvertTo(DType dtype) const {
  if (dtype == dtype_) return *this;
  ASSIGN_OR_RETURN(KvCache out, Create(shape_, dtype, pos_begin_));
  std::vector<float> buf(shape_.layer_elems());
  for (KvKind kind : shape_.kinds()) {
    for (uint32_t l = 0; l < shape_.n_layers; ++l) {
      ReadRowsF32(kind, l, 0, shape_.n_tokens, buf.data());
      out.WriteRowsF32(kind, l, 0, shape_.n_tokens, buf.data());
    }
  }
  return out;
}

bool KvCache::operator==(const KvCache& other) const {
  return shape_ == other.shape_ && dtype_ == other.dtype_ && pos_begin_ == other.pos_begin_ && k_ == other.k_ &&
         v_ == other.v_;
}

Result<KvView> KvView::Over(const KvShape& shape, DType dtype, int32_t pos_begin, std::span<const uint8_t> k,
                            std::span<const uint8_t> v) {
  RETURN_IF_ERROR(ValidateShape(shape, dtype));
  const size_t bytes = shape.elems() * DTypeSize(dtype);
  const size_t v_bytes = shape.keys_only ? 0 : bytes;
  if (k.size() != bytes || v.size() != v_bytes) {
    return InvalidArgument(FormatMessage("K and V of this shape hold %zu and %zu bytes, not %zu and %zu", bytes,
                                         v_bytes, k.size(), v.size()));
  }
  KvView view;
  view.outside_ = Outside{shape, dtype, pos_begin, k.data(), v.data()};
  view.n_tokens_ = shape.n_tokens;
  return view;
}

std::span<const uint8_t> KvView::OutsideRowBytes(KvKind kind, uint32_t layer, uint32_t token, uint32_t n) const {
  const size_t row = outside_.shape.row_elems() * DTypeSize(outside_.dtype);
  const size_t offset = (size_t{layer} * outside_.shape.n_tokens + token) * row;
  const uint8_t* base = kind == KvKind::kKey ? outside_.k : outside_.v;
  return {base + offset, size_t{n} * row};
}

KvShape KvView::shape() const {
  KvShape s = cache_ ? cache_->shape() : outside_.shape;
  s.n_tokens = n_tokens_;
  return s;
}

KvShape KvSlice::shape() const {
  KvShape s = cache_->shape();
  s.n_tokens = n_tokens_;
  return s;
}

Result<KvView> KvView::View(uint32_t token_begin, uint32_t n_tokens) const {
  RETURN_IF_ERROR(CheckTokenRange(token_begin, n_tokens, n_tokens_));
  KvView out = *this;
  out.token_begin_ = token_begin_ + token_begin;
  out.n_tokens_ = n_tokens;
  return out;
}

Result<KvCache> KvView::Copy() const {
  ASSIGN_OR_RETURN(KvCache out, KvCache::CreateForOverwrite(shape(), dtype(), pos_begin()));  // every row copied below
  CopyKvInto(*this, out.Slice());
  return out;
}

void CopyKvInto(const KvView& from, const KvSlice& to) {
  for (KvKind kind : to.shape().kinds()) {
    for (uint32_t l = 0; l < to.shape().n_layers; ++l) {
      const auto src = from.LayerBytes(kind, l);
      if (!src.empty()) std::memcpy(to.RowBytes(kind, l, 0, to.n_tokens()).data(), src.data(), src.size());
    }
  }
}

}  // namespace kvc
