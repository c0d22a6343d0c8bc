#include "server/ingest/ingest_pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/except"
#include "pqxx/result"
#include "pqxx/transaction"
#include "server/observability/metrics.h"
#include "server/state/live_project.h"
#include "storage/annotation_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

class IngestPipelineTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<storage::AnnotationStore>(&pool());
    ASSERT_NO_FATAL_FAILURE(project_ = NewProject("p"));
  }

  // A new two-class project, in the database and live.
  std::shared_ptr<LiveProject> NewProject(const std::string& name) {
    storage::ProjectStore projects(&pool());
    storage::ProjectRecord record;
    record.name = name;
    record.classes = {"no", "yes"};
    absl::StatusOr<storage::ProjectRecord> created = projects.CreateProject(record);
    EXPECT_THAT(created, IsOk());
    if (!created.ok()) return nullptr;
    LiveProject::Identity identity;
    identity.project_id = created->project_id;
    identity.name = name;
    identity.classes = record.classes;
    absl::StatusOr<std::unique_ptr<LiveProject>> live =
        LiveProject::Create(identity, v1::ProjectSettings(), {});
    EXPECT_THAT(live, IsOk());
    if (!live.ok()) return nullptr;
    return std::move(*live);
  }

  storage::AnnotationWrite Write(const std::string& item, const std::string& annotator,
                                 int32_t label) const {
    return WriteTo(*project_, item, annotator, label);
  }
  static storage::AnnotationWrite WriteTo(const LiveProject& project, const std::string& item,
                                          const std::string& annotator, int32_t label) {
    storage::AnnotationWrite w;
    w.project_id = project.identity().project_id;
    w.item_id = item;
    w.annotator_id = annotator;
    w.label = label;
    return w;
  }
  // `size` labels of annotator "w" on items TAG-0, TAG-1, ... (labels 0, 1, 0, ...).
  static std::vector<storage::AnnotationWrite> Batch(const LiveProject& project,
                                                     const std::string& tag, int size = 10) {
    std::vector<storage::AnnotationWrite> writes;
    for (int n = 0; n < size; ++n) {
      writes.push_back(WriteTo(project, absl::StrCat(tag, "-", n), "w", n % 2));
    }
    return writes;
  }

  // Labels of `item` in the served posteriors (0 for an item not served yet).
  int32_t ServedLabels(const std::string& item) const { return ServedLabelsOf(*project_, item); }
  static int32_t ServedLabelsOf(const LiveProject& project, const std::string& item) {
    std::optional<int32_t> index = project.FindItem(item);
    std::shared_ptr<const ProjectSnapshot> snapshot = project.snapshot();
    if (!index.has_value() || *index >= snapshot->posteriors.num_items()) return 0;
    return snapshot->posteriors.num_labels(*index);
  }

  // Waits (at most 30 s) until some session waits on a row lock: a commit lane holding a batch
  // behind a test's lock. False if none did.
  bool WaitUntilALaneWaitsOnALock() {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    auto lane_waits = [&] {
      absl::StatusOr<int64_t> waiting = pool().WithTransaction(
          "counting lock waits", [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
            return txn
                .exec1("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")[0]
                .as<int64_t>();
          });
      return waiting.ok() && *waiting > 0;
    };
    while (!lane_waits() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
    return lane_waits();
  }

  // An admission check that says it runs (in the commit lane) and, once released, answers
  // `answer` (admits by default; an error refuses the held batch without a transaction): it
  // holds the lane while the batches submitted meanwhile queue behind it.
  static IngestPipeline::AdmissionCheck HoldLane(absl::Notification& entered,
                                                 absl::Notification& release,
                                                 absl::Status answer = absl::OkStatus()) {
    return [&entered, &release, answer](
               const LiveProject&, absl::Span<const std::vector<storage::AnnotationWrite>* const>) {
      entered.Notify();
      release.WaitForNotification();
      return answer;
    };
  }

  // Makes the next `faults` COMMITs lose their ack (the connection breaks after the server
  // committed), counting `faults` down to 0 and below; tests clear the hook themselves.
  void LoseTheNextAcks(std::atomic<int>& faults) {
    pool().SetAfterCommitHookForTesting([&faults](pqxx::connection&) {
      if (faults.fetch_sub(1) > 0) throw pqxx::broken_connection("injected: ack lost after COMMIT");
    });
  }

  // The id of the transaction that wrote `item`'s live annotation (of its one annotator).
  int64_t XminOf(const LiveProject& project, const std::string& item) {
    absl::StatusOr<int64_t> xmin =
        pool().WithTransaction("reading xmin", [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
          return txn
              .exec_params1(
                  "SELECT a.xmin::text::bigint FROM annotations a JOIN items i "
                  "ON i.project_id = a.project_id AND i.item_index = a.item_index "
                  "WHERE a.project_id = $1 AND i.external_id = $2",
                  project.identity().project_id, item)[0]
              .as<int64_t>();
        });
    EXPECT_THAT(xmin, IsOk()) << item;
    return xmin.value_or(0);
  }

  std::unique_ptr<storage::AnnotationStore> store_;
  std::shared_ptr<LiveProject> project_;
};

