// ProjectRegistry's load from PostgreSQL and its memory budget, against a real PostgreSQL: a
// loaded project serves its latest stored version (counting only the labels that version did
// not see), its open leases and its revision count, and the budget never unloads a project
// while it fits.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/state/project_registry.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

v1::Project NewProject(const std::string& name) {
  v1::Project project;
  project.set_name(name);
  project.add_classes("no");
  project.add_classes("yes");
  project.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  return project;
}

class ProjectRegistryLoadTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    auto storage = StorageHandles::Open(url(), 4);
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_ = std::move(*storage);
  }

  // Labels (item-i, annotator-(i%5), (i/5)%2) of `n` items, committed through the store and
  // applied to `project` as the ingest pipeline would.
  void AddLabels(LiveProject& project, int n) {
    std::vector<storage::AnnotationWrite> writes;
    for (int i = 0; i < n; ++i) {
      writes.push_back({project.identity().project_id, absl::StrCat("item-", i),
                        absl::StrCat("annotator-", i % 5), (i / 5) % 2, std::nullopt});
    }
    auto results = storage_->annotations->CommitAnnotations(writes);
    ASSERT_TRUE(results.ok()) << results.status();
    std::vector<CommittedLabel> labels;
    for (size_t i = 0; i < writes.size(); ++i) {
      const storage::WriteResult& r = (*results)[i];
      labels.push_back({r.item_index, writes[i].item_id, r.annotator_index, writes[i].annotator_id,
                        r.label, r.seq, true});
    }
    project.ApplyCommitted(labels);
  }

  std::unique_ptr<StorageHandles> storage_;
};

// StoredState / live_project.h: a load restores the latest stored version; the labels it did
// not see (committed after its watermark) count toward the next refit, the others do not. The
// open leases and the revisions kept in history are as stored.
TEST_F(ProjectRegistryLoadTest, ALoadServesTheLatestVersionItsOpenLeasesAndRevisions) {
  int64_t project_id = 0;
  int32_t item = -1, annotator = -1;  // Of a pair without a label: item-1, annotator-2.
  {
    ProjectRegistry writer(*storage_);
    auto created = writer.Create(NewProject("stored"));
    ASSERT_TRUE(created.ok()) << created.status();
    project_id = (*created)->identity().project_id;
    AddLabels(**created, 50);
    item = (*created)->FindItem("item-1").value_or(-1);
    annotator = (*created)->FindAnnotator("annotator-2").value_or(-1);
    // Version 1 sees the 50 labels (its watermark is the newest of their seqs).
    auto fitted = (*created)->Refit(*storage_->versions);
    ASSERT_TRUE(fitted.ok()) << fitted.status();
    ASSERT_EQ(fitted->version.version, 1);
  }
  // After the fit, through another replica: item-0's label by annotator-0 revised (0 → 1). The
  // replaced label goes to history; the live count stays 50.
  ASSERT_TRUE(storage_->annotations
                  ->CommitAnnotations({{project_id, "item-0", "annotator-0", 1, std::nullopt}})
                  .ok());
  // An open lease on a pair without a label.
  ASSERT_GE(item, 0);
  ASSERT_GE(annotator, 0);
  const absl::Time expires = absl::Now() + absl::Minutes(10);
  ASSERT_TRUE(storage_->leases->UpsertLeases(project_id, {{item, annotator, expires}}).ok());

  ProjectRegistry reader(*storage_);
  auto loaded = reader.Get("stored");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->model_version(), 1);
  EXPECT_EQ((*loaded)->snapshot()->model_version, 1);
  const ProjectCounts counts = (*loaded)->Counts();
  EXPECT_EQ(counts.num_labels, 50);
  EXPECT_EQ(counts.num_revisions, 1);
  EXPECT_EQ(counts.labels_since_version, 1) << "only the revision came after version 1";
  EXPECT_TRUE((*loaded)->leases().Has(item, annotator, absl::Now()));
}

// project_registry.h, EnforceMemoryBudget: the budget unloads only projects "that are not
// fitting". A project idle for long, over the budget and held by nothing but the registry is
// kept while its refit runs, and unloaded by the first pass after it.
TEST_F(ProjectRegistryLoadTest, TheBudgetKeepsAProjectWhileItFits) {
  ProjectRegistry registry(*storage_);
  LiveProject* project = nullptr;
  {
    auto created = registry.Create(NewProject("fitting"));
    ASSERT_TRUE(created.ok()) << created.status();
    AddLabels(**created, 50);
    project = created->get();
  }  // Only the registry holds it now.
  registry.EnforceMemoryBudget(1, absl::Seconds(30));
  const absl::Time later = absl::Now() + absl::Minutes(5);
  std::vector<std::string> evicted_while_fitting = {"not called"};
  bool was_training = false;
  project->SetAfterVersionStoredForTesting([&](const storage::ModelVersionRecord&) {
    was_training = project->Counts().training;
    evicted_while_fitting = registry.EvictOverBudget(later);
  });
  auto fitted = project->Refit(*storage_->versions);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_TRUE(was_training);
  EXPECT_THAT(evicted_while_fitting, IsEmpty());
  project->SetAfterVersionStoredForTesting(nullptr);
  EXPECT_THAT(registry.EvictOverBudget(later), ElementsAre("fitting"));
}

