#include "kv_arrays.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

namespace kvc::capi {

namespace {

struct Axis {
  const char* name;
  int64_t stride;   // elements, as the caller gave it
  uint32_t extent;  // values along it
};

// u64 arithmetic that reports overflow instead of wrapping: a description whose extent does not
// fit 64 bits is refused, never reduced modulo 2^64 into a small, wrong extent that passes.
bool MulAdd(uint64_t a, uint64_t b, uint64_t* acc) {
  uint64_t product;
  return !__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(*acc, product, acc);
}

}  // namespace

Result<ArrayLayout> CheckArray(const char* name, const kvc_kv_array& array, const KvShape& shape, size_t elem,
                               bool writing) {
  if ((array.data == nullptr) == (array.layers == nullptr)) {
    return InvalidArgument(FormatMessage(
        array.data == nullptr ? "%s has neither data nor layers: give one" : "%s has both data and layers: give one",
        name));
  }
  const bool one_buffer = array.data != nullptr;
  std::array<Axis, 4> axes = {{{"layer_stride", array.layer_stride, one_buffer ? shape.n_layers : 1u},
                               {"token_stride", array.token_stride, shape.n_tokens},
                               {"head_stride", array.head_stride, shape.n_kv_heads},
                               {"dim_stride", array.dim_stride, shape.head_dim}}};
  for (const Axis& a : axes) {
    if (a.stride < 0 && a.extent > 1) {
      return InvalidArgument(
          FormatMessage("%s.%s is %lld: strides must not be negative", name, a.name, static_cast<long long>(a.stride)));
    }
  }
  // The last element's offset, then the bytes up to its end: all of it must be lent.
  uint64_t last = 0;
  for (const Axis& a : axes) {
    if (a.extent > 1 && !MulAdd(a.extent - 1, static_cast<uint64_t>(a.stride), &last)) {
      return InvalidArgument(FormatMessage("%s's strides overflow 64 bits (%s %lld over %u values)", name, a.name,
                                           static_cast<long long>(a.stride), a.extent));
    }
  }
  uint64_t reach = elem;
  if (!MulAdd(last, elem, &reach)) return InvalidArgument(FormatMessage("%s's strides overflow 64 bits", name));
  if (reach > array.size) {
    return InvalidArgument(FormatMessage("%s's strides reach %llu bytes from %s, past its size of %zu bytes", name,
                                         static_cast<unsigned long long>(reach),
                                         one_buffer ? "data" : "a layer's start", array.size));
  }

  ArrayLayout out;
  // Within `size`, every product below fits: (extent - 1) * stride * elem <= reach <= size.
  const auto bytes = [&](const Axis& a) -> size_t { return a.extent > 1 ? static_cast<size_t>(a.stride) * elem : 0; };
  out.token = bytes(axes[1]);
  out.head = bytes(axes[2]);
  out.dim = bytes(axes[3]);
  out.layer_base.resize(shape.n_layers);
  const auto fits_address_space = [&](const void* p) {
    return reinterpret_cast<uintptr_t>(p) <= UINTPTR_MAX - array.size;
  };
  if (one_buffer) {
    if (!fits_address_space(array.data)) {
      return InvalidArgument(FormatMessage("%s.data + size runs past the end of the address space", name));
    }
    const size_t layer = bytes(axes[0]);
    for (uint32_t l = 0; l < shape.n_layers; ++l) out.layer_base[l] = static_cast<uint8_t*>(array.data) + l * layer;
  } else {
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      if (array.layers[l] == nullptr) return InvalidArgument(FormatMessage("%s.layers[%u] is NULL", name, l));
      if (!fits_address_space(array.layers[l])) {
        return InvalidArgument(FormatMessage("%s.layers[%u] + size runs past the end of the address space", name, l));
      }
      out.layer_base[l] = static_cast<uint8_t*>(array.layers[l]);
    }
  }

