// ReplicaFollower: keeps this server's live projects up to date with the labels that other
// server replicas of the same database commit.
//
// Every commit of annotations sends NOTIFY on storage::AnnotationStore::kLabelsChannel with its
// project's id (inside the transaction, so PostgreSQL delivers it after COMMIT). The follower
// holds one connection of its own that LISTENs there; on a notification it reads the project's
// labels with seq above what memory holds and applies them (CatchUpLabels). Notifications are
// not durable: a listener that was disconnected misses them. So every `poll_interval` the
// follower also lists each project's newest drawn seq (one small query) and catches up every
// loaded project that is behind it. A missed notification costs latency, never a label.
//
// Items, annotators and settings written by other replicas follow the same way: their writes
// bump the project's change_seq and notify (storage/project_changes.h), and the follower then
// re-reads the project's items, annotators and settings and applies what differs
// (LiveProject::ApplyStoredEntities). That re-read costs O(items of the project), so such
// notifications are handled at most once per poll_interval per project; a replica's own
// writes need none.
//
// Model versions follow the same way: every stored version sends NOTIFY on
// storage::ModelVersionStore::kVersionsChannel, and the poll also lists each project's newest
// version; a project with a newer version than it serves is handed to `adopt_stored_version`
// (TrainingScheduler::AdoptStoredVersion, which reads its parameters once).
//
// Projects another replica created are not followed until this server loads them
// (ProjectRegistry::Get loads them on first use).
//
// Thread-safety: Start and Stop from one thread; the follower runs on its own thread.
#ifndef VERITY_SERVER_REPLICATION_REPLICA_FOLLOWER_H_
#define VERITY_SERVER_REPLICATION_REPLICA_FOLLOWER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/observability/metrics.h"
#include "server/state/project_registry.h"
#include "server/state/storage_handles.h"

namespace verity::server {

class ReplicaFollower {
 public:
  struct Options {
    // How often every loaded project is checked against the database's counters, whatever
    // the notifications said.
    absl::Duration poll_interval = absl::Seconds(1);
    // Wait before reconnecting the listening connection after it broke.
    absl::Duration reconnect_delay = absl::Seconds(1);
  };

  // Serves the newest stored version of a project if it is newer than the one served.
  using AdoptStoredVersion = std::function<void(LiveProject&)>;

  // `registry`, `storage` and `metrics` (may be null) must outlive the follower.
  ReplicaFollower(std::string postgres_url, ProjectRegistry& registry, StorageHandles& storage,
                  AdoptStoredVersion adopt_stored_version, Options options,
                  MetricsRegistry* metrics);
  ~ReplicaFollower();  // Stop()

  // Connects and LISTENs, then starts following: every commit after Start returns is followed.
  // UNAVAILABLE if PostgreSQL cannot be reached.
  absl::Status Start();
  // Re-reads the items, annotators and settings of `project` if its change_seq moved past
  // what memory reflects (as each poll does). The training scheduler calls it under the
  // project's fit lock, so that a fit is decided on the settings the database holds.
  void FollowChanges(LiveProject& project);
  // The same, for a caller that holds the project's write order (LiveProject::write_order_mu):
  // the registry's writers, before they decide what is new and count it against the limits.
  void FollowChangesUnderWriteOrder(LiveProject& project);
  void Stop();

 private:
  struct Listener;  // The LISTENing connection (libpqxx stays inside the .cc file).
  struct Metrics;

  void Run();
  // The loaded project with id `project_id`, or null.
  std::shared_ptr<LiveProject> Find(int64_t project_id) const;
  // Catches up the labels of `project`; `trigger` names the metric's reason.
  void CatchUp(LiveProject& project, const char* trigger);
  // Catches up every loaded project whose newest drawn seq is above what memory holds, adopts
  // every newer stored version, and follows every project whose change_seq moved.
  void Poll();

  const std::string postgres_url_;
  ProjectRegistry& registry_;
  StorageHandles& storage_;
  const AdoptStoredVersion adopt_stored_version_;
  const Options options_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Listener> listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_REPLICATION_REPLICA_FOLLOWER_H_
