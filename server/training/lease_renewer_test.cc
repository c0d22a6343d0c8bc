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

// lease_renewer.h: failed renewals are retried every lease/10 only until the lease, counted
// from the last success (here the claim), would have run out. Lease 600 ms: renewals at
// >= 200 ms, then >= 260, 320, ..., 620 ms; the 8th call comes at least 620 ms after the
// claim, when the lease has run out, so the lease is lost after at most 8 calls (fewer if the
// thread is scheduled late, never more). Were a failing lease kept for longer, there would be
// retries past the 8th.
TEST(LeaseRenewerTest, FailedRenewalsStopOnceTheLeaseHasRunOut) {
  std::atomic<int> calls{0};
  LeaseRenewer renewer(
      [&]() -> absl::Status {
        ++calls;
        return absl::UnavailableError("connection refused");
      },
      absl::Milliseconds(600), "job 6");
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!renewer.lost() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(renewer.lost());
  renewer.Stop();
  EXPECT_GE(calls.load(), 2);
  EXPECT_LE(calls.load(), 8);
}

// After a failed renewal is retried successfully, renewals go back to every lease/3
// (lease_renewer.h), not every lease/10. The wait before a renewal never ends early, so the
// gap between the successful retry and the next renewal is at least lease/3 = 1 s (a retry
// period, 300 ms, would be far below). The lease, 3 s, leaves a loaded machine seconds of
// slack before the failed first renewal could lose it.
TEST(LeaseRenewerTest, ASuccessfulRetryRestoresTheRenewalPeriod) {
  absl::Mutex mu;
  std::vector<absl::Time> calls;
  LeaseRenewer renewer(
      [&]() -> absl::Status {
        absl::MutexLock lock(&mu);
        calls.push_back(absl::Now());
        return calls.size() == 1 ? absl::UnavailableError("timeout") : absl::OkStatus();
      },
      absl::Seconds(3), "job 7");
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (absl::Now() < give_up) {
    {
      absl::MutexLock lock(&mu);
      if (calls.size() >= 3) break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  renewer.Stop();
  EXPECT_FALSE(renewer.lost());
  absl::MutexLock lock(&mu);
  ASSERT_GE(calls.size(), 3u);
  EXPECT_GE(absl::ToDoubleSeconds(calls[2] - calls[1]), 0.999);
}

}  // namespace
}  // namespace verity::server
