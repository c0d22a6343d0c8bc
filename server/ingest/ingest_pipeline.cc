#include "server/ingest/ingest_pipeline.h"

#include <pthread.h>

#include <algorithm>
#include <iterator>
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
  // Named for profilers (perf, top -H); at most 15 characters.
  committer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "verity-ingest");
    CommitLoop();
  });
  publisher_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "verity-publish");
    PublishLoop();
  });
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
  if (publisher_.joinable()) publisher_.join();
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
      if (queue_.empty()) {  // stopping_ and drained.
        absl::MutexLock publish_lock(&publish_mu_);
        committer_done_ = true;
        return;
      }
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
    CommittedGroup committed = CommitGroup(std::move(group));
    absl::MutexLock lock(&publish_mu_);
    publish_mu_.Await(absl::Condition(
        +[](IngestPipeline* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return self->committed_.size() < kMaxUnpublishedGroups;
        },
        this));
    committed_.push_back(std::move(committed));
  }
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
  CommittedGroup committed;
  // The group's writes move into one array; each batch keeps its size.
  std::vector<storage::AnnotationWrite> all;
  size_t total = 0;
  for (const Pending& p : group) total += p.writes.size();
  all.reserve(total);
  committed.sizes.reserve(group.size());
  // What the live projects already know, so that the store reads back only what they do not.
  storage::WriteHints hints;
  hints.writes.reserve(total);
  for (Pending& p : group) {
    committed.sizes.push_back(p.writes.size());
    storage::WriteHints known = p.project->IngestHints(p.writes);
    hints.writes.insert(hints.writes.end(), known.writes.begin(), known.writes.end());
    hints.projects.insert(hints.projects.end(), known.projects.begin(), known.projects.end());
    std::move(p.writes.begin(), p.writes.end(), std::back_inserter(all));
    p.writes.clear();
  }

  const absl::Time commit_start = absl::Now();
  committed.results = store_.CommitAnnotations(all, &hints);
  if (metrics_) metrics_->commit_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - commit_start));
  if (committed.results.ok()) {
    // Register the ids and labels now: the next group's hints must include them.
    size_t offset = 0;
    std::vector<CommittedLabel> labels;
    for (size_t b = 0; b < group.size(); ++b) {
      const size_t n = committed.sizes[b];
      labels.clear();
      labels.reserve(n);
      for (size_t i = offset; i < offset + n; ++i) {
        const storage::WriteResult& r = (*committed.results)[i];
        const storage::AnnotationWrite& w = all[i];
        labels.push_back({r.item_index, w.item_id, r.annotator_index, w.annotator_id, w.label,
                          r.seq, r.outcome != storage::WriteOutcome::kDuplicate});
      }
      std::vector<int32_t> touched = group[b].project->RegisterCommitted(labels);
      auto it = std::find_if(committed.touched.begin(), committed.touched.end(),
                             [&](const auto& t) { return t.first == group[b].project; });
      if (it == committed.touched.end()) {
        committed.touched.emplace_back(group[b].project, std::move(touched));
      } else {
        it->second.insert(it->second.end(), touched.begin(), touched.end());
      }
      offset += n;
    }
  } else if (metrics_) {
    metrics_->commit_failures.Increment();
  }
  committed.batches = std::move(group);
  return committed;
}

void IngestPipeline::PublishGroup(CommittedGroup& group) {
  if (!group.results.ok()) {
    for (Pending& p : group.batches) p.done.set_value(group.results.status());
    return;
  }
  for (auto& [project, touched] : group.touched) {
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    project->PublishCommitted(touched);
  }
  const std::vector<storage::WriteResult>& results = *group.results;
  size_t offset = 0;
  for (size_t b = 0; b < group.batches.size(); ++b) {
    Pending& p = group.batches[b];
    const size_t n = group.sizes[b];
    if (metrics_) RecordCommitted(p, results, offset, n);
    p.done.set_value(std::vector<storage::WriteResult>(results.begin() + offset,
                                                       results.begin() + offset + n));
    offset += n;
  }
}

void IngestPipeline::RecordCommitted(const Pending& batch,
                                     const std::vector<storage::WriteResult>& results,
                                     size_t offset, size_t n) {
  metrics_->freshness_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - batch.queued_at));
  metrics_->batches.Increment();
  int64_t accepted = 0, duplicate = 0, revised = 0;
  for (size_t i = offset; i < offset + n; ++i) {
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