// Small groups, so that several groups are committed while earlier ones are still being
// published: every ack still comes after its labels are durable and served.
TEST_F(IngestPipelineTest, AckedBatchesAreStoredAndServedInOrder) {
  IngestPipeline::Options options;
  options.max_group_annotations = 40;
  IngestPipeline pipeline(*store_, options);
  constexpr int kThreads = 3, kBatches = 12, kBatchSize = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::future<IngestPipeline::Result>> futures;
      std::vector<std::string> last_item;
      for (int b = 0; b < kBatches; ++b) {
        std::vector<storage::AnnotationWrite> writes;
        // Each batch: new items of this thread, labelled by two annotators shared by all
        // threads; the batch's first item comes back in the next batch (a duplicate).
        for (int n = 0; n < kBatchSize; ++n) {
          const std::string item = absl::StrCat("t", t, "-b", b, "-", n);
          writes.push_back(Write(item, absl::StrCat("a", n % 2), n % 2));
        }
        if (b > 0) writes.push_back(Write(absl::StrCat("t", t, "-b", b - 1, "-0"), "a0", 0));
        last_item.push_back(writes[kBatchSize - 1].item_id);
        futures.push_back(pipeline.Submit(project_, std::move(writes)));
      }
      for (int b = 0; b < kBatches; ++b) {
        IngestPipeline::Result result = futures[b].get();
        ASSERT_THAT(result, IsOk());
        ASSERT_EQ(result->size(), static_cast<size_t>(kBatchSize + (b > 0 ? 1 : 0)));
        for (int n = 0; n < kBatchSize; ++n) {
          EXPECT_EQ((*result)[n].outcome, storage::WriteOutcome::kAccepted);
        }
        if (b > 0) EXPECT_EQ(result->back().outcome, storage::WriteOutcome::kDuplicate);
        // Acked, so already in the served posteriors.
        EXPECT_EQ(ServedLabels(last_item[b]), 1) << last_item[b];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  pipeline.Shutdown();
  EXPECT_THAT(store_->CountLiveAnnotations(project_->identity().project_id),
              IsOkAndHolds(kThreads * kBatches * kBatchSize));
  EXPECT_EQ(project_->Counts().num_labels, kThreads * kBatches * kBatchSize);
  EXPECT_EQ(project_->Counts().num_items, kThreads * kBatches * kBatchSize);
}

TEST_F(IngestPipelineTest, AFailedGroupFailsItsBatchesAndTheNextGroupCommits) {
  IngestPipeline pipeline(*store_, IngestPipeline::Options());
  std::vector<storage::AnnotationWrite> bad = {Write("i", "a", 5)};  // K = 2.
  EXPECT_THAT(pipeline.Submit(project_, std::move(bad)).get(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<storage::AnnotationWrite> good = {Write("i", "a", 1)};
  IngestPipeline::Result result = pipeline.Submit(project_, std::move(good)).get();
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ((*result)[0].outcome, storage::WriteOutcome::kAccepted);
  EXPECT_EQ((*result)[0].item_index, 0);
  EXPECT_EQ(ServedLabels("i"), 1);
}

// Holds the row lock of a project (as a concurrent writer would) from Lock() until Release(),
// so that the committer's next transaction on that project waits and the batches submitted
// meanwhile queue up for one group.
class ProjectLockHolder {
 public:
  ProjectLockHolder(storage::ConnectionPool& pool, int64_t project_id)
      : thread_([this, &pool, project_id] {
          status_ = pool.RunInTransaction("holding a project lock", [&](pqxx::work& txn) {
            txn.exec_params("SELECT 1 FROM projects WHERE project_id = $1 FOR UPDATE",
                            project_id);
            locked_.Notify();
            release_.WaitForNotification();
            return absl::OkStatus();
          });
          // Also when the lock could not be taken (only this thread notifies locked_).
          if (!locked_.HasBeenNotified()) locked_.Notify();
        }) {}
  // Best effort: a test that checks the release calls Release() itself.
  ~ProjectLockHolder() { Release().IgnoreError(); }

  void WaitLocked() { locked_.WaitForNotification(); }
  absl::Status Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  absl::Notification locked_, release_;
  absl::Status status_;
  std::thread thread_;
};

// A batch the store refuses (a client_time past 9999-12-31T23:59:59.999999, which validation
// lets through no more) used to fail every batch of every stream in its group. Now only that
// batch is refused; the others of its group commit on their own, in order.
TEST_F(IngestPipelineTest, ABatchTheStoreRefusesFailsAloneInItsGroup) {
  std::shared_ptr<LiveProject> other;
  ASSERT_NO_FATAL_FAILURE(other = NewProject("q"));
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);

  // The committer waits on the lock with the first batch (or with a prefix of the batches
  // submitted below) while the rest queue: the poison batch shares its group with good ones
  // of both streams, whichever way the committer's wake-up falls.
  ProjectLockHolder lock(pool(), project_->identity().project_id);
  lock.WaitLocked();
  std::vector<std::future<IngestPipeline::Result>> good;  // Stream 1, project p.
  std::vector<std::future<IngestPipeline::Result>> other_good;  // Stream 2, project q.
  good.push_back(pipeline.Submit(project_, {Write("i0", "a", 0)}));
  other_good.push_back(pipeline.Submit(other, {WriteTo(*other, "j0", "b", 1)}));
  storage::AnnotationWrite poison = WriteTo(*other, "j1", "b", 1);
  poison.client_time = absl::FromUnixSeconds(253402300799) + absl::Nanoseconds(999999001);
  std::future<IngestPipeline::Result> refused =
      pipeline.Submit(other, {WriteTo(*other, "j2", "b", 0), poison});
  for (int b = 1; b < 4; ++b) {
    good.push_back(pipeline.Submit(project_, {Write(absl::StrCat("i", b), "a", b % 2)}));
  }
  other_good.push_back(pipeline.Submit(other, {WriteTo(*other, "j3", "b", 0)}));
  ASSERT_THAT(lock.Release(), IsOk());

  for (size_t b = 0; b < good.size(); ++b) {
    IngestPipeline::Result result = good[b].get();
    ASSERT_THAT(result, IsOk()) << "batch " << b;
    EXPECT_EQ((*result)[0].outcome, storage::WriteOutcome::kAccepted);
    EXPECT_EQ(ServedLabels(absl::StrCat("i", b)), 1);
  }
  for (size_t b = 0; b < other_good.size(); ++b) {
    IngestPipeline::Result result = other_good[b].get();
    ASSERT_THAT(result, IsOk()) << "batch " << b;
    EXPECT_EQ((*result)[0].outcome, storage::WriteOutcome::kAccepted);
  }
  EXPECT_THAT(refused.get(), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("annotation #1: client_time")));
  EXPECT_EQ(ServedLabelsOf(*other, "j0"), 1);
  EXPECT_EQ(ServedLabelsOf(*other, "j3"), 1);
  // Nothing of the refused batch was written, not even its valid first annotation.
  EXPECT_EQ(ServedLabelsOf(*other, "j2"), 0);
  EXPECT_THAT(store_->CountLiveAnnotations(other->identity().project_id), IsOkAndHolds(2));
  EXPECT_THAT(store_->CountLiveAnnotations(project_->identity().project_id), IsOkAndHolds(4));
  EXPECT_EQ(other->Counts().num_labels, 2);
  EXPECT_EQ(project_->Counts().num_labels, 4);
  EXPECT_THAT(metrics.RenderText(),
              HasSubstr("verity_ingest_isolated_batches_total{result=\"refused\"} 1"));
}

// The connection breaks after the server committed but before the ack came back: the batch is
// answered UNAVAILABLE (outcome unknown), and the client resends it. The store answers
// "duplicate" (it holds the labels), and the labels must now be served: a first label of a new
// pair, and a revision of a label the project already served.
TEST_F(IngestPipelineTest, AResendOfABatchCommittedInDoubtIsServed) {
  IngestPipeline pipeline(*store_, IngestPipeline::Options());
  std::vector<storage::AnnotationWrite> first = {Write("old", "a", 0), Write("other", "c", 0)};
  ASSERT_THAT(pipeline.Submit(project_, first).get(), IsOk());

  std::atomic<int> faults{1};
  LoseTheNextAcks(faults);
  // A new item and annotator, a revision (0 -> 1) of a served label, and a new pair of known
  // ids (which the hints then wrongly call unlabelled).
  std::vector<storage::AnnotationWrite> batch = {Write("new", "b", 1), Write("old", "a", 1),
                                                 Write("old", "c", 1)};
  EXPECT_THAT(pipeline.Submit(project_, batch).get(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
  // Durable although refused, and not served yet: the case the resend must repair.
  ASSERT_THAT(store_->CountLiveAnnotations(project_->identity().project_id), IsOkAndHolds(4));

  IngestPipeline::Result resent = pipeline.Submit(project_, batch).get();
  ASSERT_THAT(resent, IsOk());
  EXPECT_EQ((*resent)[0].outcome, storage::WriteOutcome::kDuplicate);
  EXPECT_EQ((*resent)[1].outcome, storage::WriteOutcome::kDuplicate);
  EXPECT_EQ((*resent)[2].outcome, storage::WriteOutcome::kDuplicate);
  EXPECT_EQ(ServedLabels("new"), 1);
  EXPECT_EQ(ServedLabels("old"), 2);
  EXPECT_EQ(project_->Counts().num_labels, 4);
  ASSERT_TRUE(project_->FindItem("new").has_value());
  ASSERT_TRUE(project_->FindAnnotator("b").has_value());
  EXPECT_TRUE(project_->HasLabelled(*project_->FindItem("new"), *project_->FindAnnotator("b")));
  // Only resent labels (1) on these items' live rows, so majority vote (the model before any
  // fit) serves class 1.
  std::shared_ptr<const ProjectSnapshot> snapshot = project_->snapshot();
  for (const char* item : {"new", "old"}) {
    const int32_t index = *project_->FindItem(item);
    EXPECT_GT(snapshot->posteriors.probabilities(index)[1], 0.5) << item;
    const int64_t seq = (*resent)[item == std::string("new") ? 0 : 2].seq;
    EXPECT_EQ(snapshot->posteriors.newest_seq(index), seq) << item;
  }
}

// A client that retries an old batch late must not replace a newer label: with client_time on
// both, the older label is acked stale, kept in history, and the newer one stays served.
TEST_F(IngestPipelineTest, ALateOlderLabelIsAckedStaleAndTheNewerOneStaysServed) {
  IngestPipeline pipeline(*store_, IngestPipeline::Options());
  const absl::Time t2 = absl::FromUnixSeconds(1700000000);
  storage::AnnotationWrite newer = Write("i", "a", 1);
  newer.client_time = t2;
  IngestPipeline::Result first = pipeline.Submit(project_, {newer}).get();
  ASSERT_THAT(first, IsOk());
  ASSERT_EQ((*first)[0].outcome, storage::WriteOutcome::kAccepted);

  storage::AnnotationWrite older = Write("i", "a", 0);
  older.client_time = t2 - absl::Minutes(5);
  IngestPipeline::Result late = pipeline.Submit(project_, {older}).get();
  ASSERT_THAT(late, IsOk());
  EXPECT_EQ((*late)[0].outcome, storage::WriteOutcome::kStale);
  EXPECT_EQ((*late)[0].seq, (*first)[0].seq);

  const int32_t item = *project_->FindItem("i");
  std::shared_ptr<const ProjectSnapshot> snapshot = project_->snapshot();
  EXPECT_GT(snapshot->posteriors.probabilities(item)[1], 0.5);
  EXPECT_EQ(snapshot->posteriors.num_labels(item), 1);
  EXPECT_EQ(snapshot->posteriors.newest_seq(item), (*first)[0].seq);
  EXPECT_EQ(project_->Counts().num_labels, 1);
  absl::StatusOr<std::vector<storage::LiveAnnotation>> live =
      store_->LoadLiveAnnotations(project_->identity().project_id);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].label, 1);
  absl::StatusOr<std::vector<int32_t>> history = pool().WithTransaction(
      "reading the history", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
        std::vector<int32_t> labels;
        for (const pqxx::row& row : txn.exec_params(
                 "SELECT label FROM annotation_history WHERE project_id = $1",
                 project_->identity().project_id)) {
          labels.push_back(row[0].as<int32_t>());
        }
        return labels;
      });
  ASSERT_THAT(history, IsOk());
  EXPECT_EQ(*history, std::vector<int32_t>{0});
}

