// PCA for transform coding: a streaming covariance accumulator, the eigen-decomposition that
// turns it into a PcaBasis, and the projections onto and back from that basis.
//
// BLAS threading: every call here runs OpenBLAS single-threaded (the first call sets
// openblas_set_num_threads(1) for the process). Callers parallelise across blocks and bases
// with their own threads, and a multi-threaded BLAS under a thread pool oversubscribes.
//
// Memory: each OpenBLAS call running at a time holds a 128 MiB working buffer (address space,
// touched only as far as used, kept once mapped), and where OpenBLAS cannot map one more it
// retries forever. So no more of the calls here run at once than there are buffers known to fit:
// past that a call waits for another to end, and with room for none it fails (kInternal, naming
// the buffer) rather than hang. Under an address-space limit (ulimit -v) these can fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "transform_coding/calibration.h"

namespace kvc {

// Running mean and centred scatter matrix of rows, in double. Rows are folded in per block
// with Chan's parallel update (block mean and block scatter, then a rank-1 correction), so the
// result does not suffer the cancellation of E[xx^T] - mean mean^T when a feature's mean is
// large against its spread, as some key channels' are. Not thread-safe per object; give each
// thread its own accumulator and Merge them.
class CovarianceAccumulator {
 public:
  explicit CovarianceAccumulator(uint32_t dim);

  // rows: [n_rows][dim]. Fails only for want of BLAS's buffer (see above), adding nothing.
  [[nodiscard]] Status Add(const float* rows, size_t n_rows);
  // Folds in another accumulator's rows, as if they had been added here. other.dim() must
  // equal dim() (else kInvalidArgument). Merging an accumulator into itself counts its rows
  // twice. Fails as Add does, merging nothing.
  [[nodiscard]] Status Merge(const CovarianceAccumulator& other);

  uint64_t count() const { return count_; }
  uint32_t dim() const { return dim_; }
  // Mean of the rows so far (zeros before the first row).
  const std::vector<double>& mean() const { return mean_; }

  // Mean and the leading min(max_components, dim) eigenvectors of the covariance, by
  // decreasing eigenvalue. The covariance is normalised by count() (population variance), so
  // eigenvalues[c] is exactly the variance of coefficient c over the accumulated rows and the
  // mean squared error of keeping k components is the sum of the dropped eigenvalues.
  // Each eigenvector's sign is fixed (its largest-magnitude entry, first on ties, is positive)
  // so equal inputs give equal bases. Tiny negative eigenvalues from rounding are stored as 0.
  // Errors: count() < 2, max_components == 0, or non-finite input rows (kInvalidArgument); no
  // room for BLAS's buffer (kInternal).
  // Cost: O(dim^3) single-threaded (LAPACK dsyevr, only the kept eigenvectors computed).
  [[nodiscard]] Result<PcaBasis> Fit(uint32_t max_components) const;

 private:
  // Folds one block of rows (at most BlockRows(dim) of them, see pca.cc) into the state.
  void AddBlock(const float* rows, size_t n_rows);

  uint32_t dim_;
  uint64_t count_ = 0;
  std::vector<double> mean_;   // [dim]
  std::vector<double> m2_;     // [dim][dim], sum of centred outer products; upper triangle only
  std::vector<double> block_;  // scratch: one block of rows centred in double
};

// coeffs[t][c] = sum_d (x[t][d] - mean[d]) * components[c][d] for c < n_keep, as an sgemm.
// x: [n][basis.dim], coeffs: [n][n_keep]. Requires n_keep <= basis.n_components.
// Thread-safe (no shared state besides the read-only basis). Fails only for want of BLAS's
// buffer (see above), writing nothing.
[[nodiscard]] Status Project(const PcaBasis& basis, const float* x, size_t n, uint32_t n_keep, float* coeffs);

// x[t][d] = mean[d] + sum_{c < n_keep} coeffs[t][c] * components[c][d], by ReconstructRows
// (kvtc/reconstruct_rows.h: the same bits on any x86-64 CPU, at any row count and stride).
// coeffs: [n][n_keep], x: [n][basis.dim]. n_keep may be 0 (every row becomes the mean).
// Requires n_keep <= basis.n_components. Thread-safe.
void Reconstruct(const PcaBasis& basis, const float* coeffs, size_t n, uint32_t n_keep, float* x);
// The same with the rows of x `x_stride` floats apart (>= basis.dim), so that a basis covering
// part of a wider row (one head of a layer) is written into that row in place. Bit-identical to
// the contiguous form: the stride changes only where results are stored.
void Reconstruct(const PcaBasis& basis, const float* coeffs, size_t n, uint32_t n_keep, float* x, size_t x_stride);

// The same two products with the coefficients component-major, coeffs[c][t] (n_keep rows of n),
// the layout the component quantiser reads and writes contiguously, and with rows of x
// `x_stride` floats apart (>= basis.dim), so that a basis covering part of a wider row (one
// head of a layer) is read from and written into that row in place. ProjectByComponent fails as
// Project does.
[[nodiscard]] Status ProjectByComponent(const PcaBasis& basis, const float* x, size_t x_stride, size_t n,
                                        uint32_t n_keep, float* coeffs);
void ReconstructByComponent(const PcaBasis& basis, const float* coeffs, size_t n, uint32_t n_keep, float* x,
                            size_t x_stride);

}  // namespace kvc
