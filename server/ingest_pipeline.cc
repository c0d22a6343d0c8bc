#include "server/ingest_pipeline.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace verity::server {

IngestPipeline::IngestPipeline(storage::AnnotationStore& store, Options options)
    : store_(store), options_(options) {
  committer_ = std::thread([this] { CommitLoop(); });
}

IngestPipeline::~IngestPipeline() { Shutdown(); }

std::future<IngestPipeline::Result> IngestPipeline::Submit(
    std::shared_ptr<LiveProject> project, std::vector<storage::AnnotationWrite> writes) {
  Pending pending{std::move(project), std::move(writes), {}};
  std::future<Result> future = pending.done.get_future();
  if (pending.writes.empty()) {
    pending.done.set_value(std::vector<storage::WriteResult>{});
    return future;
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    pending.done.set_value(absl::UnavailableError("the server is shutting down"));
    return future;
  }
  const int64_t n = static_cast<int64_t>(pending.writes.size());
  if (queued_annotations_ > 0 && queued_annotations_ + n > options_.max_queued_annotations) {
    pending.done.set_value(absl::ResourceExhaustedError(absl::StrCat(
        "ingest queue full (", queued_annotations_, " annotations waiting for commit); "
        "retry the batch later")));
    return future;
  }
  queued_annotations_ += n;
  queue_.push_back(std::move(pending));
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

  absl::StatusOr<std::vector<storage::WriteResult>> results = store_.CommitAnnotations(all);
  if (!results.ok()) {
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
    p.done.set_value(std::vector<storage::WriteResult>(results->begin() + offset,
                                                       results->begin() + offset + n));
    offset += n;
  }
}

}  // namespace verity::server
