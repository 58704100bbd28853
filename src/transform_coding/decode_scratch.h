// Working memory the kvtc decoder keeps from one call to the next on the same thread.
//
// A 256-token chunk needs a few hundred KiB of codes, coefficients and fp32 rows. Allocated and
// freed per call, blocks that size come from mmap (or a heap top that free trims), so every
// call page-faults its buffers in again and the kernel zeroes each page: a third of the decode
// time on kvtiny. Reused per thread, the pages stay mapped and mostly in cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transform_coding/reconstruct_rows.h"

namespace kvc {

struct KvtcDecodeScratch {
  // Each decode task (one kind and layer) fills `rows` and `coeffs`; the calling thread alone
  // holds `codes` and `scales`, which tasks only read, so a caller that also runs tasks (a
  // serial decode, or a pool that uses it) never resizes what a task is reading.
  std::vector<float> rows;            // one kind and layer's fp32 rows
  std::vector<float> coeffs;          // one basis's dequantised coefficients (token-group quantiser)
  std::vector<CodedComponent> coded;  // one basis's components as codes (component quantiser)
  std::vector<uint8_t> codes;         // every code of the chunk
  std::vector<uint16_t> scales;       // every scale of the chunk
};

// This thread's scratch.
KvtcDecodeScratch& ThreadDecodeScratch();

// v's storage for at least n elements. Grows v but never shrinks it, so reuse zero-fills
// nothing; the contents are whatever the last use left.
template <typename T>
T* ScratchData(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Frees v's storage if it exceeds what a thread keeps between calls (a few MiB: one chunk of a
// large model), so that an occasional very long file does not pin its memory in every thread.
template <typename T>
void TrimScratch(std::vector<T>& v) {
  constexpr size_t kMaxKeptBytes = size_t{8} << 20;
  if (v.capacity() * sizeof(T) > kMaxKeptBytes) std::vector<T>().swap(v);
}

// Trims a thread's buffers when it goes out of scope, on every return path: a decode task's
// (rows, coeffs), and with `chunk_buffers` the calling thread's too (codes, scales), which it
// holds for the tasks: constructed before any task starts, it trims after every task is done.
class ScratchTrim {
 public:
  ScratchTrim(KvtcDecodeScratch& s, bool chunk_buffers) : s_(s), chunk_buffers_(chunk_buffers) {}
  ~ScratchTrim() {
    TrimScratch(s_.rows);
    TrimScratch(s_.coeffs);
    if (chunk_buffers_) {
      TrimScratch(s_.codes);
      TrimScratch(s_.scales);
    }
  }
  ScratchTrim(const ScratchTrim&) = delete;
  ScratchTrim& operator=(const ScratchTrim&) = delete;

 private:
  KvtcDecodeScratch& s_;
  bool chunk_buffers_;
};

}  // namespace kvc
