// ProjectRegistry: the server's live projects by name, loaded from PostgreSQL.
//
// At start-up LoadAll() restores every project (labels, latest model version, posteriors), or
// LoadAllInBackground() starts doing so on several threads and returns at once: a project a
// thread is loading answers UNAVAILABLE ("loading"), one no thread has reached yet loads on its
// first call; when every listed project has loaded (or failed to), the initial load is over
// (OnBackgroundLoadDone, event=projects_loaded). With a memory budget (EnforceMemoryBudget),
// projects idle for long enough are unloaded, least recently used first, while the loaded
// projects' estimated memory exceeds it; the next call loads them again from PostgreSQL. A
// project that cannot be restored is logged and skipped: the others serve, and Get() answers
// UNAVAILABLE with the reason, trying the load again at most every load_retry_interval (a
// repaired project is picked up without a restart; a broken one under heavy traffic does not
// reload on every call). Get() also finds a
// project created by another server replica since, by loading it from PostgreSQL on first use.
// Every caller gets the one registered LiveProject of a name, whichever call loaded or created
// it.
//
// Settings and item changes hold the project's write-order lock across their database write and
// their memory update, so that memory ends as the database's last commit left it.
//
// Thread-safety: thread-safe.
#ifndef VERITY_SERVER_STATE_PROJECT_REGISTRY_H_
#define VERITY_SERVER_STATE_PROJECT_REGISTRY_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/state/live_project.h"
#include "server/state/storage_handles.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {

class ProjectRegistry {
 public:
  // A project that failed to load is tried again at most every `load_retry_interval`.
  explicit ProjectRegistry(StorageHandles& storage,
                           absl::Duration load_retry_interval = absl::Seconds(10))
      : storage_(storage), load_retry_interval_(load_retry_interval) {}
  ~ProjectRegistry();  // StopBackgroundWork().

  // Lists the stored projects and loads them on `threads` background threads (see the file
  // comment). Fails only if the projects cannot be listed.
  absl::Status LoadAllInBackground(int threads) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether every project LoadAllInBackground listed has been loaded (or failed to); true when
  // it was never called.
  bool BackgroundLoadDone() const ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `done` once when BackgroundLoadDone() becomes true: on the last background loader,
  // after it logs event=projects_loaded, or at once on this thread if it is true already. Never
  // after StopBackgroundWork() (a load stopped half-way is not done). At most one callback.
  void OnBackgroundLoadDone(std::function<void()> done) ABSL_LOCKS_EXCLUDED(mu_);
  // Projects LoadAllInBackground listed that are neither loaded nor failed yet (0 when done).
  int64_t ProjectsStillLoading() const ABSL_LOCKS_EXCLUDED(mu_);
  // Stops the background loaders (a project one is loading finishes first; the rest are left
  // to their first call) and the budget thread, and joins them. Idempotent; call it before
  // whatever OnBackgroundLoadDone's callback uses goes away.
  void StopBackgroundWork() ABSL_LOCKS_EXCLUDED(mu_);