// Fairness: one project's backlog neither fills the queue for the others nor stands ahead of
// their batches. While a lane is held on project A's first batch (its row lock taken here), A
// queues more than its share (the excess is refused, naming A) and B's batch is accepted.
// With one lane, B's batch commits right after A's next one, ahead of A's backlog
// (round-robin); with two, the free lane commits it at once, before A's next. The
// transactions' ids (xmin, assigned as each transaction first writes) show the order.
TEST_F(IngestPipelineTest, OneProjectsBacklogNeitherFillsTheQueueNorGoesFirst) {
  for (int lanes : {1, 2}) {
    SCOPED_TRACE(absl::StrCat(lanes, " commit lanes"));
    std::shared_ptr<LiveProject> a = NewProject(absl::StrCat("a", lanes));
    std::shared_ptr<LiveProject> b = NewProject(absl::StrCat("b", lanes));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    IngestPipeline::Options options;
    options.max_group_annotations = 10;               // One batch per group.
    options.max_queued_annotations = 1000;
    options.max_queued_annotations_per_project = 30;  // Three batches of A.
    options.commit_lanes = lanes;
    IngestPipeline pipeline(*store_, options);
    ProjectLockHolder lock(pool(), a->identity().project_id);
    lock.WaitLocked();
    std::vector<std::future<IngestPipeline::Result>> of_a;
    of_a.push_back(pipeline.Submit(a, Batch(*a, "a0")));  // Taken, then held by the lock.
    // Once a lane waits on the lock with a0, A's queue holds a1..a3 (30 = its share) and a4
    // is refused.
    ASSERT_TRUE(WaitUntilALaneWaitsOnALock());
    for (int i = 1; i <= 3; ++i) {
      of_a.push_back(pipeline.Submit(a, Batch(*a, absl::StrCat("a", i))));
    }
    std::future<IngestPipeline::Result> a4 = pipeline.Submit(a, Batch(*a, "a4"));
    std::future<IngestPipeline::Result> b0 = pipeline.Submit(b, Batch(*b, "b0"));
    EXPECT_THAT(a4.get(), StatusIs(absl::StatusCode::kResourceExhausted,
                                   HasSubstr(absl::StrCat("project a", lanes))));
    // With two lanes the free one commits B's batch while A's lane still waits: it is acked
    // before the lock is released.
    if (lanes > 1) {
      EXPECT_EQ(b0.wait_for(std::chrono::seconds(30)), std::future_status::ready)
          << "B's batch waited for A's lane";
    }
    ASSERT_THAT(lock.Release(), IsOk());
    EXPECT_THAT(b0.get(), IsOk());
    for (auto& f : of_a) EXPECT_THAT(f.get(), IsOk());
    auto xmin_of = [&](const LiveProject& project, const std::string& item) -> int64_t {
      absl::StatusOr<int64_t> xmin = pool().WithTransaction(
          "reading xmin", [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
            return txn
                .exec_params1("SELECT a.xmin::text::bigint FROM annotations a JOIN items i "
                              "ON i.project_id = a.project_id AND i.item_index = a.item_index "
                              "WHERE a.project_id = $1 AND i.external_id = $2",
                              project.identity().project_id, item)[0]
                .as<int64_t>();
          });
      EXPECT_THAT(xmin, IsOk());
      return xmin.value_or(0);
    };
    const int64_t a1 = xmin_of(*a, "a1-0"), a2 = xmin_of(*a, "a2-0");
    const int64_t b_first = xmin_of(*b, "b0-0");
    if (lanes == 1) {
      EXPECT_LT(a1, b_first) << "a1 was queued first";
      EXPECT_LT(b_first, a2) << "B's batch waited behind A's backlog";
    } else {
      EXPECT_LT(b_first, a1) << "B's batch waited for A's lane";
    }
  }
}

// ingest_pipeline.h: one API key's batches, over all its projects, wait at most
// Options::max_queued_annotations_per_key. With the one lane held on project P's first batch
// (a taken batch no longer waits), key K queues 10 on P and 10 on Q (20, its share: accepted,
// each project within its own share of 1000) and is refused one more batch on Q, naming the
// key; another key's batch on Q, and a batch without a key, are accepted. Once everything
// committed, K's share is free again.
TEST_F(IngestPipelineTest, OneKeyWritingToSeveralProjectsIsRefusedBeyondItsShare) {
  std::shared_ptr<LiveProject> other;
  ASSERT_NO_FATAL_FAILURE(other = NewProject("q-key"));
  IngestPipeline::Options options;
  options.max_group_annotations = 10;  // One batch per group.
  options.max_queued_annotations = 1000;
  options.max_queued_annotations_per_project = 1000;
  options.max_queued_annotations_per_key = 20;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  ProjectLockHolder lock(pool(), project_->identity().project_id);
  lock.WaitLocked();
  std::vector<std::future<IngestPipeline::Result>> accepted;
  accepted.push_back(pipeline.Submit(project_, Batch(*project_, "k0"), nullptr, "key-k"));
  ASSERT_TRUE(WaitUntilALaneWaitsOnALock());  // k0 is taken: K has nothing waiting.
  accepted.push_back(pipeline.Submit(project_, Batch(*project_, "k1"), nullptr, "key-k"));
  accepted.push_back(pipeline.Submit(other, Batch(*other, "k2"), nullptr, "key-k"));
  std::future<IngestPipeline::Result> refused =
      pipeline.Submit(other, Batch(*other, "k3"), nullptr, "key-k");
  accepted.push_back(pipeline.Submit(other, Batch(*other, "j0"), nullptr, "key-j"));
  accepted.push_back(pipeline.Submit(other, Batch(*other, "n0")));
  accepted.push_back(pipeline.Submit(other, Batch(*other, "n1")));
  EXPECT_THAT(refused.get(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("API key key-k")));
  ASSERT_THAT(lock.Release(), IsOk());
  for (auto& f : accepted) EXPECT_THAT(f.get(), IsOk());
  EXPECT_THAT(pipeline.Submit(other, Batch(*other, "k4"), nullptr, "key-k").get(), IsOk());
  EXPECT_THAT(pipeline.Submit(other, Batch(*other, "k5"), nullptr, "key-k").get(), IsOk());
}

