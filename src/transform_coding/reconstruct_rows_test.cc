#include "transform_coding/reconstruct_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kvc {
namespace {

constexpr float kUntouched = -7.0f;

struct Problem {
  size_t dim;
  size_t n;
  uint32_t n_keep;
  std::vector<float> mean, components, coeffs;  // coeffs component-major: [n_keep][n]

  Problem(size_t dim_in, size_t n_in, uint32_t keep, uint32_t seed) : dim(dim_in), n(n_in), n_keep(keep) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    mean.resize(dim);
    components.resize(keep * dim);
    coeffs.resize(keep * n);
    for (float& v : mean) v = 3.0f * normal(rng);
    for (float& v : components) v = normal(rng) / std::sqrt(static_cast<float>(dim));
    for (float& v : coeffs) v = 10.0f * normal(rng);
  }
  std::vector<float> TokenMajor() const {
    std::vector<float> out(coeffs.size());
    for (size_t t = 0; t < n; ++t)
      for (uint32_t c = 0; c < n_keep; ++c) out[t * n_keep + c] = coeffs[c * n + t];
    return out;
  }
  double Reference(size_t t, size_t d) const {
    double sum = mean[d];
    for (uint32_t c = 0; c < n_keep; ++c) sum += double{coeffs[c * n + t]} * components[c * dim + d];
    return sum;
  }
  // Rows `stride` apart, `offset` into each.
  std::vector<float> Run(size_t stride, size_t offset, VectorIsa isa = VectorIsa::kAuto) const {
    std::vector<float> x(n * stride, kUntouched);
    ReconstructRows(mean.data(), components.data(), dim, coeffs.data(), {.token_stride = 1, .component_stride = n}, n,
                    n_keep, x.data() + offset, stride, isa);
    return x;
  }
};

// Row counts and widths that reach every tile shape of every kernel: full 6- and 12-row bands
// and each tail of 1-11 rows, with and without 8 or 16 rows of codes past the band; 32-, 16-
// and 8-wide columns, masked and element-wise ones.
const size_t kDims[] = {1, 7, 8, 16, 24, 48, 64, 100, 128, 136};
const size_t kRowCounts[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 17, 23, 24, 25, 29, 256};

// The vector paths this CPU runs, each to be compared with the portable loop.
std::vector<VectorIsa> VectorPaths() {
  std::vector<VectorIsa> out = SupportedVectorIsas();
  out.erase(out.begin());  // kPortable
  ::testing::Test::RecordProperty("widest_path", VectorIsaName(BestVectorIsa()));
  return out;
}

TEST(ReconstructRows, MatchesADoublePrecisionReference) {
  for (const size_t dim : kDims) {
    for (const size_t n : kRowCounts) {
      const Problem p(dim, n, 19, static_cast<uint32_t>(dim * 1000 + n));
      const std::vector<float> x = p.Run(dim, 0);
      for (size_t t = 0; t < n; ++t) {
        for (size_t d = 0; d < dim; ++d) {
          const double want = p.Reference(t, d);
          ASSERT_NEAR(x[t * dim + d], want, 1e-4 * (1 + std::abs(want))) << dim << " " << n << " " << t << "," << d;
        }
      }
    }
  }
}

TEST(ReconstructRows, EveryVectorPathAndThePortableLoopGiveTheSameBits) {
  const std::vector<VectorIsa> paths = VectorPaths();
  for (const size_t dim : kDims) {
    for (const size_t n : kRowCounts) {
      const Problem p(dim, n, 23, static_cast<uint32_t>(dim * 7 + n));
      const std::vector<float> portable = p.Run(dim, 0, VectorIsa::kPortable);
      for (const VectorIsa k : paths) {
        const std::vector<float> fast = p.Run(dim, 0, k);
        ASSERT_EQ(std::memcmp(fast.data(), portable.data(), fast.size() * sizeof(float)), 0)
            << VectorIsaName(k) << " " << dim << " " << n;
      }
    }
  }
}

TEST(ReconstructRows, WritesOnlyItsColumnsOfAWiderRowWithTheSameBits) {
  const Problem p(40, 29, 12, 5);
  constexpr size_t kStride = 57, kOffset = 9;
  for (const VectorIsa k : SupportedVectorIsas()) {
    const std::vector<float> tight = p.Run(40, 0, k);
    const std::vector<float> wide = p.Run(kStride, kOffset, k);
    for (size_t t = 0; t < p.n; ++t) {
      for (size_t j = 0; j < kStride; ++j) {
        const float got = wide[t * kStride + j];
        if (j < kOffset || j >= kOffset + p.dim) {
          ASSERT_EQ(got, kUntouched) << VectorIsaName(k) << " wrote outside its columns at " << t << "," << j;
        } else {
          ASSERT_EQ(got, tight[t * p.dim + j - kOffset]) << VectorIsaName(k) << " " << t << "," << j;
        }
      }
    }
  }
}

