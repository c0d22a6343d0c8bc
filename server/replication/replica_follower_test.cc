// ReplicaFollower against a real PostgreSQL (replica_follower.h): labels another replica
// commits are caught up after its NOTIFY, and the periodic check reads nothing and adopts
// nothing for a project that is already current. Counted by verity_replica_catch_up_reads_total.
// Also: a broken listening connection is counted and replaced, and what it missed is polled;
// failed reads are counted and never applied.
#include "server/replication/replica_follower.h"

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pqxx/connection"
#include "pqxx/nontransaction"
#include "server/observability/metric_sample.h"
#include "server/observability/metrics.h"
#include "server/state/project_registry.h"
#include "server/state/storage_handles.h"
#include "storage/annotation_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {
namespace {

// The value of `series` in `metrics` as a scrape would read it; 0.0 when it is not rendered.
double Sample(const MetricsRegistry& metrics, const std::string& series) {
  return MetricSample(metrics, series).value_or(0.0);
}

class ReplicaFollowerTest : public storage::testing::PostgresTest {
 protected:
  // Stores a project `name` with classes a, b and method ds; its id.
  absl::StatusOr<int64_t> CreateDsProject(const std::string& name) {
    storage::ProjectStore projects(&pool());
    storage::ProjectRecord p;
    p.name = name;
    p.classes = {"a", "b"};
    v1::ProjectSettings settings;
    settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
    p.settings = settings.SerializeAsString();
    absl::StatusOr<storage::ProjectRecord> created = projects.CreateProject(p);
    if (!created.ok()) return created.status();
    return created->project_id;
  }

  void SetUp() override {
    PostgresTest::SetUp();
    absl::StatusOr<int64_t> created = CreateDsProject("p");
    ASSERT_TRUE(created.ok()) << created.status();
    project_id_ = *created;
    ASSERT_TRUE(Commit(0, 30).ok());
    auto storage = StorageHandles::Open(url(), 3);
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_ = std::move(*storage);
    registry_ = std::make_unique<ProjectRegistry>(*storage_);
    ASSERT_TRUE(registry_->LoadAll().ok());
    project_ = *registry_->Get("p");
    // This replica fits and serves version 1: the newest stored.
    ASSERT_TRUE(project_->Refit(*storage_->versions).ok());
    ASSERT_EQ(project_->model_version(), 1);
  }
  void TearDown() override {
    follower_.reset();
    project_.reset();
    registry_.reset();
    storage_.reset();
    PostgresTest::TearDown();
  }

  // Labels of items [from, to), 2 each, committed as another replica would (NOTIFY included).
  absl::Status Commit(int from, int to) { return Commit(project_id_, from, to); }
  // The same for the project with id `project_id`.
  absl::Status Commit(int64_t project_id, int from, int to) {
    std::vector<storage::AnnotationWrite> writes;
    for (int i = from; i < to; ++i) {
      for (int r = 0; r < 2; ++r) {
        writes.push_back(
            {project_id, absl::StrCat("i", i), absl::StrCat("w", r), i % 2, std::nullopt});
      }
    }
    storage::AnnotationStore annotations(&pool());
    return annotations.CommitAnnotations(writes).status();
  }

  void StartFollower(absl::Duration poll_interval = absl::Milliseconds(50)) {
    ReplicaFollower::Options options;
    options.poll_interval = poll_interval;
    follower_ = std::make_unique<ReplicaFollower>(
        url(), *registry_, *storage_, [this](LiveProject&) { ++adopt_calls_; }, options,
        &metrics_);
    ASSERT_TRUE(follower_->Start().ok());
  }

