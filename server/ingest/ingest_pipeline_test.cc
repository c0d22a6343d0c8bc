#include "server/ingest/ingest_pipeline.h"

#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "server/state/live_project.h"
#include "storage/annotation_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

class IngestPipelineTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<storage::AnnotationStore>(&pool());
    storage::ProjectStore projects(&pool());
    storage::ProjectRecord record;
    record.name = "p";
    record.classes = {"no", "yes"};
    absl::StatusOr<storage::ProjectRecord> created = projects.CreateProject(record);
    ASSERT_THAT(created, IsOk());
    LiveProject::Identity identity;
    identity.project_id = created->project_id;
    identity.name = "p";
    identity.classes = record.classes;
    absl::StatusOr<std::unique_ptr<LiveProject>> live =
        LiveProject::Create(identity, v1::ProjectSettings(), {});
    ASSERT_THAT(live, IsOk());
    project_ = std::move(*live);
  }

  storage::AnnotationWrite Write(const std::string& item, const std::string& annotator,
                                 int32_t label) const {
    storage::AnnotationWrite w;
    w.project_id = project_->identity().project_id;
    w.item_id = item;
    w.annotator_id = annotator;
    w.label = label;
    return w;
  }

  // Labels of `item` in the served posteriors (0 for an item not served yet).
  int32_t ServedLabels(const std::string& item) const {
    std::optional<int32_t> index = project_->FindItem(item);
    std::shared_ptr<const ProjectSnapshot> snapshot = project_->snapshot();
    if (!index.has_value() || *index >= snapshot->posteriors.num_items()) return 0;
    return snapshot->posteriors.num_labels(*index);
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

}  // namespace
}  // namespace verity::server
