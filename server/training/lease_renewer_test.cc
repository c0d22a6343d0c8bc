#include "server/training/lease_renewer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"

#include "absl/time/clock.h"

namespace verity::server {
namespace {

TEST(LeaseRenewerTest, ATransientFailureIsRetriedAndTheLeaseKept) {
  std::atomic<int> calls{0};
  LeaseRenewer renewer(
      [&]() -> absl::Status {
        // The database is unreachable for the first two renewals, then back.
        return ++calls <= 2 ? absl::UnavailableError("connection refused") : absl::OkStatus();
      },
      absl::Milliseconds(900), "job 1");
  absl::SleepFor(absl::Milliseconds(1500));
  renewer.Stop();
  EXPECT_FALSE(renewer.lost());
  EXPECT_GE(calls.load(), 3) << "a failed renewal must be retried";
}

TEST(LeaseRenewerTest, ALeaseThatCannotBeRenewedForAWholeLeaseIsLost) {
  std::atomic<int> calls{0};
  LeaseRenewer renewer(
      [&]() -> absl::Status {
        ++calls;
        return absl::UnavailableError("connection refused");
      },
      absl::Milliseconds(300), "job 2");
  absl::SleepFor(absl::Milliseconds(800));
  EXPECT_TRUE(renewer.lost());
  renewer.Stop();
  EXPECT_GT(calls.load(), 1) << "retried before giving up";
}

TEST(LeaseRenewerTest, AnotherOwnerEndsTheLeaseAtOnce) {
  std::atomic<int> calls{0};
  LeaseRenewer renewer(
      [&]() -> absl::Status {
        ++calls;
        return absl::AbortedError("training job 3 is no longer owned by w");
      },
      absl::Milliseconds(300), "job 3");
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(renewer.lost());
  renewer.Stop();
  EXPECT_EQ(calls.load(), 1);
}

// Renewals every lease/3; a failed one retried every lease/10 (lease_renewer.h).
TEST(LeaseRenewerTest, RenewsAfterAThirdOfTheLeaseAndRetriesAfterATenth) {
  absl::Mutex mu;
  std::vector<absl::Time> calls;
  const absl::Time start = absl::Now();
  LeaseRenewer renewer(
      [&]() -> absl::Status {
        absl::MutexLock lock(&mu);
        calls.push_back(absl::Now());
        return calls.size() == 1 ? absl::UnavailableError("timeout") : absl::OkStatus();
      },
      absl::Seconds(6), "job 4");
  absl::SleepFor(absl::Milliseconds(3400));
  renewer.Stop();
  EXPECT_FALSE(renewer.lost());
  absl::MutexLock lock(&mu);
  ASSERT_GE(calls.size(), 2u);
  // First renewal at 2 s (lease/3), not at lease/2 (3 s) or lease/4 (1.5 s). The bounds
  // leave the thread 0.6 s of scheduling delay on a loaded machine.
  const double first = absl::ToDoubleSeconds(calls[0] - start);
  EXPECT_GE(first, 1.95);
  EXPECT_LT(first, 2.6);
  // The retry 0.6 s later (lease/10), not lease/5 (1.2 s) or a whole period (2 s).
  const double retry = absl::ToDoubleSeconds(calls[1] - calls[0]);
  EXPECT_GE(retry, 0.58);
  EXPECT_LT(retry, 1.05);
}

// A lease runs out a whole lease after the last successful renewal, not after the claim.
TEST(LeaseRenewerTest, TheLeaseIsCountedFromTheLastSuccessfulRenewal) {
  std::atomic<int> calls{0};
  LeaseRenewer renewer(
      [&]() -> absl::Status {
        // The first renewal (at 1 s) succeeds; the database is gone after it.
        return ++calls == 1 ? absl::OkStatus() : absl::UnavailableError("connection refused");
      },
      absl::Seconds(3), "job 5");
  // 3.5 s after the claim, 2.5 s after the last renewal: still held (counted from the claim,
  // it would have run out at 3 s).
  absl::SleepFor(absl::Milliseconds(3500));
  EXPECT_FALSE(renewer.lost()) << "lost " << calls.load() << " calls in";
  // 5.2 s after the claim, 4.2 s after the last renewal: lost.
  absl::SleepFor(absl::Milliseconds(1700));
  EXPECT_TRUE(renewer.lost());
  renewer.Stop();
}

}  // namespace
}  // namespace verity::server