  if (writing) {
    // Injective: taking the axes by increasing stride, each must step past everything the axes
    // below it reach, so no two index tuples land on one element. Conservative (a few exotic
    // interleavings that do not collide are refused too), and exact for every layout a tensor
    // library makes.
    std::array<Axis, 4> sorted = axes;
    std::sort(sorted.begin(), sorted.end(), [](const Axis& a, const Axis& b) { return a.stride < b.stride; });
    uint64_t span = 1;  // elements the lower axes cover, from the first to past the last
    for (const Axis& a : sorted) {
      if (a.extent <= 1) continue;
      if (static_cast<uint64_t>(a.stride) < span) {
        return InvalidArgument(
            FormatMessage("%s.%s of %lld writes two values into one element (the smaller strides "
                          "already span %llu elements)",
                          name, a.name, static_cast<long long>(a.stride), static_cast<unsigned long long>(span)));
      }
      span += (a.extent - 1) * static_cast<uint64_t>(a.stride);  // <= last + 1: no overflow
    }
    if (!one_buffer) {
      std::vector<uintptr_t> starts(shape.n_layers);
      for (uint32_t l = 0; l < shape.n_layers; ++l) starts[l] = reinterpret_cast<uintptr_t>(out.layer_base[l]);
      std::sort(starts.begin(), starts.end());
      for (size_t i = 1; i < starts.size(); ++i) {
        if (starts[i] - starts[i - 1] < reach) {
          return InvalidArgument(FormatMessage(
              "%s.layers: two layers' buffers meet (%llu bytes apart, each reaches %llu)", name,
              static_cast<unsigned long long>(starts[i] - starts[i - 1]), static_cast<unsigned long long>(reach)));
        }
      }
    }
  }
  return out;
}

Status CheckDistinct(const ArrayLayout& k, const ArrayLayout& v) {
  for (size_t l = 0; l < k.layer_base.size() && l < v.layer_base.size(); ++l) {
    if (k.layer_base[l] == v.layer_base[l]) {
      return InvalidArgument(FormatMessage("k and v start at the same element in layer %zu: V would overwrite K", l));
    }
  }
  return Status::Ok();
}

namespace {

// Between a cache layer's rows ([token][head][channel], dense) and the caller's strided layer.
// `kElem` a constant, so each element moves as one load and one store.
template <size_t kElem, bool kIntoCache>
void CopyLayer(std::conditional_t<kIntoCache, uint8_t*, const uint8_t*> rows, uint8_t* base, const ArrayLayout& a,
               const KvShape& s) {
  const auto move = [](auto* cache_elem, uint8_t* caller_elem, size_t n) {
    if constexpr (kIntoCache) {
      std::memcpy(cache_elem, caller_elem, n);
    } else {
      std::memcpy(caller_elem, cache_elem, n);
    }
  };
  const size_t heads = s.n_kv_heads, dims = s.head_dim;
  if (a.dim == kElem || dims == 1) {  // channels contiguous: a head's row at a time
    for (uint32_t t = 0; t < s.n_tokens; ++t) {
      for (size_t h = 0; h < heads; ++h) {
        move(rows + ((size_t{t} * heads + h) * dims) * kElem, base + t * a.token + h * a.head, dims * kElem);
      }
    }
    return;
  }
  // Any other order (V transposed: tokens contiguous): tokens innermost, a tile of them at a
  // time, so the caller's side is walked along its small stride while the tile's rows stay in
  // cache.
  constexpr uint32_t kTile = 64;
  for (uint32_t t0 = 0; t0 < s.n_tokens; t0 += kTile) {
    const uint32_t t1 = std::min(s.n_tokens, t0 + kTile);
    for (size_t h = 0; h < heads; ++h) {
      for (size_t d = 0; d < dims; ++d) {
        uint8_t* caller = base + h * a.head + d * a.dim;
        for (uint32_t t = t0; t < t1; ++t) {
          move(rows + ((size_t{t} * heads + h) * dims + d) * kElem, caller + t * a.token, kElem);
        }
      }
    }
  }
}

}  // namespace

void CopyIntoCache(const ArrayLayout& from, KvKind kind, KvCache* cache) {
  const KvShape& s = cache->shape();
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    uint8_t* rows = cache->RowBytes(kind, l, 0, s.n_tokens).data();
    if (DTypeSize(cache->dtype()) == 2) {
      CopyLayer<2, true>(rows, from.layer_base[l], from, s);
    } else {
      CopyLayer<4, true>(rows, from.layer_base[l], from, s);
    }
  }
}

void CopyFromCache(const KvCache& cache, KvKind kind, const ArrayLayout& to) {
  const KvShape& s = cache.shape();
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    const uint8_t* rows = cache.RowBytes(kind, l, 0, s.n_tokens).data();
    if (DTypeSize(cache.dtype()) == 2) {
      CopyLayer<2, false>(rows, to.layer_base[l], to, s);
    } else {
      CopyLayer<4, false>(rows, to.layer_base[l], to, s);
    }
  }
}

}  // namespace kvc::capi