// A project whose stored item or annotator indices have a gap cannot be restored (its labels
// would name the wrong rows): Get answers UNAVAILABLE naming the reason (projects.proto:
// UNAVAILABLE for a project whose stored state cannot be loaded) and the others serve.
TEST_F(ProjectRegistryLoadTest, StoredIndicesWithAGapAnswerUnavailable) {
  {
    ProjectRegistry writer(*storage_);
    for (const char* name : {"item-gap", "annotator-gap", "dense"}) {
      auto created = writer.Create(NewProject(name));
      ASSERT_TRUE(created.ok()) << created.status();
      AddLabels(**created, 2);  // item-0, item-1 by annotator-0, annotator-1.
    }
  }
  // Index 1 moved to 2: two rows, indices {0, 2}.
  const absl::Status opened = pool().RunInTransaction("opening gaps", [](pqxx::work& txn) {
    txn.exec(
        "UPDATE items SET item_index = 2 WHERE item_index = 1 AND project_id = "
        "(SELECT project_id FROM projects WHERE name = 'item-gap')");
    txn.exec(
        "UPDATE annotators SET annotator_index = 2 WHERE annotator_index = 1 AND "
        "project_id = (SELECT project_id FROM projects WHERE name = 'annotator-gap')");
    return absl::OkStatus();
  });
  ASSERT_TRUE(opened.ok()) << opened;
  ProjectRegistry reader(*storage_);
  const std::pair<const char*, const char*> gaps[] = {
      {"item-gap", "item indices not dense"}, {"annotator-gap", "annotator indices not dense"}};
  for (const auto& [name, reason] : gaps) {
    auto loaded = reader.Get(name);
    ASSERT_FALSE(loaded.ok()) << name;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kUnavailable) << loaded.status();
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(reason));
  }
  EXPECT_TRUE(reader.Get("dense").ok());
}

// StoredState: a load holds the stored item and annotator features. Memory then equals the
// stored state: the same features again are no new input (SetAnnotatorFeatures), the version
// stays current, and applying the stored items and annotators changes nothing.
TEST_F(ProjectRegistryLoadTest, ALoadHoldsTheStoredItemAndAnnotatorFeatures) {
  v1::Project requested = NewProject("features");
  requested.set_item_feature_dim(2);
  requested.set_annotator_feature_dim(1);
  int64_t project_id = 0;
  {
    ProjectRegistry writer(*storage_);
    auto created = writer.Create(requested);
    ASSERT_TRUE(created.ok()) << created.status();
    project_id = (*created)->identity().project_id;
    AddLabels(**created, 10);
    storage::ItemWrite item;
    item.external_id = "item-3";
    item.features = std::vector<float>{1.5f, -2.0f};
    ASSERT_TRUE(writer.AddItems(**created, {item}).ok());
    ASSERT_TRUE(
        storage_->items->UpsertAnnotators(project_id, {{"annotator-2", std::vector<float>{0.25f}}})
            .ok());
    auto fitted = (*created)->Refit(*storage_->versions);
    ASSERT_TRUE(fitted.ok()) << fitted.status();
  }
  ProjectRegistry reader(*storage_);
  auto loaded = reader.Get("features");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE((*loaded)->FitIsCurrent());
  const std::optional<int32_t> annotator = (*loaded)->FindAnnotator("annotator-2");
  ASSERT_TRUE(annotator.has_value());
  (*loaded)->SetAnnotatorFeatures(*annotator, {0.25f});
  EXPECT_TRUE((*loaded)->FitIsCurrent()) << "annotator-2's stored features are not new";

  auto record = storage_->projects->GetProjectByName("features");
  ASSERT_TRUE(record.ok()) << record.status();
  v1::ProjectSettings settings;
  ASSERT_TRUE(settings.ParseFromString(record->settings));
  auto items = storage_->items->LoadItems(project_id);
  ASSERT_TRUE(items.ok()) << items.status();
  auto annotators = storage_->items->LoadAnnotators(project_id);
  ASSERT_TRUE(annotators.ok()) << annotators.status();
  // As of a later change (of something else): every item and annotator equals memory.
  EXPECT_FALSE(
      (*loaded)->ApplyStoredEntities(settings, *items, *annotators, record->change_seq + 1));
  EXPECT_TRUE((*loaded)->FitIsCurrent());
}

}  // namespace
}  // namespace verity::server
