#include "server/ingest/ingest_pipeline.h"

#include <limits>

#include <pthread.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "server/observability/log.h"
#include "server/state/label_catch_up.h"

namespace verity::server {

struct IngestPipeline::Metrics {
  explicit Metrics(MetricsRegistry& registry)
      : batches(registry.AddCounter("verity_ingest_batches_total",
                                    "Annotation batches committed.").Get()),
        accepted(annotations(registry).WithLabels({"accepted"})),
        duplicate(annotations(registry).WithLabels({"duplicate"})),
        revised(annotations(registry).WithLabels({"revised"})),
        stale(annotations(registry).WithLabels({"stale"})),
        refused_queue_full(refused(registry).WithLabels({"queue_full"})),
        refused_shutting_down(refused(registry).WithLabels({"shutting_down"})),
        refused_admission(refused(registry).WithLabels({"admission"})),
        commit_failures(registry.AddCounter(
            "verity_ingest_commit_failures_total",
            "Group-commit transactions that failed. A group of several batches that failed for "
            "another reason than UNAVAILABLE is then committed batch by batch "
            "(verity_ingest_isolated_batches_total).").Get()),
        catch_up_reads(registry.AddCounter(
            "verity_ingest_catch_up_reads_total",
            "Own commits that found another replica's commit to the project between them and "
            "what memory held, and read the labels since before applying their own.").Get()),
        isolated_committed(isolated(registry).WithLabels({"committed"})),
        isolated_refused(isolated(registry).WithLabels({"refused"})),
        queued_annotations(registry.AddGauge("verity_ingest_queue_annotations",
                                             "Annotations queued, waiting for a commit.").Get()),
        queued_batches(registry.AddGauge("verity_ingest_queue_batches",
                                         "Batches queued, waiting for a commit.").Get()),
        commit_seconds(registry.AddHistogram("verity_ingest_commit_duration_seconds",
                                             "Duration of one group-commit transaction.", {},
                                             LatencyBuckets()).Get()),
        freshness_seconds(registry.AddHistogram(
            "verity_posterior_freshness_seconds",
            "Time from a batch being queued to its labels being in the served posteriors "
            "(queue wait, commit and online update).", {}, LatencyBuckets()).Get()) {}

  static MetricFamily<Counter>& annotations(MetricsRegistry& registry) {
    return registry.AddCounter("verity_ingest_annotations_total",
                               "Annotations committed, by outcome (accepted: a first label, "
                               "duplicate: same as the live label, revised: replaced it, "
                               "stale: older client_time than the live label, history only).",
                               {"outcome"});
  }
  static MetricFamily<Counter>& isolated(MetricsRegistry& registry) {
    return registry.AddCounter("verity_ingest_isolated_batches_total",
                               "Batches committed in a transaction of their own after their "
                               "group's transaction failed, by result (committed, or refused "
                               "with their own error).",
                               {"result"});
  }
  static MetricFamily<Counter>& refused(MetricsRegistry& registry) {
    return registry.AddCounter("verity_ingest_refused_batches_total",
                               "Batches refused before queueing, by reason.", {"reason"});
  }

  Counter& batches;
  Counter& accepted;
  Counter& duplicate;
  Counter& revised;
  Counter& stale;
  Counter& refused_queue_full;
  Counter& refused_shutting_down;
  Counter& refused_admission;  // by the commit lane's AdmissionCheck (a quota)
  Counter& commit_failures;
  Counter& catch_up_reads;
  Counter& isolated_committed;
  Counter& isolated_refused;
  Gauge& queued_annotations;
  Gauge& queued_batches;
  Histogram& commit_seconds;
  Histogram& freshness_seconds;
};

IngestPipeline::IngestPipeline(storage::AnnotationStore& store, Options options,
                               MetricsRegistry* metrics)
    : store_(store),
      options_(options),
      metrics_(metrics != nullptr ? std::make_unique<Metrics>(*metrics) : nullptr) {
  // Named for profilers (perf, top -H); at most 15 characters.
  const int lanes = std::max(1, options_.commit_lanes);
  {
    absl::MutexLock lock(&publish_mu_);
    lanes_running_ = lanes;
  }
  for (int lane = 0; lane < lanes; ++lane) {
    committers_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "verity-ingest");
      CommitLoop();
    });
  }
  publisher_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "verity-publish");
    PublishLoop();
  });
}

