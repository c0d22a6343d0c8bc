#include "storage/migrations.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/result"
#include "storage/connection_pool.h"
#include "storage/model_version_store.h"
#include "storage/schema_migrations.h"
#include "storage/testing/postgres_fixture.h"

namespace verity {
namespace storage {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;
using ::verity::storage::testing::TestCluster;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

std::vector<int32_t> AllVersions() {
  std::vector<int32_t> versions;
  for (const Migration& m : SchemaMigrations()) versions.push_back(m.version);
  return versions;
}

// Each test gets a fresh database WITHOUT the schema.
class MigrationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TestCluster*> cluster = TestCluster::Get();
    ASSERT_THAT(cluster, IsOk());
    cluster_ = *cluster;
    absl::StatusOr<std::string> url = cluster_->CreateDatabase(false);
    ASSERT_THAT(url, IsOk());
    url_ = *url;
    pool_ = NewPool();
  }
  void TearDown() override {
    pool_.reset();
    EXPECT_THAT(cluster_->DropDatabase(url_), IsOk());
  }

  std::unique_ptr<ConnectionPool> NewPool() {
    ConnectionPool::Options options;
    options.url = url_;
    options.size = 2;
    return *ConnectionPool::Create(options);
  }

  bool TableExists(const std::string& table) {
    return *pool_->WithTransaction(
        "exists", [&](pqxx::work& txn) -> absl::StatusOr<bool> {
          return txn.exec_params1("SELECT to_regclass($1) IS NOT NULL", table)[0]
              .as<bool>();
        });
  }

  TestCluster* cluster_ = nullptr;
  std::string url_;
  std::unique_ptr<ConnectionPool> pool_;
};

TEST_F(MigrationsTest, AppliesEverythingOnceThenNothing) {
  EXPECT_THAT(AppliedMigrationVersions(*pool_), IsOkAndHolds(IsEmpty()));
  absl::StatusOr<std::vector<int32_t>> first = ApplySchemaMigrations(*pool_);
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(*first, AllVersions());
  EXPECT_TRUE(TableExists("annotations"));

  absl::StatusOr<std::vector<int32_t>> second = ApplySchemaMigrations(*pool_);
  ASSERT_THAT(second, IsOk());
  EXPECT_THAT(*second, IsEmpty());
  absl::StatusOr<std::vector<int32_t>> recorded =
      AppliedMigrationVersions(*pool_);
  ASSERT_THAT(recorded, IsOk());
  EXPECT_EQ(*recorded, AllVersions());
}

TEST_F(MigrationsTest, ConcurrentCallersApplyEachVersionExactlyOnce) {
  constexpr int kThreads = 4;
  std::vector<std::unique_ptr<ConnectionPool>> pools;
  for (int i = 0; i < kThreads; ++i) pools.push_back(NewPool());
  std::vector<absl::StatusOr<std::vector<int32_t>>> results(
      kThreads, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back(
        [&, i] { results[i] = ApplySchemaMigrations(*pools[i]); });
  }
  for (std::thread& t : threads) t.join();

  std::vector<int32_t> applied;
  for (const auto& result : results) {
    ASSERT_THAT(result, IsOk());
    applied.insert(applied.end(), result->begin(), result->end());
  }
  EXPECT_THAT(applied, UnorderedElementsAreArray(AllVersions()));
  EXPECT_EQ(*AppliedMigrationVersions(*pool_), AllVersions());
}

TEST_F(MigrationsTest, AFailingMigrationAppliesNothing) {
  const std::vector<Migration> migrations = {
      {1, "good", "CREATE TABLE good (v int)"},
      {2, "bad", "CREATE TABLE bad (v nosuchtype)"},
  };
  EXPECT_THAT(ApplyMigrations(*pool_, migrations),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("migration 2 (bad)")));
  EXPECT_FALSE(TableExists("good"));
  EXPECT_THAT(AppliedMigrationVersions(*pool_), IsOkAndHolds(IsEmpty()));
}

TEST_F(MigrationsTest, AppliesOnlyNewMigrationsInOrder) {
  std::vector<Migration> migrations = {
      {1, "one", "CREATE TABLE one (v int)"},
  };
  ASSERT_THAT(ApplyMigrations(*pool_, migrations),
              IsOkAndHolds(ElementsAre(1)));
  migrations.push_back({2, "two", "ALTER TABLE one ADD COLUMN w int"});
  migrations.push_back({5, "five", "CREATE TABLE five (v int)"});
  EXPECT_THAT(ApplyMigrations(*pool_, migrations),
              IsOkAndHolds(ElementsAre(2, 5)));
  EXPECT_THAT(AppliedMigrationVersions(*pool_),
              IsOkAndHolds(ElementsAre(1, 2, 5)));
}

