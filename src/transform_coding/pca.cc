#include "transform_coding/pca.h"

#include <cblas.h>
#include <lapacke.h>
#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <utility>

#include "transform_coding/reconstruct_rows.h"

namespace kvc {
namespace {

// BLAS calls here come from the caller's worker threads; OpenBLAS's own threads on top of
// those would oversubscribe the cores, so the process runs it single-threaded.
void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// OpenBLAS keeps a pool of working buffers (BUFFER_SIZE: 128 MiB of address space each on
// x86-64 unless built otherwise): a call takes a free one, maps a new one when every buffer is
// held by another call, and keeps it for good. When that mmap fails (an address-space limit,
// ulimit -v) it retries forever: the call spins a core and never returns. So the calls here run
// in sections that admit no more of them at once than there are buffers known to fit: before a
// section would need one buffer more, the room for it is checked (mapped and given back); without
// room the section waits for another to end, or fails when none is running. An allocation
// elsewhere between the check and OpenBLAS's own mmap can still take the room: this narrows the
// window, it cannot close it.
constexpr size_t kBlasBufferBytes = size_t{129} << 20;  // a buffer and its page of slack, rounded up

class BlasBuffers {
 public:
  Status Enter() {
    std::unique_lock lock(mutex_);
    while (running_ >= room_for_) {
      if (RoomForOneMore()) {
        ++room_for_;
        break;
      }
      if (running_ == 0) {
        return Internal(
            FormatMessage("no address space for a BLAS working buffer (%zu MiB) (%s); is `ulimit -v` too low?",
                          kBlasBufferBytes >> 20, std::strerror(errno)));
      }
      ended_.wait(lock);
    }
    ++running_;
    return Status::Ok();
  }

  void Exit() {
    {
      const std::lock_guard lock(mutex_);
      --running_;
    }
    ended_.notify_one();
  }

 private:
  // The mapping OpenBLAS makes (private, anonymous, read-write), so it counts against the same limits.
  static bool RoomForOneMore() {
    void* room = ::mmap(nullptr, kBlasBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (room == MAP_FAILED) return false;
    ::munmap(room, kBlasBufferBytes);
    return true;
  }

  std::mutex mutex_;
  std::condition_variable ended_;
  size_t running_ = 0;   // sections in BLAS now, each holding at most one buffer at a time
  size_t room_for_ = 0;  // buffers known to fit: those OpenBLAS has mapped, or had room for
};

// Never destroyed: worker threads may still leave a section while the process exits.
BlasBuffers& Buffers() {
  static BlasBuffers* const buffers = new BlasBuffers;
  return *buffers;
}

// One section of BLAS calls made one after another (each holds one buffer while it runs).
class BlasSection {
 public:
  static Result<BlasSection> Enter() {
    UseSingleThreadedBlas();
    RETURN_IF_ERROR(Buffers().Enter());
    return BlasSection();
  }
  BlasSection(BlasSection&& other) noexcept : entered_(std::exchange(other.entered_, false)) {}
  BlasSection(const BlasSection&) = delete;
  BlasSection& operator=(const BlasSection&) = delete;
  BlasSection& operator=(BlasSection&&) = delete;
  ~BlasSection() {
    if (entered_) Buffers().Exit();
  }

 private:
  BlasSection() = default;
  bool entered_ = true;
};

// Rows per Add block: enough for syrk to run near peak, few enough that the double copy of a
// block stays around 2 MiB at any dim.
size_t BlockRows(uint32_t dim) { return std::clamp<size_t>((size_t{1} << 18) / std::max<uint32_t>(dim, 1), 64, 1024); }

// Rows per sgemm in the projections: bounds the centred scratch copy and keeps the row count
// inside BLAS's int.
constexpr size_t kGemmRows = 1024;

bool AllFinite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

}  // namespace

CovarianceAccumulator::CovarianceAccumulator(uint32_t dim) : dim_(dim), mean_(dim, 0.0), m2_(size_t{dim} * dim, 0.0) {}

Status CovarianceAccumulator::Add(const float* rows, size_t n_rows) {
  if (dim_ == 0) {
    count_ += n_rows;
    return Status::Ok();
  }
  if (n_rows == 0) return Status::Ok();
  ASSIGN_OR_RETURN(const BlasSection section, BlasSection::Enter());
  const size_t block = BlockRows(dim_);
  for (size_t r = 0; r < n_rows; r += block) {
    AddBlock(rows + r * dim_, std::min(block, n_rows - r));
  }
  return Status::Ok();
}

void CovarianceAccumulator::AddBlock(const float* rows, size_t n_rows) {
  if (n_rows == 0) return;
  const size_t dim = dim_;
  block_.resize(n_rows * dim);
  std::vector<double> block_mean(dim, 0.0);
  for (size_t r = 0; r < n_rows; ++r) {
    const float* row = rows + r * dim;
    for (size_t d = 0; d < dim; ++d) block_mean[d] += row[d];
  }
  const double inv_n = 1.0 / static_cast<double>(n_rows);
  for (size_t d = 0; d < dim; ++d) block_mean[d] *= inv_n;
  for (size_t r = 0; r < n_rows; ++r) {
    const float* row = rows + r * dim;
    double* out = block_.data() + r * dim;
    for (size_t d = 0; d < dim; ++d) out[d] = static_cast<double>(row[d]) - block_mean[d];
  }
  // m2 += B^T B (the block's own centred scatter), upper triangle.
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(dim), static_cast<int>(n_rows), 1.0,
              block_.data(), static_cast<int>(dim), 1.0, m2_.data(), static_cast<int>(dim));

