#include "transform_coding/water_filling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kvc {

double ReverseWaterFillingRate(std::span<const double> eigenvalues, double distortion) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(distortion)) return kNaN;
  std::vector<double> l;
  l.reserve(eigenvalues.size());
  double total = 0;
  for (double v : eigenvalues) {
    if (std::isnan(v)) return kNaN;
    if (v > 0) {
      l.push_back(v);
      total += v;
    }
  }
  if (distortion >= total) return 0.0;  // includes every eigenvalue being 0
  if (distortion <= 0) return std::numeric_limits<double>::infinity();

  // With the k smallest variances fully "under water", sum_i min(theta, l_i) = S_k + (n - k) theta;
  // theta is the first such solution that does not exceed the next variance up.
  std::sort(l.begin(), l.end());
  const size_t n = l.size();
  double below = 0;  // S_k
  double theta = 0;
  size_t k = 0;
  for (; k < n; ++k) {
    theta = (distortion - below) / static_cast<double>(n - k);
    if (theta <= l[k]) break;
    below += l[k];
  }
  double rate = 0;
  for (size_t i = k; i < n; ++i) {
    if (l[i] > theta) rate += 0.5 * std::log2(l[i] / theta);
  }
  return rate;
}

}  // namespace kvc
