// The decoder's inner product: rows rebuilt from a PCA basis's mean and components and their
// coefficients, x[t][d] = mean[d] + sum_{c < n_keep} coeff(t, c) * components[c][d].
//
// A dedicated kernel rather than sgemm: a 256-token chunk's product is small (a few hundred
// rows, dim 64-256, tens of components), and a BLAS call spends a large share of it packing
// both operands; this one reads the components and coefficients where they lie and keeps a
// tile of x in registers: 12 rows x 32 columns with AVX-512 where the CPU has it, 6 x 16 with
// AVX2 + FMA, a plain loop otherwise.
//
// Every element is mean[d] followed by one fused multiply-add per component in the order given
// (increasing c for ReconstructRows), on every path (vector tiles, edge tiles, the portable
// loop), so the result is the same bits on any x86-64 CPU and does not depend on the row count,
// the tile an element falls in or x's stride. Thread-safe (nothing shared but the read-only inputs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/vector_isa.h"

namespace kvc {

// Where coefficient (t, c) lies: coeffs[t * token_stride + c * component_stride].
struct CoeffLayout {
  size_t token_stride = 0;
  size_t component_stride = 0;
};

// x rows are x_stride floats apart (>= dim); only x[t][0 .. dim) is written. components is
// [n_keep][dim] row-major. n_keep may be 0 (every row becomes the mean). `isa` picks the path
// (tests and benchmarks compare them).
void ReconstructRows(const float* mean, const float* components, size_t dim, const float* coeffs, CoeffLayout layout,
                     size_t n, uint32_t n_keep, float* x, size_t x_stride, VectorIsa isa = VectorIsa::kAuto);

// A component whose coefficients arrive as codes: coefficient(t) = (codes[t] + first) * step,
// each fp32 operation rounded as written (the component quantiser's dequantisation).
struct CodedComponent {
  uint32_t component = 0;  // its row of `components`
  float first = 0, step = 0;
  const uint8_t* codes = nullptr;  // n codes, one per row
};

// ReconstructRows over the given components, in their order, with each coefficient
// dequantised where the kernel packs it: the same bits as dequantising them into a buffer and
// calling ReconstructRows on their rows, without the buffer's write and read. The component
// indices must be rows of `components`.
void ReconstructFromCodes(const float* mean, const float* components, size_t dim, std::span<const CodedComponent> coded,
                          size_t n, float* x, size_t x_stride, VectorIsa isa = VectorIsa::kAuto);

}  // namespace kvc