  // Keeps the loaded projects' estimated memory (LiveProject::EstimatedBytes) at most `bytes`:
  // every second, unloads the least recently used projects that no call used for `idle`, that
  // are not fitting and that nothing else holds (an open ingest stream holds its project), until
  // it is. A project needed again loads on its next call.
  void EnforceMemoryBudget(int64_t bytes, absl::Duration idle) ABSL_LOCKS_EXCLUDED(mu_);
  // One pass of that now, at `now`; returns the names unloaded. No-op without a budget.
  std::vector<std::string> EvictOverBudget(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // The loaded project of that name, or null; never loads one (a listing must not undo the
  // budget's work).
  std::shared_ptr<LiveProject> IfLoaded(absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);
  // For a project the budget unloaded and no call has loaded since: its counts when it was
  // unloaded (labels other replicas commit meanwhile are not in them).
  std::optional<ProjectCounts> CountsIfUnloaded(absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // What each project the budget unloaded, and no call has loaded since, showed when it was
  // unloaded (LiveProject::Summary), by name: the console and the per-project gauges list them
  // beside All()'s.
  std::vector<ProjectSummary> UnloadedSummaries() const ABSL_LOCKS_EXCLUDED(mu_);

  // For a project this server has neither loaded nor unloaded (one created, or only used, on
  // another replica of the database): its counts from the database, without loading it. Items
  // and annotators come from `record`; live labels are counted, and a count is reused for
  // kStoredLabelCountReuse, so that listing in a loop does not recount a large project. One
  // caller recounts an expired count while the others use the old one.
  absl::StatusOr<ProjectCounts> StoredCounts(const storage::ProjectRecord& record, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr absl::Duration kStoredLabelCountReuse = absl::Minutes(1);
  // True while a start-up loader loads the project, or while its last load here failed less
  // than load_retry_interval ago (GetProject says why; after that Get tries again); a listing
  // leaves such a project out.
  bool LoadingOrFailed(absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);

  // Loads every stored project. Fails only if the projects cannot be listed; a project that
  // cannot be restored is logged (event=project_load_failed) and left to Get().
  absl::Status LoadAll() ABSL_LOCKS_EXCLUDED(mu_);

  // NOT_FOUND (naming the project) if no such project exists in memory or in PostgreSQL;
  // UNAVAILABLE with the reason if it exists but cannot be loaded.
  absl::StatusOr<std::shared_ptr<LiveProject>> Get(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);

  // Creates and persists a validated project. ALREADY_EXISTS if the name is taken;
  // UNIMPLEMENTED if its truth method is not built.
  absl::StatusOr<std::shared_ptr<LiveProject>> Create(const v1::Project& project)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Persists and applies new settings (an unset model.method keeps the project's method).
  // `admit`, when given, refuses the update when not OK. Both are decided on the settings
  // stored now, read under the project row's lock in the write's transaction, so they see what
  // every update before it wrote, through this server or another replica.
  absl::Status UpdateSettings(
      LiveProject& project, const v1::ProjectSettings& settings,
      const std::function<absl::Status(const v1::ProjectSettings& current)>& admit = nullptr);

  // With several replicas: `follow` brings a project's items, annotators and settings up to
  // the database's (ReplicaFollower::FollowChangesUnderWriteOrder), so that a write through
  // this server counts as new, and against the limits, only what no replica stored yet. Set
  // once, before serving; AddItems and FollowStoredChanges call it under the write order.
  void SetFollowStoredChanges(std::function<void(LiveProject&)> follow) {
    follow_stored_changes_ = std::move(follow);
  }
  // Runs the function above, if set; the caller holds project.write_order_mu().
  void FollowStoredChanges(LiveProject& project) const {
    if (follow_stored_changes_) follow_stored_changes_(project);
  }

  // Persists items (AddItems: new ones, gold labels, priorities, features; validated by the
  // caller) and registers them with the project. Returns each write's item index. `admit`, if
  // set, runs first under the project's write order (so that calls at once are admitted one
  // after the other, e.g. against the project's limits); its error refuses the call.
  absl::StatusOr<std::vector<int32_t>> AddItems(
      LiveProject& project, std::vector<storage::ItemWrite> writes,
      const std::function<absl::Status()>& admit = nullptr);

  // Test-only hooks: run after Create's INSERT has committed and before the project is
  // registered; and between the database write and the memory update of UpdateSettings and
  // AddItems. Set before any concurrent use.
  void SetAfterCreateStoredHookForTesting(std::function<void()> hook) {
    after_create_stored_ = std::move(hook);
  }
  void SetBetweenWriteAndApplyHookForTesting(std::function<void()> hook) {
    between_write_and_apply_ = std::move(hook);
  }
  // Runs in a background loader before it loads each project.
  void SetBeforeBackgroundLoadHookForTesting(std::function<void(const std::string&)> hook) {
    before_background_load_ = std::move(hook);
  }
  // Runs before Get loads a project that is not loaded (once per load, not per caller).
  void SetBeforeLoadHookForTesting(std::function<void(const std::string&)> hook) {
    before_load_ = std::move(hook);
  }

  std::vector<std::shared_ptr<LiveProject>> All() const ABSL_LOCKS_EXCLUDED(mu_);

  // Builds a project's live state from PostgreSQL without registering it (training workers
  // load a fresh copy for each job).
  absl::StatusOr<std::shared_ptr<LiveProject>> Load(const storage::ProjectRecord& record);

 private:
  // Load's reads (Load adds the log line and the first use).
  absl::StatusOr<std::shared_ptr<LiveProject>> LoadFromStorage(
      const storage::ProjectRecord& record);
  // Get's load of a project that is not loaded: reads its record, loads and registers it (or
  // records the failure).
  absl::StatusOr<std::shared_ptr<LiveProject>> LoadAndRegister(absl::string_view name)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A load by Get in progress: the first caller loads, the others wait for its result.
  struct PendingLoad {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::StatusOr<std::shared_ptr<LiveProject>> result ABSL_GUARDED_BY(mu);
  };
  StorageHandles& storage_;
  const absl::Duration load_retry_interval_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<LiveProject>> projects_ ABSL_GUARDED_BY(mu_);
  // Projects whose last load failed: when, and the UNAVAILABLE answer until the next try.
  struct LoadFailure {
    absl::Time at;
    absl::Status status;
  };
  absl::flat_hash_map<std::string, LoadFailure> failed_ ABSL_GUARDED_BY(mu_);
  std::function<void()> after_create_stored_;
  std::function<void()> between_write_and_apply_;
  std::function<void(LiveProject&)> follow_stored_changes_;
  std::function<void(const std::string&)> before_background_load_;
  std::function<void(const std::string&)> before_load_;
  absl::flat_hash_map<std::string, std::shared_ptr<PendingLoad>> pending_loads_
      ABSL_GUARDED_BY(mu_);

  void BackgroundLoader() ABSL_LOCKS_EXCLUDED(mu_);
  void BudgetLoop() ABSL_LOCKS_EXCLUDED(mu_);

  // Background loading: the projects not yet taken by a loader, and those being loaded (since).
  std::vector<storage::ProjectRecord> to_load_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> loading_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> loaders_;
  // False from LoadAllInBackground until its last loader finishes.
  bool background_done_ ABSL_GUARDED_BY(mu_) = true;
  std::function<void()> on_background_done_ ABSL_GUARDED_BY(mu_);
  // For event=projects_loaded: the projects listed, those whose load failed, and since when.
  int64_t background_listed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t background_failed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time background_start_ ABSL_GUARDED_BY(mu_);
  int background_threads_ ABSL_GUARDED_BY(mu_) = 0;
  // Memory budget (0: none).
  int64_t budget_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration evict_after_idle_ ABSL_GUARDED_BY(mu_) = absl::Seconds(60);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread budget_thread_;
  // Projects the budget unloaded, with what they showed then; erased when one loads again.
  absl::flat_hash_map<std::string, ProjectSummary> unloaded_ ABSL_GUARDED_BY(mu_);
  struct StoredLabelCount {
    absl::Time counted_at;
    int64_t labels = 0;
    bool recounting = false;  // A caller is counting again.
  };
  // StoredCounts' label counts, by project name.
  absl::flat_hash_map<std::string, StoredLabelCount> stored_label_counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_PROJECT_REGISTRY_H_
