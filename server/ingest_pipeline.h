// IngestPipeline: group commit of annotation batches from every open stream.
//
// Submit() queues a validated batch and returns a future. One committer thread takes every
// queued batch (up to Options::max_group_annotations), writes them in ONE PostgreSQL
// transaction, applies the committed labels to their live projects (online posterior update),
// and only then fulfils the futures: an ack sent on a fulfilled future is durable, and a query
// made after it sees the label.
//
// Back-pressure: at most Options::max_queued_annotations wait at once; Submit() answers
// RESOURCE_EXHAUSTED (retryable) beyond that rather than growing without bound.
//
// Metrics (when given a registry): batches and annotations committed (by outcome), batches
// refused, the queue's depth, the commit transaction's duration, and posterior freshness — the
// time from Submit() to the batch's labels being in the served posteriors.
//
// Thread-safety: Submit() may be called from any thread. Shutdown() drains the queue (every
// queued batch is committed or failed) and joins the committer; Submit() after it answers
// UNAVAILABLE.
#ifndef VERITY_SERVER_INGEST_PIPELINE_H_
#define VERITY_SERVER_INGEST_PIPELINE_H_

#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/live_project.h"
#include "server/metrics.h"
#include "storage/annotation_store.h"

namespace verity::server {

class IngestPipeline {
 public:
  struct Options {
    // Annotations waiting for a commit, over all streams, before Submit refuses.
    int64_t max_queued_annotations = 500000;
    // Most annotations written by one transaction.
    int64_t max_group_annotations = 100000;
  };

  using Result = absl::StatusOr<std::vector<storage::WriteResult>>;

  // `metrics` may be null (nothing measured); otherwise it must outlive the pipeline.
  IngestPipeline(storage::AnnotationStore& store, Options options,
                 MetricsRegistry* metrics = nullptr);
  ~IngestPipeline();

  // Queues `writes` (all for `project`, already validated). The future yields one WriteResult
  // per write, in order, after COMMIT and after the project's posteriors include them; or the
  // error of the transaction (nothing of the batch written).
  std::future<Result> Submit(std::shared_ptr<LiveProject> project,
                             std::vector<storage::AnnotationWrite> writes)
      ABSL_LOCKS_EXCLUDED(mu_);

  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending {
    std::shared_ptr<LiveProject> project;
    std::vector<storage::AnnotationWrite> writes;
    std::promise<Result> done;
    absl::Time queued_at;
  };

  // The pipeline's metric children; null without a registry.
  struct Metrics;

  void CommitLoop();
  void CommitGroup(std::vector<Pending>& group);
  // Counts one committed batch, whose results start at results[offset]. Requires metrics_.
  void RecordCommitted(const Pending& batch, const std::vector<storage::WriteResult>& results,
                       size_t offset);

  storage::AnnotationStore& store_;
  const Options options_;
  const std::unique_ptr<Metrics> metrics_;

  absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_annotations_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread committer_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_INGEST_PIPELINE_H_
