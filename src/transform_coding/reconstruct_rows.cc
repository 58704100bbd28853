#include "transform_coding/reconstruct_rows.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "transform_coding/decode_scratch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvc {
namespace {

// What every path reads: the terms' coefficients, from a float buffer or dequantised from codes.
struct Terms {
  const float* mean = nullptr;
  const float* components = nullptr;
  size_t dim = 0;
  uint32_t n_keep = 0;
  const float* coeffs = nullptr;  // with `layout`; null when the terms are `coded`
  CoeffLayout layout;
  const CodedComponent* coded = nullptr;

  const float* Component(uint32_t k) const {
    return components + size_t{coded != nullptr ? coded[k].component : k} * dim;
  }
  float Coefficient(size_t t, uint32_t k) const {
    if (coded != nullptr) return (static_cast<float>(coded[k].codes[t]) + coded[k].first) * coded[k].step;
    return coeffs[t * layout.token_stride + k * layout.component_stride];
  }
};

// Columns [d_begin, dim) of rows [t_begin, t_begin + n), one fused multiply-add at a time.
void PortableBlock(const Terms& terms, size_t t_begin, size_t n, size_t d_begin, float* x, size_t x_stride) {
  for (size_t t = t_begin; t < t_begin + n; ++t) {
    float* const row = x + (t - t_begin) * x_stride;
    for (size_t d = d_begin; d < terms.dim; ++d) {
      float acc = terms.mean[d];
      for (uint32_t k = 0; k < terms.n_keep; ++k) acc = std::fma(terms.Coefficient(t, k), terms.Component(k)[d], acc);
      row[d] = acc;
    }
  }
}

#if defined(__x86_64__)
// The components' columns in strips of 16 (then one of 8 where dim % 16 >= 8), each strip
// [n_keep][width] contiguous, and one row band's coefficients [n_keep][rows] contiguous: the
// tile below then reads both operands sequentially. Unpacked, the k-th row segments lie
// dim * 4 bytes apart (512 B at dim 128, 1 KiB for a 256-token band of coefficients), which
// maps them onto a few L1 sets and evicts them before their reuse.
// (By vector loads and stores: std::copy_n of 16 floats outside an AVX function became a
// memmove call per 64 bytes, ~3% of a kvtc decode.)
__attribute__((target("avx2,fma"))) size_t PackStrips(const Terms& terms, float* packed) {
  float* out = packed;
  size_t d = 0;
  for (; d + 16 <= terms.dim; d += 16) {
    for (uint32_t k = 0; k < terms.n_keep; ++k, out += 16) {
      const float* const from = terms.Component(k) + d;
      _mm256_storeu_ps(out, _mm256_loadu_ps(from));
      _mm256_storeu_ps(out + 8, _mm256_loadu_ps(from + 8));
    }
  }
  if (d + 8 <= terms.dim) {
    for (uint32_t k = 0; k < terms.n_keep; ++k, out += 8)
      _mm256_storeu_ps(out, _mm256_loadu_ps(terms.Component(k) + d));
    d += 8;
  }
  return d;  // the columns from here on are left to the portable loop
}

// Rows [t, t + kRows)'s coefficients, [n_keep][kRows], one at a time (the vector paths' edges).
template <int kRows>
inline void PackBandScalar(const Terms& terms, size_t t, float* packed) {
  if (terms.coded != nullptr) {
    for (uint32_t k = 0; k < terms.n_keep; ++k) {
      for (int r = 0; r < kRows; ++r) *packed++ = terms.Coefficient(t + r, k);
    }
    return;
  }
  const CoeffLayout layout = terms.layout;
  const float* const coeffs = terms.coeffs + t * layout.token_stride;
  if (layout.token_stride == 1) {  // component-major: a copy per component
    for (uint32_t k = 0; k < terms.n_keep; ++k, packed += kRows) {
      std::memcpy(packed, coeffs + k * layout.component_stride, sizeof(float) * kRows);
    }
    return;
  }
  for (uint32_t k = 0; k < terms.n_keep; ++k) {
    const float* const c = coeffs + k * layout.component_stride;
    for (int r = 0; r < kRows; ++r) *packed++ = c[r * layout.token_stride];
  }
}

// Rows [t, t + kRows)'s coefficients, [n_keep][kRows]; packed has room for 2 floats more.
template <int kRows>
__attribute__((target("avx2,fma"), always_inline)) inline void PackBand(const Terms& terms, size_t t, size_t n,
                                                                        float* packed) {
  if constexpr (kRows == 6) {
    if (terms.coded != nullptr && t + 8 <= n) {
      // Dequantised with Terms::Coefficient's operations, 8 codes at a time (the 6 of this band
      // and 2 more), stored 6 floats apart: each store's last 2 lanes land where the next
      // component's first 2 go, or in the padding.
      for (uint32_t k = 0; k < terms.n_keep; ++k, packed += kRows) {
        const CodedComponent& c = terms.coded[k];
        const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c.codes + t));
        const __m256 values = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes));
        _mm256_storeu_ps(packed, _mm256_mul_ps(_mm256_add_ps(values, _mm256_set1_ps(c.first)), _mm256_set1_ps(c.step)));
      }
      return;
    }
  }
  PackBandScalar<kRows>(terms, t, packed);
}