IngestPipeline::~IngestPipeline() { Shutdown(); }

std::future<IngestPipeline::Result> IngestPipeline::Submit(
    std::shared_ptr<LiveProject> project, std::vector<storage::AnnotationWrite> writes,
    AdmissionCheck admit, std::string key_id, int64_t max_history_rows) {
  Pending pending{std::move(project), std::move(writes), {}, absl::Now(), std::move(admit),
                  std::move(key_id), max_history_rows};
  std::future<Result> future = pending.done.get_future();
  if (pending.writes.empty()) {
    pending.done.set_value(std::vector<storage::WriteResult>{});
    return future;
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    if (metrics_) metrics_->refused_shutting_down.Increment();
    pending.done.set_value(absl::UnavailableError("the server is shutting down"));
    return future;
  }
  const int64_t n = static_cast<int64_t>(pending.writes.size());
  const LiveProject::Identity& identity = pending.project->identity();
  if (!pending.key_id.empty()) {
    // As for a project: a key with nothing waiting always gets one batch in.
    const auto waiting = queued_by_key_.find(pending.key_id);
    if (waiting != queued_by_key_.end() &&
        waiting->second + n > options_.max_queued_annotations_per_key) {
      if (metrics_) metrics_->refused_queue_full.Increment();
      pending.done.set_value(absl::ResourceExhaustedError(absl::StrCat(
          "ingest queue share of API key ", pending.key_id, " full (", waiting->second,
          " annotations of its batches waiting for commit, over all its projects; its share is ",
          options_.max_queued_annotations_per_key, "); retry the batch later")));
      return future;
    }
  }
  ProjectQueue& queue = queues_[identity.project_id];
  // An empty queue always takes one batch, however large: a batch can never be refused for
  // good.
  if (queue.annotations > 0 &&
      queue.annotations + n > options_.max_queued_annotations_per_project) {
    if (metrics_) metrics_->refused_queue_full.Increment();
    pending.done.set_value(absl::ResourceExhaustedError(absl::StrCat(
        "ingest queue of project ", identity.name, " full (", queue.annotations,
        " annotations waiting for commit, its share is ",
        options_.max_queued_annotations_per_project, "); retry the batch later")));
    return future;
  }
  if (queued_annotations_ > 0 && queued_annotations_ + n > options_.max_queued_annotations) {
    if (queue.batches.empty()) queues_.erase(identity.project_id);
    if (metrics_) metrics_->refused_queue_full.Increment();
    // How much waits is other tenants' business: the message says only that the queue is
    // full (an operator reads verity_ingest_queue_annotations).
    pending.done.set_value(absl::ResourceExhaustedError(
        "ingest queue full: the server's annotations waiting for commit, over all projects, are "
        "at its limit; retry the batch later"));
    return future;
  }
  if (queue.batches.empty()) ready_.push_back(identity.project_id);
  if (!pending.key_id.empty()) queued_by_key_[pending.key_id] += n;
  queue.annotations += n;
  queue.batches.push_back(std::move(pending));
  queued_annotations_ += n;
  ++queued_batches_;
  if (metrics_) {
    metrics_->queued_annotations.Set(static_cast<double>(queued_annotations_));
    metrics_->queued_batches.Set(static_cast<double>(queued_batches_));
  }
  return future;
}

void IngestPipeline::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && committers_.empty()) return;
    stopping_ = true;
  }
  for (std::thread& committer : committers_) committer.join();
  committers_.clear();
  if (publisher_.joinable()) publisher_.join();
}

bool IngestPipeline::LaneHasWorkOrIsDone() const {
  if (stopping_ && ready_.empty()) return true;
  for (int64_t project_id : ready_) {
    if (!held_.contains(project_id)) return true;
  }
  return false;
}

