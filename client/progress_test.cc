#include "client/progress.h"

#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity::client {
namespace {

TEST(FormatCountTest, GroupsThousands) {
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(1000), "1,000");
  EXPECT_EQ(FormatCount(96883), "96,883");
  EXPECT_EQ(FormatCount(1234567), "1,234,567");
  EXPECT_EQ(FormatCount(-1234), "-1,234");
}

TEST(FormatEtaTest, PicksUnitsByMagnitude) {
  EXPECT_EQ(FormatEta(absl::Milliseconds(400)), "0s");
  EXPECT_EQ(FormatEta(absl::Seconds(42)), "42s");
  EXPECT_EQ(FormatEta(absl::Seconds(185)), "3m05s");
  EXPECT_EQ(FormatEta(absl::Seconds(2 * 3600 + 7 * 60 + 59)), "2h07m");
  EXPECT_EQ(FormatEta(absl::Seconds(-5)), "0s");
}

TEST(FormatProgressTest, ShowsCountPercentRateAndEta) {
  EXPECT_EQ(FormatProgress(45000, 96883, absl::Seconds(2), "labels"),
            "45,000/96,883 labels (46%)  22,500 labels/s  ETA 2s");
  EXPECT_EQ(FormatProgress(1000, 1000, absl::Milliseconds(500), "labels"),
            "1,000/1,000 labels (100%)  2,000 labels/s  ETA 0s");
}

TEST(FormatProgressTest, ShowsDashesBeforeARateIsKnown) {
  EXPECT_EQ(FormatProgress(0, 500, absl::Seconds(3), "labels"),
            "0/500 labels (0%)  -- labels/s  ETA --");
  EXPECT_EQ(FormatProgress(10, 500, absl::ZeroDuration(), "items"),
            "10/500 items (2%)  -- items/s  ETA --");
  EXPECT_EQ(FormatProgress(0, 0, absl::ZeroDuration(), "labels"),
            "0/0 labels (100%)  -- labels/s  ETA --");
}

TEST(FormatProgressTest, CountsDoneBeyondAnEstimatedTotalAsTheTotal) {
  EXPECT_EQ(FormatProgress(120, 100, absl::Seconds(2), "items"),
            "120/120 items (100%)  60 items/s  ETA 0s");
}

TEST(ElapsedTickerTest, DrawsAtOnceAndErasesTheLineOnFinish) {
  std::ostringstream out;
  // An interval far beyond the test: only the constructor draws.
  ElapsedTicker ticker(out, "training birds:", absl::Hours(1));
  ticker.Finish();
  ticker.Finish();  // Idempotent.
  EXPECT_EQ(out.str(), "\rtraining birds: 0s\x1b[K\r\x1b[K");
}

TEST(ProgressMeterTest, RedrawsInPlaceAtMostOncePerInterval) {
  std::ostringstream out;
  absl::Time now = absl::FromUnixSeconds(1000);
  ProgressMeter::Options options;
  options.now = [&now] { return now; };
  ProgressMeter meter(out, 100, options);

  now += absl::Seconds(1);
  meter.Update(10);
  now += absl::Milliseconds(50);
  meter.Update(20);  // Within 100 ms of the last draw: skipped.
  now += absl::Milliseconds(50);
  meter.Update(30);  // 100 ms after it: drawn.
  meter.Finish();
  meter.Finish();  // Nothing drawn since the first: writes nothing.
  EXPECT_EQ(out.str(),
            "\r10/100 labels (10%)  10 labels/s  ETA 9s\x1b[K"
            "\r30/100 labels (30%)  27 labels/s  ETA 2s\x1b[K"
            "\r\x1b[K");
}

TEST(ProgressMeterTest, FinishWithoutDrawingWritesNothing) {
  std::ostringstream out;
  ProgressMeter meter(out, 100, ProgressMeter::Options());
  meter.Finish();
  EXPECT_EQ(out.str(), "");
}

