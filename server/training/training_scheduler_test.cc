// TrainingScheduler::NextPassDelay: the rest the background trainer takes after a pass. The
// loop itself (fitting due projects) is exercised end to end by tests/ through a real server.
#include "server/training/training_scheduler.h"

#include <cmath>

#include "gtest/gtest.h"

namespace verity::server {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(200);
constexpr absl::Duration kStaleness = absl::Seconds(30);

// NextPassDelay in seconds (the fraction's arithmetic is floating point).
double DelaySeconds(absl::Duration busy, double fraction) {
  return absl::ToDoubleSeconds(TrainingScheduler::NextPassDelay(busy, fraction, kPoll, kStaleness));
}

TEST(NextPassDelay, HalfBusyRestsAsLongAsItFit) {
  EXPECT_NEAR(DelaySeconds(absl::Seconds(3), 0.5), 3.0, 1e-9);
}

TEST(NextPassDelay, RestScalesWithTheIdleShare) {
  // A quarter busy: three times the fit's duration at rest.
  EXPECT_NEAR(DelaySeconds(absl::Seconds(2), 0.25), 6.0, 1e-9);
  // Four fifths busy: a quarter of the fit's duration.
  EXPECT_NEAR(DelaySeconds(absl::Seconds(4), 0.8), 1.0, 1e-9);
}

TEST(NextPassDelay, FullyBusyOnlyPolls) {
  EXPECT_EQ(TrainingScheduler::NextPassDelay(absl::Seconds(10), 1.0, kPoll, kStaleness), kPoll);
}

TEST(NextPassDelay, NeverShorterThanThePollInterval) {
  // A pass that fit nothing (or fit for a millisecond) waits the poll interval.
  EXPECT_EQ(TrainingScheduler::NextPassDelay(absl::ZeroDuration(), 0.5, kPoll, kStaleness), kPoll);
  EXPECT_EQ(TrainingScheduler::NextPassDelay(absl::Milliseconds(1), 0.5, kPoll, kStaleness), kPoll);
}

TEST(NextPassDelay, NeverLongerThanTheStalenessBound) {
  // A 40 s fit at a quarter busy would rest 120 s; the staleness bound caps it.
  EXPECT_EQ(TrainingScheduler::NextPassDelay(absl::Seconds(40), 0.25, kPoll, kStaleness),
            kStaleness);
}

TEST(NextPassDelay, AFractionOutsideZeroToOneFitsBackToBack) {
  for (double fraction : {0.0, -1.0, 1.5, std::nan("")}) {
    EXPECT_EQ(TrainingScheduler::NextPassDelay(absl::Seconds(5), fraction, kPoll, kStaleness), kPoll)
        << fraction;
  }
}

}  // namespace
}  // namespace verity::server
