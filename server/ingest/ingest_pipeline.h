// IngestPipeline: group commit of annotation batches from every open stream.
//
// Submit() queues a validated batch and returns a future. A committer thread (a "lane"; there
// are Options::commit_lanes) takes queued batches (up to Options::max_group_annotations),
// writes them in ONE PostgreSQL transaction (passing what the live projects already know, so
// that new labels become a plain append: storage::WriteHints), and registers the committed ids
// and labels with their live projects. A publisher thread then updates the touched items'
// posteriors (online E-step) and only then fulfils the futures, while the lanes already write
// the next groups: an ack sent on a fulfilled future is durable, and a query made after it
// sees the label. Groups are published in the order the lanes queue them after commit.
//
// Failure isolation: one batch must not fail the other batches of its group. When a group of
// several batches fails with an error other than UNAVAILABLE (e.g. a value the store refuses),
// each of its batches is committed in a transaction of its own, in queue order; a batch that
// still fails gets its own error, the others commit. UNAVAILABLE (PostgreSQL unreachable, or
// the connection broke during COMMIT so the outcome is unknown) fails every batch of the group
// as it stands: a transaction per batch would fail the same way.
//
// Back-pressure and fairness: each project has its own queue, holding at most
// Options::max_queued_annotations_per_project; the batches of one API key, over all the projects
// it writes to, at most Options::max_queued_annotations_per_key; and at most
// Options::max_queued_annotations wait over all projects. Submit() answers RESOURCE_EXHAUSTED
// (retryable) beyond any of them rather than growing without bound, so a project or a key that
// floods is refused its excess while the others are not (a key writing to two projects cannot
// fill the whole queue with two projects' shares). The committer builds each group round-robin over the projects with waiting batches,
// one batch of each in turn, so one project's backlog never stands ahead of another's batch.
// A project is in at most one lane's group until that group is committed and queued for
// publishing, so its batches commit and publish in order; with two lanes a small project's
// batch commits beside a flood's group instead of after it.
//
// Metrics (when given a registry): batches and annotations committed (by outcome), batches
// refused, failed group transactions and the batches then committed alone (by result), the
// queue's depth, the commit transaction's duration, and posterior freshness — the time from
// Submit() to the batch's labels being in the served posteriors.
//
// Thread-safety: Submit() may be called from any thread. Shutdown() drains the queue (every
// queued batch is committed or failed, and published) and joins every thread; Submit() after
// it answers UNAVAILABLE.
#ifndef VERITY_SERVER_INGEST_INGEST_PIPELINE_H_
#define VERITY_SERVER_INGEST_INGEST_PIPELINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/observability/metrics.h"
#include "server/state/live_project.h"
#include "storage/annotation_store.h"

namespace verity::server {

class IngestPipeline {
 public:
  struct Options {
    // Annotations waiting for a commit, over all streams, before Submit refuses.
    int64_t max_queued_annotations = 500000;
    // Annotations of one project waiting for a commit before Submit refuses that project's
    // batches (its share of the queue: half, so a flood leaves the other half to the rest).
    int64_t max_queued_annotations_per_project = 250000;
    // Annotations of one API key's batches, over all its projects, waiting for a commit before
    // Submit refuses that key's batches (also half: one key cannot fill the queue whatever
    // projects it may write to). Batches without a key (authentication off) are not counted.
    int64_t max_queued_annotations_per_key = 250000;
    // Most annotations written by one transaction (a larger batch is written alone). A group
    // in progress is what a small project's batch waits for behind a flood: 10,000 gave the
    // same ingest throughput as 100,000 and halved that wait (docs/SECURITY.md, point 5).
    int64_t max_group_annotations = 10000;
    // Committer threads (>= 1), each with its own transaction; a project is in one at a time.
    int commit_lanes = 2;
  };

  using Result = absl::StatusOr<std::vector<storage::WriteResult>>;

  // An exact admission check, run in the commit lane just before a batch is written, against
  // its project as committed so far (a project is in one lane at a time, so nothing else
  // changes it meanwhile). `batches` holds the writes of the same project's batches admitted
  // earlier in the same group, then the batch's own, last. A batch it refuses gets the error
  // as its result and nothing of it is written; the others of the group commit.
  using AdmissionCheck = std::function<absl::Status(
      const LiveProject& project,
      absl::Span<const std::vector<storage::AnnotationWrite>* const> batches)>;

  // `metrics` may be null (nothing measured); otherwise it must outlive the pipeline.
  IngestPipeline(storage::AnnotationStore& store, Options options,
                 MetricsRegistry* metrics = nullptr);
  ~IngestPipeline();

