// LeaseRenewer: keeps a claimed training job's lease alive while its worker fits.
//
// A background thread calls `renew` every lease/3. A renewal that fails for any reason but
// ABORTED (a database outage, a timeout) is retried every lease/10 until the lease, counted from
// the last successful renewal, would have run out: a brief outage must not cost a fit, since the
// job stays this worker's as long as its lease holds. ABORTED (another worker owns the job, or it
// ended) or an expired lease marks the lease lost and stops the thread.
//
// Thread-safety: lost() may be called from any thread; Stop() (also run by the destructor) from
// the owner's.
#ifndef VERITY_SERVER_TRAINING_LEASE_RENEWER_H_
#define VERITY_SERVER_TRAINING_LEASE_RENEWER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace verity::server {

class LeaseRenewer {
 public:
  // Starts renewing. `job` names the job in log lines.
  LeaseRenewer(std::function<absl::Status()> renew, absl::Duration lease, std::string job);
  ~LeaseRenewer() { Stop(); }

  LeaseRenewer(const LeaseRenewer&) = delete;
  LeaseRenewer& operator=(const LeaseRenewer&) = delete;

  void Stop();

  // Whether the lease was lost (ABORTED, or no successful renewal for a whole lease).
  bool lost() const { return lost_.load(); }

 private:
  void Run();

  const std::function<absl::Status()> renew_;
  const absl::Duration lease_;
  const std::string job_;
  absl::Notification stop_;
  std::atomic<bool> lost_{false};
  std::thread thread_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_TRAINING_LEASE_RENEWER_H_
