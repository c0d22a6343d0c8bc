#include "models/special_functions.h"

#include <cmath>
#include <limits>

namespace verity::models {

double Digamma(double x) {
  if (!(x > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  double result = 0.0;
  while (x < 10.0) {
    result -= 1.0 / x;
    x += 1.0;
  }
  const double f = 1.0 / (x * x);
  // Bernoulli terms B_2n / (2n x^2n), n = 1..6.
  const double series =
      f * (1.0 / 12 -
           f * (1.0 / 120 -
                f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132 - f * (691.0 / 32760))))));
  return result + std::log(x) - 0.5 / x - series;
}

}  // namespace verity::models
