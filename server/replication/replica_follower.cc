#include "server/replication/replica_follower.h"

#include <cstdint>
#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pqxx/connection"
#include "pqxx/notification"
#include "pqxx/nontransaction"
#include "server/observability/log.h"
#include "server/state/label_catch_up.h"
#include "storage/project_changes.h"

namespace verity::server {

// The LISTENing connection and the project ids its notifications named since the last drain.
// Only the follower's thread (and Start, before it runs) touches it.
struct ReplicaFollower::Listener {
  struct Receiver final : pqxx::notification_receiver {
    Receiver(pqxx::connection& c, const char* channel, absl::flat_hash_set<int64_t>& ids)
        : pqxx::notification_receiver(c, channel), ids(ids) {}
    void operator()(const std::string& payload, int) override {
      int64_t id = 0;
      if (absl::SimpleAtoi(payload, &id)) ids.insert(id);
    }
    absl::flat_hash_set<int64_t>& ids;
  };

  explicit Listener(const std::string& url)
      : connection(url),
        labels(connection, storage::AnnotationStore::kLabelsChannel, labelled),
        versions(connection, storage::ModelVersionStore::kVersionsChannel, versioned),
        changes(connection, storage::kProjectChangesChannel, changed) {
    // The receivers' constructors send LISTEN; a query makes sure it took effect.
    pqxx::nontransaction(connection).exec("SELECT 1");
  }

  absl::flat_hash_set<int64_t> labelled;   // Projects with new labels.
  absl::flat_hash_set<int64_t> versioned;  // Projects with a new model version.
  absl::flat_hash_set<int64_t> changed;    // Projects with changed items or settings.
  pqxx::connection connection;
  Receiver labels;
  Receiver versions;
  Receiver changes;
};

struct ReplicaFollower::Metrics {
  explicit Metrics(MetricsRegistry& registry)
      : reads(registry.AddCounter("verity_replica_catch_up_reads_total",
                                  "Reads of what other replicas committed to a project, by "
                                  "trigger (notify: labels, after a NOTIFY; poll: labels the "
                                  "periodic check found behind; changes: a re-read of the "
                                  "project's items, annotators and settings).",
                                  {"trigger"})),
        failures(registry.AddCounter(
            "verity_replica_follow_failures_total",
            "Failed catch-up reads and broken listening connections (retried).").Get()) {}
  MetricFamily<Counter>& reads;
  Counter& failures;
};

ReplicaFollower::ReplicaFollower(std::string postgres_url, ProjectRegistry& registry,
                                 StorageHandles& storage,
                                 AdoptStoredVersion adopt_stored_version, Options options,
                                 MetricsRegistry* metrics)
    : postgres_url_(std::move(postgres_url)),
      registry_(registry),
      storage_(storage),
      adopt_stored_version_(std::move(adopt_stored_version)),
      options_(options),
      metrics_(metrics != nullptr ? std::make_unique<Metrics>(*metrics) : nullptr) {}

ReplicaFollower::~ReplicaFollower() { Stop(); }

absl::Status ReplicaFollower::Start() {
  try {
    listener_ = std::make_unique<Listener>(postgres_url_);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("replica follower: cannot LISTEN on PostgreSQL: ", e.what()));
  }
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void ReplicaFollower::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  listener_.reset();
}