std::vector<IngestPipeline::Pending> IngestPipeline::TakeGroup() {
  // The waiting projects no lane holds, in round-robin order.
  std::vector<int64_t> available;
  for (int64_t project_id : ready_) {
    if (!held_.contains(project_id)) available.push_back(project_id);
  }
  // With several projects available, a group is one round (a batch of each), so that a small
  // project's batch never commits behind several rounds of a large one's; with one, its
  // batches up to the group size.
  std::vector<Pending> group;
  int64_t taken = 0;
  std::vector<int64_t> served;
  for (size_t next = 0; next < available.size();) {
    const int64_t project_id = available[next];
    auto queue_it = queues_.find(project_id);
    ProjectQueue& queue = queue_it->second;
    const int64_t n = static_cast<int64_t>(queue.batches.front().writes.size());
    if (!group.empty() && taken + n > options_.max_group_annotations) break;
    taken += n;
    queue.annotations -= n;
    if (const std::string& key = queue.batches.front().key_id; !key.empty()) {
      auto waiting = queued_by_key_.find(key);
      waiting->second -= n;
      if (waiting->second == 0) queued_by_key_.erase(waiting);
    }
    group.push_back(std::move(queue.batches.front()));
    queue.batches.pop_front();
    if (served.empty() || served.back() != project_id) served.push_back(project_id);
    if (queue.batches.empty()) queues_.erase(queue_it);
    // One round over several projects; one project alone continues with its next batch.
    if (available.size() > 1 || queues_.find(project_id) == queues_.end()) ++next;
  }
  // The projects served go to the back of the order (or leave it, their queue empty), and
  // are held until this group is queued for publishing.
  for (int64_t project_id : served) {
    ready_.erase(std::find(ready_.begin(), ready_.end(), project_id));
    if (queues_.contains(project_id)) ready_.push_back(project_id);
    held_.insert(project_id);
  }
  queued_annotations_ -= taken;
  queued_batches_ -= static_cast<int64_t>(group.size());
  if (metrics_) {
    metrics_->queued_annotations.Set(static_cast<double>(queued_annotations_));
    metrics_->queued_batches.Set(static_cast<double>(queued_batches_));
  }
  return group;
}

void IngestPipeline::CommitLoop() {
  while (true) {
    std::vector<Pending> group;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](IngestPipeline* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->LaneHasWorkOrIsDone();
          },
          this));
      if (ready_.empty()) break;  // stopping_ and drained.
      group = TakeGroup();
    }
    std::vector<int64_t> held;
    for (const Pending& p : group) held.push_back(p.project->identity().project_id);
    CommittedGroup committed = CommitGroup(std::move(group));
    {
      absl::MutexLock lock(&publish_mu_);
      publish_mu_.Await(absl::Condition(
          +[](IngestPipeline* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->committed_.size() < kMaxUnpublishedGroups;
          },
          this));
      committed_.push_back(std::move(committed));
    }
    // Queued for publishing in commit order: the projects' next groups may be taken.
    absl::MutexLock lock(&mu_);
    for (int64_t project_id : held) held_.erase(project_id);
  }
  absl::MutexLock publish_lock(&publish_mu_);
  if (--lanes_running_ == 0) committer_done_ = true;
}

void IngestPipeline::PublishLoop() {
  while (true) {
    CommittedGroup group;
    {
      absl::MutexLock lock(&publish_mu_);
      publish_mu_.Await(absl::Condition(
          +[](IngestPipeline* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->committer_done_ || !self->committed_.empty();
          },
          this));
      if (committed_.empty()) return;  // The committer is done and everything is published.
      group = std::move(committed_.front());
      committed_.pop_front();
    }
    PublishGroup(group);
  }
}

IngestPipeline::CommittedGroup IngestPipeline::CommitGroup(std::vector<Pending> group) {
  // Check every batch in queue order while the batches stay in place (the pointers in
  // `earlier` point into `group`), then split the group.
  std::vector<absl::Status> verdicts(group.size());
  absl::flat_hash_map<int64_t, std::vector<const std::vector<storage::AnnotationWrite>*>> earlier;
  for (size_t b = 0; b < group.size(); ++b) {
    const Pending& p = group[b];
    if (!p.admit) continue;
    std::vector<const std::vector<storage::AnnotationWrite>*>& batches =
        earlier[p.project->identity().project_id];
    batches.push_back(&p.writes);
    verdicts[b] = p.admit(*p.project, batches);
    if (!verdicts[b].ok()) batches.pop_back();
  }
  std::vector<Pending> admitted;
  std::vector<std::pair<Pending, absl::Status>> refused;
  admitted.reserve(group.size());
  for (size_t b = 0; b < group.size(); ++b) {
    if (verdicts[b].ok()) {
      admitted.push_back(std::move(group[b]));
    } else {
      refused.emplace_back(std::move(group[b]), std::move(verdicts[b]));
    }
  }
  CommittedGroup committed;
  if (!admitted.empty()) committed = CommitAdmitted(std::move(admitted));
  for (auto& [batch, status] : refused) {
    if (metrics_) metrics_->refused_admission.Increment();
    committed.batches.push_back(std::move(batch));
    committed.results.push_back(std::move(status));
  }
  return committed;
}

