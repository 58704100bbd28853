// splitmix64: a tiny generator whose sequence is the same on every platform and standard library
// (std's distributions are not), for what must be reproducible bit for bit: rotquant's signs,
// bootstrap resamples, test data that regenerates committed seeds.
#pragma once

#include <cstdint>

namespace kvc {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

}  // namespace kvc
