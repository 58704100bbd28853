// The buffers the fetcher reads stored objects into, given back after each decode and reused.
// Where a page's first touch is dear — on a virtual machine every fault of a fresh 4 KiB page
// traps to the hypervisor (here ~13 µs a page: a 768 KiB raw chunk read into fresh memory took
// ~1 ms, into a reused buffer ~0.05 ms) — a fetch should write into memory already mapped, and
// the first request after a start should not be the one that maps it: Warm() maps them at start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace kvc {

class ReadBuffers {
 public:
  // Keeps at most `count` buffers, none of more than `max_bytes` (a larger one given back is freed).
  ReadBuffers(size_t count, size_t max_bytes) : count_(count), max_bytes_(max_bytes) { kept_.reserve(count); }

  // Adds buffers of `bytes` each (at most max_bytes), every page written, until `buffers` (at
  // most the count) are kept. Short only where the memory cannot be had.
  void Warm(size_t buffers, size_t bytes);
  // A kept buffer (the largest), or an empty one when none is kept.
  std::vector<uint8_t> Take();
  // Keeps `buffer` for a later Take if there is room and it is not too large; never throws.
  void Give(std::vector<uint8_t> buffer) noexcept;

  size_t kept() const;
  size_t kept_bytes() const;  // capacity of the kept buffers

 private:
  const size_t count_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::vector<std::vector<uint8_t>> kept_;
};

}  // namespace kvc