TEST_F(MigrationsTest, RejectsVersionsOutOfOrder) {
  const std::vector<Migration> migrations = {
      {2, "two", "SELECT 1"},
      {1, "one", "SELECT 1"},
  };
  EXPECT_THAT(ApplyMigrations(*pool_, migrations),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// migrations.h: INVALID_ARGUMENT unless the versions are positive and strictly increasing; a
// repeated version or version 0 is refused before anything runs.
TEST_F(MigrationsTest, RejectsARepeatedVersionAndVersionZero) {
  const std::vector<Migration> repeated = {
      {1, "a", "CREATE TABLE a (v int)"},
      {1, "b", "CREATE TABLE b (v int)"},
  };
  EXPECT_THAT(ApplyMigrations(*pool_, repeated),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("strictly increasing")));
  const std::vector<Migration> zero = {{0, "zero", "CREATE TABLE zero (v int)"}};
  EXPECT_THAT(ApplyMigrations(*pool_, zero),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positive")));
  EXPECT_FALSE(TableExists("a"));
  EXPECT_FALSE(TableExists("b"));
  EXPECT_FALSE(TableExists("zero"));
  EXPECT_THAT(AppliedMigrationVersions(*pool_), IsOkAndHolds(IsEmpty()));
}

TEST_F(MigrationsTest, RefusesADatabaseMigratedByANewerBinary) {
  ASSERT_THAT(ApplySchemaMigrations(*pool_), IsOk());
  const std::vector<Migration> older(SchemaMigrations().begin(),
                                     SchemaMigrations().end() - 1);
  EXPECT_THAT(ApplyMigrations(*pool_, older),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("newer")));
}

TEST_F(MigrationsTest, PerProjectSeqsContinuePastTheGlobalSequence) {
  // A database of the schema before migration 10, whose labels took seqs from the global
  // sequence annotation_seq.
  std::vector<Migration> before_counters;
  for (const Migration& m : SchemaMigrations()) {
    if (m.version < 10) before_counters.push_back(m);
  }
  ASSERT_THAT(ApplyMigrations(*pool_, before_counters), IsOk());
  ASSERT_THAT(pool_->WithTransaction(
                  "old labels",
                  [](pqxx::work& txn) -> absl::StatusOr<bool> {
                    txn.exec0("INSERT INTO projects (name, classes) VALUES "
                              "('a', '{x,y}'), ('b', '{x,y}')");
                    txn.exec0("INSERT INTO annotations (project_id, item_index, "
                              "annotator_index, label, seq) "
                              "SELECT 1, i, 0, 0, nextval('annotation_seq') "
                              "FROM generate_series(0, 41) AS i");
                    return true;
                  }),
              IsOk());
  ASSERT_THAT(ApplySchemaMigrations(*pool_), IsOk());
  EXPECT_FALSE(TableExists("annotation_seq"));
  absl::StatusOr<std::vector<int64_t>> next_seqs = pool_->WithTransaction(
      "next seqs", [](pqxx::work& txn) -> absl::StatusOr<std::vector<int64_t>> {
        std::vector<int64_t> next;
        for (const pqxx::row& row :
             txn.exec("SELECT next_seq FROM projects ORDER BY project_id")) {
          next.push_back(row[0].as<int64_t>());
        }
        return next;
      });
  // The 42 labels took seqs 1..42: both projects go on from 43.
  EXPECT_THAT(next_seqs, IsOkAndHolds(ElementsAre(43, 43)));
}

// Migration 13 counts the history rows a database already holds into projects.history_rows
// (ProjectLimits.max_revisions checks that count): 5 rows of project a, 2 of c, none of b.
TEST_F(MigrationsTest, TheHistoryRowCountStartsFromTheRowsAlreadyKept) {
  std::vector<Migration> before_count;
  for (const Migration& m : SchemaMigrations()) {
    if (m.version < 13) before_count.push_back(m);
  }
  ASSERT_THAT(ApplyMigrations(*pool_, before_count), IsOk());
  ASSERT_THAT(pool_->WithTransaction(
                  "old history",
                  [](pqxx::work& txn) -> absl::StatusOr<bool> {
                    txn.exec0("INSERT INTO projects (name, classes) VALUES "
                              "('a', '{x,y}'), ('b', '{x,y}'), ('c', '{x,y}')");
                    txn.exec0("INSERT INTO annotation_history (project_id, item_index, "
                              "annotator_index, label, seq, revision, committed_at) "
                              "SELECT p, 0, 0, r % 2, r + 1, r, now() FROM "
                              "(VALUES (1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (3, 0), (3, 1)) "
                              "AS rows (p, r)");
                    return true;
                  }),
              IsOk());
  ASSERT_THAT(ApplySchemaMigrations(*pool_), IsOk());
  absl::StatusOr<std::vector<int64_t>> counts = pool_->WithTransaction(
      "history rows", [](pqxx::work& txn) -> absl::StatusOr<std::vector<int64_t>> {
        std::vector<int64_t> rows;
        for (const pqxx::row& row :
             txn.exec("SELECT history_rows FROM projects ORDER BY project_id")) {
          rows.push_back(row[0].as<int64_t>());
        }
        return rows;
      });
  EXPECT_THAT(counts, IsOkAndHolds(ElementsAre(5, 0, 2)));
}

// migrations.h: ApplyMigrations runs "the migrations whose version is not recorded" — not
// only those above the newest recorded one. A database that recorded 1 and 5 (say, from a
// branch that skipped 2) gets 2 next, and only 2.
TEST_F(MigrationsTest, AppliesAVersionMissingBelowTheNewestRecorded) {
  const std::vector<Migration> one_and_five = {
      {1, "one", "CREATE TABLE one (v int)"},
      {5, "five", "CREATE TABLE five (v int)"},
  };
  ASSERT_THAT(ApplyMigrations(*pool_, one_and_five), IsOkAndHolds(ElementsAre(1, 5)));
  const std::vector<Migration> with_two = {
      one_and_five[0],
      {2, "two", "CREATE TABLE two (v int)"},
      one_and_five[1],
  };
  EXPECT_THAT(ApplyMigrations(*pool_, with_two), IsOkAndHolds(ElementsAre(2)));
  EXPECT_TRUE(TableExists("two"));
  EXPECT_THAT(AppliedMigrationVersions(*pool_), IsOkAndHolds(ElementsAre(1, 2, 5)));
}

// migrations.h: FAILED_PRECONDITION "if the database records a version newer than the newest
// in `migrations`", whichever version was recorded last: here 5 was recorded before 2, and a
// binary that knows versions up to 3 is refused and applies nothing.
TEST_F(MigrationsTest, RefusesANewerVersionRecordedBeforeAnOlderOne) {
  ASSERT_THAT(ApplyMigrations(*pool_, {{1, "one", "CREATE TABLE one (v int)"},
                                       {5, "five", "CREATE TABLE five (v int)"}}),
              IsOk());
  ASSERT_THAT(ApplyMigrations(*pool_, {{1, "one", "CREATE TABLE one (v int)"},
                                       {2, "two", "CREATE TABLE two (v int)"},
                                       {5, "five", "CREATE TABLE five (v int)"}}),
              IsOkAndHolds(ElementsAre(2)));
  const std::vector<Migration> up_to_three = {
      {1, "one", "CREATE TABLE one (v int)"},
      {2, "two", "CREATE TABLE two (v int)"},
      {3, "three", "CREATE TABLE three (v int)"},
  };
  EXPECT_THAT(ApplyMigrations(*pool_, up_to_three),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("version 5")));
  EXPECT_FALSE(TableExists("three"));
  EXPECT_THAT(AppliedMigrationVersions(*pool_), IsOkAndHolds(ElementsAre(1, 2, 5)));
}