void ReplicaFollower::Run() {
  absl::Time next_poll = absl::Now();
  absl::Time last_poll = absl::InfinitePast();
  while (!stop_) {
    if (listener_ == nullptr) {
      try {
        listener_ = std::make_unique<Listener>(postgres_url_);
        LogEvent("replica_follower_reconnected", {});
        next_poll = absl::Now();  // What was missed while disconnected.
      } catch (const std::exception& e) {
        if (metrics_) metrics_->failures.Increment();
        absl::SleepFor(options_.reconnect_delay);
        continue;
      }
    }
    try {
      // Wakes on a notification, or after 100 ms to look at stop_ and the poll clock.
      listener_->connection.await_notification(0, 100'000);
    } catch (const std::exception& e) {
      LogEvent("replica_follower_disconnected", {{"error", e.what()}});
      if (metrics_) metrics_->failures.Increment();
      listener_.reset();
      continue;
    }
    absl::flat_hash_set<int64_t> labelled = std::move(listener_->labelled);
    listener_->labelled.clear();
    absl::flat_hash_set<int64_t> versioned = std::move(listener_->versioned);
    listener_->versioned.clear();
    for (int64_t project_id : labelled) {
      if (std::shared_ptr<LiveProject> project = Find(project_id)) CatchUp(*project, "notify");
    }
    for (int64_t project_id : versioned) {
      std::shared_ptr<LiveProject> project = Find(project_id);
      if (project == nullptr || !adopt_stored_version_) continue;
      // The settings and items the version was fitted with first (the writer changes them
      // before it fits, and the poll would bring them only later): a version restored under
      // older settings (calibration, gold) serves other posteriors and profiles than the
      // writer's.
      FollowChanges(*project);
      adopt_stored_version_(*project);
    }
    // Changed items and settings wait for the poll: one re-read per project per interval
    // however many writes (a bulk AddItems sends many).
    if (!listener_->changed.empty()) {
      next_poll = std::min(next_poll, last_poll + options_.poll_interval);
      listener_->changed.clear();
    }
    if (absl::Now() >= next_poll) {
      last_poll = absl::Now();
      Poll();
      next_poll = absl::Now() + options_.poll_interval;
    }
  }
}

std::shared_ptr<LiveProject> ReplicaFollower::Find(int64_t project_id) const {
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) {
    if (project->identity().project_id == project_id) return project;
  }
  return nullptr;
}

void ReplicaFollower::CatchUp(LiveProject& project, const char* trigger) {
  if (metrics_) metrics_->reads.WithLabels({trigger}).Increment();
  if (absl::Status s = CatchUpLabels(*storage_.annotations, project); !s.ok()) {
    if (metrics_) metrics_->failures.Increment();
    LogEvent("replica_catch_up_failed",
             {{"project", project.identity().name}, {"error", s.ToString()}});
  }
}

void ReplicaFollower::Poll() {
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> drawn =
      storage_.annotations->ListDrawnThrough();
  absl::StatusOr<std::vector<std::pair<int64_t, int32_t>>> newest =
      storage_.versions->ListNewestVersions();
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> changes =
      storage_.projects->ListChangeSeqs();
  if (!drawn.ok() || !newest.ok() || !changes.ok()) {
    if (metrics_) metrics_->failures.Increment();
    return;
  }
  absl::flat_hash_map<int64_t, int64_t> drawn_through(drawn->begin(), drawn->end());
  absl::flat_hash_map<int64_t, int32_t> newest_version(newest->begin(), newest->end());
  absl::flat_hash_map<int64_t, int64_t> change_seq(changes->begin(), changes->end());
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) {
    const int64_t id = project->identity().project_id;
    if (auto it = drawn_through.find(id);
        it != drawn_through.end() && it->second > project->applied_seq()) {
      CatchUp(*project, "poll");
    }
    // Changes before versions, as above.
    if (auto it = change_seq.find(id);
        it != change_seq.end() && it->second > project->followed_change_seq()) {
      FollowChanges(*project);
    }
    if (auto it = newest_version.find(id); it != newest_version.end() &&
                                           it->second > project->model_version() &&
                                           adopt_stored_version_) {
      adopt_stored_version_(*project);
    }
  }
}

void ReplicaFollower::FollowChanges(LiveProject& project) {
  // No own write interleaves between the reads below and their application.
  absl::MutexLock order(&project.write_order_mu());
  FollowChangesUnderWriteOrder(project);
}

void ReplicaFollower::FollowChangesUnderWriteOrder(LiveProject& project) {
  const int64_t id = project.identity().project_id;
  absl::StatusOr<storage::ProjectRecord> record = storage_.projects->GetProject(id);
  if (!record.ok()) {
    if (metrics_) metrics_->failures.Increment();
    return;
  }
  if (record->change_seq <= project.followed_change_seq()) return;
  if (metrics_) metrics_->reads.WithLabels({"changes"}).Increment();
  v1::ProjectSettings settings;
  absl::StatusOr<std::vector<storage::ItemRecord>> items = storage_.items->LoadItems(id);
  absl::StatusOr<std::vector<storage::AnnotatorRecord>> annotators =
      storage_.items->LoadAnnotators(id);
  if (!settings.ParseFromString(record->settings) || !items.ok() || !annotators.ok()) {
    if (metrics_) metrics_->failures.Increment();
    LogEvent("replica_follow_changes_failed", {{"project", project.identity().name}});
    return;
  }
  project.ApplyStoredEntities(settings, *items, *annotators, record->change_seq);
}

}  // namespace verity::server