  // Chan et al.: combining (n_a, mean_a, M2_a) with (n_b, mean_b, M2_b) adds
  // n_a n_b / (n_a + n_b) * delta delta^T, delta = mean_b - mean_a.
  const double n_a = static_cast<double>(count_);
  const double n_b = static_cast<double>(n_rows);
  const double n = n_a + n_b;
  std::vector<double>& delta = block_mean;  // reused: becomes mean_b - mean_a
  for (size_t d = 0; d < dim; ++d) delta[d] -= mean_[d];
  if (count_ > 0) {
    cblas_dsyr(CblasRowMajor, CblasUpper, static_cast<int>(dim), n_a * n_b / n, delta.data(), 1, m2_.data(),
               static_cast<int>(dim));
  }
  for (size_t d = 0; d < dim; ++d) mean_[d] += delta[d] * (n_b / n);
  count_ += n_rows;
}

Status CovarianceAccumulator::Merge(const CovarianceAccumulator& other) {
  assert(other.dim_ == dim_);
  if (other.dim_ != dim_) return InvalidArgument("PCA merge of accumulators of different dimensions");
  if (other.count_ == 0) return Status::Ok();
  if (count_ == 0) {
    count_ = other.count_;
    mean_ = other.mean_;
    m2_ = other.m2_;
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(const BlasSection section, BlasSection::Enter());
  const double n_a = static_cast<double>(count_);
  const double n_b = static_cast<double>(other.count_);
  const double n = n_a + n_b;
  std::vector<double> delta(dim_);
  for (size_t d = 0; d < dim_; ++d) delta[d] = other.mean_[d] - mean_[d];
  // Element-wise, so merging an object into itself reads each value before writing it.
  for (size_t i = 0; i < m2_.size(); ++i) m2_[i] += other.m2_[i];
  if (dim_ > 0) {
    cblas_dsyr(CblasRowMajor, CblasUpper, static_cast<int>(dim_), n_a * n_b / n, delta.data(), 1, m2_.data(),
               static_cast<int>(dim_));
  }
  for (size_t d = 0; d < dim_; ++d) mean_[d] += delta[d] * (n_b / n);
  count_ += other.count_;
  return Status::Ok();
}

Result<PcaBasis> CovarianceAccumulator::Fit(uint32_t max_components) const {
  if (count_ < 2) {
    return InvalidArgument(
        FormatMessage("PCA fit needs at least 2 rows, has %llu", static_cast<unsigned long long>(count_)));
  }
  if (dim_ == 0) return InvalidArgument("PCA fit of 0-dimensional rows");
  if (max_components == 0) return InvalidArgument("PCA fit asked for 0 components");
  if (!AllFinite(mean_) || !AllFinite(m2_)) return InvalidArgument("PCA fit: the rows hold inf or NaN");
  ASSIGN_OR_RETURN(const BlasSection section, BlasSection::Enter());

  const uint32_t dim = dim_;
  const uint32_t k = std::min(max_components, dim);
  // m2_'s row-major upper triangle is, read column-major, the lower triangle: LAPACK gets
  // uplo 'L' and no transpose.
  std::vector<double> cov(m2_.size());
  const double inv_count = 1.0 / static_cast<double>(count_);
  for (size_t i = 0; i < m2_.size(); ++i) cov[i] = m2_[i] * inv_count;

  std::vector<double> w(dim);
  std::vector<double> z(size_t{dim} * k);
  std::vector<lapack_int> isuppz(2 * size_t{k});
  lapack_int found = 0;
  const lapack_int n = static_cast<lapack_int>(dim);
  // Eigenvalues come out ascending; indices il..iu (1-based) select the k largest.
  const lapack_int info =
      LAPACKE_dsyevr(LAPACK_COL_MAJOR, 'V', 'I', 'L', n, cov.data(), n, 0.0, 0.0, n - static_cast<lapack_int>(k) + 1, n,
                     0.0, &found, w.data(), z.data(), n, isuppz.data());
  if (info != 0 || found != static_cast<lapack_int>(k)) {
    return Internal(FormatMessage("LAPACKE_dsyevr failed (info %d, %d of %u eigenvectors)", static_cast<int>(info),
                                  static_cast<int>(found), k));
  }

  PcaBasis basis;
  basis.dim = dim;
  basis.n_components = k;
  basis.mean.assign(mean_.begin(), mean_.end());
  basis.components.resize(size_t{k} * dim);
  basis.eigenvalues.resize(k);
  for (uint32_t c = 0; c < k; ++c) {
    const uint32_t src = k - 1 - c;
    const double* v = z.data() + size_t{src} * dim;
    size_t arg = 0;
    for (size_t d = 1; d < dim; ++d) {
      if (std::abs(v[d]) > std::abs(v[arg])) arg = d;
    }
    const double sign = v[arg] < 0 ? -1.0 : 1.0;
    float* out = basis.components.data() + size_t{c} * dim;
    for (size_t d = 0; d < dim; ++d) out[d] = static_cast<float>(sign * v[d]);
    basis.eigenvalues[c] = static_cast<float>(std::max(w[src], 0.0));
  }
  return basis;
}

namespace {

// centred[r] = x[r] - mean for rows [r0, r0 + rows) of x (rows `x_stride` apart).
void CentreRows(const PcaBasis& basis, const float* x, size_t x_stride, size_t r0, size_t rows, float* centred) {
  const size_t dim = basis.dim;
  const float* mean = basis.mean.data();
  for (size_t r = 0; r < rows; ++r) {
    const float* in = x + (r0 + r) * x_stride;
    float* out = centred + r * dim;
    for (size_t d = 0; d < dim; ++d) out[d] = in[d] - mean[d];
  }
}

// Centres the rows of x kGemmRows at a time and hands each block to product(r0, rows, centred).
// Centring before the product (rather than subtracting mean . component afterwards) avoids
// fp32 cancellation on channels whose mean dwarfs their spread.
template <typename Product>
Status ProjectInBlocks(const PcaBasis& basis, const float* x, size_t x_stride, size_t n, uint32_t n_keep,
                       Product&& product) {
  assert(n_keep <= basis.n_components && x_stride >= basis.dim && n <= size_t{INT_MAX});
  if (n == 0 || n_keep == 0) return Status::Ok();
  ASSIGN_OR_RETURN(const BlasSection section, BlasSection::Enter());
  std::vector<float> centred(std::min(n, kGemmRows) * basis.dim);
  for (size_t r0 = 0; r0 < n; r0 += kGemmRows) {
    const size_t rows = std::min(kGemmRows, n - r0);
    CentreRows(basis, x, x_stride, r0, rows, centred.data());
    product(r0, rows, centred.data());
  }
  return Status::Ok();
}

}  // namespace

Status Project(const PcaBasis& basis, const float* x, size_t n, uint32_t n_keep, float* coeffs) {
  const int dim = static_cast<int>(basis.dim);
  return ProjectInBlocks(basis, x, basis.dim, n, n_keep, [&](size_t r0, size_t rows, const float* centred) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(n_keep), dim, 1.0f,
                centred, dim, basis.components.data(), dim, 0.0f, coeffs + r0 * n_keep, static_cast<int>(n_keep));
  });
}

