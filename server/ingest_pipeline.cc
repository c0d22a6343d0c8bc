#include "server/ingest_pipeline.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace verity::server {

struct IngestPipeline::Metrics {
  explicit Metrics(MetricsRegistry& registry)
      : batches(registry.AddCounter("verity_ingest_batches_total",
                                    "Annotation batches committed.").Get()),
        accepted(annotations(registry).WithLabels({"accepted"})),
        duplicate(annotations(registry).WithLabels({"duplicate"})),
        revised(annotations(registry).WithLabels({"revised"})),
        refused_queue_full(refused(registry).WithLabels({"queue_full"})),
        refused_shutting_down(refused(registry).WithLabels({"shutting_down"})),
        commit_failures(registry.AddCounter("verity_ingest_commit_failures_total",
                                            "Group-commit transactions that failed (every batch "
                                            "in the group is failed).").Get()),
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
                               "duplicate: same as the live label, revised: replaced it).",
                               {"outcome"});
  }
  static MetricFamily<Counter>& refused(MetricsRegistry& registry) {
    return registry.AddCounter("verity_ingest_refused_batches_total",
                               "Batches refused before queueing, by reason.", {"reason"});
  }

  Counter& batches;
  Counter& accepted;
  Counter& duplicate;
  Counter& revised;
  Counter& refused_queue_full;
  Counter& refused_shutting_down;
  Counter& commit_failures;
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
  committer_ = std::thread([this] { CommitLoop(); });
}

IngestPipeline::~IngestPipeline() { Shutdown(); }

std::future<IngestPipeline::Result> IngestPipeline::Submit(
    std::shared_ptr<LiveProject> project, std::vector<storage::AnnotationWrite> writes) {
  Pending pending{std::move(project), std::move(writes), {}, absl::Now()};
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
  if (queued_annotations_ > 0 && queued_annotations_ + n > options_.max_queued_annotations) {
    if (metrics_) metrics_->refused_queue_full.Increment();
    pending.done.set_value(absl::ResourceExhaustedError(absl::StrCat(
        "ingest queue full (", queued_annotations_, " annotations waiting for commit); "
        "retry the batch later")));
    return future;
  }
  queued_annotations_ += n;
  queue_.push_back(std::move(pending));
  if (metrics_) {
    metrics_->queued_annotations.Set(static_cast<double>(queued_annotations_));
    metrics_->queued_batches.Set(static_cast<double>(queue_.size()));
  }
  return future;
}

void IngestPipeline::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !committer_.joinable()) return;
    stopping_ = true;
  }
  if (committer_.joinable()) committer_.join();
}

void IngestPipeline::CommitLoop() {
  while (true) {
    std::vector<Pending> group;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](IngestPipeline* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping_ and drained.
      int64_t taken = 0;
      while (!queue_.empty() &&
             (group.empty() ||
              taken + static_cast<int64_t>(queue_.front().writes.size()) <=
                  options_.max_group_annotations)) {
        taken += static_cast<int64_t>(queue_.front().writes.size());
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_annotations_ -= taken;
      if (metrics_) {
        metrics_->queued_annotations.Set(static_cast<double>(queued_annotations_));
        metrics_->queued_batches.Set(static_cast<double>(queue_.size()));
      }
    }
    CommitGroup(group);
  }
}

void IngestPipeline::CommitGroup(std::vector<Pending>& group) {
  std::vector<storage::AnnotationWrite> all;
  size_t total = 0;
  for (const Pending& p : group) total += p.writes.size();
  all.reserve(total);
  for (const Pending& p : group) all.insert(all.end(), p.writes.begin(), p.writes.end());

  const absl::Time commit_start = absl::Now();
  absl::StatusOr<std::vector<storage::WriteResult>> results = store_.CommitAnnotations(all);
  if (metrics_) metrics_->commit_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - commit_start));
  if (!results.ok()) {
    if (metrics_) metrics_->commit_failures.Increment();
    for (Pending& p : group) p.done.set_value(results.status());
    return;
  }
  size_t offset = 0;
  std::vector<CommittedLabel> committed;
  for (Pending& p : group) {
    const size_t n = p.writes.size();
    committed.clear();
    committed.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const storage::WriteResult& r = (*results)[offset + i];
      const storage::AnnotationWrite& w = p.writes[i];
      committed.push_back({r.item_index, w.item_id, r.annotator_index, w.annotator_id, w.label,
                           r.seq, r.outcome != storage::WriteOutcome::kDuplicate});
    }
    p.project->ApplyCommitted(committed);
    if (metrics_) RecordCommitted(p, *results, offset);
    p.done.set_value(std::vector<storage::WriteResult>(results->begin() + offset,
                                                       results->begin() + offset + n));
    offset += n;
  }
}

void IngestPipeline::RecordCommitted(const Pending& batch,
                                     const std::vector<storage::WriteResult>& results,
                                     size_t offset) {
  metrics_->freshness_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - batch.queued_at));
  metrics_->batches.Increment();
  int64_t accepted = 0, duplicate = 0, revised = 0;
  for (size_t i = offset; i < offset + batch.writes.size(); ++i) {
    switch (results[i].outcome) {
      case storage::WriteOutcome::kAccepted:
        ++accepted;
        break;
      case storage::WriteOutcome::kDuplicate:
        ++duplicate;
        break;
      case storage::WriteOutcome::kRevised:
        ++revised;
        break;
    }
  }
  metrics_->accepted.Increment(static_cast<double>(accepted));
  metrics_->duplicate.Increment(static_cast<double>(duplicate));
  metrics_->revised.Increment(static_cast<double>(revised));
}

}  // namespace verity::server