TEST(ReconstructRows, ARowHasTheSameBitsWhateverTileItFallsIn) {
  // Row t of a 256-row call against the same row decoded alone: the tile (a band or a tail)
  // must not change its bits.
  const Problem p(72, 256, 31, 9);
  const std::vector<float> all = p.Run(p.dim, 0);
  for (const size_t t : {size_t{0}, size_t{5}, size_t{100}, size_t{253}, size_t{255}}) {
    std::vector<float> one(p.dim, kUntouched);
    ReconstructRows(p.mean.data(), p.components.data(), p.dim, p.coeffs.data() + t,
                    {.token_stride = 1, .component_stride = p.n}, 1, p.n_keep, one.data(), p.dim);
    ASSERT_EQ(std::memcmp(one.data(), all.data() + t * p.dim, p.dim * sizeof(float)), 0) << t;
  }
}

TEST(ReconstructRows, TokenMajorCoefficientsGiveTheSameBits) {
  const Problem p(64, 50, 17, 11);
  const std::vector<float> by_component = p.Run(p.dim, 0);
  const std::vector<float> token_major = p.TokenMajor();
  std::vector<float> by_token(p.n * p.dim, kUntouched);
  ReconstructRows(p.mean.data(), p.components.data(), p.dim, token_major.data(),
                  {.token_stride = p.n_keep, .component_stride = 1}, p.n, p.n_keep, by_token.data(), p.dim);
  EXPECT_EQ(std::memcmp(by_token.data(), by_component.data(), by_token.size() * sizeof(float)), 0);
}

TEST(ReconstructRows, NoComponentsGiveTheMeanWithoutReadingCoefficients) {
  const Problem p(20, 9, 0, 13);
  std::vector<float> x(p.n * p.dim, kUntouched);
  ReconstructRows(p.mean.data(), p.components.data(), p.dim, nullptr, {.token_stride = 1, .component_stride = p.n}, p.n,
                  0, x.data(), p.dim);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], p.mean[i % p.dim]) << i;
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// Codes for components 0, 2, 3, ... of a basis (component 1 skipped, as a 0-bit one is), with
// the widths and steps of a component quantiser.
struct CodedProblem {
  Problem basis;
  std::vector<std::vector<uint8_t>> codes;
  std::vector<CodedComponent> coded;
  std::vector<float> coeffs;        // their dequantised values, [j][n]
  std::vector<float> compact_rows;  // their rows of the basis, [j][dim]

  CodedProblem(size_t dim, size_t n, uint32_t keep, uint32_t seed) : basis(dim, n, keep, seed) {
    std::mt19937 rng(seed + 1);
    for (uint32_t c = 0; c < keep; ++c) {
      if (c == 1) continue;
      const uint32_t bits = 1 + c % 8;
      std::vector<uint8_t> v(n);
      for (uint8_t& code : v) code = static_cast<uint8_t>(rng() % (1u << bits));
      codes.push_back(std::move(v));
      const float first = 0.5f - static_cast<float>(1u << (bits - 1));
      const float step = 0.01f + 0.37f * static_cast<float>(c);
      coded.push_back({.component = c, .first = first, .step = step, .codes = codes.back().data()});
    }
    for (size_t j = 0; j < coded.size(); ++j) {
      coded[j].codes = codes[j].data();  // the vector of vectors may have moved them
      for (size_t t = 0; t < n; ++t)
        coeffs.push_back((static_cast<float>(codes[j][t]) + coded[j].first) * coded[j].step);
      const float* row = basis.components.data() + coded[j].component * dim;
      compact_rows.insert(compact_rows.end(), row, row + dim);
    }
  }
};

TEST(ReconstructFromCodes, SameBitsAsDequantisingFirstOnEveryPath) {
  std::vector<VectorIsa> paths = VectorPaths();
  paths.push_back(VectorIsa::kPortable);
  for (const size_t dim : kDims) {
    for (const size_t n : kRowCounts) {
      const CodedProblem p(dim, n, 14, static_cast<uint32_t>(dim * 31 + n));
      const auto m = static_cast<uint32_t>(p.coded.size());
      std::vector<float> want(n * dim, kUntouched);
      ReconstructRows(p.basis.mean.data(), p.compact_rows.data(), dim, p.coeffs.data(),
                      {.token_stride = 1, .component_stride = n}, n, m, want.data(), dim, VectorIsa::kPortable);
      for (const VectorIsa k : paths) {
        std::vector<float> got(n * dim, kUntouched);
        ReconstructFromCodes(p.basis.mean.data(), p.basis.components.data(), dim, p.coded, n, got.data(), dim, k);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
            << VectorIsaName(k) << " " << dim << " " << n;
      }
    }
  }
}

TEST(ReconstructFromCodes, NoComponentsGiveTheMean) {
  const Problem p(24, 5, 3, 2);
  std::vector<float> x(5 * 30, kUntouched);
  ReconstructFromCodes(p.mean.data(), p.components.data(), 24, {}, 5, x.data(), 30);
  for (size_t t = 0; t < 5; ++t) {
    for (size_t j = 0; j < 30; ++j) ASSERT_EQ(x[t * 30 + j], j < 24 ? p.mean[j] : kUntouched) << t << "," << j;
  }
}

}  // namespace
}  // namespace kvc