void Reconstruct(const PcaBasis& basis, const float* coeffs, size_t n, uint32_t n_keep, float* x) {
  Reconstruct(basis, coeffs, n, n_keep, x, basis.dim);
}

void Reconstruct(const PcaBasis& basis, const float* coeffs, size_t n, uint32_t n_keep, float* x, size_t x_stride) {
  assert(n_keep <= basis.n_components && x_stride >= basis.dim);
  ReconstructRows(basis.mean.data(), basis.components.data(), basis.dim, coeffs,
                  {.token_stride = n_keep, .component_stride = 1}, n, n_keep, x, x_stride);
}

Status ProjectByComponent(const PcaBasis& basis, const float* x, size_t x_stride, size_t n, uint32_t n_keep,
                          float* coeffs) {
  const int dim = static_cast<int>(basis.dim);
  return ProjectInBlocks(basis, x, x_stride, n, n_keep, [&](size_t r0, size_t rows, const float* centred) {
    // coeffs[:, r0 .. r0 + rows) = components[n_keep][dim] . centred^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_keep), static_cast<int>(rows), dim, 1.0f,
                basis.components.data(), dim, centred, dim, 0.0f, coeffs + r0, static_cast<int>(n));
  });
}

void ReconstructByComponent(const PcaBasis& basis, const float* coeffs, size_t n, uint32_t n_keep, float* x,
                            size_t x_stride) {
  assert(n_keep <= basis.n_components && x_stride >= basis.dim);
  ReconstructRows(basis.mean.data(), basis.components.data(), basis.dim, coeffs,
                  {.token_stride = 1, .component_stride = n}, n, n_keep, x, x_stride);
}

}  // namespace kvc
