#include "models/special_functions.h"

#include <cmath>

#include "gtest/gtest.h"

namespace verity::models {
namespace {

// Reference values: psi(1) = -gamma (Euler-Mascheroni), psi(1/2) = -gamma -
// 2 ln 2, psi(n) = -gamma + sum_{k<n} 1/k; psi(0.1) and psi(123.4) from
// scipy.special.digamma (/usr/bin/python3 -c "from scipy.special import
// digamma; print(digamma(0.1), digamma(123.4))").
TEST(DigammaTest, MatchesKnownValues) {
  const double euler = 0.57721566490153286;
  EXPECT_NEAR(Digamma(1.0), -euler, 1e-14);
  EXPECT_NEAR(Digamma(0.5), -euler - 2 * std::log(2.0), 1e-14);
  EXPECT_NEAR(Digamma(10.0), -euler + 1 + 1. / 2 + 1. / 3 + 1. / 4 + 1. / 5 + 1. / 6 +
                                 1. / 7 + 1. / 8 + 1. / 9,
              1e-13);
  EXPECT_NEAR(Digamma(0.1), -10.423754940411076, 1e-12);
  EXPECT_NEAR(Digamma(123.4), 4.8113737751162775, 1e-12);
  EXPECT_TRUE(std::isnan(Digamma(0.0)));
  EXPECT_TRUE(std::isnan(Digamma(-1.0)));
}

}  // namespace
}  // namespace verity::models