// Migration 10 continues every project "past every value the global sequence handed out". A
// database whose sequence handed out none (projects, no label yet) starts its projects at seq
// 1, the first value the sequence would have given and a new project's next_seq.
TEST_F(MigrationsTest, PerProjectSeqsStartAtOneWhenTheGlobalSequenceWasNeverUsed) {
  std::vector<Migration> before_counters;
  for (const Migration& m : SchemaMigrations()) {
    if (m.version < 10) before_counters.push_back(m);
  }
  ASSERT_THAT(ApplyMigrations(*pool_, before_counters), IsOk());
  ASSERT_THAT(pool_->WithTransaction("projects without labels",
                                     [](pqxx::work& txn) -> absl::StatusOr<bool> {
                                       txn.exec0(
                                           "INSERT INTO projects (name, classes) VALUES "
                                           "('a', '{x,y}'), ('b', '{x,y}')");
                                       return true;
                                     }),
              IsOk());
  ASSERT_THAT(ApplySchemaMigrations(*pool_), IsOk());
  absl::StatusOr<std::vector<int64_t>> next_seqs = pool_->WithTransaction(
      "next seqs", [](pqxx::work& txn) -> absl::StatusOr<std::vector<int64_t>> {
        std::vector<int64_t> next;
        for (const pqxx::row& row : txn.exec("SELECT next_seq FROM projects ORDER BY project_id")) {
          next.push_back(row[0].as<int64_t>());
        }
        return next;
      });
  EXPECT_THAT(next_seqs, IsOkAndHolds(ElementsAre(1, 1)));
}

