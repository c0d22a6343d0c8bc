#include "server/console/console_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace verity::server {
namespace {

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("line\nbreak\ttab\r"), "\"line\\nbreak\\ttab\\r\"");
  EXPECT_EQ(JsonQuote(std::string("nul\0bell\x07", 9)), "\"nul\\u0000bell\\u0007\"");
  EXPECT_EQ(JsonQuote("</script> é"), "\"</script> é\"");
}

TEST(JsonWriterTest, SeparatesMembersAndElementsWithCommas) {
  JsonWriter json;
  json.BeginObject();
  json.Key("name").String("p\"1");
  json.Key("counts").BeginArray().Int(1).Int(-2).EndArray();
  json.Key("nested").BeginArray().BeginArray().EndArray().BeginObject().EndObject().EndArray();
  json.Key("ok").Bool(true).Key("none").Null();
  json.Key("x").Double(0.25);
  json.EndObject();
  EXPECT_EQ(json.text(),
            "{\"name\":\"p\\\"1\",\"counts\":[1,-2],\"nested\":[[],{}],\"ok\":true,"
            "\"none\":null,\"x\":0.25}");
}

TEST(JsonWriterTest, NonFiniteNumbersAreNull) {
  JsonWriter json;
  json.BeginArray()
      .Double(std::numeric_limits<double>::infinity())
      .Double(std::numeric_limits<double>::quiet_NaN())
      .EndArray();
  EXPECT_EQ(json.text(), "[null,null]");
}

TEST(WriteHistoryTest, RatesBetweenConsecutiveSamplesAndNullWhereUndefined) {
  // 10 -> 35 labels in 5 s: 5/s. A second sample at the same time has no rate. 40 -> 30 in
  // 10 s (the count went down): 0, not negative.
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const std::vector<ProjectSample> samples = {
      {t0, 10, std::nullopt},
      {t0 + absl::Seconds(5), 35, 0.5},
      {t0 + absl::Seconds(5), 40, std::nullopt},
      {t0 + absl::Seconds(15), 30, 0.25},
  };
  JsonWriter json;
  WriteHistory(samples, json);
  EXPECT_EQ(json.text(),
            "{\"time_ms\":[1000000,1005000,1005000,1015000],\"labels\":[10,35,40,30],"
            "\"labels_per_second\":[null,5,null,0],\"resolved_share\":[null,0.5,null,0.25]}");
}

TEST(WriteHistoryTest, NoSamplesGiveEmptyArrays) {
  JsonWriter json;
  WriteHistory({}, json);
  EXPECT_EQ(json.text(),
            "{\"time_ms\":[],\"labels\":[],\"labels_per_second\":[],\"resolved_share\":[]}");
}

TEST(ComputeReliabilityTest, BinsByConfidenceWithAccuracyAndCalibrationError) {
  // Five bins of width 0.2. Bin 0 is empty; 0.3 (wrong) in bin 1; 0.55 (right) in bin 2;
  // 0.62 (wrong) in bin 3; 0.95, 0.85 (right) and 0.9 (wrong) in bin 4: mean 0.9, accuracy
  // 2/3. Overall 3 of 6 right. ECE = (0.3 + |1 - 0.55| + 0.62) / 6 + 3/6 * |2/3 - 0.9|
  // = 1.37 / 6 + 0.7 / 6 = 0.345.
  const std::vector<double> confidence = {0.95, 0.85, 0.9, 0.55, 0.62, 0.3};
  const bool correct[] = {true, true, false, true, false, false};
  const Reliability r = ComputeReliability(confidence, correct, 5);
  ASSERT_EQ(r.bins.size(), 5u);
  EXPECT_EQ(r.count, 6);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.5);
  EXPECT_NEAR(r.expected_calibration_error, 0.345, 1e-12);
  const int64_t counts[] = {0, 1, 1, 1, 3};
  const double means[] = {0, 0.3, 0.55, 0.62, 0.9};
  const double accuracies[] = {0, 0, 1, 0, 2.0 / 3};
  for (int b = 0; b < 5; ++b) {
    EXPECT_EQ(r.bins[b].count, counts[b]) << "bin " << b;
    EXPECT_NEAR(r.bins[b].mean_confidence, means[b], 1e-12) << "bin " << b;
    EXPECT_NEAR(r.bins[b].accuracy, accuracies[b], 1e-12) << "bin " << b;
  }
}

TEST(ComputeReliabilityTest, EdgesGoToTheUpperBinAndOneToTheLast) {
  // 0 and -0.1 (clamped) in bin 0; 0.2 starts bin 1; 1 and 1.5 (clamped) in the last bin.
  const std::vector<double> confidence = {0.0, -0.1, 0.2, 1.0, 1.5};
  const bool correct[] = {false, false, true, true, true};
  const Reliability r = ComputeReliability(confidence, correct, 5);
  EXPECT_EQ(r.bins[0].count, 2);
  EXPECT_EQ(r.bins[1].count, 1);
  EXPECT_EQ(r.bins[4].count, 2);
  EXPECT_DOUBLE_EQ(r.bins[4].mean_confidence, 1.0);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.6);
}

TEST(ComputeReliabilityTest, NoPredictionsGiveZeroCountAndNoError) {
  const Reliability r = ComputeReliability({}, {}, 10);
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.bins.size(), 10u);
  EXPECT_EQ(r.expected_calibration_error, 0);
}