// A kRows x (8 * kVecs) tile of x held in registers through every component: per component,
// kVecs loads of the strip and kRows broadcasts of the band. mean and x point at the tile's
// first column.
template <int kRows, int kVecs>
__attribute__((target("avx2,fma"), always_inline)) inline void Tile(const float* mean, const float* strip,
                                                                    const float* band, uint32_t n_keep, float* x,
                                                                    size_t x_stride) {
  __m256 acc[kRows][kVecs];
  // Unrolled fully (the pragmas): left as loops at -O2, the accumulators live in memory.
#pragma GCC unroll 2
  for (int v = 0; v < kVecs; ++v) {
    const __m256 m = _mm256_loadu_ps(mean + 8 * v);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) acc[r][v] = m;
  }
  // Unrolled by 4 as well: at the 30-50 components a basis keeps at level 16, the loop's own
  // overhead left the FMA units idle ~15% of the time.
#pragma GCC unroll 4
  for (uint32_t k = 0; k < n_keep; ++k, strip += 8 * kVecs, band += kRows) {
    __m256 b[kVecs];
#pragma GCC unroll 2
    for (int v = 0; v < kVecs; ++v) b[v] = _mm256_loadu_ps(strip + 8 * v);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256 a = _mm256_broadcast_ss(band + r);
#pragma GCC unroll 2
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(x + r * x_stride + 8 * v, acc[r][v]);
  }
}

// One band of kRows rows from row t (of n): its coefficients packed, then its vector columns
// [0, vector_columns).
template <int kRows>
__attribute__((target("avx2,fma"))) void RowBand(const Terms& terms, size_t t, size_t n, const float* strips,
                                                 size_t vector_columns, float* band, float* x, size_t x_stride) {
  PackBand<kRows>(terms, t, n, band);
  const uint32_t n_keep = terms.n_keep;
  size_t d = 0;
  for (; d + 16 <= vector_columns; d += 16, strips += size_t{16} * n_keep) {
    Tile<kRows, 2>(terms.mean + d, strips, band, n_keep, x + d, x_stride);
  }
  if (d < vector_columns) Tile<kRows, 1>(terms.mean + d, strips, band, n_keep, x + d, x_stride);
}

// RowBand<1> .. RowBand<kRows>, indexed by the band's rows minus 1.
template <size_t... kRowsMinus1>
constexpr auto RowBands(std::index_sequence<kRowsMinus1...>) {
  return std::array{&RowBand<static_cast<int>(kRowsMinus1) + 1>...};
}

__attribute__((target("avx2,fma"))) void Avx2(const Terms& terms, size_t n, float* x, size_t x_stride) {
  // Reused per thread as the decoder's other buffers are: a basis's strips are up to dim * n_keep
  // floats (256 KiB at dim 256), which allocated per call would come from mmap and fault in
  // again every time.
  thread_local std::vector<float> strip_scratch, band_scratch;
  constexpr size_t kBand = 6;  // 6 rows x 2 vectors: 12 accumulators, 2 strip and 1 broadcast registers
  static constexpr auto kRowBands = RowBands(std::make_index_sequence<kBand>());
  float* const strips = ScratchData(strip_scratch, terms.dim * terms.n_keep);
  float* const band = ScratchData(band_scratch, kBand * terms.n_keep + 2);
  const size_t vector_columns = PackStrips(terms, strips);
  for (size_t t = 0; t < n; t += kBand) {
    const size_t rows = std::min(kBand, n - t);
    float* const x_rows = x + t * x_stride;
    kRowBands[rows - 1](terms, t, n, strips, vector_columns, band, x_rows, x_stride);
    if (vector_columns < terms.dim) PortableBlock(terms, t, rows, vector_columns, x_rows, x_stride);
  }
  TrimScratch(strip_scratch);
}