// An upgrade keeps what the database holds: model versions saved before migration 14 keep
// their checkpoints (parameters and outputs) after it, as read through ModelVersionStore, and
// the project's next version follows them.
TEST_F(MigrationsTest, VersionsSavedBeforeCheckpointFreeingKeepTheirCheckpoints) {
  std::vector<Migration> before_freeing;
  for (const Migration& m : SchemaMigrations()) {
    if (m.version < 14) before_freeing.push_back(m);
  }
  ASSERT_THAT(ApplyMigrations(*pool_, before_freeing), IsOk());
  ASSERT_THAT(pool_->WithTransaction(
                  "old versions",
                  [](pqxx::work& txn) -> absl::StatusOr<bool> {
                    txn.exec0("INSERT INTO projects (name, classes) VALUES ('a', '{x,y}')");
                    txn.exec0(
                        "INSERT INTO model_versions (project_id, version, method, "
                        "parameters, watermark) VALUES "
                        "(1, 1, 'ds', 'one'::bytea, 10), (1, 2, 'mv', 'two'::bytea, 20)");
                    txn.exec0(
                        "INSERT INTO model_version_outputs (project_id, version, "
                        "posteriors, annotator_profiles) VALUES "
                        "(1, 2, 'post'::bytea, 'prof'::bytea)");
                    return true;
                  }),
              IsOk());
  ASSERT_THAT(ApplySchemaMigrations(*pool_), IsOkAndHolds(ElementsAre(14, 15)));

  ModelVersionStore store(pool_.get());
  absl::StatusOr<ModelVersionRecord> first = store.GetModelVersion(1, 1);
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->method, "ds");
  EXPECT_EQ(first->parameters, "one");
  EXPECT_EQ(first->watermark, 10);
  absl::StatusOr<ModelVersionRecord> latest = store.LatestModelVersion(1);
  ASSERT_THAT(latest, IsOk());
  EXPECT_EQ(latest->version, 2);
  EXPECT_EQ(latest->parameters, "two");
  // Migration 15: the base of its warm starts is not known (a restart then refits from scratch).
  EXPECT_EQ(latest->scratch_num_labels, 0);
  absl::StatusOr<ModelVersionOutputs> outputs = store.GetModelVersionOutputs(1, 2);
  ASSERT_THAT(outputs, IsOk());
  EXPECT_EQ(outputs->posteriors, "post");
  EXPECT_EQ(outputs->annotator_profiles, "prof");

  ModelVersionRecord next;
  next.project_id = 1;
  next.method = "ds";
  next.parameters = "three";
  absl::StatusOr<ModelVersionRecord> saved = store.SaveModelVersion(next);
  ASSERT_THAT(saved, IsOk());
  EXPECT_EQ(saved->version, 3);
  // Three versions are within kCheckpointsKept: the first still has its checkpoint.
  EXPECT_THAT(store.GetModelVersion(1, 1),
              IsOkAndHolds(Field(&ModelVersionRecord::parameters, "one")));
}

// migrations.h: a migration's sql is "one or more statements", any SQL a schema change needs.
// One whose last statement returns a row (here setting a sequence with SELECT setval, as a
// data migration does) is applied and recorded like any other.
TEST_F(MigrationsTest, AMigrationEndingInASelectIsApplied) {
  const std::vector<Migration> migrations = {
      {1, "counter", "CREATE SEQUENCE counter; SELECT setval('counter', 41)"},
  };
  EXPECT_THAT(ApplyMigrations(*pool_, migrations), IsOkAndHolds(ElementsAre(1)));
  EXPECT_THAT(AppliedMigrationVersions(*pool_), IsOkAndHolds(ElementsAre(1)));
  EXPECT_THAT(
      pool_->WithTransaction("next value",
                             [](pqxx::work& txn) -> absl::StatusOr<int64_t> {
                               return txn.exec1("SELECT nextval('counter')")[0].as<int64_t>();
                             }),
      IsOkAndHolds(42));
}

}  // namespace
}  // namespace storage
}  // namespace verity