// RESOURCE_EXHAUSTED for a key's share is retryable: as a project's empty queue, a key with
// nothing waiting always gets a batch in, however large, also after earlier batches of its
// own have been committed (a batch larger than the share is never refused for good).
TEST_F(IngestPipelineTest, AKeyWithNothingWaitingGetsABatchLargerThanItsShareIn) {
  IngestPipeline::Options options;
  options.max_queued_annotations_per_key = 5;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  for (int round = 0; round < 3; ++round) {
    std::vector<storage::AnnotationWrite> writes;
    for (int n = 0; n < 10; ++n) {
      writes.push_back(WriteTo(*project_, absl::StrCat("big", round, "-", n), "w", n % 2));
    }
    EXPECT_THAT(pipeline.Submit(project_, std::move(writes), nullptr, "key-big").get(), IsOk())
        << "round " << round;
  }
}

// ingest_pipeline.h: "at most Options::max_queued_annotations wait over all projects;
// Submit() answers RESOURCE_EXHAUSTED (retryable) beyond" it. With a cap of 20 (and a project
// share far above it, so only the global cap can refuse) and the one lane held on project P's
// first batch (its row lock taken here; a taken batch no longer waits in the queue), a batch
// of P and one of Q fill the queue exactly (10 + 10 = 20: accepted), and a further annotation
// of Q is refused. Once everything committed, the queue is empty again: a full batch of 20 is
// accepted.
TEST_F(IngestPipelineTest, TheGlobalQueueCapRefusesTheExcessAndIsReleasedOnCommit) {
  std::shared_ptr<LiveProject> other;
  ASSERT_NO_FATAL_FAILURE(other = NewProject("q"));
  IngestPipeline::Options options;
  options.max_group_annotations = 10;  // One batch per group.
  options.max_queued_annotations = 20;
  options.max_queued_annotations_per_project = 1000;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  ProjectLockHolder lock(pool(), project_->identity().project_id);
  lock.WaitLocked();
  std::vector<std::future<IngestPipeline::Result>> accepted;
  accepted.push_back(pipeline.Submit(project_, Batch(*project_, "p0", 10)));
  // Wait until the lane holds p0 and waits on the lock.
  ASSERT_TRUE(WaitUntilALaneWaitsOnALock());
  accepted.push_back(pipeline.Submit(project_, Batch(*project_, "p1", 10)));
  accepted.push_back(pipeline.Submit(other, Batch(*other, "q0", 10)));
  const IngestPipeline::Result refused = pipeline.Submit(other, Batch(*other, "q1", 1)).get();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  // docs/SECURITY.md: no key reads what it should not. The refusal tells Q's writer that the
  // server is full, not how much the other tenants have waiting (20 over all, 10 of them P's).
  EXPECT_FALSE(absl::StrContains(refused.status().message(), "20")) << refused.status();
  EXPECT_FALSE(absl::StrContains(refused.status().message(), "10")) << refused.status();
  ASSERT_THAT(lock.Release(), IsOk());
  for (auto& f : accepted) EXPECT_THAT(f.get(), IsOk());
  EXPECT_EQ(ServedLabelsOf(*other, "q0-9"), 1);
  EXPECT_EQ(ServedLabelsOf(*other, "q1-0"), 0);
  EXPECT_THAT(pipeline.Submit(other, Batch(*other, "q2", 20)).get(), IsOk());
  EXPECT_EQ(ServedLabelsOf(*other, "q2-19"), 1);
}

// ingest_pipeline.h: Submit() answers RESOURCE_EXHAUSTED "(retryable)" beyond a queue's
// limit. A batch larger than the project's share or the global cap must then still be taken
// by an empty queue, or its retries would be refused for good: a batch of 10 commits under a
// share of 5 and under a global cap of 5.
TEST_F(IngestPipelineTest, AnEmptyQueueTakesABatchLargerThanItsLimits) {
  for (const bool global : {false, true}) {
    SCOPED_TRACE(global ? "global cap of 5" : "project share of 5");
    IngestPipeline::Options options;
    options.max_queued_annotations = global ? 5 : 1000;
    options.max_queued_annotations_per_project = global ? 1000 : 5;
    IngestPipeline pipeline(*store_, options);
    const std::string tag = global ? "global" : "share";
    std::vector<storage::AnnotationWrite> writes;
    for (int n = 0; n < 10; ++n) writes.push_back(Write(absl::StrCat(tag, "-", n), "w", n % 2));
    EXPECT_THAT(pipeline.Submit(project_, std::move(writes)).get(), IsOk());
    EXPECT_EQ(ServedLabels(absl::StrCat(tag, "-9")), 1);
  }
}

// ingest_pipeline.h's metrics: annotations committed "by outcome". One batch each of two first
// labels, a resend of a live label, a revision and a label older (by client_time) than the
// live one: accepted 2, duplicate 1, revised 1, stale 1, and 4 batches.
TEST_F(IngestPipelineTest, CommittedAnnotationsAreCountedByOutcome) {
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  storage::AnnotationWrite timed = Write("i1", "a", 1);
  timed.client_time = t;
  ASSERT_THAT(pipeline.Submit(project_, {timed, Write("i2", "a", 0)}).get(), IsOk());
  ASSERT_THAT(pipeline.Submit(project_, {Write("i2", "a", 0)}).get(), IsOk());
  ASSERT_THAT(pipeline.Submit(project_, {Write("i2", "a", 1)}).get(), IsOk());
  storage::AnnotationWrite older = Write("i1", "a", 0);
  older.client_time = t - absl::Minutes(5);
  ASSERT_THAT(pipeline.Submit(project_, {older}).get(), IsOk());
  const std::string text = metrics.RenderText();
  EXPECT_THAT(text, HasSubstr("verity_ingest_annotations_total{outcome=\"accepted\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_annotations_total{outcome=\"duplicate\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_annotations_total{outcome=\"revised\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_annotations_total{outcome=\"stale\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_batches_total 4\n"));
}

TEST_F(IngestPipelineTest, ShutdownCommitsAndPublishesEverythingQueued) {
  IngestPipeline pipeline(*store_, IngestPipeline::Options());
  std::vector<std::future<IngestPipeline::Result>> futures;
  for (int b = 0; b < 20; ++b) {
    futures.push_back(pipeline.Submit(project_, {Write(absl::StrCat("i", b), "a", b % 2)}));
  }
  pipeline.Shutdown();
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    EXPECT_THAT(f.get(), IsOk());
  }
  EXPECT_EQ(ServedLabels("i19"), 1);
  EXPECT_THAT(pipeline.Submit(project_, {Write("late", "a", 0)}).get(),
              StatusIs(absl::StatusCode::kUnavailable));
}

// ingest_pipeline.h, AdmissionCheck: "`batches` holds the writes of the same project's
// batches admitted earlier in the same group, then the batch's own, last. A batch it refuses
// gets the error as its result and nothing of it is written; the others of the group commit."
// With the one lane held on the project's first batch, three batches queue for one group: the
// first is refused, so the second's check sees only its own writes, and the third's sees the
// second's (admitted) and then its own.
TEST_F(IngestPipelineTest, AdmissionChecksSeeOnlyTheBatchesAdmittedBeforeThem) {
  IngestPipeline::Options options;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  ProjectLockHolder lock(pool(), project_->identity().project_id);
  lock.WaitLocked();
  std::future<IngestPipeline::Result> first = pipeline.Submit(project_, Batch(*project_, "b0", 2));
  ASSERT_TRUE(WaitUntilALaneWaitsOnALock());  // b0 is taken; the next three wait together.

  // The first item of each batch a check is shown, in order.
  auto recorder = [](std::vector<std::string>& seen, absl::Status verdict) {
    return [&seen, verdict](const LiveProject&,
                            absl::Span<const std::vector<storage::AnnotationWrite>* const>
                                batches) {
      for (const std::vector<storage::AnnotationWrite>* b : batches) {
        seen.push_back(b->front().item_id);
      }
      return verdict;
    };
  };
  std::vector<std::string> seen1, seen2, seen3;
  std::future<IngestPipeline::Result> refused = pipeline.Submit(
      project_, Batch(*project_, "b1", 2),
      recorder(seen1, absl::ResourceExhaustedError("over the project's quota")));
  std::future<IngestPipeline::Result> second =
      pipeline.Submit(project_, Batch(*project_, "b2", 2), recorder(seen2, absl::OkStatus()));
  std::future<IngestPipeline::Result> third =
      pipeline.Submit(project_, Batch(*project_, "b3", 2), recorder(seen3, absl::OkStatus()));
  ASSERT_THAT(lock.Release(), IsOk());

  EXPECT_THAT(first.get(), IsOk());
  EXPECT_THAT(refused.get(), StatusIs(absl::StatusCode::kResourceExhausted,
                                      HasSubstr("over the project's quota")));
  EXPECT_THAT(second.get(), IsOk());
  EXPECT_THAT(third.get(), IsOk());
  EXPECT_THAT(seen1, ::testing::ElementsAre("b1-0"));
  EXPECT_THAT(seen2, ::testing::ElementsAre("b2-0"));
  EXPECT_THAT(seen3, ::testing::ElementsAre("b2-0", "b3-0"));
  EXPECT_EQ(ServedLabels("b1-0"), 0);
  EXPECT_EQ(ServedLabels("b3-1"), 1);
  EXPECT_THAT(store_->CountLiveAnnotations(project_->identity().project_id), IsOkAndHolds(6));
}

