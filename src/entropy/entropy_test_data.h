// Synthetic inputs shaped like what the codecs hand the entropy stage, shared by the tests,
// the benchmark and the corpus generator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvc::testing {

// round(Laplace(0, b)), drawn as a two-sided geometric variable: the distribution of quantised
// transform coefficients. Fixed by the seed for a given standard library.
inline int DrawLaplacian(std::mt19937_64& rng, double b) {
  std::geometric_distribution<int> magnitude(1.0 - std::exp(-1.0 / b));
  const int m = magnitude(rng);
  return (rng() & 1) ? m : -m;
}

// Bytes 128 + round(Laplace(0, b)), clamped to 0..255. b = 1.5 gives about 3 bits a byte.
inline std::vector<uint8_t> LaplacianBytes(size_t n, double b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& v : out) v = static_cast<uint8_t>(std::clamp(128 + DrawLaplacian(rng, b), 0, 255));
  return out;
}

// 4-bit codes 8 + round(Laplace(0, b)) clamped to 0..15, two a byte, first in the low nibble:
// the packing of the quant codec's 4-bit codes.
inline std::vector<uint8_t> PackedNibbles(size_t n_bytes, double b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n_bytes);
  for (auto& v : out) {
    const int lo = std::clamp(8 + DrawLaplacian(rng, b), 0, 15);
    const int hi = std::clamp(8 + DrawLaplacian(rng, b), 0, 15);
    v = static_cast<uint8_t>(lo | hi << 4);
  }
  return out;
}

inline std::vector<uint8_t> UniformBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& v : out) v = static_cast<uint8_t>(rng());
  return out;
}

// Order-0 empirical entropy of `data`, in bytes: the floor an order-0 coder can reach.
inline double Order0EntropyBytes(std::span<const uint8_t> data) {
  uint64_t counts[256] = {};
  for (uint8_t b : data) ++counts[b];
  double bits = 0;
  for (uint64_t c : counts) {
    if (c != 0) bits -= static_cast<double>(c) * std::log2(static_cast<double>(c) / static_cast<double>(data.size()));
  }
  return bits / 8;
}

}  // namespace kvc::testing