  // Runs `sql` in one transaction of the test's own pool.
  absl::Status Exec(const std::string& sql) {
    return pool().RunInTransaction("test statement", [&sql](pqxx::work& txn) {
      txn.exec(sql);
      return absl::OkStatus();
    });
  }
  // The backends of this database whose last statement is the follower's "SELECT 1" after its
  // LISTENs (every other connection has run other statements since); terminated if `terminate`.
  absl::StatusOr<int> ListeningBackends(bool terminate) {
    const std::string sql = absl::StrCat(
        "SELECT ", terminate ? "pg_terminate_backend(pid)" : "pid",
        " FROM pg_stat_activity WHERE datname = current_database() AND query = 'SELECT 1' "
        "AND pid <> pg_backend_pid()");
    return pool().WithTransaction("listening backends", [&sql](pqxx::work& txn) {
      return absl::StatusOr<int>(static_cast<int>(txn.exec(sql).size()));
    });
  }
  // Lets new connections to this test's database in, or refuses them (those open stay open).
  // Run from the cluster's "postgres" database: PostgreSQL refuses it for the current one.
  absl::Status AllowConnections(bool allow) {
    const std::string key = "dbname='";
    const size_t begin = url().find(key) + key.size();
    const size_t end = url().find('\'', begin);
    const std::string database = url().substr(begin, end - begin);
    try {
      pqxx::connection admin(url().substr(0, begin) + "postgres" + url().substr(end));
      pqxx::nontransaction(admin).exec(absl::StrCat(
          "ALTER DATABASE \"", database, "\" ALLOW_CONNECTIONS ", allow ? "true" : "false"));
    } catch (const std::exception& e) {
      return absl::InternalError(e.what());
    }
    return absl::OkStatus();
  }
  // Waits up to 10 s for `done`; its last answer.
  static bool WaitFor(const std::function<bool()>& done) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!done() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
    return done();
  }

  int64_t project_id_ = 0;
  std::unique_ptr<StorageHandles> storage_;
  std::unique_ptr<ProjectRegistry> registry_;
  std::shared_ptr<LiveProject> project_;
  MetricsRegistry metrics_;
  std::atomic<int> adopt_calls_{0};
  std::unique_ptr<ReplicaFollower> follower_;
};

TEST_F(ReplicaFollowerTest, ACurrentProjectIsNeitherReadNorAdoptedByThePoll) {
  StartFollower();
  absl::SleepFor(absl::Milliseconds(600));  // about 10 polls
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"poll\"}"), 0);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"notify\"}"), 0);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"changes\"}"), 0);
  EXPECT_EQ(Sample(metrics_, "verity_replica_follow_failures_total"), 0);
  EXPECT_EQ(adopt_calls_.load(), 0) << "version 1 is served already";
}

TEST_F(ReplicaFollowerTest, LabelsAnotherReplicaCommitsAreCaughtUpAfterItsNotify) {
  // One poll at the start, then none for an hour: only the NOTIFY can bring the labels.
  StartFollower(absl::Hours(1));
  // Time for that first poll to have run, even on a loaded machine (it must not be the one that
  // finds the commit below).
  absl::SleepFor(absl::Milliseconds(1000));
  const int64_t before = project_->Counts().num_labels;
  ASSERT_EQ(before, 60);
  ASSERT_TRUE(Commit(30, 40).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (project_->Counts().num_labels < 80 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(project_->Counts().num_labels, 80);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"notify\"}"), 1);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"poll\"}"), 0);
  EXPECT_EQ(adopt_calls_.load(), 0);
}

// Notifications are not durable: labels committed while the follower was not listening are
// found by the poll (replica_follower.h: "a missed notification costs latency, never a label").
TEST_F(ReplicaFollowerTest, ThePollCatchesUpLabelsWhoseNotifyWasMissed) {
  ASSERT_TRUE(Commit(30, 40).ok());  // No follower listens yet: its NOTIFY is lost.
  StartFollower();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (project_->Counts().num_labels < 80 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(project_->Counts().num_labels, 80);
  EXPECT_GE(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"poll\"}"), 1);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"notify\"}"), 0);
}

