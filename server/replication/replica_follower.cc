#include "server/replication/replica_follower.h"

#include <cstdint>
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

namespace verity::server {

// The LISTENing connection and the project ids its notifications named since the last drain.
// Only the follower's thread (and Start, before it runs) touches it.
struct ReplicaFollower::Listener {
  struct Receiver final : pqxx::notification_receiver {
    Receiver(pqxx::connection& c, absl::flat_hash_set<int64_t>& ids)
        : pqxx::notification_receiver(c, storage::AnnotationStore::kLabelsChannel), ids(ids) {}
    void operator()(const std::string& payload, int) override {
      int64_t id = 0;
      if (absl::SimpleAtoi(payload, &id)) ids.insert(id);
    }
    absl::flat_hash_set<int64_t>& ids;
  };

  explicit Listener(const std::string& url)
      : connection(url), receiver(connection, notified) {
    // The receiver's constructor sends LISTEN; a query makes sure it took effect.
    pqxx::nontransaction(connection).exec("SELECT 1");
  }

  absl::flat_hash_set<int64_t> notified;
  pqxx::connection connection;
  Receiver receiver;
};

struct ReplicaFollower::Metrics {
  explicit Metrics(MetricsRegistry& registry)
      : reads(registry.AddCounter("verity_replica_catch_up_reads_total",
                                  "Reads of a project's labels committed by other replicas, by "
                                  "what triggered them (notify: a NOTIFY after their commit; "
                                  "poll: the periodic check of every project's newest seq).",
                                  {"trigger"})),
        failures(registry.AddCounter(
            "verity_replica_follow_failures_total",
            "Failed catch-up reads and broken listening connections (retried).").Get()) {}
  MetricFamily<Counter>& reads;
  Counter& failures;
};

ReplicaFollower::ReplicaFollower(std::string postgres_url, ProjectRegistry& registry,
                                 storage::AnnotationStore& store, Options options,
                                 MetricsRegistry* metrics)
    : postgres_url_(std::move(postgres_url)),
      registry_(registry),
      store_(store),
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
    absl::flat_hash_set<int64_t> notified = std::move(listener_->notified);
    listener_->notified.clear();
    for (int64_t project_id : notified) CatchUp(project_id, "notify");
    if (absl::Now() >= next_poll) {
      Poll();
      next_poll = absl::Now() + options_.poll_interval;
    }
  }
}

void ReplicaFollower::CatchUp(int64_t project_id, const char* trigger) {
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) {
    if (project->identity().project_id != project_id) continue;
    if (metrics_) metrics_->reads.WithLabels({trigger}).Increment();
    if (absl::Status s = CatchUpLabels(store_, *project); !s.ok()) {
      if (metrics_) metrics_->failures.Increment();
      LogEvent("replica_catch_up_failed",
               {{"project", project->identity().name}, {"error", s.ToString()}});
    }
    return;
  }
}

void ReplicaFollower::Poll() {
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> drawn = store_.ListDrawnThrough();
  if (!drawn.ok()) {
    if (metrics_) metrics_->failures.Increment();
    return;
  }
  absl::flat_hash_map<int64_t, int64_t> drawn_through(drawn->begin(), drawn->end());
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) {
    auto it = drawn_through.find(project->identity().project_id);
    if (it == drawn_through.end() || it->second <= project->applied_seq()) continue;
    if (metrics_) metrics_->reads.WithLabels({"poll"}).Increment();
    if (absl::Status s = CatchUpLabels(store_, *project); !s.ok()) {
      if (metrics_) metrics_->failures.Increment();
    }
  }
}

}  // namespace verity::server
