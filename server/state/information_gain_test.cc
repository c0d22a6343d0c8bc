#include "server/state/information_gain.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace verity::server {
namespace {

TEST(InformationGainTest, PerfectAnnotatorOnAFiftyFiftyItemGainsLn2) {
  const std::vector<double> p = {0.5, 0.5};
  const std::vector<double> perfect = {1, 0, 0, 1};
  EXPECT_NEAR(ExpectedEntropyReduction(p, perfect), std::log(2.0), 1e-12);
  EXPECT_NEAR(ProbabilityCorrect(p, perfect), 1.0, 1e-12);
}

TEST(InformationGainTest, SpammerGainsNothing) {
  const std::vector<double> p = {0.3, 0.7};
  // Answers "0" with probability 0.8 whatever the truth: the label says nothing.
  const std::vector<double> spammer = {0.8, 0.2, 0.8, 0.2};
  EXPECT_NEAR(ExpectedEntropyReduction(p, spammer), 0.0, 1e-12);
  EXPECT_NEAR(ProbabilityCorrect(p, spammer), 0.3 * 0.8 + 0.7 * 0.2, 1e-12);
}

TEST(InformationGainTest, KnownItemGainsNothingAndGainNeverExceedsEntropy) {
  const std::vector<double> known = {0, 1, 0};
  const std::vector<double> good = {0.9, 0.05, 0.05, 0.05, 0.9, 0.05, 0.05, 0.05, 0.9};
  EXPECT_NEAR(ExpectedEntropyReduction(known, good), 0.0, 1e-12);
  const std::vector<double> p = {0.2, 0.5, 0.3};
  const double gain = ExpectedEntropyReduction(p, good);
  EXPECT_GT(gain, 0.0);
  EXPECT_LT(gain, Entropy(p));
}

TEST(InformationGainTest, HandComputedNoisyBinaryAnnotator) {
  // p = (0.5, 0.5), symmetric accuracy 0.8: P(y) = 0.5 each, posterior after a label is
  // (0.8, 0.2), so gain = ln 2 − H(0.8, 0.2).
  const std::vector<double> p = {0.5, 0.5};
  const std::vector<double> c = {0.8, 0.2, 0.2, 0.8};
  const double h82 = -(0.8 * std::log(0.8) + 0.2 * std::log(0.2));
  EXPECT_NEAR(ExpectedEntropyReduction(p, c), std::log(2.0) - h82, 1e-12);
}

}  // namespace
}  // namespace verity::server