TEST(WriteReliabilityTest, WritesBinsWithNullsForEmptyOnes) {
  // Four bins: 0.25 (wrong) in [0.25, 0.5), 0.75 (right) in [0.75, 1]. ECE = 0.5 * 0.25 +
  // 0.5 * 0.25.
  const std::vector<double> confidence = {0.75, 0.25};
  const bool correct[] = {true, false};
  JsonWriter json;
  WriteReliability(ComputeReliability(confidence, correct, 4), json);
  EXPECT_EQ(json.text(),
            "{\"count\":2,\"accuracy\":0.5,\"expected_calibration_error\":0.25,\"bins\":["
            "{\"low\":0,\"high\":0.25,\"count\":0,\"mean_confidence\":null,\"accuracy\":null},"
            "{\"low\":0.25,\"high\":0.5,\"count\":1,\"mean_confidence\":0.25,\"accuracy\":0},"
            "{\"low\":0.5,\"high\":0.75,\"count\":0,\"mean_confidence\":null,\"accuracy\":null},"
            "{\"low\":0.75,\"high\":1,\"count\":1,\"mean_confidence\":0.75,\"accuracy\":1}]}");
}

TEST(PrincipalComponents2DTest, ProjectsOntoTheTwoLargestVarianceDirections) {
  // Rows ±(2, 2) and ±(2, -1): mean 0, covariance (1/4) sum x x^T = [[4, 1], [1, 2.5]], with
  // eigenvalues 4.5 along (2, 1)/√5 and 2 along (1, -2)/√5; its largest coordinate in
  // magnitude (-2) must be positive, so the second component is (-1, 2)/√5. The power
  // iteration starts from (2, 2), which is not an eigenvector.
  const std::vector<std::vector<float>> rows = {{2, 2}, {-2, -2}, {2, -1}, {-2, 1}};
  const double s = std::sqrt(5.0);
  const std::vector<std::array<double, 2>> want = {
      {6 / s, 2 / s}, {-6 / s, -2 / s}, {3 / s, -4 / s}, {-3 / s, 4 / s}};
  const std::vector<std::array<double, 2>> got = PrincipalComponents2D(rows);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i][0], want[i][0], 1e-9) << "row " << i;
    EXPECT_NEAR(got[i][1], want[i][1], 1e-9) << "row " << i;
  }
}

TEST(PrincipalComponents2DTest, CentresTheRowsAndIgnoresDirectionsWithoutVariance) {
  // Three rows on the line (1, 1, 5) + t (1, 0, 0), t = -1, 0, 2: mean t = 1/3, one component
  // (1, 0, 0); the second coordinate is 0.
  const std::vector<std::vector<float>> rows = {{0, 1, 5}, {1, 1, 5}, {3, 1, 5}};
  const std::vector<std::array<double, 2>> got = PrincipalComponents2D(rows);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_NEAR(got[0][0], -4.0 / 3, 1e-9);
  EXPECT_NEAR(got[1][0], -1.0 / 3, 1e-9);
  EXPECT_NEAR(got[2][0], 5.0 / 3, 1e-9);
  for (const auto& point : got) EXPECT_EQ(point[1], 0);
}

TEST(PrincipalComponents2DTest, OneDimensionalAndMalformedInputs) {
  const std::vector<std::array<double, 2>> one = PrincipalComponents2D({{1}, {3}});
  ASSERT_EQ(one.size(), 2u);
  EXPECT_DOUBLE_EQ(one[0][0], -1);
  EXPECT_DOUBLE_EQ(one[1][0], 1);
  EXPECT_EQ(one[1][1], 0);
  EXPECT_TRUE(PrincipalComponents2D({}).empty());
  EXPECT_TRUE(PrincipalComponents2D({{1, 2}, {3}}).empty());
  // Identical rows: no variance, every point at the origin.
  const std::vector<std::array<double, 2>> same = PrincipalComponents2D({{1, 2}, {1, 2}});
  ASSERT_EQ(same.size(), 2u);
  EXPECT_EQ(same[0][0], 0);
  EXPECT_EQ(same[1][1], 0);
}

// The sign rule's tie-break: "its coordinate of largest magnitude (the first of equals) is
// positive". Rows ±(1, -1) vary along (1, -1)/√2, whose two coordinates are equal in
// magnitude: the first must be positive, so (1, -1) maps to +√2 and (-1, 1) to -√2.
TEST(PrincipalComponents2DTest, TheFirstOfEqualCoordinatesDecidesTheSign) {
  for (const std::vector<std::vector<float>>& rows :
       {std::vector<std::vector<float>>{{1, -1}, {-1, 1}},
        std::vector<std::vector<float>>{{-1, 1}, {1, -1}}}) {
    const std::vector<std::array<double, 2>> got = PrincipalComponents2D(rows);
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      const double want = rows[i][0] > 0 ? std::sqrt(2.0) : -std::sqrt(2.0);
      EXPECT_NEAR(got[i][0], want, 1e-9) << "row " << i;
      EXPECT_NEAR(got[i][1], 0, 1e-9) << "row " << i;
    }
  }
}

// console_json.h: strings are escaped per RFC 8259, which requires every control character
// U+0000 to U+001F to be escaped: the last of them (0x1f) and ESC (0x1b) as \u00XX; the space
// (0x20) and DEL (0x7f, not a control character of RFC 8259) pass through.
TEST(JsonQuoteTest, EveryControlCharacterUpToUnitSeparatorIsEscaped) {
  EXPECT_EQ(JsonQuote("\x1f"), "\"\\u001f\"");
  EXPECT_EQ(JsonQuote("a\x1b[0m"), "\"a\\u001b[0m\"");
  EXPECT_EQ(JsonQuote(" \x7f"), "\" \x7f\"");
}

}  // namespace
}  // namespace verity::server
