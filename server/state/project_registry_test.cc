// ProjectRegistry against a real PostgreSQL: a project that cannot load does not stop the others,
// Create never replaces a project a concurrent Get loaded, memory follows the database's order
// of settings and item changes, background loading answers UNAVAILABLE until a project is
// loaded, and a memory budget unloads idle projects and reloads them unchanged.
#include "server/state/project_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "server/state/label_catch_up.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

using ::testing::HasSubstr;

v1::Project NewProject(const std::string& name) {
  v1::Project project;
  project.set_name(name);
  project.add_classes("no");
  project.add_classes("yes");
  return project;
}

class ProjectRegistryTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    auto storage = StorageHandles::Open(url(), 4);
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_ = std::move(*storage);
  }

  // The settings PostgreSQL holds for `name`.
  v1::ProjectSettings StoredSettings(const std::string& name) {
    auto record = storage_->projects->GetProjectByName(name);
    EXPECT_TRUE(record.ok()) << record.status();
    v1::ProjectSettings settings;
    if (record.ok()) {
      EXPECT_TRUE(settings.ParseFromString(record->settings));
    }
    return settings;
  }

  std::unique_ptr<StorageHandles> storage_;
};

TEST_F(ProjectRegistryTest, AProjectThatCannotLoadAnswersUnavailableAndTheOthersServe) {
  {
    ProjectRegistry writer(*storage_);
    ASSERT_TRUE(writer.Create(NewProject("good")).ok());
    ASSERT_TRUE(writer.Create(NewProject("broken")).ok());
  }
  // Stored settings that do not parse: the project cannot be restored.
  ASSERT_TRUE(pool().RunInTransaction("corrupting a project", [](pqxx::work& txn) {
                      txn.exec("UPDATE projects SET settings = '\\xffffffff'::bytea "
                               "WHERE name = 'broken'");
                      return absl::OkStatus();
                    }).ok());

  ProjectRegistry registry(*storage_);
  EXPECT_TRUE(registry.LoadAll().ok()) << "one broken project must not stop the start";
  auto good = registry.Get("good");
  EXPECT_TRUE(good.ok()) << good.status();
  auto broken = registry.Get("broken");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kUnavailable) << broken.status();
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("broken"));
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("settings do not parse"));
  EXPECT_EQ(registry.All().size(), 1u);
}

TEST_F(ProjectRegistryTest, AProjectThatCannotLoadIsTriedAgainOnlyAfterTheRetryInterval) {
  {
    ProjectRegistry writer(*storage_);
    ASSERT_TRUE(writer.Create(NewProject("flaky")).ok());
  }
  auto set_settings = [&](const std::string& bytes_sql) {
    ASSERT_TRUE(pool().RunInTransaction("setting stored settings", [&](pqxx::work& txn) {
                        txn.exec("UPDATE projects SET settings = " + bytes_sql +
                                 " WHERE name = 'flaky'");
                        return absl::OkStatus();
                      }).ok());
  };
  set_settings("'\\xffffffff'::bytea");
  constexpr absl::Duration kRetry = absl::Milliseconds(500);
  ProjectRegistry registry(*storage_, kRetry);
  ASSERT_TRUE(registry.LoadAll().ok());
  EXPECT_EQ(registry.Get("flaky").status().code(), absl::StatusCode::kUnavailable);

  // Repaired at once, but a call inside the retry interval is answered from the last failure
  // (a broken project under heavy traffic must not reload on every call).
  set_settings("''::bytea");
  const absl::Time repaired = absl::Now();
  auto early = registry.Get("flaky");
  if (absl::Now() - repaired < kRetry) {
    EXPECT_EQ(early.status().code(), absl::StatusCode::kUnavailable) << early.status();
    EXPECT_THAT(std::string(early.status().message()), HasSubstr("settings do not parse"));
  }
  absl::SleepFor(kRetry);
  auto later = registry.Get("flaky");
  EXPECT_TRUE(later.ok()) << later.status();
}

