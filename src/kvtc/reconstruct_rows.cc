#include "kvtc/reconstruct_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kvtc/decode_scratch.h"

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

  const float* Component(uint32_t k) const { return components + size_t{coded != nullptr ? coded[k].component : k} * dim; }
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
bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

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
    for (uint32_t k = 0; k < terms.n_keep; ++k, out += 8) _mm256_storeu_ps(out, _mm256_loadu_ps(terms.Component(k) + d));
    d += 8;
  }
  return d;  // the columns from here on are left to the portable loop
}

// Rows [t, t + kRows)'s coefficients, [n_keep][kRows]; packed has room for 2 floats more.
template <int kRows>
__attribute__((target("avx2,fma"), always_inline)) inline void PackBand(const Terms& terms, size_t t, size_t n,
                                                                        float* packed) {
  if (terms.coded != nullptr) {  // dequantised here, with Terms::Coefficient's operations
    if constexpr (kRows == 6) {
      if (t + 8 <= n) {
        // 8 codes at a time (the 6 of this band and 2 more), stored 6 floats apart: each store's
        // last 2 lanes land where the next component's first 2 go, or in the padding.
        for (uint32_t k = 0; k < terms.n_keep; ++k, packed += kRows) {
          const CodedComponent& c = terms.coded[k];
          const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c.codes + t));
          const __m256 values = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes));
          _mm256_storeu_ps(packed, _mm256_mul_ps(_mm256_add_ps(values, _mm256_set1_ps(c.first)),
                                                 _mm256_set1_ps(c.step)));
        }
        return;
      }
    }
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

__attribute__((target("avx2,fma"))) void Avx2(const Terms& terms, size_t n, float* x, size_t x_stride) {
  // Reused per thread as the decoder's other buffers are: a basis's strips are up to dim * n_keep
  // floats (256 KiB at dim 256), which allocated per call would come from mmap and fault in
  // again every time.
  thread_local std::vector<float> strip_scratch, band_scratch;
  constexpr size_t kBand = 6;  // 6 rows x 2 vectors: 12 accumulators, 2 strip and 1 broadcast registers
  float* const strips = ScratchData(strip_scratch, terms.dim * terms.n_keep);
  float* const band = ScratchData(band_scratch, kBand * terms.n_keep + 2);
  const size_t vector_columns = PackStrips(terms, strips);
  for (size_t t = 0; t < n; t += kBand) {
    const size_t rows = std::min(kBand, n - t);
    float* const x_rows = x + t * x_stride;
    switch (rows) {
      case 6: RowBand<6>(terms, t, n, strips, vector_columns, band, x_rows, x_stride); break;
      case 5: RowBand<5>(terms, t, n, strips, vector_columns, band, x_rows, x_stride); break;
      case 4: RowBand<4>(terms, t, n, strips, vector_columns, band, x_rows, x_stride); break;
      case 3: RowBand<3>(terms, t, n, strips, vector_columns, band, x_rows, x_stride); break;
      case 2: RowBand<2>(terms, t, n, strips, vector_columns, band, x_rows, x_stride); break;
      default: RowBand<1>(terms, t, n, strips, vector_columns, band, x_rows, x_stride); break;
    }
    if (vector_columns < terms.dim) PortableBlock(terms, t, rows, vector_columns, x_rows, x_stride);
  }
  TrimScratch(strip_scratch);
}
#endif

void Run(const Terms& terms, size_t n, float* x, size_t x_stride, bool portable) {
  if (terms.n_keep == 0) {  // coeffs may be null: no offset is taken from it
    for (size_t t = 0; t < n; ++t) std::copy_n(terms.mean, terms.dim, x + t * x_stride);
    return;
  }
#if defined(__x86_64__)
  if (!portable && HasAvx2Fma()) {
    Avx2(terms, n, x, x_stride);
    return;
  }
#endif
  PortableBlock(terms, 0, n, 0, x, x_stride);
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

void ReconstructRowsPortable(const float* mean, const float* components, size_t dim, const float* coeffs,
                             CoeffLayout layout, size_t n, uint32_t n_keep, float* x, size_t x_stride) {
  Run(CoeffTerms(mean, components, dim, coeffs, layout, n_keep), n, x, x_stride, /*portable=*/true);
}

void ReconstructRows(const float* mean, const float* components, size_t dim, const float* coeffs, CoeffLayout layout,
                     size_t n, uint32_t n_keep, float* x, size_t x_stride) {
  Run(CoeffTerms(mean, components, dim, coeffs, layout, n_keep), n, x, x_stride, /*portable=*/false);
}

void ReconstructFromCodes(const float* mean, const float* components, size_t dim,
                          std::span<const CodedComponent> coded, size_t n, float* x, size_t x_stride) {
  Run(CodedTerms(mean, components, dim, coded), n, x, x_stride, /*portable=*/false);
}

void ReconstructFromCodesPortable(const float* mean, const float* components, size_t dim,
                                  std::span<const CodedComponent> coded, size_t n, float* x, size_t x_stride) {
  Run(CodedTerms(mean, components, dim, coded), n, x, x_stride, /*portable=*/true);
}

}  // namespace kvc
