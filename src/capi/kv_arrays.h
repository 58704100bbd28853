// K and V in the caller's memory (kvc_kv_array): checking a description against a shape, and
// copying between it and a KvCache. The descriptions come from outside the library, so every
// size is checked, overflow included, before any element is touched.
// Internal: not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "kvcodec/kvcodec.h"
#include "tensor/kv_cache.h"

namespace kvc::capi {

// A checked kvc_kv_array: each layer's first element, and the strides in bytes (0 along an axis
// of one value, where the caller's stride means nothing).
struct ArrayLayout {
  std::vector<uint8_t*> layer_base;
  size_t token = 0, head = 0, dim = 0;
};

// Checks `array` (named `name` in messages: "k", "v") as the description of one of K or V of
// `shape` in elements of `elem` bytes. `writing`: it is a destination, where no two values may
// share an element.
Result<ArrayLayout> CheckArray(const char* name, const kvc_kv_array& array, const KvShape& shape, size_t elem,
                               bool writing);

// `k` and `v`, both destinations, must not start at the same element in any layer (the one
// overlap of two arrays that is cheap to see, and the likely one: the same array given twice).
Status CheckDistinct(const ArrayLayout& k, const ArrayLayout& v);

// Copies one kind of the caller's arrays into `cache` (whose shape and dtype they were checked
// against), or the cache's into them.
void CopyIntoCache(const ArrayLayout& from, KvKind kind, KvCache* cache);
void CopyFromCache(const KvCache& cache, KvKind kind, const ArrayLayout& to);

}  // namespace kvc::capi