// A version another replica stored while this follower was not listening is handed to
// adopt_stored_version by the poll (it lists each project's newest version).
TEST_F(ReplicaFollowerTest, ThePollHandsANewerStoredVersionToAdopt) {
  ProjectRegistry other_replica(*storage_);
  ASSERT_TRUE(other_replica.LoadAll().ok());
  std::shared_ptr<LiveProject> other = *other_replica.Get("p");
  ASSERT_TRUE(other->Refit(*storage_->versions).ok());
  ASSERT_EQ(other->model_version(), 2);
  ASSERT_EQ(project_->model_version(), 1);
  StartFollower();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (adopt_calls_.load() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(adopt_calls_.load(), 1) << "version 2 is newer than the served version 1";
}

// A version another replica stores sends NOTIFY on the versions channel, and the follower hands
// the project to adopt_stored_version without waiting for a poll.
TEST_F(ReplicaFollowerTest, AVersionAnotherReplicaStoresIsAdoptedAfterItsNotify) {
  // One poll at the start, then none for an hour: only the NOTIFY can bring the version.
  StartFollower(absl::Hours(1));
  absl::SleepFor(absl::Milliseconds(1000));  // Time for that first poll to have run.
  ASSERT_EQ(adopt_calls_.load(), 0);
  ProjectRegistry other_replica(*storage_);
  ASSERT_TRUE(other_replica.LoadAll().ok());
  std::shared_ptr<LiveProject> other = *other_replica.Get("p");
  ASSERT_TRUE(other->Refit(*storage_->versions).ok());
  ASSERT_EQ(other->model_version(), 2);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (adopt_calls_.load() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(adopt_calls_.load(), 1);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"poll\"}"), 0);
}

// Items another replica added while this follower was not listening bump the project's
// change_seq; the poll re-reads and applies them (LiveProject::ApplyStoredEntities).
TEST_F(ReplicaFollowerTest, ThePollFollowsItemsAnotherReplicaAdded) {
  ASSERT_EQ(project_->Counts().num_items, 30);
  const std::vector<storage::ItemWrite> writes = {{"new-1"}, {"new-2"}};
  ASSERT_TRUE(storage_->items->UpsertItems(project_id_, writes).ok());
  StartFollower();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (project_->Counts().num_items < 32 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(project_->Counts().num_items, 32);
  EXPECT_GE(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"changes\"}"), 1);
}

// With two projects loaded, a NOTIFY names one project: the follower catches up that project,
// not another one. Labels are committed to each project in turn (poll once, at the start), so
// whichever project a wrong lookup would land on, the other one is left behind.
TEST_F(ReplicaFollowerTest, ANotifyCatchesUpTheProjectItNamesAmongSeveral) {
  absl::StatusOr<int64_t> created = CreateDsProject("q");
  ASSERT_TRUE(created.ok()) << created.status();
  const int64_t q_id = *created;
  absl::StatusOr<std::shared_ptr<LiveProject>> loaded = registry_->Get("q");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<LiveProject> q_project = *loaded;
  ASSERT_EQ(q_project->Counts().num_labels, 0);
  ASSERT_EQ(project_->Counts().num_labels, 60);

  StartFollower(absl::Hours(1));
  absl::SleepFor(absl::Milliseconds(1000));  // Time for the first poll to have run.

  // 5 items of 2 labels each to q: q has 10 labels, p keeps its 60.
  ASSERT_TRUE(Commit(q_id, 0, 5).ok());
  absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (q_project->Counts().num_labels < 10 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(q_project->Counts().num_labels, 10);

  // 10 items of 2 labels each to p: p has 80, q keeps its 10.
  ASSERT_TRUE(Commit(30, 40).ok());
  give_up = absl::Now() + absl::Seconds(10);
  while (project_->Counts().num_labels < 80 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(project_->Counts().num_labels, 80);
  EXPECT_EQ(q_project->Counts().num_labels, 10);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"notify\"}"), 2);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"poll\"}"), 0);
}

// replica_follower.h: notifications of changed items "are handled at most once per
// poll_interval per project". With an interval of an hour, items another replica adds after
// the first poll are not re-read within the next seconds, though their NOTIFY arrives.
TEST_F(ReplicaFollowerTest, ChangedItemsWaitForThePollInterval) {
  StartFollower(absl::Hours(1));
  absl::SleepFor(absl::Milliseconds(1000));  // Time for the first poll to have run.
  ASSERT_EQ(project_->Counts().num_items, 30);
  const std::vector<storage::ItemWrite> writes = {{"new-1"}, {"new-2"}};
  ASSERT_TRUE(storage_->items->UpsertItems(project_id_, writes).ok());
  absl::SleepFor(absl::Milliseconds(1500));  // About 15 wake-ups of the follower.
  EXPECT_EQ(project_->Counts().num_items, 30);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"changes\"}"), 0);
}

