// ProjectRegistry against a real PostgreSQL: a project that cannot load does not stop the others,
// Create never replaces a project a concurrent Get loaded, and memory follows the database's
// order of settings and item changes.
#include "server/state/project_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
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
    if (record.ok()) EXPECT_TRUE(settings.ParseFromString(record->settings));
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

}  // namespace
}  // namespace verity::server
