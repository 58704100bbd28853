// Rate-distortion bound used to judge how close KVTC's bit allocation gets to the ideal.
#pragma once

#include <span>

namespace kvc {

// Gaussian reverse water-filling (Cover & Thomas, Theorem 10.3.3): the fewest bits per vector
// that reach a total mean squared error `distortion` for independent Gaussian components with
// variances `eigenvalues`. Finds the water level theta with sum_i min(theta, l_i) = D and
// returns sum over l_i > theta of 0.5 * log2(l_i / theta).
// Negative eigenvalues (rounding noise) count as 0. distortion >= sum(l) gives 0; distortion
// <= 0 gives +inf unless every eigenvalue is 0; a NaN anywhere gives NaN.
double ReverseWaterFillingRate(std::span<const double> eigenvalues, double distortion);

}  // namespace kvc