// replica_follower.h: FollowChanges re-reads "if its change_seq moved past what memory
// reflects". For a project that is current (nothing written since it was loaded), a direct call
// (as the training scheduler makes under the fit lock) reads nothing and counts no re-read.
TEST_F(ReplicaFollowerTest, FollowChangesOfACurrentProjectReadsNothing) {
  StartFollower(absl::Hours(1));
  absl::SleepFor(absl::Milliseconds(1000));  // Time for the first poll to have run.
  follower_->FollowChanges(*project_);
  follower_->FollowChanges(*project_);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"changes\"}"), 0);
  EXPECT_EQ(project_->Counts().num_items, 30);
}

// replica_follower.h: on a new version's NOTIFY the follower first follows the project's
// changed items and settings (the writer changes them before it fits), then adopts. With a poll
// interval of an hour, only that path can bring the items another replica added before it
// stored the version, and they are in memory by the time adopt_stored_version runs.
TEST_F(ReplicaFollowerTest, AVersionNotifyFollowsTheWritersChangesBeforeAdopting) {
  std::atomic<int> items_seen_by_adopt{-1};
  ReplicaFollower::Options options;
  options.poll_interval = absl::Hours(1);
  follower_ = std::make_unique<ReplicaFollower>(
      url(), *registry_, *storage_,
      [&](LiveProject& project) {
        items_seen_by_adopt = static_cast<int>(project.Counts().num_items);
        ++adopt_calls_;
      },
      options, &metrics_);
  ASSERT_TRUE(follower_->Start().ok());
  absl::SleepFor(absl::Milliseconds(1000));  // Time for the first poll to have run.
  ProjectRegistry other_replica(*storage_);
  ASSERT_TRUE(other_replica.LoadAll().ok());
  const std::vector<storage::ItemWrite> writes = {{"new-1"}, {"new-2"}};
  ASSERT_TRUE(storage_->items->UpsertItems(project_id_, writes).ok());
  std::shared_ptr<LiveProject> other = *other_replica.Get("p");
  ASSERT_TRUE(other->Refit(*storage_->versions).ok());
  ASSERT_EQ(other->model_version(), 2);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (adopt_calls_.load() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(adopt_calls_.load(), 1);
  EXPECT_EQ(items_seen_by_adopt.load(), 32);
  EXPECT_EQ(project_->Counts().num_items, 32);
}

// replica_follower.h: Start answers UNAVAILABLE "if PostgreSQL cannot be reached" (nothing
// listens on port 1 of this host).
TEST_F(ReplicaFollowerTest, StartAnswersUnavailableWhenPostgresCannotBeReached) {
  ReplicaFollower follower("postgresql://127.0.0.1:1/verity?connect_timeout=5", *registry_,
                           *storage_, nullptr, ReplicaFollower::Options(), &metrics_);
  EXPECT_EQ(follower.Start().code(), absl::StatusCode::kUnavailable);
}

// A broken listening connection is counted once in verity_replica_follow_failures_total and
// replaced: labels another replica commits afterwards still reach this server.
TEST_F(ReplicaFollowerTest, ABrokenListeningConnectionIsCountedAndReplaced) {
  StartFollower(absl::Hours(1));
  ASSERT_TRUE(WaitFor([this] { return ListeningBackends(false).value_or(0) == 1; }));
  absl::SleepFor(absl::Milliseconds(500));  // Time for the first poll to have run.
  ASSERT_EQ(ListeningBackends(/*terminate=*/true).value_or(0), 1);
  EXPECT_TRUE(WaitFor([this] { return ListeningBackends(false).value_or(0) == 1; }))
      << "the follower listens again";
  ASSERT_TRUE(Commit(30, 40).ok());
  EXPECT_TRUE(WaitFor([this] { return project_->Counts().num_labels == 80; }));
  EXPECT_EQ(project_->Counts().num_labels, 80);
  EXPECT_EQ(Sample(metrics_, "verity_replica_follow_failures_total"), 1);
}

// replica_follower.h: "a missed notification costs latency, never a label". Labels committed
// while the listening connection was down (its reconnection refused meanwhile) are read as
// soon as it listens again, although the next periodic poll is an hour away.
TEST_F(ReplicaFollowerTest, LabelsCommittedWhileDisconnectedAreReadOnReconnecting) {
  ReplicaFollower::Options options;
  options.poll_interval = absl::Hours(1);
  options.reconnect_delay = absl::Milliseconds(50);
  follower_ = std::make_unique<ReplicaFollower>(
      url(), *registry_, *storage_, [this](LiveProject&) { ++adopt_calls_; }, options, &metrics_);
  ASSERT_TRUE(follower_->Start().ok());
  ASSERT_TRUE(WaitFor([this] { return ListeningBackends(false).value_or(0) == 1; }));
  absl::SleepFor(absl::Milliseconds(500));  // Time for the first poll to have run.
  const absl::Status refused = AllowConnections(false);
  ASSERT_TRUE(refused.ok()) << refused;
  ASSERT_EQ(ListeningBackends(/*terminate=*/true).value_or(0), 1);
  ASSERT_TRUE(Commit(30, 40).ok());  // Nobody listens: its NOTIFY is lost.
  // The broken connection and at least one refused reconnection.
  EXPECT_TRUE(
      WaitFor([this] { return Sample(metrics_, "verity_replica_follow_failures_total") >= 2; }));
  const absl::Status allowed = AllowConnections(true);
  ASSERT_TRUE(allowed.ok()) << allowed;
  EXPECT_TRUE(WaitFor([this] { return project_->Counts().num_labels == 80; }));
  EXPECT_EQ(project_->Counts().num_labels, 80);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"notify\"}"), 0);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"poll\"}"), 1);
}