  // Queues `writes` (all for `project`, already validated). The future yields one WriteResult
  // per write, in order, after COMMIT and after the project's posteriors include them; or the
  // error of the batch's transaction: nothing of the batch written, or, for UNAVAILABLE,
  // maybe written (the outcome of COMMIT unknown: resend).
  // `admit`, if given, is the batch's AdmissionCheck. `key_id` is the API key that sent the
  // batch ("" with authentication off), for its share of the queue. `max_history_rows` (> 0)
  // is the project's max_revisions, which the commit itself enforces against the database's
  // count of every server's history rows (storage::HistoryLimit); `admit` sees the count as of
  // this server's last commit to the project, which other replicas' revisions may have passed.
  // A batch the commit refuses gets its RESOURCE_EXHAUSTED; the rest of its group commits.
  std::future<Result> Submit(std::shared_ptr<LiveProject> project,
                             std::vector<storage::AnnotationWrite> writes,
                             AdmissionCheck admit = nullptr, std::string key_id = "",
                             int64_t max_history_rows = 0)
      ABSL_LOCKS_EXCLUDED(mu_);

  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending {
    std::shared_ptr<LiveProject> project;
    std::vector<storage::AnnotationWrite> writes;
    std::promise<Result> done;
    absl::Time queued_at;
    AdmissionCheck admit;  // May be null.
    std::string key_id;    // "" when authentication is off.
    int64_t max_history_rows = 0;  // <= 0: no bound (Submit).
  };

  // A group after its transaction(s), waiting for the publisher.
  struct CommittedGroup {
    std::vector<Pending> batches;
    std::vector<Result> results;  // One per batch: its write results or its error.
    // Each project of the group, with the items whose posteriors changed.
    std::vector<std::pair<std::shared_ptr<LiveProject>, std::vector<int32_t>>> touched;
  };

  // The pipeline's metric children; null without a registry.
  struct Metrics;

  void CommitLoop();
  // Takes the next group for a lane: round-robin over the waiting projects that no lane holds.
  // Marks its projects held. Requires a project to be available.
  std::vector<Pending> TakeGroup() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LaneHasWorkOrIsDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the batches' admission checks, then commits the admitted ones (CommitAdmitted); the
  // refused ones join the result with their errors.
  CommittedGroup CommitGroup(std::vector<Pending> group);
  CommittedGroup CommitAdmitted(std::vector<Pending> group);
  // Commits batches [first, last) of `group`, whose writes are all[offsets[first],
  // offsets[last]), in one transaction; on success registers them with their projects and
  // adds the touched items to `committed`. Returns the transaction's results or error.
  Result CommitBatches(const std::vector<Pending>& group,
                       const std::vector<storage::AnnotationWrite>& all,
                       const std::vector<size_t>& offsets, size_t first, size_t last,
                       CommittedGroup& committed);
  // The seqs `drawn` lists for `project`, if any.
  static std::optional<storage::DrawnSeqs> DrawnSeqsOf(
      const std::vector<storage::DrawnSeqs>& drawn, const LiveProject& project);
  // Registers this pipeline's commit of `labels` (one project's, one transaction's) with the
  // project: LiveProject::RegisterOwnCommit, catching up first with the labels other replicas
  // committed before it when it asks to. Returns the items whose posteriors changed.
  std::vector<int32_t> RegisterOwnCommit(LiveProject& project,
                                         absl::Span<const CommittedLabel> labels,
                                         std::optional<storage::DrawnSeqs> drawn);
  void PublishLoop();
  void PublishGroup(CommittedGroup& group);
  // Counts one committed batch. Requires metrics_.
  void RecordCommitted(const Pending& batch, const std::vector<storage::WriteResult>& results);

  storage::AnnotationStore& store_;
  const Options options_;
  const std::unique_ptr<Metrics> metrics_;

  // One project's waiting batches.
  struct ProjectQueue {
    std::deque<Pending> batches;
    int64_t annotations = 0;
  };

  absl::Mutex mu_;
  // By project id; a queue is erased once empty.
  absl::flat_hash_map<int64_t, ProjectQueue> queues_ ABSL_GUARDED_BY(mu_);
  // The projects with waiting batches, in the order the committer serves them.
  std::deque<int64_t> ready_ ABSL_GUARDED_BY(mu_);
  int64_t queued_annotations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_batches_ ABSL_GUARDED_BY(mu_) = 0;
  // Annotations waiting per API key (keys with none are erased).
  absl::flat_hash_map<std::string, int64_t> queued_by_key_ ABSL_GUARDED_BY(mu_);
  // Projects in a group a lane is committing (until it is queued for publishing).
  absl::flat_hash_set<int64_t> held_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Committed groups in commit order. The committer waits while kMaxUnpublishedGroups wait.
  static constexpr size_t kMaxUnpublishedGroups = 2;
  absl::Mutex publish_mu_;
  std::deque<CommittedGroup> committed_ ABSL_GUARDED_BY(publish_mu_);
  bool committer_done_ ABSL_GUARDED_BY(publish_mu_) = false;  // Every lane has returned.
  int lanes_running_ ABSL_GUARDED_BY(publish_mu_) = 0;

  std::vector<std::thread> committers_;
  std::thread publisher_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_INGEST_INGEST_PIPELINE_H_
