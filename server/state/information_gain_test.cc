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

// information_gain.h: Entropy in nats with 0 log 0 = 0.
TEST(InformationGainTest, EntropyTreatsZeroProbabilitiesAsContributingNothing) {
  EXPECT_EQ(Entropy(std::vector<double>{0, 1, 0}), 0.0);
  EXPECT_NEAR(Entropy(std::vector<double>{0.5, 0, 0.5}), std::log(2.0), 1e-15);
}

// information_gain.h: 0 <= gain. An annotator whose confusion rows are all equal (a label
// independent of the truth) has mutual information exactly 0; for these items and rows the
// two sums of the formula round to a difference of about -1e-16, which must not come out.
TEST(InformationGainTest, GainIsNeverNegative) {
  const std::vector<std::vector<double>> cases = {
      {0.07697430866546645, 0.4854760764029465, 0.43754961493158706, 0.21255837564721652,
       0.4128642317334276, 0.37457739261935585},
      {0.4247185529422919, 0.5141022914447522, 0.06117915561295602, 0.021858216803802486,
       0.6444430714794388, 0.3336987117167587},
      {0.34139961260123985, 0.33815103391745627, 0.3204493534813039, 0.5962102721825417,
       0.37591269036922165, 0.02787703744823661},
      {0.4113180815250307, 0.2732637809257725, 0.3154181375491969, 0.09120222323242,
       0.48692369463444435, 0.4218740821331358}};
  for (const std::vector<double>& c : cases) {
    const std::vector<double> p(c.begin(), c.begin() + 3);
    std::vector<double> spammer;
    for (int row = 0; row < 3; ++row) spammer.insert(spammer.end(), c.begin() + 3, c.end());
    const double gain = ExpectedEntropyReduction(p, spammer);
    EXPECT_GE(gain, 0.0);
    EXPECT_NEAR(gain, 0.0, 1e-12);
  }
}

}  // namespace
}  // namespace verity::server