IngestPipeline::CommittedGroup IngestPipeline::CommitAdmitted(std::vector<Pending> group) {
  // The group's writes move into one array; batch b's are all[offsets[b], offsets[b + 1]).
  std::vector<storage::AnnotationWrite> all;
  std::vector<size_t> offsets = {0};
  for (const Pending& p : group) offsets.push_back(offsets.back() + p.writes.size());
  all.reserve(offsets.back());
  for (Pending& p : group) {
    std::move(p.writes.begin(), p.writes.end(), std::back_inserter(all));
    p.writes.clear();
  }

  CommittedGroup committed;
  committed.results.reserve(group.size());
  Result together = CommitBatches(group, all, offsets, 0, group.size(), committed);
  if (together.ok() || group.size() == 1 || absl::IsUnavailable(together.status())) {
    // Every batch shares the outcome. UNAVAILABLE (PostgreSQL unreachable, or the outcome of
    // COMMIT unknown) is not isolated: each batch alone would fail the same way.
    if (!together.ok() && metrics_) metrics_->commit_failures.Increment();
    for (size_t b = 0; b < group.size(); ++b) {
      if (!together.ok()) {
        committed.results.push_back(together.status());
        continue;
      }
      committed.results.push_back(std::vector<storage::WriteResult>(
          together->begin() + offsets[b], together->begin() + offsets[b + 1]));
    }
  } else {
    // The transaction failed for a reason that may belong to one batch (a value the store
    // refuses): commit each batch on its own, in order, so that only the guilty one fails.
    if (metrics_) metrics_->commit_failures.Increment();
    for (size_t b = 0; b < group.size(); ++b) {
      if (b > 0 && absl::IsUnavailable(committed.results.back().status())) {
        committed.results.push_back(committed.results.back().status());
        continue;
      }
      committed.results.push_back(CommitBatches(group, all, offsets, b, b + 1, committed));
      if (metrics_) {
        (committed.results.back().ok() ? metrics_->isolated_committed
                                       : metrics_->isolated_refused)
            .Increment();
      }
    }
  }
  committed.batches = std::move(group);
  return committed;
}

IngestPipeline::Result IngestPipeline::CommitBatches(
    const std::vector<Pending>& group, const std::vector<storage::AnnotationWrite>& all,
    const std::vector<size_t>& offsets, size_t first, size_t last, CommittedGroup& committed) {
  const absl::Span<const storage::AnnotationWrite> writes =
      absl::MakeConstSpan(all).subspan(offsets[first], offsets[last] - offsets[first]);
  // What the live projects already know, so that the store reads back only what they do not.
  storage::WriteHints hints;
  hints.writes.reserve(writes.size());
  for (size_t b = first; b < last; ++b) {
    storage::WriteHints known = group[b].project->IngestHints(
        absl::MakeConstSpan(all).subspan(offsets[b], offsets[b + 1] - offsets[b]));
    hints.writes.insert(hints.writes.end(), known.writes.begin(), known.writes.end());
    hints.projects.insert(hints.projects.end(), known.projects.begin(), known.projects.end());
  }

  std::vector<storage::HistoryLimit> history_limits;
  for (size_t b = first; b < last; ++b) {
    if (group[b].max_history_rows > 0) {
      history_limits.push_back(
          {group[b].project->identity().project_id, group[b].max_history_rows});
    }
  }

  const absl::Time commit_start = absl::Now();
  std::vector<storage::DrawnSeqs> drawn;
  Result results = store_.CommitAnnotations(writes, &hints, &drawn, history_limits);
  if (metrics_) metrics_->commit_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - commit_start));
  if (!results.ok()) return results;

  // Register the ids and labels now: the next transaction's hints must include them. One call
  // per project, with all of its batches in this transaction: the seqs it drew are one range.
  std::vector<std::shared_ptr<LiveProject>> projects;
  std::vector<std::vector<CommittedLabel>> labels_of;
  for (size_t b = first; b < last; ++b) {
    const std::shared_ptr<LiveProject>& project = group[b].project;
    size_t p = std::find(projects.begin(), projects.end(), project) - projects.begin();
    if (p == projects.size()) {
      projects.push_back(project);
      labels_of.emplace_back();
    }
    std::vector<CommittedLabel>& labels = labels_of[p];
    for (size_t i = offsets[b]; i < offsets[b + 1]; ++i) {
      const storage::WriteResult& r = (*results)[i - offsets[first]];
      const storage::AnnotationWrite& w = all[i];
      // The live label after the write (for a stale write, the newer one the store kept).
      const bool changed = r.outcome == storage::WriteOutcome::kAccepted ||
                           r.outcome == storage::WriteOutcome::kRevised;
      labels.push_back({r.item_index, w.item_id, r.annotator_index, w.annotator_id, r.label,
                        r.seq, changed});
    }
  }
  for (size_t p = 0; p < projects.size(); ++p) {
    std::vector<int32_t> touched =
        RegisterOwnCommit(*projects[p], labels_of[p], DrawnSeqsOf(drawn, *projects[p]));
    auto it = std::find_if(committed.touched.begin(), committed.touched.end(),
                           [&](const auto& t) { return t.first == projects[p]; });
    if (it == committed.touched.end()) {
      committed.touched.emplace_back(projects[p], std::move(touched));
    } else {
      it->second.insert(it->second.end(), touched.begin(), touched.end());
    }
  }
  return results;
}

