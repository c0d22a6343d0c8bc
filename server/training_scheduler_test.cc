// TrainingScheduler::NextPassDelay: the rest the background trainer takes after a pass. The
// loop itself (fitting due projects) is exercised end to end by tests/ through a real server.
#include "server/training_scheduler.h"

#include "gtest/gtest.h"

namespace verity::server {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(200);

// NextPassDelay in seconds (the fraction's arithmetic is floating point).
double DelaySeconds(absl::Duration busy, double fraction) {
  return absl::ToDoubleSeconds(TrainingScheduler::NextPassDelay(busy, fraction, kPoll));
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
  EXPECT_EQ(TrainingScheduler::NextPassDelay(absl::Seconds(10), 1.0, kPoll), kPoll);
}

TEST(NextPassDelay, NeverShorterThanThePollInterval) {
  // A pass that fit nothing (or fit for a millisecond) waits the poll interval.
  EXPECT_EQ(TrainingScheduler::NextPassDelay(absl::ZeroDuration(), 0.5, kPoll), kPoll);
  EXPECT_EQ(TrainingScheduler::NextPassDelay(absl::Milliseconds(1), 0.5, kPoll), kPoll);
}

}  // namespace
}  // namespace verity::server