// The same product with 512-bit vectors: a 12-row x 32-column tile (24 accumulators of the 32
// registers), and the columns past the last multiple of 16 done by masked loads and stores
// rather than the portable loop, so no column is left to a scalar loop.
// (GCC 12's avx512fintrin.h warns about its own _mm512_undefined_* in the intrinsics.)
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC warning group clang does not know
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

constexpr size_t kBand512 = 12;

// The lanes of the 16 columns from d on that lie within dim.
__mmask16 ColumnMask(size_t dim, size_t d) {
  return static_cast<__mmask16>(dim - d >= 16 ? 0xffff : (1u << (dim - d)) - 1);
}

// Strips of 32 columns, then one of 16, then one of the last dim % 16 columns zero-padded to 16.
__attribute__((target("avx512f"))) void PackStrips512(const Terms& terms, float* packed) {
  float* out = packed;
  size_t d = 0;
  for (; d + 32 <= terms.dim; d += 32) {
    for (uint32_t k = 0; k < terms.n_keep; ++k, out += 32) {
      const float* const from = terms.Component(k) + d;
      _mm512_storeu_ps(out, _mm512_loadu_ps(from));
      _mm512_storeu_ps(out + 16, _mm512_loadu_ps(from + 16));
    }
  }
  for (; d < terms.dim; d += 16) {
    const __mmask16 mask = ColumnMask(terms.dim, d);
    for (uint32_t k = 0; k < terms.n_keep; ++k, out += 16) {
      _mm512_storeu_ps(out, _mm512_maskz_loadu_ps(mask, terms.Component(k) + d));
    }
  }
}

// Rows [t, t + kRows)'s coefficients, [n_keep][kRows]; packed has room for 4 floats more.
template <int kRows>
__attribute__((target("avx512f"), always_inline)) inline void PackBand512(const Terms& terms, size_t t, size_t n,
                                                                          float* packed) {
  if constexpr (kRows == kBand512) {
    if (terms.coded != nullptr && t + 16 <= n) {  // as PackBand: 16 codes per store, 12 apart
      for (uint32_t k = 0; k < terms.n_keep; ++k, packed += kRows) {
        const CodedComponent& c = terms.coded[k];
        const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c.codes + t));
        const __m512 values = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes));
        _mm512_storeu_ps(packed, _mm512_mul_ps(_mm512_add_ps(values, _mm512_set1_ps(c.first)), _mm512_set1_ps(c.step)));
      }
      return;
    }
  }
  PackBandScalar<kRows>(terms, t, packed);
}

// A kRows x (16 * kVecs) tile; the last vector's columns are `last` (all 16 but at the edge).
// Tile's loop again, not a template over both: a function's target set cannot depend on a
// template argument, and AVX2 code built with AVX-512 enabled may use registers AVX2 CPUs lack.
template <int kRows, int kVecs>
__attribute__((target("avx512f"), always_inline)) inline void Tile512(const float* mean, const float* strip,
                                                                      const float* band, uint32_t n_keep,
                                                                      __mmask16 last, float* x, size_t x_stride) {
  __m512 acc[kRows][kVecs];
#pragma GCC unroll 2
  for (int v = 0; v < kVecs; ++v) {
    const __m512 m = _mm512_maskz_loadu_ps(v + 1 == kVecs ? last : __mmask16{0xffff}, mean + 16 * v);
#pragma GCC unroll 12
    for (int r = 0; r < kRows; ++r) acc[r][v] = m;
  }
#pragma GCC unroll 2
  for (uint32_t k = 0; k < n_keep; ++k, strip += 16 * kVecs, band += kRows) {
    __m512 b[kVecs];
#pragma GCC unroll 2
    for (int v = 0; v < kVecs; ++v) b[v] = _mm512_loadu_ps(strip + 16 * v);
#pragma GCC unroll 12
    for (int r = 0; r < kRows; ++r) {
      const __m512 a = _mm512_set1_ps(band[r]);
#pragma GCC unroll 2
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < kVecs; ++v) {
      _mm512_mask_storeu_ps(x + r * x_stride + 16 * v, v + 1 == kVecs ? last : __mmask16{0xffff}, acc[r][v]);
    }
  }
}