// project_registry.h, LoadingOrFailed: a listing leaves a project out while its last load
// failed less than the retry interval ago, and lists it after (Get would try it again then):
// one transient failure must not hide a project until some other call loads it.
TEST_F(ProjectRegistryTest, AFailedLoadHidesAProjectFromListingsOnlyForTheRetryInterval) {
  {
    ProjectRegistry writer(*storage_);
    ASSERT_TRUE(writer.Create(NewProject("hidden-for-a-while")).ok());
  }
  ASSERT_TRUE(pool().RunInTransaction("breaking settings", [&](pqxx::work& txn) {
                      txn.exec("UPDATE projects SET settings = '\\xffffffff'::bytea "
                               "WHERE name = 'hidden-for-a-while'");
                      return absl::OkStatus();
                    }).ok());
  constexpr absl::Duration kRetry = absl::Milliseconds(500);
  ProjectRegistry registry(*storage_, kRetry);
  EXPECT_FALSE(registry.LoadingOrFailed("hidden-for-a-while"));  // Never tried.
  const absl::Time tried = absl::Now();
  ASSERT_EQ(registry.Get("hidden-for-a-while").status().code(), absl::StatusCode::kUnavailable);
  const bool hidden = registry.LoadingOrFailed("hidden-for-a-while");
  if (absl::Now() - tried < kRetry) EXPECT_TRUE(hidden);
  absl::SleepFor(kRetry);
  EXPECT_FALSE(registry.LoadingOrFailed("hidden-for-a-while"));
}

// project_registry.h, StoredCounts: items and annotators from the record, live labels counted
// from the database, and a count reused within kStoredLabelCountReuse (labels committed
// meanwhile are not in it) and counted again after it.
TEST_F(ProjectRegistryTest, StoredCountsCountLabelsOnceAMinute) {
  ProjectRegistry writer(*storage_);
  auto created = writer.Create(NewProject("counted"));
  ASSERT_TRUE(created.ok()) << created.status();
  const int64_t project_id = (*created)->identity().project_id;
  auto label = [&](const std::string& item, const std::string& annotator) {
    storage::AnnotationWrite w;
    w.project_id = project_id;
    w.item_id = item;
    w.annotator_id = annotator;
    w.label = 1;
    ASSERT_TRUE(storage_->annotations->CommitAnnotations({w}).ok());
  };
  label("i0", "a");
  label("i1", "a");
  label("i1", "b");
  auto record = storage_->projects->GetProjectByName("counted");
  ASSERT_TRUE(record.ok()) << record.status();
  ProjectRegistry registry(*storage_);
  const absl::Time now = absl::Now();
  auto counts = registry.StoredCounts(*record, now);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->num_items, 2);
  EXPECT_EQ(counts->num_annotators, 2);
  EXPECT_EQ(counts->num_labels, 3);
  label("i2", "b");
  counts = registry.StoredCounts(*record, now + ProjectRegistry::kStoredLabelCountReuse / 2);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->num_labels, 3);
  counts = registry.StoredCounts(*record, now + ProjectRegistry::kStoredLabelCountReuse);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->num_labels, 4);
  EXPECT_EQ(registry.IfLoaded("counted"), nullptr);
}

// project_registry.h: "Get() also finds a project created by another server replica since, by
// loading it from PostgreSQL on first use": also after a Get that found no such project, and
// for a caller waiting on another's load.
TEST_F(ProjectRegistryTest, AProjectNotFoundOnceIsFoundOnceAnotherReplicaCreatesIt) {
  ProjectRegistry registry(*storage_);
  ASSERT_TRUE(registry.LoadAll().ok());
  EXPECT_EQ(registry.Get("later").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Get("later").status().code(), absl::StatusCode::kNotFound);
  {
    ProjectRegistry other_replica(*storage_);
    ASSERT_TRUE(other_replica.Create(NewProject("later")).ok());
  }
  absl::StatusOr<std::shared_ptr<LiveProject>> found = registry.Get("later");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ((*found)->identity().name, "later");
  EXPECT_EQ(registry.Get("later")->get(), found->get());
}

TEST_F(ProjectRegistryTest, CreateKeepsTheProjectAConcurrentGetLoaded) {
  ProjectRegistry registry(*storage_);
  std::shared_ptr<LiveProject> loaded_by_get;
  // Between Create's INSERT and its registration, another call finds the new row and loads it.
  registry.SetAfterCreateStoredHookForTesting([&] {
    auto got = registry.Get("racy");
    ASSERT_TRUE(got.ok()) << got.status();
    loaded_by_get = *got;
  });
  auto created = registry.Create(NewProject("racy"));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_NE(loaded_by_get, nullptr);
  auto now = registry.Get("racy");
  ASSERT_TRUE(now.ok());
  // One live object: a label ingested through either pointer is served.
  EXPECT_EQ(now->get(), loaded_by_get.get());
  EXPECT_EQ(created->get(), loaded_by_get.get());
}

