#include "transform_coding/pca.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace kvc {
namespace {

// A random orthogonal matrix, rows orthonormal (Gram-Schmidt on Gaussian rows, in double).
std::vector<double> RandomRotation(uint32_t dim, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> q(size_t{dim} * dim);
  for (double& v : q) v = normal(rng);
  for (uint32_t i = 0; i < dim; ++i) {
    double* row = q.data() + size_t{i} * dim;
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t j = 0; j < i; ++j) {
        const double* other = q.data() + size_t{j} * dim;
        const double dot = std::inner_product(row, row + dim, other, 0.0);
        for (uint32_t d = 0; d < dim; ++d) row[d] -= dot * other[d];
      }
    }
    const double norm = std::sqrt(std::inner_product(row, row + dim, row, 0.0));
    for (uint32_t d = 0; d < dim; ++d) row[d] /= norm;
  }
  return q;
}

// Rows x = mean + sum_i sqrt(variance_i) z_i axes[i], z standard normal: the covariance has
// eigenvectors axes[i] with eigenvalues variance_i.
struct Gaussian {
  uint32_t dim;
  std::vector<double> axes;  // [dim][dim], rows
  std::vector<double> variances;
  std::vector<double> mean;

  std::vector<float> Sample(size_t n, std::mt19937& rng) const {
    std::normal_distribution<double> normal;
    std::vector<float> rows(n * dim);
    std::vector<double> z(dim);
    for (size_t r = 0; r < n; ++r) {
      for (uint32_t i = 0; i < dim; ++i) z[i] = normal(rng) * std::sqrt(variances[i]);
      for (uint32_t d = 0; d < dim; ++d) {
        double v = mean[d];
        for (uint32_t i = 0; i < dim; ++i) v += z[i] * axes[size_t{i} * dim + d];
        rows[r * dim + d] = static_cast<float>(v);
      }
    }
    return rows;
  }
};

Gaussian MakeGaussian(uint32_t dim, double mean_offset, double mean_spread, uint32_t seed) {
  std::mt19937 rng(seed);
  Gaussian g{dim, RandomRotation(dim, rng), {}, {}};
  for (uint32_t i = 0; i < dim; ++i) g.variances.push_back(10.0 * std::pow(0.7, i));
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  for (uint32_t d = 0; d < dim; ++d) g.mean.push_back(mean_offset + mean_spread * uni(rng));
  return g;
}

PcaBasis FitRows(const std::vector<float>& rows, uint32_t dim, uint32_t max_components) {
  CovarianceAccumulator acc(dim);
  EXPECT_TRUE(acc.Add(rows.data(), rows.size() / dim).ok());
  auto basis = acc.Fit(max_components);
  EXPECT_TRUE(basis.ok()) << basis.status().ToString();
  return basis.ok() ? *basis : PcaBasis{};
}

