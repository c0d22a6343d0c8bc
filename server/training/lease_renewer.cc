#include "server/training/lease_renewer.h"

#include <utility>

#include "absl/time/clock.h"
#include "server/observability/log.h"

namespace verity::server {

LeaseRenewer::LeaseRenewer(std::function<absl::Status()> renew, absl::Duration lease,
                           std::string job)
    : renew_(std::move(renew)), lease_(lease), job_(std::move(job)) {
  thread_ = std::thread([this] { Run(); });
}

void LeaseRenewer::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void LeaseRenewer::Run() {
  const absl::Duration period = lease_ / 3;
  const absl::Duration retry = lease_ / 10;
  absl::Time renewed = absl::Now();  // The claim granted the lease.
  absl::Duration wait = period;
  while (!stop_.WaitForNotificationWithTimeout(wait)) {
    const absl::Status s = renew_();
    if (s.ok()) {
      renewed = absl::Now();
      wait = period;
      continue;
    }
    if (absl::IsAborted(s) || absl::Now() - renewed >= lease_) {
      LogEvent("job_lease_lost", {{"job", job_}, {"error", s.ToString()}});
      lost_ = true;
      return;
    }
    LogEvent("job_lease_renewal_failed", {{"job", job_}, {"error", s.ToString()}});
    wait = retry;
  }
}

}  // namespace verity::server