// ingest_pipeline.h: a project's queue holds at most max_queued_annotations_per_project
// *waiting* annotations; a batch a lane has taken no longer waits. With one batch per group
// and the lane held inside a batch's admission check (a test hook, run in the lane), the
// project's share of 20 holds the one batch of 10 still waiting, so another batch of 10 fits.
TEST_F(IngestPipelineTest, ABatchTakenByTheLaneNoLongerCountsAgainstItsProjectsShare) {
  IngestPipeline::Options options;
  options.max_group_annotations = 10;  // One batch per group.
  options.max_queued_annotations = 1000;
  options.max_queued_annotations_per_project = 20;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  // An admission check that admits once the test releases it, after saying it runs.
  auto held = [](absl::Notification& entered, absl::Notification& release) {
    return [&entered, &release](const LiveProject&,
                                absl::Span<const std::vector<storage::AnnotationWrite>* const>) {
      entered.Notify();
      release.WaitForNotification();
      return absl::OkStatus();
    };
  };
  absl::Notification entered1, release1, entered2, release2;
  std::vector<std::future<IngestPipeline::Result>> accepted;
  accepted.push_back(
      pipeline.Submit(project_, Batch(*project_, "s1", 10), held(entered1, release1)));
  entered1.WaitForNotification();  // s1 is taken: nothing waits.
  accepted.push_back(
      pipeline.Submit(project_, Batch(*project_, "s2", 10), held(entered2, release2)));
  accepted.push_back(pipeline.Submit(project_, Batch(*project_, "s3", 10)));
  release1.Notify();
  entered2.WaitForNotification();  // s2 is taken: only s3 (10) waits.

  accepted.push_back(pipeline.Submit(project_, Batch(*project_, "s4", 10)));
  release2.Notify();
  for (size_t b = 0; b < accepted.size(); ++b) {
    EXPECT_THAT(accepted[b].get(), IsOk()) << "batch s" << b + 1;
  }
  EXPECT_EQ(ServedLabels("s4-9"), 1);
}