// The units switch at whole minutes and hours (progress.h: "42s", "3m05s",
// "2h07m").
TEST(FormatEtaTest, SwitchesUnitsExactlyAtAMinuteAndAnHour) {
  EXPECT_EQ(FormatEta(absl::Seconds(59)), "59s");
  EXPECT_EQ(FormatEta(absl::Seconds(60)), "1m00s");
  EXPECT_EQ(FormatEta(absl::Seconds(3599)), "59m59s");
  EXPECT_EQ(FormatEta(absl::Seconds(3600)), "1h00m");
}

// The percentage is rounded down: 999 of 1,000 is not yet 100%.
TEST(FormatProgressTest, RoundsThePercentageDown) {
  EXPECT_EQ(FormatProgress(999, 1000, absl::Seconds(1), "labels"),
            "999/1,000 labels (99%)  999 labels/s  ETA 0s");
  EXPECT_EQ(FormatProgress(1, 3, absl::Seconds(1), "items"),
            "1/3 items (33%)  1 items/s  ETA 2s");
}

// progress.h: "within the first millisecond, rate and ETA are shown as --"; from 1 ms on they
// are shown (10 items in 1 ms: 10,000/s, 490 left take 49 ms).
TEST(FormatProgressTest, ShowsDashesOnlyWithinTheFirstMillisecond) {
  EXPECT_EQ(FormatProgress(10, 500, absl::Microseconds(999), "items"),
            "10/500 items (2%)  -- items/s  ETA --");
  EXPECT_EQ(FormatProgress(10, 500, absl::Milliseconds(1), "items"),
            "10/500 items (2%)  10,000 items/s  ETA 0s");
}

// The rate done / elapsed is shown to the nearest whole unit: 5 in 3 s is 1.67/s, shown as 2.
TEST(FormatProgressTest, RoundsTheRateToTheNearestWholeNumber) {
  EXPECT_EQ(FormatProgress(5, 10, absl::Seconds(3), "labels"),
            "5/10 labels (50%)  2 labels/s  ETA 3s");
}

// A stream buffer that keeps what is written and notifies once `n` carriage returns (redraws)
// have been written; safe to write from another thread than the one that waits.
class RedrawCounter : public std::streambuf {
 public:
  explicit RedrawCounter(int n) : wanted_(n) {}

  // Waits up to `timeout` for the n-th redraw.
  bool WaitForRedraws(absl::Duration timeout) {
    return enough_.WaitForNotificationWithTimeout(timeout);
  }
  std::string text() const {
    absl::MutexLock lock(&mutex_);
    return text_;
  }

 protected:
  int_type overflow(int_type c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    absl::MutexLock lock(&mutex_);
    text_.push_back(static_cast<char>(c));
    if (c == '\r' && ++redraws_ == wanted_) enough_.Notify();
    return c;
  }

 private:
  const int wanted_;
  mutable absl::Mutex mutex_;
  std::string text_ ABSL_GUARDED_BY(mutex_);
  int redraws_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Notification enough_;
};

// progress.h: the ticker redraws its line every `interval` from its own thread, after the
// constructor's first draw.
TEST(ElapsedTickerTest, RedrawsEveryIntervalUntilFinished) {
  RedrawCounter counter(/*n=*/3);
  std::ostream out(&counter);
  ElapsedTicker ticker(out, "training birds:", absl::Milliseconds(1));
  ASSERT_TRUE(counter.WaitForRedraws(absl::Seconds(30)));
  ticker.Finish();
  const std::string text = counter.text();
  // Two draws at least ("0s": far below a second), then the erase.
  EXPECT_THAT(text, ::testing::StartsWith("\rtraining birds: 0s\x1b[K\rtraining birds: 0s\x1b[K"));
  EXPECT_THAT(text, ::testing::EndsWith("\r\x1b[K"));
}

}  // namespace
}  // namespace verity::client