std::optional<storage::DrawnSeqs> IngestPipeline::DrawnSeqsOf(
    const std::vector<storage::DrawnSeqs>& drawn, const LiveProject& project) {
  for (const storage::DrawnSeqs& d : drawn) {
    if (d.project_id == project.identity().project_id) return d;
  }
  return std::nullopt;
}

std::vector<int32_t> IngestPipeline::RegisterOwnCommit(LiveProject& project,
                                                       absl::Span<const CommittedLabel> labels,
                                                       std::optional<storage::DrawnSeqs> drawn) {
  if (std::optional<std::vector<int32_t>> touched = project.RegisterOwnCommit(labels, drawn)) {
    return *std::move(touched);
  }
  // Another replica committed to the project since memory last caught up: apply its labels
  // first, so that no pair goes back to an older label.
  if (metrics_) metrics_->catch_up_reads.Increment();
  if (absl::Status caught_up = CatchUpLabels(store_, project); caught_up.ok()) {
    if (std::optional<std::vector<int32_t>> touched = project.RegisterOwnCommit(labels, drawn)) {
      return *std::move(touched);
    }
  } else {
    LogEvent("label_catch_up_failed", {{"project", project.identity().name},
                                       {"error", caught_up.ToString()}});
  }
  // The labels are durable and acknowledged either way; serve them now and let the replica
  // follower fill the gap.
  return project.RegisterOwnCommitOutOfOrder(labels, drawn);
}

void IngestPipeline::PublishGroup(CommittedGroup& group) {
  for (auto& [project, touched] : group.touched) {
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    project->PublishCommitted(touched);
  }
  for (size_t b = 0; b < group.batches.size(); ++b) {
    Pending& p = group.batches[b];
    if (metrics_ && group.results[b].ok()) RecordCommitted(p, *group.results[b]);
    p.done.set_value(std::move(group.results[b]));
  }
}

void IngestPipeline::RecordCommitted(const Pending& batch,
                                     const std::vector<storage::WriteResult>& results) {
  metrics_->freshness_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - batch.queued_at));
  metrics_->batches.Increment();
  int64_t accepted = 0, duplicate = 0, revised = 0, stale = 0;
  for (const storage::WriteResult& r : results) {
    switch (r.outcome) {
      case storage::WriteOutcome::kAccepted:
        ++accepted;
        break;
      case storage::WriteOutcome::kDuplicate:
        ++duplicate;
        break;
      case storage::WriteOutcome::kRevised:
        ++revised;
        break;
      case storage::WriteOutcome::kStale:
        ++stale;
        break;
    }
  }
  metrics_->accepted.Increment(static_cast<double>(accepted));
  metrics_->duplicate.Increment(static_cast<double>(duplicate));
  metrics_->revised.Increment(static_cast<double>(revised));
  metrics_->stale.Increment(static_cast<double>(stale));
}

}  // namespace verity::server
