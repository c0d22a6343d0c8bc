#include "server/training/lease_renewer.h"

#include <gtest/gtest.h>

#include <atomic>

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

}  // namespace
}  // namespace verity::server