// A poll whose queries fail (here the model versions table is missing) is counted as a failure
// and retried; the follower keeps following.
TEST_F(ReplicaFollowerTest, APollThatCannotReadTheVersionsIsCountedAndRetried) {
  StartFollower();
  ASSERT_TRUE(Exec("ALTER TABLE model_versions RENAME TO model_versions_hidden").ok());
  EXPECT_TRUE(
      WaitFor([this] { return Sample(metrics_, "verity_replica_follow_failures_total") >= 2; }));
  ASSERT_TRUE(Exec("ALTER TABLE model_versions_hidden RENAME TO model_versions").ok());
  ASSERT_TRUE(Commit(30, 40).ok());
  EXPECT_TRUE(WaitFor([this] { return project_->Counts().num_labels == 80; }));
  EXPECT_EQ(project_->Counts().num_labels, 80);
}

// A catch-up read that fails (the poll finds a seq drawn past what memory holds, but the
// labels cannot be read) is counted in verity_replica_follow_failures_total.
TEST_F(ReplicaFollowerTest, ACatchUpReadThatFailsIsCounted) {
  StartFollower();
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_EQ(Sample(metrics_, "verity_replica_follow_failures_total"), 0);
  ASSERT_TRUE(Exec("ALTER TABLE annotations RENAME TO annotations_hidden").ok());
  ASSERT_TRUE(Exec(absl::StrCat("UPDATE projects SET next_seq = next_seq + 5 WHERE project_id = ",
                                project_id_))
                  .ok());
  EXPECT_TRUE(
      WaitFor([this] { return Sample(metrics_, "verity_replica_follow_failures_total") >= 1; }));
  EXPECT_GE(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"poll\"}"), 1);
  EXPECT_EQ(project_->Counts().num_labels, 60);
}

// FollowChanges when the project's row cannot be read: one failure counted, nothing applied.
TEST_F(ReplicaFollowerTest, FollowChangesThatCannotReadTheProjectCountsAFailure) {
  StartFollower(absl::Hours(1));
  absl::SleepFor(absl::Milliseconds(1000));  // Time for the first poll to have run.
  ASSERT_TRUE(Exec("ALTER TABLE projects RENAME TO projects_hidden").ok());
  follower_->FollowChanges(*project_);
  EXPECT_EQ(Sample(metrics_, "verity_replica_follow_failures_total"), 1);
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"changes\"}"), 0);
  ASSERT_TRUE(Exec("ALTER TABLE projects_hidden RENAME TO projects").ok());
}