// ingest_pipeline.h: "UNAVAILABLE (PostgreSQL unreachable, or the connection broke during
// COMMIT so the outcome is unknown) fails every batch of the group as it stands". Two batches
// queue for one group while the lane is held in an earlier batch's admission check (which
// refuses it: no transaction); the group's COMMIT then loses its ack. Both batches are
// answered UNAVAILABLE, none is committed again on its own (their labels are durable, as the
// client that resends will learn).
TEST_F(IngestPipelineTest, AGroupWhoseCommitOutcomeIsUnknownFailsEveryBatchUnavailable) {
  IngestPipeline::Options options;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held = pipeline.Submit(
      project_, Batch(*project_, "h", 1),
      HoldLane(entered, release, absl::ResourceExhaustedError("refused to hold the lane")));
  entered.WaitForNotification();
  std::future<IngestPipeline::Result> b1 = pipeline.Submit(project_, Batch(*project_, "u1", 2));
  std::future<IngestPipeline::Result> b2 = pipeline.Submit(project_, Batch(*project_, "u2", 2));
  std::atomic<int> faults{1};
  LoseTheNextAcks(faults);
  release.Notify();

  EXPECT_THAT(held.get(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(b1.get(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
  EXPECT_THAT(b2.get(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
  EXPECT_EQ(faults.load(), 0) << "one transaction: the group's";
  pool().SetAfterCommitHookForTesting(nullptr);
  EXPECT_THAT(store_->CountLiveAnnotations(project_->identity().project_id), IsOkAndHolds(4));
}

// live_project.h: memory holds the database's live labels "as of one seq, applied_seq()";
// ingest_pipeline.h: a catch-up read happens only when "another replica's commit" lies
// between memory and an own commit. With this pipeline the project's only writer, each acked
// batch advances applied_seq() to the last seq it drew, and no catch-up read is made.
TEST_F(IngestPipelineTest, OwnCommitsAdvanceAppliedSeqWithoutCatchUpReads) {
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);
  for (int b = 0; b < 3; ++b) {
    IngestPipeline::Result result =
        pipeline.Submit(project_, Batch(*project_, absl::StrCat("seq", b), 3)).get();
    ASSERT_THAT(result, IsOk());
    int64_t last = 0;
    for (const storage::WriteResult& r : *result) last = std::max(last, r.seq);
    EXPECT_EQ(project_->applied_seq(), last) << "batch " << b;
  }
  EXPECT_THAT(metrics.RenderText(), HasSubstr("verity_ingest_catch_up_reads_total 0\n"));
}

// ingest_pipeline.h Submit: "`max_history_rows` (> 0) is the project's max_revisions, which the
// commit itself enforces ... A batch the commit refuses gets its RESOURCE_EXHAUSTED". With a
// bound of 1 and no admission check, the first revision (one history row) commits and the
// second is refused naming max_revisions; the label the first revision made stays served.
TEST_F(IngestPipelineTest, TheCommitEnforcesMaxHistoryRows) {
  IngestPipeline pipeline(*store_, IngestPipeline::Options());
  auto submit = [&](int32_t label) {
    return pipeline.Submit(project_, {Write("i", "a", label)}, nullptr, "", /*max_history_rows=*/1)
        .get();
  };
  ASSERT_THAT(submit(0), IsOk());
  IngestPipeline::Result revised = submit(1);
  ASSERT_THAT(revised, IsOk());
  EXPECT_EQ((*revised)[0].outcome, storage::WriteOutcome::kRevised);
  EXPECT_THAT(submit(0),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_revisions")));
  absl::StatusOr<std::vector<storage::LiveAnnotation>> live =
      store_->LoadLiveAnnotations(project_->identity().project_id);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].label, 1);
  EXPECT_GT(project_->snapshot()->posteriors.probabilities(*project_->FindItem("i"))[1], 0.5);
}

// ingest_pipeline.h AdmissionCheck: "`batches` holds the writes of the same project's batches
// admitted earlier in the same group, then the batch's own". With the one lane held in an
// earlier batch's check, a batch of P and one of Q queue for one group: Q's check sees Q's
// batch only, never P's (a project's quota is not charged for another's writes).
TEST_F(IngestPipelineTest, AdmissionChecksSeeOnlyTheirOwnProjectsBatches) {
  std::shared_ptr<LiveProject> other;
  ASSERT_NO_FATAL_FAILURE(other = NewProject("q-admit"));
  IngestPipeline::Options options;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held = pipeline.Submit(
      project_, Batch(*project_, "h", 1),
      [&](const LiveProject&, absl::Span<const std::vector<storage::AnnotationWrite>* const>) {
        entered.Notify();
        release.WaitForNotification();
        return absl::OkStatus();
      });
  entered.WaitForNotification();
  auto recorder = [](std::vector<std::string>& seen) {
    return [&seen](const LiveProject&,
                   absl::Span<const std::vector<storage::AnnotationWrite>* const> batches) {
      for (const std::vector<storage::AnnotationWrite>* b : batches) {
        seen.push_back(b->front().item_id);
      }
      return absl::OkStatus();
    };
  };
  std::vector<std::string> seen_p, seen_q;
  std::future<IngestPipeline::Result> p1 =
      pipeline.Submit(project_, Batch(*project_, "p1", 2), recorder(seen_p));
  std::future<IngestPipeline::Result> q1 =
      pipeline.Submit(other, Batch(*other, "q1", 2), recorder(seen_q));
  release.Notify();
  EXPECT_THAT(held.get(), IsOk());
  EXPECT_THAT(p1.get(), IsOk());
  EXPECT_THAT(q1.get(), IsOk());
  EXPECT_THAT(seen_p, ::testing::ElementsAre("p1-0"));
  EXPECT_THAT(seen_q, ::testing::ElementsAre("q1-0"));
}

// ingest_pipeline.h Submit: "The future yields one WriteResult per write, in order". Three
// batches committed in one group (the one lane held in an earlier batch's check meanwhile)
// each get their own writes' results: a first label, a duplicate of the held batch's label, and
// a revision of it, each with its own item's index.
TEST_F(IngestPipelineTest, EachBatchOfAGroupGetsItsOwnWritesResults) {
  IngestPipeline::Options options;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held = pipeline.Submit(
      project_, {Write("h0", "a", 0), Write("h1", "a", 0)},
      [&](const LiveProject&, absl::Span<const std::vector<storage::AnnotationWrite>* const>) {
        entered.Notify();
        release.WaitForNotification();
        return absl::OkStatus();
      });
  entered.WaitForNotification();
  std::future<IngestPipeline::Result> fresh = pipeline.Submit(project_, {Write("n0", "a", 1)});
  std::future<IngestPipeline::Result> again = pipeline.Submit(project_, {Write("h0", "a", 0)});
  std::future<IngestPipeline::Result> revise = pipeline.Submit(project_, {Write("h1", "a", 1)});
  release.Notify();
  ASSERT_THAT(held.get(), IsOk());
  const struct {
    std::future<IngestPipeline::Result>* future;
    const char* item;
    storage::WriteOutcome outcome;
    int32_t label;
  } expected[] = {{&fresh, "n0", storage::WriteOutcome::kAccepted, 1},
                  {&again, "h0", storage::WriteOutcome::kDuplicate, 0},
                  {&revise, "h1", storage::WriteOutcome::kRevised, 1}};
  for (const auto& e : expected) {
    IngestPipeline::Result result = e.future->get();
    ASSERT_THAT(result, IsOk()) << e.item;
    ASSERT_EQ(result->size(), 1u) << e.item;
    EXPECT_EQ((*result)[0].outcome, e.outcome) << e.item;
    EXPECT_EQ((*result)[0].label, e.label) << e.item;
    EXPECT_EQ((*result)[0].item_index, project_->FindItem(e.item).value_or(-1)) << e.item;
  }
}

// ingest_pipeline.h: a catch-up read happens only when another replica's commit lies between
// memory and an own commit. Two projects' batches committed in one transaction each register
// the seqs drawn for their own project, not the other's: no catch-up read is made, and each
// project's applied_seq() is the last seq of its own batch.
TEST_F(IngestPipelineTest, OneGroupOverTwoProjectsAdvancesEachOnesAppliedSeq) {
  std::shared_ptr<LiveProject> other;
  ASSERT_NO_FATAL_FAILURE(other = NewProject("q-seqs"));
  MetricsRegistry metrics;
  IngestPipeline::Options options;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options, &metrics);
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held = pipeline.Submit(
      project_, Batch(*project_, "h", 1),
      [&](const LiveProject&, absl::Span<const std::vector<storage::AnnotationWrite>* const>) {
        entered.Notify();
        release.WaitForNotification();
        return absl::OkStatus();
      });
  entered.WaitForNotification();
  // Both queue behind the held batch, for one group. P has drawn one seq more than Q, whose
  // counter started where P's did, so the two batches draw different seqs.
  std::future<IngestPipeline::Result> p = pipeline.Submit(project_, Batch(*project_, "p", 2));
  std::future<IngestPipeline::Result> q = pipeline.Submit(other, Batch(*other, "q", 2));
  release.Notify();
  ASSERT_THAT(held.get(), IsOk());
  IngestPipeline::Result p_result = p.get();
  IngestPipeline::Result q_result = q.get();
  ASSERT_THAT(p_result, IsOk());
  ASSERT_THAT(q_result, IsOk());
  const int64_t p_last = std::max((*p_result)[0].seq, (*p_result)[1].seq);
  const int64_t q_last = std::max((*q_result)[0].seq, (*q_result)[1].seq);
  EXPECT_EQ(p_last, q_last + 1);
  EXPECT_EQ(project_->applied_seq(), p_last);
  EXPECT_EQ(other->applied_seq(), q_last);
  EXPECT_THAT(metrics.RenderText(), HasSubstr("verity_ingest_catch_up_reads_total 0\n"));
}

// ingest_pipeline.h: "A committer thread takes queued batches (up to
// Options::max_group_annotations), writes them in ONE PostgreSQL transaction". With the one
// lane held in an earlier batch's admission check, three batches of one project queue: 10 and
// 10 fill a group of 20 exactly and share a transaction; the third (1 more) gets its own.
TEST_F(IngestPipelineTest, AGroupTakesBatchesUpToMaxGroupAnnotationsInOneTransaction) {
  IngestPipeline::Options options;
  options.max_group_annotations = 20;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held =
      pipeline.Submit(project_, Batch(*project_, "h", 1), HoldLane(entered, release));
  entered.WaitForNotification();
  std::vector<std::future<IngestPipeline::Result>> queued;
  queued.push_back(pipeline.Submit(project_, Batch(*project_, "g1", 10)));
  queued.push_back(pipeline.Submit(project_, Batch(*project_, "g2", 10)));
  queued.push_back(pipeline.Submit(project_, Batch(*project_, "g3", 1)));
  release.Notify();
  ASSERT_THAT(held.get(), IsOk());
  for (auto& f : queued) ASSERT_THAT(f.get(), IsOk());
  EXPECT_EQ(XminOf(*project_, "g1-0"), XminOf(*project_, "g2-9"));
  EXPECT_NE(XminOf(*project_, "g2-9"), XminOf(*project_, "g3-0"));
  EXPECT_NE(XminOf(*project_, "h-0"), XminOf(*project_, "g1-0"));
}

// ingest_pipeline.h: "The committer builds each group round-robin over the projects with
// waiting batches, one batch of each in turn". With the one lane held on A's batch, A queues
// a1 and a2 and then B queues b0 (10 each, groups of at most 20): the next group is a1 and b0,
// one transaction, and a2 commits after it in another.
TEST_F(IngestPipelineTest, AGroupTakesOneBatchOfEachWaitingProjectInTurn) {
  std::shared_ptr<LiveProject> other;
  ASSERT_NO_FATAL_FAILURE(other = NewProject("q-turn"));
  IngestPipeline::Options options;
  options.max_group_annotations = 20;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held =
      pipeline.Submit(project_, Batch(*project_, "h", 1), HoldLane(entered, release));
  entered.WaitForNotification();
  std::future<IngestPipeline::Result> a1 = pipeline.Submit(project_, Batch(*project_, "a1"));
  std::future<IngestPipeline::Result> a2 = pipeline.Submit(project_, Batch(*project_, "a2"));
  std::future<IngestPipeline::Result> b0 = pipeline.Submit(other, Batch(*other, "b0"));
  release.Notify();
  ASSERT_THAT(held.get(), IsOk());
  ASSERT_THAT(a1.get(), IsOk());
  ASSERT_THAT(a2.get(), IsOk());
  ASSERT_THAT(b0.get(), IsOk());
  const int64_t a1_xmin = XminOf(*project_, "a1-0");
  EXPECT_EQ(XminOf(*other, "b0-0"), a1_xmin) << "B's batch was left out of A's group";
  EXPECT_GT(XminOf(*project_, "a2-0"), a1_xmin) << "A's second batch went before B's";
}

// ingest_pipeline.h, failure isolation concerns "a group of several batches": a group of one
// batch whose transaction fails is one failed transaction, answered with the store's error,
// and no batch is committed again on its own.
TEST_F(IngestPipelineTest, AFailedSingleBatchIsOneFailedTransactionAndNotIsolated) {
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);
  storage::AnnotationWrite poison = Write("i", "a", 1);
  poison.client_time = absl::FromUnixSeconds(253402300799) + absl::Nanoseconds(999999001);
  EXPECT_THAT(pipeline.Submit(project_, {poison}).get(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client_time")));
  const std::string text = metrics.RenderText();
  EXPECT_THAT(text, HasSubstr("verity_ingest_commit_failures_total 1\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_isolated_batches_total{result=\"refused\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_isolated_batches_total{result=\"committed\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_commit_duration_seconds_count 1\n"));
}

// ingest_pipeline.h metrics: "batches refused". A batch its admission check refuses is answered
// with the check's error, counted as refused for admission, and nothing of it is stored.
TEST_F(IngestPipelineTest, ABatchItsAdmissionCheckRefusesIsCountedAndNotStored) {
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);
  auto refuse = [](const LiveProject&,
                   absl::Span<const std::vector<storage::AnnotationWrite>* const>) {
    return absl::ResourceExhaustedError("over the project's quota");
  };
  EXPECT_THAT(pipeline.Submit(project_, Batch(*project_, "r", 2), refuse).get(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("quota")));
  EXPECT_THAT(metrics.RenderText(),
              HasSubstr("verity_ingest_refused_batches_total{reason=\"admission\"} 1\n"));
  EXPECT_THAT(store_->CountLiveAnnotations(project_->identity().project_id), IsOkAndHolds(0));
}

// ingest_pipeline.h: the commit registers its labels with the project, "catching up first with
// the labels other replicas committed before it". Another replica (a direct store commit)
// labels item "y" between two batches of this pipeline: the second batch's ack comes with "y"
// served too, one catch-up read counted, and applied_seq() at the second batch's seq.
TEST_F(IngestPipelineTest, AnOwnCommitAfterAnotherReplicasCatchesUpWithIt) {
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);
  ASSERT_THAT(pipeline.Submit(project_, {Write("x", "a", 0)}).get(), IsOk());
  ASSERT_THAT(store_->CommitAnnotations({Write("y", "r", 1)}), IsOk());
  EXPECT_EQ(ServedLabels("y"), 0);
  IngestPipeline::Result own = pipeline.Submit(project_, {Write("z", "a", 1)}).get();
  ASSERT_THAT(own, IsOk());
  EXPECT_EQ(ServedLabels("y"), 1);
  EXPECT_EQ(ServedLabels("z"), 1);
  EXPECT_EQ(project_->Counts().num_labels, 3);
  EXPECT_EQ(project_->applied_seq(), (*own)[0].seq);
  EXPECT_THAT(metrics.RenderText(), HasSubstr("verity_ingest_catch_up_reads_total 1\n"));
}

// ingest_pipeline.h metrics: "batches refused" and "the queue's depth". With the one lane held
// in an earlier batch's admission check, a key's share (10), a project's (20) and the whole
// queue (30) each refuse one batch: three refused for a full queue, while 30 annotations in 3
// batches wait. Once everything is committed, nothing waits.
TEST_F(IngestPipelineTest, QueueRefusalsAndTheQueueDepthAreMeasured) {
  std::shared_ptr<LiveProject> other;
  ASSERT_NO_FATAL_FAILURE(other = NewProject("q-depth"));
  MetricsRegistry metrics;
  IngestPipeline::Options options;
  options.max_queued_annotations = 30;
  options.max_queued_annotations_per_project = 20;
  options.max_queued_annotations_per_key = 10;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options, &metrics);
  absl::Notification entered, release;
  std::vector<std::future<IngestPipeline::Result>> accepted, refused;
  accepted.push_back(
      pipeline.Submit(project_, Batch(*project_, "h", 1), HoldLane(entered, release)));
  entered.WaitForNotification();
  accepted.push_back(pipeline.Submit(project_, Batch(*project_, "k1"), nullptr, "key-k"));
  refused.push_back(pipeline.Submit(other, Batch(*other, "k2", 1), nullptr, "key-k"));
  accepted.push_back(pipeline.Submit(project_, Batch(*project_, "p2")));
  refused.push_back(pipeline.Submit(project_, Batch(*project_, "p3", 1)));
  accepted.push_back(pipeline.Submit(other, Batch(*other, "q1")));
  refused.push_back(pipeline.Submit(other, Batch(*other, "q2", 1)));
  for (auto& f : refused) EXPECT_THAT(f.get(), StatusIs(absl::StatusCode::kResourceExhausted));
  std::string text = metrics.RenderText();
  EXPECT_THAT(text, HasSubstr("verity_ingest_refused_batches_total{reason=\"queue_full\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_queue_annotations 30\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_queue_batches 3\n"));
  release.Notify();
  for (auto& f : accepted) EXPECT_THAT(f.get(), IsOk());
  text = metrics.RenderText();
  EXPECT_THAT(text, HasSubstr("verity_ingest_queue_annotations 0\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_queue_batches 0\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_batches_total 4\n"));
}

// ingest_pipeline.h: "Submit() after [Shutdown] answers UNAVAILABLE"; the batch is counted as
// refused while shutting down, and nothing of it is stored.
TEST_F(IngestPipelineTest, ABatchSubmittedAfterShutdownIsRefusedAndCounted) {
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);
  pipeline.Shutdown();
  EXPECT_THAT(pipeline.Submit(project_, Batch(*project_, "late", 2)).get(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(metrics.RenderText(),
              HasSubstr("verity_ingest_refused_batches_total{reason=\"shutting_down\"} 1\n"));
  EXPECT_THAT(store_->CountLiveAnnotations(project_->identity().project_id), IsOkAndHolds(0));
}

// ingest_pipeline.h: UNAVAILABLE "fails every batch of the group as it stands: a transaction
// per batch would fail the same way". A group of a good batch, one the store refuses and
// another good one fails as a whole, so its batches are committed alone, in order; the first
// one's COMMIT loses its ack (UNAVAILABLE). The batches after it are answered UNAVAILABLE as
// well, without a transaction of their own: only the first one's labels are stored.
TEST_F(IngestPipelineTest, IsolatedBatchesAfterAnUnavailableOneAreAnsweredUnavailable) {
  IngestPipeline::Options options;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held = pipeline.Submit(
      project_, Batch(*project_, "h", 1),
      HoldLane(entered, release, absl::ResourceExhaustedError("refused to hold the lane")));
  entered.WaitForNotification();
  storage::AnnotationWrite poison = Write("p", "a", 1);
  poison.client_time = absl::FromUnixSeconds(253402300799) + absl::Nanoseconds(999999001);
  std::future<IngestPipeline::Result> first = pipeline.Submit(project_, {Write("g1", "a", 0)});
  std::future<IngestPipeline::Result> refused = pipeline.Submit(project_, {poison});
  std::future<IngestPipeline::Result> last = pipeline.Submit(project_, {Write("g2", "a", 1)});
  std::atomic<int> faults{1};
  LoseTheNextAcks(faults);
  release.Notify();

  EXPECT_THAT(held.get(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(first.get(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
  EXPECT_THAT(refused.get(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
  EXPECT_THAT(last.get(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
  EXPECT_EQ(faults.load(), 0) << "one commit: the first batch's";
  pool().SetAfterCommitHookForTesting(nullptr);
  EXPECT_THAT(store_->CountLiveAnnotations(project_->identity().project_id), IsOkAndHolds(1));
}

// ingest_pipeline.h, failure isolation: after a group's transaction fails, "each of its batches
// is committed in a transaction of its own, in queue order; a batch that still fails gets its
// own error, the others commit" (and are served). A group of a new label, a batch the store
// refuses and a revision of a served label: two batches committed alone, one refused, and the
// revision's item now serves its new label.
TEST_F(IngestPipelineTest, TheBatchesOfAFailedGroupCommittedAloneAreCountedAndServed) {
  MetricsRegistry metrics;
  IngestPipeline::Options options;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options, &metrics);
  ASSERT_THAT(pipeline.Submit(project_, {Write("r", "a", 0)}).get(), IsOk());
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held =
      pipeline.Submit(project_, Batch(*project_, "h", 1), HoldLane(entered, release));
  entered.WaitForNotification();
  storage::AnnotationWrite poison = Write("p", "a", 1);
  poison.client_time = absl::FromUnixSeconds(253402300799) + absl::Nanoseconds(999999001);
  std::future<IngestPipeline::Result> fresh = pipeline.Submit(project_, {Write("g", "a", 1)});
  std::future<IngestPipeline::Result> refused = pipeline.Submit(project_, {poison});
  std::future<IngestPipeline::Result> revision = pipeline.Submit(project_, {Write("r", "a", 1)});
  release.Notify();
  ASSERT_THAT(held.get(), IsOk());
  EXPECT_THAT(fresh.get(), IsOk());
  EXPECT_THAT(refused.get(), StatusIs(absl::StatusCode::kInvalidArgument));
  IngestPipeline::Result revised = revision.get();
  ASSERT_THAT(revised, IsOk());
  EXPECT_EQ((*revised)[0].outcome, storage::WriteOutcome::kRevised);
  // Only label 1 on "r" now: majority vote (no fit yet) serves class 1.
  EXPECT_GT(project_->snapshot()->posteriors.probabilities(*project_->FindItem("r"))[1], 0.5);
  EXPECT_EQ(ServedLabels("g"), 1);
  const std::string text = metrics.RenderText();
  EXPECT_THAT(text, HasSubstr("verity_ingest_commit_failures_total 1\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_isolated_batches_total{result=\"committed\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_isolated_batches_total{result=\"refused\"} 1\n"));
}

// ingest_pipeline.h's metrics, by outcome: a batch of two labels older (by client_time) than
// the live ones counts 2 stale and no revision.
TEST_F(IngestPipelineTest, LateOlderLabelsAreCountedStaleNotRevised) {
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  std::vector<storage::AnnotationWrite> newer = {Write("i1", "a", 1), Write("i2", "a", 1)};
  for (storage::AnnotationWrite& w : newer) w.client_time = t;
  ASSERT_THAT(pipeline.Submit(project_, newer).get(), IsOk());
  std::vector<storage::AnnotationWrite> older = {Write("i1", "a", 0), Write("i2", "a", 0)};
  for (storage::AnnotationWrite& w : older) w.client_time = t - absl::Minutes(5);
  ASSERT_THAT(pipeline.Submit(project_, older).get(), IsOk());
  const std::string text = metrics.RenderText();
  EXPECT_THAT(text, HasSubstr("verity_ingest_annotations_total{outcome=\"stale\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_annotations_total{outcome=\"revised\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("verity_ingest_annotations_total{outcome=\"accepted\"} 2\n"));
}

// ingest_pipeline.h Submit: `max_history_rows` is the project's max_revisions, "which the commit
// itself enforces"; in a group each batch has its own project's bound. Q's batch (no bound) and
// then a revision over P's bound of 1 share a group: P's batch is refused naming max_revisions,
// Q's commits, and P's live label stays the one its first revision made.
TEST_F(IngestPipelineTest, EveryBatchOfAGroupHasItsProjectsHistoryBoundEnforced) {
  std::shared_ptr<LiveProject> other;
  ASSERT_NO_FATAL_FAILURE(other = NewProject("q-history"));
  IngestPipeline::Options options;
  options.commit_lanes = 1;
  IngestPipeline pipeline(*store_, options);
  ASSERT_THAT(pipeline.Submit(project_, {Write("i", "a", 0)}, nullptr, "", 1).get(), IsOk());
  ASSERT_THAT(pipeline.Submit(project_, {Write("i", "a", 1)}, nullptr, "", 1).get(), IsOk());
  absl::Notification entered, release;
  std::future<IngestPipeline::Result> held =
      pipeline.Submit(project_, Batch(*project_, "h", 1), HoldLane(entered, release));
  entered.WaitForNotification();
  std::future<IngestPipeline::Result> q = pipeline.Submit(other, {WriteTo(*other, "j", "b", 1)});
  std::future<IngestPipeline::Result> p =
      pipeline.Submit(project_, {Write("i", "a", 0)}, nullptr, "", /*max_history_rows=*/1);
  release.Notify();
  ASSERT_THAT(held.get(), IsOk());
  EXPECT_THAT(q.get(), IsOk());
  EXPECT_THAT(p.get(), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_revisions")));
  EXPECT_EQ(ServedLabelsOf(*other, "j"), 1);
  absl::StatusOr<std::vector<storage::LiveAnnotation>> live =
      store_->LoadLiveAnnotations(project_->identity().project_id);
  ASSERT_THAT(live, IsOk());
  ASSERT_TRUE(project_->FindItem("i").has_value());
  for (const storage::LiveAnnotation& a : *live) {
    if (a.item_index == *project_->FindItem("i")) {
      EXPECT_EQ(a.label, 1);
    }
  }
}

// ingest_pipeline.h: an own commit is registered "catching up first with the labels other
// replicas committed before it"; when that read fails the labels, durable and acknowledged, are
// served anyway (LiveProject::RegisterOwnCommitOutOfOrder), as the live label after the write:
// "for a stale write, the newer one the store kept". Another replica labels (i, a) 1 at t2;
// this pipeline's 0 from before t2 is acked stale while the catch-up read loses its
// connection: the pair serves 1, the label the database holds, not the stale 0.
TEST_F(IngestPipelineTest, AStaleLabelServedWithoutACatchUpReadServesTheNewerLabelKept) {
  MetricsRegistry metrics;
  IngestPipeline pipeline(*store_, IngestPipeline::Options(), &metrics);
  ASSERT_THAT(pipeline.Submit(project_, {Write("x", "a", 0)}).get(), IsOk());
  const absl::Time t2 = absl::FromUnixSeconds(1700000000);
  storage::AnnotationWrite newer = Write("i", "a", 1);
  newer.client_time = t2;
  ASSERT_THAT(store_->CommitAnnotations({newer}), IsOk());  // Another replica's commit.
  // Commit 0: the pipeline's own; commit 1: its catch-up read, whose connection breaks.
  std::atomic<int> commits{0};
  pool().SetAfterCommitHookForTesting([&](pqxx::connection&) {
    if (commits.fetch_add(1) == 1) throw pqxx::broken_connection("injected: catch-up read lost");
  });
  storage::AnnotationWrite older = Write("i", "a", 0);
  older.client_time = t2 - absl::Minutes(5);
  IngestPipeline::Result late = pipeline.Submit(project_, {older}).get();
  pool().SetAfterCommitHookForTesting(nullptr);
  ASSERT_THAT(late, IsOk());
  EXPECT_EQ((*late)[0].outcome, storage::WriteOutcome::kStale);
  EXPECT_EQ(commits.load(), 2);
  EXPECT_THAT(metrics.RenderText(), HasSubstr("verity_ingest_catch_up_reads_total 1\n"));
  ASSERT_TRUE(project_->FindItem("i").has_value());
  const int32_t item = *project_->FindItem("i");
  EXPECT_EQ(ServedLabels("i"), 1);
  EXPECT_GT(project_->snapshot()->posteriors.probabilities(item)[1], 0.5);
}

}  // namespace
}  // namespace verity::server