double Dot(const float* a, const double* b, uint32_t n) {
  double s = 0;
  for (uint32_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

TEST(Pca, RecoversKnownRotationAndVariances) {
  constexpr uint32_t kDim = 16;
  const Gaussian g = MakeGaussian(kDim, 3.0, 2.0, 1);
  std::mt19937 rng(2);
  const std::vector<float> rows = g.Sample(200000, rng);
  const PcaBasis basis = FitRows(rows, kDim, kDim);
  ASSERT_EQ(basis.dim, kDim);
  ASSERT_EQ(basis.n_components, kDim);
  ASSERT_EQ(basis.mean.size(), kDim);
  ASSERT_EQ(basis.components.size(), size_t{kDim} * kDim);
  ASSERT_EQ(basis.eigenvalues.size(), kDim);
  for (uint32_t d = 0; d < kDim; ++d) EXPECT_NEAR(basis.mean[d], g.mean[d], 0.03) << d;
  for (uint32_t c = 0; c < kDim; ++c) {
    EXPECT_NEAR(basis.eigenvalues[c], g.variances[c], 0.02 * g.variances[c]) << c;
    if (c > 0) {
      EXPECT_GE(basis.eigenvalues[c - 1], basis.eigenvalues[c]);
    }
    // The same axis up to sign.
    const double cosine = Dot(basis.components.data() + size_t{c} * kDim, g.axes.data() + size_t{c} * kDim, kDim);
    EXPECT_GT(std::abs(cosine), 0.99) << c;
  }
}

TEST(Pca, ComponentsAreOrthonormal) {
  for (const uint32_t rows_n : {3u, 40u, 5000u}) {  // rank-deficient and full-rank covariances
    constexpr uint32_t kDim = 64;
    const Gaussian g = MakeGaussian(kDim, 0.0, 1.0, 3);
    std::mt19937 rng(4);
    const PcaBasis basis = FitRows(g.Sample(rows_n, rng), kDim, kDim);
    ASSERT_EQ(basis.n_components, kDim);
    for (uint32_t a = 0; a < kDim; ++a) {
      for (uint32_t b = 0; b < kDim; ++b) {
        const float* ra = basis.components.data() + size_t{a} * kDim;
        const float* rb = basis.components.data() + size_t{b} * kDim;
        double dot = 0;
        for (uint32_t d = 0; d < kDim; ++d) dot += double{ra[d]} * rb[d];
        ASSERT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << rows_n << " rows, " << a << "," << b;
      }
    }
    for (float l : basis.eigenvalues) EXPECT_GE(l, 0.0f);
  }
}

TEST(Pca, KeepsAtMostRequestedComponents) {
  constexpr uint32_t kDim = 24;
  const Gaussian g = MakeGaussian(kDim, 0.0, 1.0, 5);
  std::mt19937 rng(6);
  const std::vector<float> rows = g.Sample(3000, rng);
  const PcaBasis full = FitRows(rows, kDim, 1000);
  EXPECT_EQ(full.n_components, kDim);
  const PcaBasis part = FitRows(rows, kDim, 5);
  ASSERT_EQ(part.n_components, 5u);
  ASSERT_EQ(part.components.size(), 5u * kDim);
  ASSERT_EQ(part.eigenvalues.size(), 5u);
  // Computing only the leading eigenvectors gives the same ones as computing all of them.
  for (size_t i = 0; i < part.components.size(); ++i) EXPECT_NEAR(part.components[i], full.components[i], 1e-5);
  for (size_t c = 0; c < 5; ++c) EXPECT_NEAR(part.eigenvalues[c], full.eigenvalues[c], 1e-5 * full.eigenvalues[c]);
}

TEST(Pca, ProjectThenReconstructWithAllComponentsIsIdentity) {
  constexpr uint32_t kDim = 48;
  const Gaussian g = MakeGaussian(kDim, 5.0, 3.0, 7);
  std::mt19937 rng(8);
  const PcaBasis basis = FitRows(g.Sample(4000, rng), kDim, kDim);
  const std::vector<float> x = g.Sample(1500, rng);  // more than one GEMM chunk, fresh rows
  const size_t n = x.size() / kDim;
  std::vector<float> coeffs(n * kDim);
  std::vector<float> back(x.size());
  ASSERT_TRUE(Project(basis, x.data(), n, kDim, coeffs.data()).ok());
  Reconstruct(basis, coeffs.data(), n, kDim, back.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(back[i], x[i], 1e-4 * (1.0 + std::abs(x[i]))) << i;
}

TEST(Pca, ProjectMatchesDefinition) {
  constexpr uint32_t kDim = 20;
  const Gaussian g = MakeGaussian(kDim, 1.0, 1.0, 9);
  std::mt19937 rng(10);
  const PcaBasis basis = FitRows(g.Sample(1000, rng), kDim, 12);
  const std::vector<float> x = g.Sample(10, rng);
  constexpr uint32_t kKeep = 7;
  std::vector<float> coeffs(size_t{10} * kKeep);
  ASSERT_TRUE(Project(basis, x.data(), 10, kKeep, coeffs.data()).ok());
  for (size_t t = 0; t < 10; ++t) {
    for (uint32_t c = 0; c < kKeep; ++c) {
      double want = 0;
      for (uint32_t d = 0; d < kDim; ++d) {
        want += (double{x[t * kDim + d]} - basis.mean[d]) * basis.components[size_t{c} * kDim + d];
      }
      EXPECT_NEAR(coeffs[t * kKeep + c], want, 1e-4) << t << "," << c;
    }
  }
}

// The component-major products are the token-major ones transposed, reading and writing rows
// that sit inside wider rows (as one head inside a layer's row) and leaving the rest alone.
TEST(Pca, ByComponentIsTheTransposeInPlace) {
  constexpr uint32_t kDim = 24, kStride = 72, kOffset = 24, kKeep = 9;
  const Gaussian g = MakeGaussian(kDim, 2.0, 1.0, 21);
  std::mt19937 rng(22);
  const PcaBasis basis = FitRows(g.Sample(2000, rng), kDim, 16);
  const size_t n = 1300;  // more than one GEMM chunk
  const std::vector<float> x = g.Sample(n, rng);
  std::vector<float> wide(n * kStride, -7.0f);
  for (size_t t = 0; t < n; ++t) std::copy_n(&x[t * kDim], kDim, &wide[t * kStride + kOffset]);

  std::vector<float> by_token(n * kKeep), by_component(n * kKeep);
  ASSERT_TRUE(Project(basis, x.data(), n, kKeep, by_token.data()).ok());
  ASSERT_TRUE(ProjectByComponent(basis, wide.data() + kOffset, kStride, n, kKeep, by_component.data()).ok());
  for (size_t t = 0; t < n; ++t) {
    for (uint32_t c = 0; c < kKeep; ++c) {
      ASSERT_NEAR(by_component[c * n + t], by_token[t * kKeep + c], 1e-4 * (1 + std::abs(by_token[t * kKeep + c])));
    }
  }

  std::vector<float> back(n * kDim), wide_back(n * kStride, -7.0f);
  Reconstruct(basis, by_token.data(), n, kKeep, back.data());
  ReconstructByComponent(basis, by_component.data(), n, kKeep, wide_back.data() + kOffset, kStride);
  for (size_t t = 0; t < n; ++t) {
    for (uint32_t j = 0; j < kStride; ++j) {
      const float got = wide_back[t * kStride + j];
      if (j < kOffset || j >= kOffset + kDim) {
        ASSERT_EQ(got, -7.0f) << "wrote outside the slice at " << t << "," << j;
      } else {
        const float want = back[t * kDim + j - kOffset];
        ASSERT_NEAR(got, want, 1e-4 * (1 + std::abs(want))) << t << "," << j;
      }
    }
  }
}

TEST(Pca, ProjectionErrorIsTheDroppedEigenvalues) {
  constexpr uint32_t kDim = 32;
  const Gaussian g = MakeGaussian(kDim, 2.0, 1.0, 11);
  std::mt19937 rng(12);
  const std::vector<float> rows = g.Sample(50000, rng);
  const size_t n = rows.size() / kDim;
  const PcaBasis basis = FitRows(rows, kDim, kDim);
  for (const uint32_t keep : {0u, 1u, 4u, 10u, 20u}) {
    std::vector<float> coeffs(n * keep);
    std::vector<float> back(rows.size());
    ASSERT_TRUE(Project(basis, rows.data(), n, keep, coeffs.data()).ok());
    Reconstruct(basis, coeffs.data(), n, keep, back.data());
    double err = 0;
    for (size_t i = 0; i < rows.size(); ++i) err += (double{rows[i]} - back[i]) * (double{rows[i]} - back[i]);
    err /= static_cast<double>(n);
    // On the fit rows the identity is exact (population covariance); against the true
    // variances it holds to sampling error.
    const double fitted = std::accumulate(basis.eigenvalues.begin() + keep, basis.eigenvalues.end(), 0.0);
    const double truth = std::accumulate(g.variances.begin() + keep, g.variances.end(), 0.0);
    EXPECT_NEAR(err, fitted, 1e-3 * fitted) << keep;
    EXPECT_NEAR(err, truth, 0.03 * truth) << keep;
  }
}

TEST(Pca, ReconstructWithNoComponentsGivesTheMean) {
  constexpr uint32_t kDim = 8;
  const Gaussian g = MakeGaussian(kDim, 4.0, 1.0, 13);
  std::mt19937 rng(14);
  const PcaBasis basis = FitRows(g.Sample(100, rng), kDim, 3);
  std::vector<float> x(size_t{5} * kDim, -1.0f);
  Reconstruct(basis, nullptr, 5, 0, x.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], basis.mean[i % kDim]);
}

TEST(Pca, MergeEqualsOneAccumulator) {
  constexpr uint32_t kDim = 40;
  const Gaussian g = MakeGaussian(kDim, 7.0, 5.0, 15);
  std::mt19937 rng(16);
  const std::vector<float> rows = g.Sample(5000, rng);
  CovarianceAccumulator whole(kDim);
  ASSERT_TRUE(whole.Add(rows.data(), 5000).ok());

  // Uneven parts, one added in odd-sized pieces, and an empty one.
  CovarianceAccumulator a(kDim), b(kDim), c(kDim), empty(kDim);
  ASSERT_TRUE(a.Add(rows.data(), 1).ok());
  for (size_t r = 1; r < 3001; r += 7) ASSERT_TRUE(b.Add(rows.data() + r * kDim, std::min<size_t>(7, 3001 - r)).ok());
  ASSERT_TRUE(c.Add(rows.data() + size_t{3001} * kDim, 1999).ok());
  CovarianceAccumulator merged(kDim);
  ASSERT_TRUE(merged.Merge(empty).ok());
  ASSERT_TRUE(merged.Merge(a).ok());
  ASSERT_TRUE(merged.Merge(b).ok());
  ASSERT_TRUE(merged.Merge(empty).ok());
  ASSERT_TRUE(merged.Merge(c).ok());
  ASSERT_EQ(merged.count(), whole.count());
  for (uint32_t d = 0; d < kDim; ++d) {
    EXPECT_NEAR(merged.mean()[d], whole.mean()[d], 1e-12 * (1 + std::abs(whole.mean()[d])));
  }

  const PcaBasis pw = *whole.Fit(kDim);
  const PcaBasis pm = *merged.Fit(kDim);
  for (uint32_t i = 0; i < kDim; ++i) EXPECT_NEAR(pm.eigenvalues[i], pw.eigenvalues[i], 1e-6 * pw.eigenvalues[0]);
  for (size_t i = 0; i < pw.components.size(); ++i) EXPECT_NEAR(pm.components[i], pw.components[i], 1e-4) << i;
}

TEST(Pca, MergeIntoItselfDoublesTheRows) {
  constexpr uint32_t kDim = 6;
  const Gaussian g = MakeGaussian(kDim, 1.0, 1.0, 17);
  std::mt19937 rng(18);
  const std::vector<float> rows = g.Sample(300, rng);
  CovarianceAccumulator self(kDim), twice(kDim);
  ASSERT_TRUE(self.Add(rows.data(), 300).ok());
  ASSERT_TRUE(self.Merge(self).ok());
  ASSERT_TRUE(twice.Add(rows.data(), 300).ok());
  ASSERT_TRUE(twice.Add(rows.data(), 300).ok());
  ASSERT_EQ(self.count(), 600u);
  const PcaBasis ps = *self.Fit(kDim);
  const PcaBasis pt = *twice.Fit(kDim);
  for (uint32_t i = 0; i < kDim; ++i) EXPECT_NEAR(ps.eigenvalues[i], pt.eigenvalues[i], 1e-9 * pt.eigenvalues[0]);
}

TEST(Pca, LargeMeanDoesNotCancel) {
  // A channel mean 10^6 times its spread, as some key channels have: E[xx] - mean^2 would
  // lose most digits; the centred update does not.
  constexpr uint32_t kDim = 4;
  Gaussian g = MakeGaussian(kDim, 1000.0, 0.0, 19);
  for (double& v : g.variances) v *= 1e-7;
  std::mt19937 rng(20);
  const PcaBasis basis = FitRows(g.Sample(100000, rng), kDim, kDim);
  for (uint32_t c = 0; c < kDim; ++c) EXPECT_NEAR(basis.eigenvalues[c], g.variances[c], 0.02 * g.variances[c]) << c;
}

TEST(Pca, SignsAreDeterministic) {
  constexpr uint32_t kDim = 12;
  const Gaussian g = MakeGaussian(kDim, 0.5, 1.0, 21);
  std::mt19937 rng(22);
  std::vector<float> rows = g.Sample(2000, rng);
  const PcaBasis first = FitRows(rows, kDim, kDim);
  EXPECT_EQ(FitRows(rows, kDim, kDim), first);
  for (uint32_t c = 0; c < kDim; ++c) {
    const float* v = first.components.data() + size_t{c} * kDim;
    const float* big = std::max_element(v, v + kDim, [](float a, float b) { return std::abs(a) < std::abs(b); });
    EXPECT_GT(*big, 0.0f) << c;
  }
  // Negated data has the same covariance: the sign rule must give the same components, whatever
  // signs the eigen-solver happened to return.
  for (float& v : rows) v = -v;
  const PcaBasis negated = FitRows(rows, kDim, kDim);
  for (size_t i = 0; i < first.components.size(); ++i) EXPECT_NEAR(negated.components[i], first.components[i], 1e-5);
}

TEST(Pca, FitErrors) {
  CovarianceAccumulator acc(3);
  EXPECT_EQ(acc.Fit(3).status().code(), StatusCode::kInvalidArgument);
  const float row[3] = {1, 2, 3};
  ASSERT_TRUE(acc.Add(row, 1).ok());
  EXPECT_EQ(acc.Fit(3).status().code(), StatusCode::kInvalidArgument);
  const float row2[3] = {2, 2, 5};
  ASSERT_TRUE(acc.Add(row2, 1).ok());
  EXPECT_TRUE(acc.Fit(3).ok());
  EXPECT_EQ(acc.Fit(0).status().code(), StatusCode::kInvalidArgument);
  const float bad[3] = {1, std::numeric_limits<float>::quiet_NaN(), 0};
  ASSERT_TRUE(acc.Add(bad, 1).ok());
  EXPECT_EQ(acc.Fit(3).status().code(), StatusCode::kInvalidArgument);
}

TEST(Pca, ConcurrentProjectionsAgree) {
  constexpr uint32_t kDim = 64;
  constexpr uint32_t kKeep = 20;
  const Gaussian g = MakeGaussian(kDim, 0.0, 1.0, 23);
  std::mt19937 rng(24);
  const PcaBasis basis = FitRows(g.Sample(2000, rng), kDim, kDim);
  const std::vector<float> x = g.Sample(512, rng);
  std::vector<float> want(size_t{512} * kKeep);
  ASSERT_TRUE(Project(basis, x.data(), 512, kKeep, want.data()).ok());
  std::vector<std::vector<float>> got(4, std::vector<float>(size_t{512} * kKeep));
  std::vector<std::thread> threads;
  threads.reserve(got.size());
  for (auto& out : got) {
    threads.emplace_back([&basis, &x, &out] {
      for (int rep = 0; rep < 20; ++rep) EXPECT_TRUE(Project(basis, x.data(), 512, kKeep, out.data()).ok());
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : got) EXPECT_EQ(out, want);
}

// ---- OpenBLAS's buffer under an address-space limit -----------------------------------------

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAddressSanitizer = true;
#else
constexpr bool kUnderAddressSanitizer = false;
#endif
#else
constexpr bool kUnderAddressSanitizer = false;
#endif

// The process's mapped address space (what RLIMIT_AS counts).
uint64_t AddressSpaceBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  return pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Death-test bodies, run in a fresh process (threadsafe style): OpenBLAS's pool then holds no
// free buffer, so the first call here needs a new one. Each exits, 0 on success, saying what
// happened on stderr; an alarm ends one that hangs (killed by SIGALRM: the test fails).

// Rows added on a new thread with the address space capped at `headroom` above what it is now.
[[noreturn]] void AddUnderALimitAndExit(uint64_t headroom) {
  ::alarm(30);
  std::vector<float> rows(size_t{64} * 8, 1.0f);
  rows[3] = 2.0f;
  CovarianceAccumulator acc(8);
  const rlimit limit{AddressSpaceBytes() + headroom, RLIM_INFINITY};
  if (::setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(3);
  Status added = Internal("not run");
  std::thread([&] { added = acc.Add(rows.data(), 64); }).join();
  std::fprintf(stderr, "%s\n", added.ok() ? "ok" : added.ToString().c_str());
  std::_Exit(added.ok() ? 0 : 1);
}

// The address space the first call maps, which the check must cover.
[[noreturn]] void FirstAddGrowthAndExit() {
  ::alarm(30);
  std::vector<float> rows(size_t{256} * 16, 1.0f);
  rows[5] = 3.0f;
  CovarianceAccumulator acc(16);
  const uint64_t before = AddressSpaceBytes();
  const bool ok = acc.Add(rows.data(), 256).ok();
  const uint64_t grown = AddressSpaceBytes() - before;
  std::fprintf(stderr, "grew %llu MiB\n", static_cast<unsigned long long>(grown >> 20));
  std::_Exit(ok && grown <= (uint64_t{129} << 20) ? 0 : 1);
}

// A death test's child re-executes this binary with the parent's environment. OpenBLAS starts
// its own threads when it is loaded, each mapping a buffer as it starts: on a loaded machine one
// started late mapped its buffer while the first call was being measured (256 MiB, two buffers).
// With OPENBLAS_NUM_THREADS=1 from the child's start there are none, as in a process that ran
// UseSingleThreadedBlas before loading anything, so what is measured is the call's own buffer.
class SingleThreadedBlasChildren {
 public:
  SingleThreadedBlasChildren() {
    const char* old = std::getenv("OPENBLAS_NUM_THREADS");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  }
  ~SingleThreadedBlasChildren() {
    if (had_) {
      ::setenv("OPENBLAS_NUM_THREADS", old_.c_str(), 1);
    } else {
      ::unsetenv("OPENBLAS_NUM_THREADS");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

// OpenBLAS retries a buffer it cannot map forever; without room for one the call fails instead,
// and with room it is not refused.
TEST(Pca, WithoutRoomForABlasBufferTheCallFailsInsteadOfHanging) {
  if (kUnderAddressSanitizer) GTEST_SKIP() << "AddressSanitizer's shadow needs terabytes of address space";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const SingleThreadedBlasChildren single_threaded;
  EXPECT_EXIT(AddUnderALimitAndExit(uint64_t{48} << 20), testing::ExitedWithCode(1),
              "internal error: no address space for a BLAS working buffer .*ulimit -v");
  EXPECT_EXIT(AddUnderALimitAndExit(uint64_t{1} << 30), testing::ExitedWithCode(0), "ok");
}

// The check looks for 129 MiB: as much as OpenBLAS maps for a buffer (BUFFER_SIZE, 128 MiB in
// upstream's and Debian's x86-64 builds). An OpenBLAS with larger buffers would make the check
// too small, and a limit could hang a call again: this notices.
TEST(Pca, ABlasBufferIsNoLargerThanTheCheckLooksFor) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const SingleThreadedBlasChildren single_threaded;
  EXPECT_EXIT(FirstAddGrowthAndExit(), testing::ExitedWithCode(0), "grew");
}

}  // namespace
}  // namespace kvc
