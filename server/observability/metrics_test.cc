#include "server/observability/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace verity::server {
namespace {

TEST(MetricsRegistryTest, RendersTheTextExpositionFormat) {
  MetricsRegistry registry;
  MetricFamily<Counter>& rpcs =
      registry.AddCounter("test_rpcs_total", "RPCs handled.", {"method", "code"});
  rpcs.WithLabels({"/a.B/C", "OK"}).Increment();
  rpcs.WithLabels({"/a.B/C", "OK"}).Increment(2);
  rpcs.WithLabels({"/a.B/C", "NOT_FOUND"}).Increment();
  registry.AddGauge("test_queue_depth", "Items waiting.").Get().Set(7);
  MetricFamily<Histogram>& latency =
      registry.AddHistogram("test_latency_seconds", "Latency.", {"method"}, {0.1, 1});
  latency.WithLabels({"x"}).Observe(0.05);
  latency.WithLabels({"x"}).Observe(0.5);
  latency.WithLabels({"x"}).Observe(3);
  registry.AddCallbackGauge("test_pool_connections", "Connections.", {"state"}, [] {
    return std::vector<GaugeSample>{{{"open"}, 3}, {{"idle"}, 1}};
  });

  EXPECT_EQ(registry.RenderText(),
            "# HELP test_latency_seconds Latency.\n"
            "# TYPE test_latency_seconds histogram\n"
            "test_latency_seconds_bucket{method=\"x\",le=\"0.1\"} 1\n"
            "test_latency_seconds_bucket{method=\"x\",le=\"1\"} 2\n"
            "test_latency_seconds_bucket{method=\"x\",le=\"+Inf\"} 3\n"
            "test_latency_seconds_sum{method=\"x\"} 3.55\n"
            "test_latency_seconds_count{method=\"x\"} 3\n"
            "# HELP test_pool_connections Connections.\n"
            "# TYPE test_pool_connections gauge\n"
            "test_pool_connections{state=\"idle\"} 1\n"
            "test_pool_connections{state=\"open\"} 3\n"
            "# HELP test_queue_depth Items waiting.\n"
            "# TYPE test_queue_depth gauge\n"
            "test_queue_depth 7\n"
            "# HELP test_rpcs_total RPCs handled.\n"
            "# TYPE test_rpcs_total counter\n"
            "test_rpcs_total{method=\"/a.B/C\",code=\"NOT_FOUND\"} 1\n"
            "test_rpcs_total{method=\"/a.B/C\",code=\"OK\"} 3\n");
}

TEST(MetricsRegistryTest, UnlabelledFamiliesShowZeroFromRegistration) {
  MetricsRegistry registry;
  registry.AddCounter("c_total", "C.");
  registry.AddHistogram("h_seconds", "H.", {}, {1});
  registry.AddCounter("labelled_total", "Only HELP and TYPE until a child exists.", {"k"});
  EXPECT_EQ(registry.RenderText(),
            "# HELP c_total C.\n"
            "# TYPE c_total counter\n"
            "c_total 0\n"
            "# HELP h_seconds H.\n"
            "# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"1\"} 0\n"
            "h_seconds_bucket{le=\"+Inf\"} 0\n"
            "h_seconds_sum 0\n"
            "h_seconds_count 0\n"
            "# HELP labelled_total Only HELP and TYPE until a child exists.\n"
            "# TYPE labelled_total counter\n");
}

TEST(MetricsRegistryTest, EscapesLabelValuesAndHelp) {
  MetricsRegistry registry;
  registry.AddGauge("g", "Back\\slash and\nnewline.", {"project"})
      .WithLabels({"a\"b\\c\nd"})
      .Set(1);
  EXPECT_EQ(registry.RenderText(),
            "# HELP g Back\\\\slash and\\nnewline.\n"
            "# TYPE g gauge\n"
            "g{project=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(MetricsRegistryTest, SameRegistrationTwiceReturnsTheSameFamily) {
  MetricsRegistry registry;
  MetricFamily<Counter>& first = registry.AddCounter("x_total", "X.", {"k"});
  MetricFamily<Counter>& second = registry.AddCounter("x_total", "X.", {"k"});
  EXPECT_EQ(&first, &second);
  EXPECT_EQ(&first.WithLabels({"v"}), &second.WithLabels({"v"}));
}

TEST(MetricsRegistryDeathTest, ConflictingRegistrationAborts) {
  MetricsRegistry registry;
  registry.AddCounter("x_total", "X.", {"k"});
  EXPECT_DEATH(registry.AddGauge("x_total", "X.", {"k"}), "registered twice differently");
  EXPECT_DEATH(registry.AddCounter("x_total", "X.", {"other"}), "registered twice differently");
  EXPECT_DEATH(registry.AddCounter("bad-name", "X."), "invalid metric name");
  EXPECT_DEATH(registry.AddHistogram("h", "H.", {"le"}, {1}), "invalid label name");
  EXPECT_DEATH(registry.AddHistogram("h", "H.", {}, {1, 1}), "strictly increasing");
  EXPECT_DEATH(registry.AddCounter("y_total", "Y.", {"a", "b"}).WithLabels({"only-one"}),
               "1 label values for 2 label names");
}

TEST(MetricsRegistryTest, CountersIgnoreNegativeIncrementsGaugesGoBothWays) {
  MetricsRegistry registry;
  Counter& counter = registry.AddCounter("c_total", "C.").Get();
  counter.Increment(1.5);
  counter.Increment(-4);
  EXPECT_EQ(counter.value(), 1.5);
  Gauge& gauge = registry.AddGauge("g", "G.").Get();
  gauge.Add(3);
  gauge.Add(-5);
  EXPECT_EQ(gauge.value(), -2);
}

TEST(HistogramTest, BoundsAreInclusiveAndNanCountsOnlyInInf) {
  Histogram histogram({1, 2});
  histogram.Observe(1);  // le="1" is inclusive.
  histogram.Observe(1.5);
  histogram.Observe(std::numeric_limits<double>::quiet_NaN());
  Histogram::Snapshot snapshot = histogram.snapshot();
  EXPECT_EQ(snapshot.cumulative, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(snapshot.count, 3u);
}

TEST(MetricsRegistryTest, ConcurrentIncrementsAreAllCounted) {
  MetricsRegistry registry;
  MetricFamily<Counter>& family = registry.AddCounter("c_total", "C.", {"thread"});
  Histogram& histogram = registry.AddHistogram("h", "H.", {}, {0.5}).Get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&family, &histogram] {
      for (int i = 0; i < 10000; ++i) {
        family.WithLabels({"shared"}).Increment();
        histogram.Observe(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(family.WithLabels({"shared"}).value(), 40000);
  EXPECT_EQ(histogram.snapshot().count, 40000u);
}

TEST(FormatMetricValueTest, IntegersPlainFractionsShortestSpecialsByName) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(1234567), "1234567");
  EXPECT_EQ(FormatMetricValue(-3), "-3");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(0.0025), "0.0025");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
}

TEST(StatusCodeNameTest, NamesEveryCode) {
  EXPECT_STREQ(StatusCodeName(0), "OK");
  EXPECT_STREQ(StatusCodeName(5), "NOT_FOUND");
  EXPECT_STREQ(StatusCodeName(16), "UNAUTHENTICATED");
  EXPECT_STREQ(StatusCodeName(99), "UNKNOWN");
}


TEST(StatusCodeNameTest, NamesEveryCanonicalGrpcCode) {
  // gRPC's codes 0..16 are the canonical codes, whose names Abseil also spells.
  for (int code = 0; code <= 16; ++code) {
    EXPECT_EQ(StatusCodeName(code), absl::StatusCodeToString(static_cast<absl::StatusCode>(code)))
        << code;
  }
  EXPECT_STREQ(StatusCodeName(17), "UNKNOWN");
  EXPECT_STREQ(StatusCodeName(-1), "UNKNOWN");
}

TEST(BucketsTest, LatencyBucketsSpanOneMillisecondToTenSeconds) {
  const std::vector<double> bounds = LatencyBuckets();
  ASSERT_FALSE(bounds.empty());
  EXPECT_EQ(bounds.front(), 0.001);
  EXPECT_EQ(bounds.back(), 10.0);
  for (size_t i = 1; i < bounds.size(); ++i) EXPECT_LT(bounds[i - 1], bounds[i]) << i;
  // Boundaries a dashboard's quantiles read: 100 ms and 1 s are bucket edges.
  EXPECT_NE(std::find(bounds.begin(), bounds.end(), 0.1), bounds.end());
  EXPECT_NE(std::find(bounds.begin(), bounds.end(), 1.0), bounds.end());
}

TEST(BucketsTest, TrainingBucketsSpanTenMillisecondsToThirtyMinutes) {
  const std::vector<double> bounds = TrainingDurationBuckets();
  ASSERT_FALSE(bounds.empty());
  EXPECT_EQ(bounds.front(), 0.01);
  EXPECT_EQ(bounds.back(), 1800.0);
  for (size_t i = 1; i < bounds.size(); ++i) EXPECT_LT(bounds[i - 1], bounds[i]) << i;
  // The registry accepts them (finite and strictly increasing).
  MetricsRegistry registry;
  registry.AddHistogram("fit_seconds", "Fits.", {}, bounds).Get().Observe(3600);
  std::vector<uint64_t> expected(bounds.size(), 0);
  expected.push_back(1);  // an hour: above 30 min, in +Inf only
  EXPECT_EQ(registry.AddHistogram("fit_seconds", "Fits.", {}, bounds).Get().snapshot().cumulative,
            expected);
}

TEST(HistogramTest, ValuesAboveTheLastBoundCountOnlyInInfAndInTheSum) {
  Histogram histogram({0.5, 1});
  histogram.Observe(0.5000001);
  histogram.Observe(2);
  histogram.Observe(-3);  // below every bound: the first bucket
  const Histogram::Snapshot snapshot = histogram.snapshot();
  EXPECT_EQ(snapshot.bounds, (std::vector<double>{0.5, 1}));
  EXPECT_EQ(snapshot.cumulative, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(snapshot.count, 3u);
  EXPECT_NEAR(snapshot.sum, -0.4999999, 1e-12);
}

TEST(MetricsRegistryTest, CountersIgnoreNanIncrementsAndCountZero) {
  Counter counter;
  counter.Increment(std::nan(""));
  counter.Increment(0);
  EXPECT_EQ(counter.value(), 0);
  counter.Increment();
  EXPECT_EQ(counter.value(), 1);
}

TEST(FormatMetricValueTest, LargeIntegersAndNegativeFractions) {
  EXPECT_EQ(FormatMetricValue(999999999999999.0), "999999999999999");
  EXPECT_EQ(FormatMetricValue(1e15), "1e+15");
  EXPECT_EQ(FormatMetricValue(-0.5), "-0.5");
  EXPECT_EQ(FormatMetricValue(1800), "1800");
}

TEST(MetricsRegistryTest, ValidNamesMayUseColonsAndDigitsAfterTheFirstCharacter) {
  MetricsRegistry registry;
  registry.AddCounter("job:rate_5m_total", "Colon.", {"label_2"}).WithLabels({"x"}).Increment();
  registry.AddGauge("_g2", "Underscore first.").Get().Set(1);
  const std::string text = registry.RenderText();
  EXPECT_NE(text.find("job:rate_5m_total{label_2=\"x\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("_g2 1\n"), std::string::npos) << text;
}

TEST(MetricsRegistryDeathTest, InvalidNamesAndReservedLabelsAbort) {
  MetricsRegistry registry;
  EXPECT_DEATH(registry.AddCounter("2xx_total", "X."), "invalid metric name");
  EXPECT_DEATH(registry.AddCounter("", "X."), "invalid metric name");
  EXPECT_DEATH(registry.AddCounter("x_total", "X.", {"a:b"}), "invalid label name");
  EXPECT_DEATH(registry.AddCounter("x_total", "X.", {"9a"}), "invalid label name");
  EXPECT_DEATH(registry.AddCounter("x_total", "X.", {"__reserved"}), "invalid label name");
  EXPECT_DEATH(registry.AddHistogram("h", "H.", {}, {1, std::numeric_limits<double>::infinity()}),
               "strictly increasing");
  EXPECT_DEATH(registry.AddHistogram("h", "H.", {}, {2, 1}), "strictly increasing");
  registry.AddHistogram("h2", "H.", {}, {1, 2});
  EXPECT_DEATH(registry.AddHistogram("h2", "H.", {}, {1, 3}), "registered twice differently");
  registry.AddCallbackGauge("cb", "C.", {}, [] { return std::vector<GaugeSample>{}; });
  EXPECT_DEATH(
      registry.AddCallbackGauge("cb", "C.", {}, [] { return std::vector<GaugeSample>{}; }),
      "registered twice differently");
}

TEST(MetricsRegistryTest, LeIsAllowedOutsideHistograms) {
  MetricsRegistry registry;
  registry.AddGauge("g", "G.", {"le"}).WithLabels({"1"}).Set(2);
  EXPECT_NE(registry.RenderText().find("g{le=\"1\"} 2\n"), std::string::npos);
}

// metrics.h renders the text exposition format 0.0.4, whose HELP text escapes only backslash and
// newline: a double quote in HELP is written as it is (label values are the ones that escape it).
TEST(MetricsRegistryTest, HelpTextKeepsDoubleQuotes) {
  MetricsRegistry registry;
  registry.AddGauge("g", "Connections in the \"open\" state.").Get().Set(1);
  EXPECT_EQ(registry.RenderText(),
            "# HELP g Connections in the \"open\" state.\n"
            "# TYPE g gauge\n"
            "g 1\n");
}

// metrics.h FormatMetricValue: "otherwise the shortest text that reads back as the same
// double". 0.1 + 0.2 is the double just above 0.3, which needs 17 significant digits;
// 123456.789 needs 9, more than a default "%g" keeps.
TEST(FormatMetricValueTest, FractionsKeepEveryDigitTheDoubleNeeds) {
  EXPECT_EQ(FormatMetricValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatMetricValue(123456.789), "123456.789");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");
}

// metrics.h: Counter and Gauge are thread-safe, their hot path an atomic add without any lock:
// adds from several threads at once to one child are all counted, none lost.
TEST(MetricsRegistryTest, ConcurrentAddsToOneChildLoseNothing) {
  MetricsRegistry registry;
  Counter& counter = registry.AddCounter("c_total", "C.").Get();
  Gauge& gauge = registry.AddGauge("g", "G.").Get();
  constexpr int kThreads = 4;
  constexpr int kAdds = 1000000;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&counter, &gauge, &ready] {
      // Every thread starts adding at once, so that the adds overlap.
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < kAdds; ++i) {
        counter.Increment();
        gauge.Add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter.value(), kThreads * kAdds);
  EXPECT_EQ(gauge.value(), kThreads * kAdds);
}

}  // namespace
}  // namespace verity::server