template <int kRows>
__attribute__((target("avx512f"))) void RowBand512(const Terms& terms, size_t t, size_t n, const float* strips,
                                                   float* band, float* x, size_t x_stride) {
  PackBand512<kRows>(terms, t, n, band);
  const uint32_t n_keep = terms.n_keep;
  size_t d = 0;
  for (; d + 32 <= terms.dim; d += 32, strips += size_t{32} * n_keep) {
    Tile512<kRows, 2>(terms.mean + d, strips, band, n_keep, 0xffff, x + d, x_stride);
  }
  for (; d < terms.dim; d += 16, strips += size_t{16} * n_keep) {
    Tile512<kRows, 1>(terms.mean + d, strips, band, n_keep, ColumnMask(terms.dim, d), x + d, x_stride);
  }
}

template <size_t... kRowsMinus1>
constexpr auto RowBands512(std::index_sequence<kRowsMinus1...>) {
  return std::array{&RowBand512<static_cast<int>(kRowsMinus1) + 1>...};
}

__attribute__((target("avx512f"))) void Avx512(const Terms& terms, size_t n, float* x, size_t x_stride) {
  thread_local std::vector<float> strip_scratch, band_scratch;  // as in Avx2
  static constexpr auto kRowBands = RowBands512(std::make_index_sequence<kBand512>());
  float* const strips = ScratchData(strip_scratch, (terms.dim + 15) / 16 * 16 * terms.n_keep);
  float* const band = ScratchData(band_scratch, kBand512 * terms.n_keep + 4);
  PackStrips512(terms, strips);
  for (size_t t = 0; t < n; t += kBand512) {
    const size_t rows = std::min(kBand512, n - t);
    kRowBands[rows - 1](terms, t, n, strips, band, x + t * x_stride, x_stride);
  }
  TrimScratch(strip_scratch);
}
#pragma GCC diagnostic pop
#endif

void Run(const Terms& terms, size_t n, float* x, size_t x_stride, VectorIsa isa) {
  if (terms.n_keep == 0) {  // coeffs may be null: no offset is taken from it
    for (size_t t = 0; t < n; ++t) std::copy_n(terms.mean, terms.dim, x + t * x_stride);
    return;
  }
  switch (ResolveVectorIsa(isa)) {
#if defined(__x86_64__)
    case VectorIsa::kAvx512:
      Avx512(terms, n, x, x_stride);
      return;
    case VectorIsa::kAvx2:
      Avx2(terms, n, x, x_stride);
      return;
#endif
    default:
      PortableBlock(terms, 0, n, 0, x, x_stride);
      return;
  }
}

Terms CoeffTerms(const float* mean, const float* components, size_t dim, const float* coeffs, CoeffLayout layout,
                 uint32_t n_keep) {
  return {.mean = mean, .components = components, .dim = dim, .n_keep = n_keep, .coeffs = coeffs, .layout = layout};
}

Terms CodedTerms(const float* mean, const float* components, size_t dim, std::span<const CodedComponent> coded) {
  return {.mean = mean,
          .components = components,
          .dim = dim,
          .n_keep = static_cast<uint32_t>(coded.size()),
          .coded = coded.data()};
}

}  // namespace

void ReconstructRows(const float* mean, const float* components, size_t dim, const float* coeffs, CoeffLayout layout,
                     size_t n, uint32_t n_keep, float* x, size_t x_stride, VectorIsa isa) {
  Run(CoeffTerms(mean, components, dim, coeffs, layout, n_keep), n, x, x_stride, isa);
}

void ReconstructFromCodes(const float* mean, const float* components, size_t dim, std::span<const CodedComponent> coded,
                          size_t n, float* x, size_t x_stride, VectorIsa isa) {
  Run(CodedTerms(mean, components, dim, coded), n, x, x_stride, isa);
}

}  // namespace kvc