// Stored settings that do not parse are not applied (the project keeps its method) and each
// failed re-read is counted.
TEST_F(ReplicaFollowerTest, SettingsThatDoNotParseAreNotApplied) {
  StartFollower();
  ASSERT_TRUE(Exec(absl::StrCat("UPDATE projects SET settings = '\\xffffffff'::bytea, "
                                "change_seq = change_seq + 1 WHERE project_id = ",
                                project_id_))
                  .ok());
  EXPECT_TRUE(
      WaitFor([this] { return Sample(metrics_, "verity_replica_follow_failures_total") >= 1; }));
  EXPECT_EQ(project_->settings().model().method(), v1::TRUTH_METHOD_DAWID_SKENE);
}

// Once the poll has followed another replica's items, the project's change_seq is current:
// later polls read nothing more (one re-read, however many polls).
TEST_F(ReplicaFollowerTest, FollowedItemsAreReadOnce) {
  const std::vector<storage::ItemWrite> writes = {{"new-1"}, {"new-2"}};
  ASSERT_TRUE(storage_->items->UpsertItems(project_id_, writes).ok());
  StartFollower();
  ASSERT_TRUE(WaitFor([this] { return project_->Counts().num_items == 32; }));
  absl::SleepFor(absl::Milliseconds(600));  // About 10 more polls.
  EXPECT_EQ(Sample(metrics_, "verity_replica_catch_up_reads_total{trigger=\"changes\"}"), 1);
}

// The poll, like the version NOTIFY, follows the items another replica wrote before handing a
// newer version to adopt_stored_version (replica_follower.h: the version was fitted with them).
TEST_F(ReplicaFollowerTest, ThePollFollowsTheWritersChangesBeforeAdopting) {
  ProjectRegistry other_replica(*storage_);
  ASSERT_TRUE(other_replica.LoadAll().ok());
  const std::vector<storage::ItemWrite> writes = {{"new-1"}, {"new-2"}};
  ASSERT_TRUE(storage_->items->UpsertItems(project_id_, writes).ok());
  std::shared_ptr<LiveProject> other = *other_replica.Get("p");
  ASSERT_TRUE(other->Refit(*storage_->versions).ok());
  ASSERT_EQ(other->model_version(), 2);
  // The items the first call saw (the callback may outlive this test's locals).
  auto items_seen_by_adopt = std::make_shared<std::atomic<int>>(-1);
  ReplicaFollower::Options options;
  options.poll_interval = absl::Milliseconds(50);
  follower_ = std::make_unique<ReplicaFollower>(
      url(), *registry_, *storage_,
      [this, items_seen_by_adopt](LiveProject& project) {
        if (adopt_calls_++ == 0) {
          *items_seen_by_adopt = static_cast<int>(project.Counts().num_items);
        }
      },
      options, &metrics_);
  ASSERT_TRUE(follower_->Start().ok());
  ASSERT_TRUE(WaitFor([this] { return adopt_calls_.load() > 0; }));
  EXPECT_EQ(items_seen_by_adopt->load(), 32);
}

// adopt_stored_version may be empty (a server that adopts nothing): a newer stored version,
// seen by its NOTIFY and by the poll, is then skipped, and the follower keeps following labels.
TEST_F(ReplicaFollowerTest, WithoutAnAdoptCallbackANewVersionIsSkipped) {
  ReplicaFollower::Options options;
  options.poll_interval = absl::Milliseconds(50);
  follower_ =
      std::make_unique<ReplicaFollower>(url(), *registry_, *storage_, nullptr, options, &metrics_);
  ASSERT_TRUE(follower_->Start().ok());
  absl::SleepFor(absl::Milliseconds(200));
  ProjectRegistry other_replica(*storage_);
  ASSERT_TRUE(other_replica.LoadAll().ok());
  std::shared_ptr<LiveProject> other = *other_replica.Get("p");
  ASSERT_TRUE(other->Refit(*storage_->versions).ok());
  absl::SleepFor(absl::Milliseconds(300));  // The NOTIFY and several polls.
  ASSERT_TRUE(Commit(30, 40).ok());
  EXPECT_TRUE(WaitFor([this] { return project_->Counts().num_labels == 80; }));
  EXPECT_EQ(project_->model_version(), 1);
}

}  // namespace
}  // namespace verity::server