// Get of a project that is not loaded loads it once, however many callers ask at once: the
// others wait for that load and get the same object (each used to build a copy of its own,
// which a burst of first calls on a large project turned into several). The hook holds the
// load for 300 ms so that all 8 callers are waiting.
TEST_F(ProjectRegistryTest, CallersAskingForAProjectAtOnceShareOneLoad) {
  {
    ProjectRegistry creator(*storage_);
    ASSERT_TRUE(creator.Create(NewProject("cold")).ok());
  }
  ProjectRegistry registry(*storage_);  // Has loaded nothing.
  std::atomic<int> loads{0};
  registry.SetBeforeLoadHookForTesting([&loads](const std::string& name) {
    if (name != "cold") return;
    ++loads;
    absl::SleepFor(absl::Milliseconds(300));
  });
  std::vector<std::shared_ptr<LiveProject>> got(8);
  std::vector<std::thread> callers;
  for (size_t c = 0; c < got.size(); ++c) {
    callers.emplace_back([&registry, &got, c] {
      auto project = registry.Get("cold");
      EXPECT_TRUE(project.ok()) << project.status();
      if (project.ok()) got[c] = *project;
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(loads.load(), 1);
  for (const std::shared_ptr<LiveProject>& project : got) {
    ASSERT_NE(project, nullptr);
    EXPECT_EQ(project.get(), got[0].get());
  }
  // A name that does not exist: every caller at once gets NOT_FOUND.
  std::vector<absl::Status> missing(4);
  callers.clear();
  for (size_t c = 0; c < missing.size(); ++c) {
    callers.emplace_back([&registry, &missing, c] { missing[c] = registry.Get("none").status(); });
  }
  for (std::thread& caller : callers) caller.join();
  for (const absl::Status& status : missing) EXPECT_TRUE(absl::IsNotFound(status)) << status;
}

// An update that leaves model.method unset keeps the project's method: a new project's
// default, auto, no longer fell back to ds when an operator changed only assignment settings.
TEST_F(ProjectRegistryTest, AnUpdateWithoutAMethodKeepsTheProjectsMethod) {
  ProjectRegistry registry(*storage_);
  auto created = registry.Create(NewProject("keeps-method"));
  ASSERT_TRUE(created.ok()) << created.status();
  LiveProject& project = **created;
  ASSERT_EQ(project.settings().model().method(), v1::TRUTH_METHOD_AUTO);

  v1::ProjectSettings update;
  update.mutable_assignment()->set_max_labels_per_item(3);
  ASSERT_TRUE(registry.UpdateSettings(project, update).ok());
  EXPECT_EQ(project.settings().model().method(), v1::TRUTH_METHOD_AUTO);
  EXPECT_EQ(StoredSettings("keeps-method").model().method(), v1::TRUTH_METHOD_AUTO);
  EXPECT_EQ(project.settings().assignment().max_labels_per_item(), 3);

  // A method given explicitly still replaces it.
  update.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  ASSERT_TRUE(registry.UpdateSettings(project, update).ok());
  EXPECT_EQ(StoredSettings("keeps-method").model().method(), v1::TRUTH_METHOD_DAWID_SKENE);
}

TEST_F(ProjectRegistryTest, ConcurrentSettingsUpdatesLeaveMemoryAsTheDatabase) {
  ProjectRegistry registry(*storage_);
  auto created = registry.Create(NewProject("settings"));
  ASSERT_TRUE(created.ok()) << created.status();
  LiveProject& project = **created;

  v1::ProjectSettings first, second;
  first.mutable_assignment()->set_max_labels_per_item(3);
  second.mutable_assignment()->set_max_labels_per_item(7);

  // The first update stops between its database write and its memory update, while the second
  // update runs. If the second can finish meanwhile, its memory update lands first and the
  // first one's older value overwrites it; the hook then waits a while for it to do so.
  absl::Notification first_written, second_done;
  std::thread second_update;
  registry.SetBetweenWriteAndApplyHookForTesting([&] {
    if (first_written.HasBeenNotified()) return;  // The second update.
    first_written.Notify();
    second_update = std::thread([&] {
      EXPECT_TRUE(registry.UpdateSettings(project, second).ok());
      second_done.Notify();
    });
    second_done.WaitForNotificationWithTimeout(absl::Seconds(2));
  });
  ASSERT_TRUE(registry.UpdateSettings(project, first).ok());
  second_update.join();

  const v1::ProjectSettings stored = StoredSettings("settings");
  EXPECT_EQ(stored.assignment().max_labels_per_item(), 7) << "the second update commits last";
  EXPECT_EQ(project.settings().assignment().max_labels_per_item(),
            stored.assignment().max_labels_per_item());
}

TEST_F(ProjectRegistryTest, ConcurrentItemChangesLeaveMemoryAsTheDatabase) {
  ProjectRegistry registry(*storage_);
  auto created = registry.Create(NewProject("items"));
  ASSERT_TRUE(created.ok()) << created.status();
  LiveProject& project = **created;

  storage::ItemWrite first, second;
  first.external_id = second.external_id = "item";
  first.priority = 1.0;
  second.priority = 2.0;

  absl::Notification first_written, second_done;
  std::thread second_update;
  registry.SetBetweenWriteAndApplyHookForTesting([&] {
    if (first_written.HasBeenNotified()) return;
    first_written.Notify();
    second_update = std::thread([&] {
      EXPECT_TRUE(registry.AddItems(project, {second}).ok());
      second_done.Notify();
    });
    second_done.WaitForNotificationWithTimeout(absl::Seconds(2));
  });
  ASSERT_TRUE(registry.AddItems(project, {first}).ok());
  second_update.join();

  auto stored = storage_->items->LoadItems(project.identity().project_id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].priority, 2.0) << "the second change commits last";
  EXPECT_EQ(project.snapshot()->posteriors.priority(0), (*stored)[0].priority);
}

// Commits `writes` through the store and applies them to `project` as the ingest pipeline
// would; the store's results go to `committed` when given.
void CommitAndApply(StorageHandles& storage, LiveProject& project,
                    const std::vector<storage::AnnotationWrite>& writes,
                    std::vector<storage::WriteResult>* committed = nullptr) {
  auto results = storage.annotations->CommitAnnotations(writes);
  ASSERT_TRUE(results.ok()) << results.status();
  if (committed != nullptr) *committed = *results;
  std::vector<CommittedLabel> labels;
  for (size_t i = 0; i < writes.size(); ++i) {
    const storage::WriteResult& r = (*results)[i];
    labels.push_back({r.item_index, writes[i].item_id, r.annotator_index, writes[i].annotator_id,
                      r.label, r.seq, true});
  }
  project.ApplyCommitted(labels);
}

// Labels (item-i, annotator-(i%5), (i/5)%2) of `n` items into `project`, committed through the
// store and applied as the ingest pipeline would.
void AddLabels(StorageHandles& storage, LiveProject& project, int n) {
  std::vector<storage::AnnotationWrite> writes;
  for (int i = 0; i < n; ++i) {
    writes.push_back({project.identity().project_id, absl::StrCat("item-", i),
                      absl::StrCat("annotator-", i % 5), (i / 5) % 2, std::nullopt});
  }
  CommitAndApply(storage, project, writes);
}

// The served probabilities of every item, in item order.
std::vector<double> Served(const LiveProject& project) {
  std::vector<double> all;
  const PosteriorTable& table = project.snapshot()->posteriors;
  for (int32_t i = 0; i < table.num_items(); ++i) {
    for (double p : table.probabilities(i)) all.push_back(p);
  }
  return all;
}

TEST_F(ProjectRegistryTest, ProjectsLoadingInTheBackgroundAnswerUnavailableUntilLoaded) {
  std::vector<double> before;
  {
    ProjectRegistry writer(*storage_);
    auto created = writer.Create(NewProject("slow"));
    ASSERT_TRUE(created.ok()) << created.status();
    AddLabels(*storage_, **created, 50);
    before = Served(**created);
    ASSERT_TRUE(writer.Create(NewProject("other")).ok());
  }
  ProjectRegistry registry(*storage_);
  absl::Notification entered, release;
  registry.SetBeforeBackgroundLoadHookForTesting([&](const std::string& name) {
    if (name != "slow") return;
    entered.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(registry.LoadAllInBackground(1).ok());
  // The one loader is held on "slow" (the first listed): it answers UNAVAILABLE naming it.
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::StatusOr<std::shared_ptr<LiveProject>> loading = registry.Get("slow");
  ASSERT_FALSE(loading.ok());
  EXPECT_EQ(loading.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(loading.status().message()), HasSubstr("\"slow\" is loading"));
  EXPECT_FALSE(registry.BackgroundLoadDone());
  absl::Notification done;
  registry.OnBackgroundLoadDone([&] { done.Notify(); });
  EXPECT_EQ(registry.ProjectsStillLoading(), 2);
  // "other", not reached by the loader yet, loads on its first call.
  EXPECT_TRUE(registry.Get("other").ok());
  EXPECT_EQ(registry.ProjectsStillLoading(), 1);
  EXPECT_FALSE(done.HasBeenNotified());

  release.Notify();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(registry.BackgroundLoadDone());
  EXPECT_EQ(registry.ProjectsStillLoading(), 0);
  // Once done, a callback runs at once.
  bool ran_at_once = false;
  registry.OnBackgroundLoadDone([&] { ran_at_once = true; });
  EXPECT_TRUE(ran_at_once);
  auto loaded = registry.Get("slow");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Served(**loaded), before);
  EXPECT_EQ(registry.All().size(), 2u);
}

TEST_F(ProjectRegistryTest, ABudgetUnloadsIdleProjectsLeastRecentlyUsedFirstAndReloadsThem) {
  ProjectRegistry registry(*storage_);
  std::map<std::string, std::vector<double>> served;
  int64_t one_project = 0;
  for (const char* name : {"p0", "p1", "p2"}) {
    auto project = registry.Create(NewProject(name));
    ASSERT_TRUE(project.ok()) << project.status();
    AddLabels(*storage_, **project, 300);
    served[name] = Served(**project);
    one_project = (*project)->EstimatedBytes();
  }
  ASSERT_GT(one_project, 0);
  // Room for a project and a half; p0, p1, p2 were used in that order.
  registry.EnforceMemoryBudget(one_project * 3 / 2, absl::Seconds(30));
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(registry.Get("p1").ok());  // p1 is now the most recent.
  EXPECT_TRUE(registry.EvictOverBudget(t0).empty()) << "nothing has been idle 30 s yet";
  EXPECT_THAT(registry.EvictOverBudget(t0 + absl::Minutes(1)),
              ::testing::ElementsAre("p0", "p2"));
  EXPECT_EQ(registry.All().size(), 1u);
  // Each comes back from PostgreSQL on its next call, serving what it served before.
  for (const char* name : {"p0", "p1", "p2"}) {
    auto project = registry.Get(name);
    ASSERT_TRUE(project.ok()) << project.status();
    EXPECT_EQ(Served(**project), served[name]) << name;
  }
  EXPECT_EQ(registry.All().size(), 3u);
}

// Promise (projects.proto: UNAVAILABLE only for a project whose stored state cannot be loaded;
// README: each training job yields exactly one version): a load that runs while labels on new
// items are committed succeeds. Items, annotators and labels are read by separate queries, so
// the labels must not be read after the items: a label committed in between, on an item created
// with it, would name an item the load has not read (it was refused as "stored label out of
// range"). A writer commits labels on new items in a loop while fresh registries load the
// project, each load from PostgreSQL.
TEST_F(ProjectRegistryTest, ALoadWhileLabelsOnNewItemsCommitSucceeds) {
  int64_t project_id = 0;
  {
    ProjectRegistry creator(*storage_);
    auto created = creator.Create(NewProject("racing"));
    ASSERT_TRUE(created.ok()) << created.status();
    project_id = (*created)->identity().project_id;
  }
  // Enough items that reading them takes a while.
  for (int batch = 0; batch < 4; ++batch) {
    std::vector<storage::AnnotationWrite> writes;
    for (int i = 0; i < 5000; ++i) {
      writes.push_back({project_id, absl::StrCat("seed-", batch, "-", i), "annotator-0", i % 2,
                        std::nullopt});
    }
    ASSERT_TRUE(storage_->annotations->CommitAnnotations(writes).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> commits{0};
  std::thread writer([&] {
    for (int n = 0; !stop.load(); ++n) {
      std::vector<storage::AnnotationWrite> writes;
      for (int i = 0; i < 20; ++i) {
        writes.push_back({project_id, absl::StrCat("new-", n, "-", i), "annotator-1", i % 2,
                          std::nullopt});
      }
      if (storage_->annotations->CommitAnnotations(writes).ok()) commits.fetch_add(1);
    }
  });
  for (int load = 0; load < 15; ++load) {
    ProjectRegistry reader(*storage_);
    auto loaded = reader.Get("racing");
    EXPECT_TRUE(loaded.ok()) << "load " << load << ": " << loaded.status();
  }
  stop.store(true);
  writer.join();
  EXPECT_GT(commits.load(), 15) << "the writer did not run alongside the loads";
}


// The budget unloads only projects "that nothing else holds" (an open ingest stream holds its
// project): with room for none, of two idle projects only the one no caller holds goes. Its
// counts stay readable (CountsIfUnloaded) until a call loads it again; IfLoaded never loads.
TEST_F(ProjectRegistryTest, TheBudgetKeepsAHeldProjectAndRemembersTheCountsOfUnloadedOnes) {
  ProjectRegistry registry(*storage_);
  std::shared_ptr<LiveProject> held;
  int64_t one_project = 0;
  for (const char* name : {"held", "idle"}) {
    auto project = registry.Create(NewProject(name));
    ASSERT_TRUE(project.ok()) << project.status();
    AddLabels(*storage_, **project, 300);
    one_project = (*project)->EstimatedBytes();
    if (std::string(name) == "held") held = *project;
  }
  ASSERT_GT(one_project, 0);
  registry.EnforceMemoryBudget(one_project / 2, absl::Seconds(30));
  EXPECT_THAT(registry.EvictOverBudget(absl::Now() + absl::Minutes(1)),
              ::testing::ElementsAre("idle"));
  EXPECT_EQ(registry.IfLoaded("held"), held);
  EXPECT_EQ(registry.IfLoaded("idle"), nullptr);
  EXPECT_EQ(registry.IfLoaded("idle"), nullptr) << "IfLoaded must not load";
  EXPECT_FALSE(registry.CountsIfUnloaded("held").has_value());
  const std::optional<ProjectCounts> counts = registry.CountsIfUnloaded("idle");
  ASSERT_TRUE(counts.has_value());
  EXPECT_EQ(counts->num_labels, 300);
  EXPECT_EQ(counts->num_items, 300);
  EXPECT_EQ(counts->num_annotators, 5);
  ASSERT_TRUE(registry.Get("idle").ok());
  EXPECT_FALSE(registry.CountsIfUnloaded("idle").has_value()) << "loaded again";
}

// A project loaded from PostgreSQL serves the gold labels and priorities its items were given
// (AddItems persisted them), as the server that added them did.
TEST_F(ProjectRegistryTest, ALoadedProjectServesTheStoredGoldLabelsAndPriorities) {
  {
    ProjectRegistry writer(*storage_);
    auto created = writer.Create(NewProject("gold"));
    ASSERT_TRUE(created.ok()) << created.status();
    std::vector<storage::ItemWrite> writes(3);
    writes[0].external_id = "plain";
    writes[1].external_id = "gold-no";
    writes[1].gold_label = 0;
    writes[1].priority = 2.5;
    writes[2].external_id = "urgent";
    writes[2].priority = 7.0;
    auto indices = writer.AddItems(**created, writes);
    ASSERT_TRUE(indices.ok()) << indices.status();
    ASSERT_EQ(*indices, (std::vector<int32_t>{0, 1, 2}));
  }
  ProjectRegistry reader(*storage_);
  auto loaded = reader.Get("gold");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const PosteriorTable& table = (*loaded)->snapshot()->posteriors;
  ASSERT_EQ(table.num_items(), 3);
  EXPECT_EQ(table.priority(0), 0.0);
  EXPECT_EQ(table.priority(1), 2.5);
  EXPECT_EQ(table.priority(2), 7.0);
  EXPECT_FALSE(table.is_gold(0));
  EXPECT_TRUE(table.is_gold(1));
  EXPECT_EQ((*loaded)->GoldItems(), (std::vector<int32_t>{1}));
}


// label_catch_up.h: CatchUpLabels reads the labels with seq > applied_seq() that any writer
// committed and applies them, ids of new items and annotators included. A second replica's
// copy of the project then serves what the writing replica serves.
TEST_F(ProjectRegistryTest, CatchUpLabelsAppliesWhatAnotherReplicaCommitted) {
  ProjectRegistry writer(*storage_), follower(*storage_);
  auto written = writer.Create(NewProject("followed"));
  ASSERT_TRUE(written.ok()) << written.status();
  AddLabels(*storage_, **written, 10);
  auto followed = follower.Get("followed");
  ASSERT_TRUE(followed.ok()) << followed.status();
  ASSERT_EQ((*followed)->Counts().num_labels, 10);
  ASSERT_EQ((*followed)->KnownIdPrefixes(), std::make_pair(10, 5));

  // The writer commits a new item by a new annotator, and a label by a known one.
  const int64_t id = (*written)->identity().project_id;
  const std::vector<storage::AnnotationWrite> writes = {
      {id, "item-10", "annotator-new", 1, std::nullopt},
      {id, "item-0", "annotator-1", 1, std::nullopt},
  };
  std::vector<storage::WriteResult> results;
  ASSERT_NO_FATAL_FAILURE(CommitAndApply(*storage_, **written, writes, &results));

  ASSERT_TRUE(CatchUpLabels(*storage_->annotations, **followed).ok());
  EXPECT_EQ((*followed)->Counts().num_labels, 12);
  EXPECT_EQ((*followed)->FindItem("item-10"), std::optional<int32_t>(10));
  EXPECT_EQ((*followed)->FindAnnotator("annotator-new"), std::optional<int32_t>(5));
  EXPECT_TRUE((*followed)->HasLabelled(0, 1));
  EXPECT_EQ((*followed)->applied_seq(), results[1].seq);
  EXPECT_EQ(Served(**followed), Served(**written));
  // Caught up: another read changes nothing.
  ASSERT_TRUE(CatchUpLabels(*storage_->annotations, **followed).ok());
  EXPECT_EQ((*followed)->Counts().num_labels, 12);
}

// label_catch_up.h: a read that fails is CatchUpLabels' error, UNAVAILABLE while PostgreSQL is
// unreachable, and memory is then unchanged; once PostgreSQL is back, the next catch-up
// applies what it missed.
TEST_F(ProjectRegistryTest, CatchUpLabelsWhilePostgresIsDownIsUnavailableAndChangesNothing) {
  ProjectRegistry writer(*storage_), follower(*storage_);
  auto written = writer.Create(NewProject("outage"));
  ASSERT_TRUE(written.ok()) << written.status();
  AddLabels(*storage_, **written, 10);
  auto followed = follower.Get("outage");
  ASSERT_TRUE(followed.ok()) << followed.status();
  ASSERT_EQ((*followed)->Counts().num_labels, 10);
  const int64_t applied = (*followed)->applied_seq();
  const std::vector<double> served = Served(**followed);
  const int64_t id = (*written)->identity().project_id;
  ASSERT_NO_FATAL_FAILURE(
      CommitAndApply(*storage_, **written, {{id, "item-10", "annotator-0", 1, std::nullopt}}));

  ASSERT_TRUE(cluster().Stop().ok());
  const absl::Status down = CatchUpLabels(*storage_->annotations, **followed);
  ASSERT_TRUE(cluster().Start().ok());
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;
  EXPECT_EQ((*followed)->Counts().num_labels, 10);
  EXPECT_EQ((*followed)->applied_seq(), applied);
  EXPECT_EQ(Served(**followed), served);

  ASSERT_TRUE(CatchUpLabels(*storage_->annotations, **followed).ok());
  EXPECT_EQ((*followed)->Counts().num_labels, 11);
  EXPECT_EQ((*followed)->FindItem("item-10"), std::optional<int32_t>(10));
}

// project_registry.h: LoadingOrFailed is true while a start-up loader loads the project (a
// listing leaves it out), and false once it is loaded.
TEST_F(ProjectRegistryTest, AProjectIsLoadingOrFailedWhileABackgroundLoaderLoadsIt) {
  {
    ProjectRegistry writer(*storage_);
    ASSERT_TRUE(writer.Create(NewProject("held")).ok());
  }
  ProjectRegistry registry(*storage_);
  absl::Notification entered, release;
  registry.SetBeforeBackgroundLoadHookForTesting([&](const std::string&) {
    entered.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(registry.LoadAllInBackground(1).ok());
  absl::Notification done;
  registry.OnBackgroundLoadDone([&] { done.Notify(); });
  const bool held = entered.WaitForNotificationWithTimeout(absl::Seconds(10));
  const bool loading = registry.LoadingOrFailed("held");
  release.Notify();
  ASSERT_TRUE(held);
  EXPECT_TRUE(loading);
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(registry.LoadingOrFailed("held"));
  EXPECT_NE(registry.IfLoaded("held"), nullptr);
}

// project_registry.h: UpdateSettings' `admit` "refuses the update when not OK": its error is
// the call's, and neither PostgreSQL nor memory takes the settings.
TEST_F(ProjectRegistryTest, AnUpdateItsAdmitRefusesChangesNothing) {
  ProjectRegistry registry(*storage_);
  auto project = registry.Create(NewProject("refused"));
  ASSERT_TRUE(project.ok()) << project.status();
  const int32_t before = (*project)->settings().assignment().max_labels_per_item();
  v1::ProjectSettings wanted = (*project)->settings();
  wanted.mutable_assignment()->set_max_labels_per_item(before + 7);
  const absl::Status refused = registry.UpdateSettings(
      **project, wanted,
      [](const v1::ProjectSettings&) { return absl::FailedPreconditionError("over the limit"); });
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(refused.message(), "over the limit");
  EXPECT_EQ((*project)->settings().assignment().max_labels_per_item(), before);
  EXPECT_EQ(StoredSettings("refused").assignment().max_labels_per_item(), before);
}

// project_registry.h: the budget unloads only projects "that no call used for `idle`"; a
// project a call has just loaded from PostgreSQL has just been used.
TEST_F(ProjectRegistryTest, AProjectACallJustLoadedIsNotIdle) {
  {
    ProjectRegistry writer(*storage_);
    auto created = writer.Create(NewProject("fresh"));
    ASSERT_TRUE(created.ok()) << created.status();
    AddLabels(*storage_, **created, 50);
  }
  ProjectRegistry registry(*storage_);
  ASSERT_TRUE(registry.Get("fresh").ok());  // Loads it; this test then holds nothing.
  registry.EnforceMemoryBudget(1, absl::Seconds(30));
  EXPECT_TRUE(registry.EvictOverBudget(absl::Now()).empty()) << "used a moment ago";
  EXPECT_THAT(registry.EvictOverBudget(absl::Now() + absl::Minutes(1)),
              ::testing::ElementsAre("fresh"));
}

// live_project.h: a writer of this server notes the change_seq its write got, so that memory,
// still current, is not read again: after this server's own item and settings changes,
// followed_change_seq() is the project's stored change_seq.
TEST_F(ProjectRegistryTest, OwnItemAndSettingsChangesLeaveMemoryAtTheStoredChangeSeq) {
  ProjectRegistry registry(*storage_);
  auto project = registry.Create(NewProject("own-changes"));
  ASSERT_TRUE(project.ok()) << project.status();
  auto followed_is_stored = [&](const char* after) {
    auto record = storage_->projects->GetProjectByName("own-changes");
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_GT(record->change_seq, 0) << after;
    EXPECT_EQ((*project)->followed_change_seq(), record->change_seq) << after;
  };
  storage::ItemWrite item;
  item.external_id = "item-0";
  ASSERT_TRUE(registry.AddItems(**project, {item}).ok());
  followed_is_stored("AddItems");
  v1::ProjectSettings settings = (*project)->settings();
  settings.mutable_assignment()->set_max_labels_per_item(3);
  ASSERT_TRUE(registry.UpdateSettings(**project, settings).ok());
  followed_is_stored("UpdateSettings");
}

}  // namespace
}  // namespace verity::server
