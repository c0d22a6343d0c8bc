#include "storage/model_version_store.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "pqxx/pqxx"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity {
namespace storage {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

class ModelVersionStoreTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<ModelVersionStore>(&pool());
    absl::StatusOr<ProjectRecord> created = CreateProject("p");
    ASSERT_THAT(created, IsOk());
    project_id_ = created->project_id;
  }

  // A project `name` of two classes.
  absl::StatusOr<ProjectRecord> CreateProject(const std::string& name) {
    ProjectRecord project;
    project.name = name;
    project.classes = {"a", "b"};
    return ProjectStore(&pool()).CreateProject(project);
  }

  ModelVersionRecord Record(int64_t watermark) {
    ModelVersionRecord r;
    r.project_id = project_id_;
    r.method = "ds";
    r.parameters = std::string("\0\1\2checkpoint", 13);
    r.watermark = watermark;
    r.log_likelihood = -1234.5;
    r.iterations = 20;
    r.duration_ms = 12.25;
    r.num_labels = 1000;
    r.scratch_num_labels = 600;
    return r;
  }

  std::unique_ptr<ModelVersionStore> store_;
  int64_t project_id_ = 0;
};

TEST_F(ModelVersionStoreTest, SavesConsecutiveVersionsAndReadsThemBack) {
  for (int i = 1; i <= 3; ++i) {
    absl::StatusOr<ModelVersionRecord> saved = store_->SaveModelVersion(Record(i * 10));
    ASSERT_THAT(saved, IsOk());
    EXPECT_EQ(saved->version, i);
  }
  absl::StatusOr<ModelVersionRecord> latest =
      store_->LatestModelVersion(project_id_);
  ASSERT_THAT(latest, IsOk());
  EXPECT_EQ(latest->version, 3);
  EXPECT_EQ(latest->method, "ds");
  EXPECT_EQ(latest->parameters, std::string("\0\1\2checkpoint", 13));
  EXPECT_EQ(latest->watermark, 30);
  EXPECT_EQ(latest->log_likelihood, -1234.5);
  EXPECT_EQ(latest->iterations, 20);
  EXPECT_EQ(latest->duration_ms, 12.25);
  EXPECT_EQ(latest->num_labels, 1000);
  EXPECT_EQ(latest->scratch_num_labels, 600);

  EXPECT_THAT(store_->GetModelVersion(project_id_, 2),
              IsOkAndHolds(AllOf(Field(&ModelVersionRecord::watermark, 20),
                                 Field(&ModelVersionRecord::scratch_num_labels, 600))));
  EXPECT_THAT(
      store_->ListModelVersions(project_id_, 2),
      IsOkAndHolds(ElementsAre(
          AllOf(Field(&ModelVersionRecord::version, 3),
                Field(&ModelVersionRecord::parameters, IsEmpty()),
                Field(&ModelVersionRecord::scratch_num_labels, 600)),
          Field(&ModelVersionRecord::version, 2))));
}

TEST_F(ModelVersionStoreTest, StoresOutputsWithTheVersion) {
  ModelVersionOutputs outputs;
  outputs.posteriors = std::string("\0posteriors\xff", 12);
  outputs.annotator_profiles = "profiles";
  absl::StatusOr<ModelVersionRecord> saved = store_->SaveModelVersion(Record(5), outputs);
  ASSERT_THAT(saved, IsOk());
  absl::StatusOr<ModelVersionOutputs> read = store_->GetModelVersionOutputs(project_id_, saved->version);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(read->posteriors, outputs.posteriors);
  EXPECT_EQ(read->annotator_profiles, "profiles");
  // A version saved without outputs has none.
  saved = store_->SaveModelVersion(Record(6));
  ASSERT_THAT(saved, IsOk());
  EXPECT_THAT(store_->GetModelVersionOutputs(project_id_, saved->version),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ModelVersionStoreTest, LargeColumnsAreReadInChunksExactly) {
  // Chunks of 1,000 bytes; blobs of every byte value, of lengths around chunk multiples.
  ModelVersionStore chunked(&pool(), /*read_chunk_bytes=*/1000);
  for (size_t length : {size_t{0}, size_t{1}, size_t{999}, size_t{1000}, size_t{1001},
                        size_t{10007}}) {
    SCOPED_TRACE(length);
    ModelVersionRecord record = Record(1);
    record.parameters.clear();
    for (size_t i = 0; i < length; ++i) record.parameters.push_back(static_cast<char>(i * 7));
    ModelVersionOutputs outputs;
    outputs.posteriors = record.parameters + "p";
    outputs.annotator_profiles = std::string(length / 2, '\0');
    absl::StatusOr<ModelVersionRecord> saved = chunked.SaveModelVersion(record, outputs);
    ASSERT_THAT(saved, IsOk());
    absl::StatusOr<ModelVersionRecord> latest = chunked.LatestModelVersion(project_id_);
    ASSERT_THAT(latest, IsOk());
    EXPECT_EQ(latest->parameters, record.parameters);
    absl::StatusOr<ModelVersionRecord> one = chunked.GetModelVersion(project_id_, saved->version);
    ASSERT_THAT(one, IsOk());
    EXPECT_EQ(one->parameters, record.parameters);
    EXPECT_EQ(one->watermark, 1);
    absl::StatusOr<ModelVersionOutputs> read =
        chunked.GetModelVersionOutputs(project_id_, saved->version);
    ASSERT_THAT(read, IsOk());
    EXPECT_EQ(read->posteriors, outputs.posteriors);
    EXPECT_EQ(read->annotator_profiles, outputs.annotator_profiles);
    absl::StatusOr<ModelVersionRecord> metadata =
        chunked.GetModelVersionMetadata(project_id_, saved->version);
    ASSERT_THAT(metadata, IsOk());
    EXPECT_TRUE(metadata->parameters.empty());
  }
}

TEST_F(ModelVersionStoreTest, NotFoundCases) {
  EXPECT_THAT(store_->LatestModelVersion(project_id_),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->GetModelVersion(project_id_, 1),
              StatusIs(absl::StatusCode::kNotFound));
  ModelVersionRecord orphan = Record(1);
  orphan.project_id = project_id_ + 1000;
  EXPECT_THAT(store_->SaveModelVersion(orphan),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->ListModelVersions(project_id_, 10),
              IsOkAndHolds(IsEmpty()));
}

TEST_F(ModelVersionStoreTest, RejectsBadArguments) {
  ModelVersionRecord no_method = Record(1);
  no_method.method.clear();
  EXPECT_THAT(store_->SaveModelVersion(no_method),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->ListModelVersions(project_id_, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ModelVersionStoreTest, KeepsNonFiniteMetrics) {
  ModelVersionRecord r = Record(1);
  r.log_likelihood = std::nan("");
  ASSERT_THAT(store_->SaveModelVersion(r), IsOk());
  absl::StatusOr<ModelVersionRecord> latest =
      store_->LatestModelVersion(project_id_);
  ASSERT_THAT(latest, IsOk());
  EXPECT_TRUE(std::isnan(latest->log_likelihood));
}

TEST_F(ModelVersionStoreTest, ConcurrentSavesGetDistinctConsecutiveVersions) {
  constexpr int kThreads = 4;
  constexpr int kSavesPerThread = 5;
  std::unique_ptr<ConnectionPool> pool = NewPool(kThreads);
  ModelVersionStore store(pool.get());
  std::vector<std::vector<int32_t>> versions(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSavesPerThread; ++i) {
        absl::StatusOr<ModelVersionRecord> saved =
            store.SaveModelVersion(Record(i));
        ASSERT_THAT(saved, IsOk());
        versions[t].push_back(saved->version);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<int32_t> all;
  for (const auto& v : versions) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<int32_t> expected(kThreads * kSavesPerThread);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = i + 1;
  EXPECT_EQ(all, expected);
}

TEST_F(ModelVersionStoreTest, ListsEachProjectsNewestVersionAndNotifiesOnSave) {
  struct Receiver final : pqxx::notification_receiver {
    Receiver(pqxx::connection& c, int& count)
        : pqxx::notification_receiver(c, ModelVersionStore::kVersionsChannel), count(count) {}
    void operator()(const std::string&, int) override { ++count; }
    int& count;
  };
  pqxx::connection listener(url());
  int notified = 0;
  Receiver receiver(listener, notified);
  pqxx::nontransaction(listener).exec("SELECT 1");

  ASSERT_THAT(CreateProject("no-versions"), IsOk());
  ASSERT_THAT(store_->SaveModelVersion(Record(10)), IsOk());
  ASSERT_THAT(store_->SaveModelVersion(Record(20)), IsOk());
  absl::StatusOr<std::vector<std::pair<int64_t, int32_t>>> newest = store_->ListNewestVersions();
  ASSERT_THAT(newest, IsOk());
  EXPECT_THAT(*newest, ::testing::ElementsAre(std::make_pair(project_id_, 2)));
  while (listener.await_notification(0, 200'000) > 0) {
  }
  EXPECT_EQ(notified, 2);
}

// model_version_store.h: versions are numbered 1, 2, ... "per project", and
// every read names its project: a second project's first version is 1, and
// reading, listing or fetching outputs of one project never returns another
// project's version with the same number.
TEST_F(ModelVersionStoreTest, VersionsAndReadsAreScopedToTheirProject) {
  absl::StatusOr<ProjectRecord> created = CreateProject("other");
  ASSERT_THAT(created, IsOk());
  const int64_t other_id = created->project_id;

  ModelVersionOutputs mine_outputs;
  mine_outputs.posteriors = "posteriors of mine";
  mine_outputs.annotator_profiles = "profiles of mine";
  ModelVersionRecord mine = Record(10);
  mine.parameters = "parameters of mine";
  ASSERT_THAT(store_->SaveModelVersion(mine, mine_outputs), IsOk());
  ASSERT_THAT(store_->SaveModelVersion(Record(20)), IsOk());

  ModelVersionRecord theirs = Record(7);
  theirs.project_id = other_id;
  theirs.method = "lia";
  theirs.parameters = "parameters of theirs";
  ModelVersionOutputs their_outputs;
  their_outputs.posteriors = "posteriors of theirs";
  their_outputs.annotator_profiles = "profiles of theirs";
  const absl::Time before = absl::Now() - absl::Seconds(5);
  absl::StatusOr<ModelVersionRecord> saved = store_->SaveModelVersion(theirs, their_outputs);
  ASSERT_THAT(saved, IsOk());
  EXPECT_EQ(saved->version, 1);
  EXPECT_GT(saved->created_at, before);
  EXPECT_LT(saved->created_at, absl::Now() + absl::Seconds(5));

  absl::StatusOr<ModelVersionRecord> latest = store_->LatestModelVersion(other_id);
  ASSERT_THAT(latest, IsOk());
  EXPECT_EQ(latest->project_id, other_id);
  EXPECT_EQ(latest->version, 1);
  EXPECT_EQ(latest->method, "lia");
  EXPECT_EQ(latest->parameters, "parameters of theirs");
  EXPECT_EQ(latest->watermark, 7);
  EXPECT_EQ(latest->created_at, saved->created_at);

  absl::StatusOr<ModelVersionRecord> one = store_->GetModelVersion(other_id, 1);
  ASSERT_THAT(one, IsOk());
  EXPECT_EQ(one->parameters, "parameters of theirs");
  EXPECT_EQ(one->watermark, 7);
  absl::StatusOr<ModelVersionRecord> metadata = store_->GetModelVersionMetadata(other_id, 1);
  ASSERT_THAT(metadata, IsOk());
  EXPECT_EQ(metadata->method, "lia");
  EXPECT_EQ(metadata->watermark, 7);
  EXPECT_THAT(store_->GetModelVersion(other_id, 2), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->GetModelVersionMetadata(other_id, 2),
              StatusIs(absl::StatusCode::kNotFound));

  absl::StatusOr<ModelVersionOutputs> outputs = store_->GetModelVersionOutputs(other_id, 1);
  ASSERT_THAT(outputs, IsOk());
  EXPECT_EQ(outputs->posteriors, "posteriors of theirs");
  EXPECT_EQ(outputs->annotator_profiles, "profiles of theirs");
  outputs = store_->GetModelVersionOutputs(project_id_, 1);
  ASSERT_THAT(outputs, IsOk());
  EXPECT_EQ(outputs->posteriors, "posteriors of mine");
  EXPECT_EQ(outputs->annotator_profiles, "profiles of mine");
  EXPECT_EQ(store_->GetModelVersion(project_id_, 1)->parameters, "parameters of mine");

  EXPECT_THAT(store_->ListModelVersions(other_id, 10),
              IsOkAndHolds(ElementsAre(AllOf(Field(&ModelVersionRecord::project_id, other_id),
                                             Field(&ModelVersionRecord::version, 1)))));
  EXPECT_THAT(store_->ListModelVersions(project_id_, 10),
              IsOkAndHolds(ElementsAre(Field(&ModelVersionRecord::watermark, 20),
                                       Field(&ModelVersionRecord::watermark, 10))));
  EXPECT_THAT(store_->ListNewestVersions(),
              IsOkAndHolds(ElementsAre(std::make_pair(project_id_, 2),
                                       std::make_pair(other_id, 1))));
}

// SaveModelVersion: INVALID_ARGUMENT for a method PostgreSQL text cannot hold
// (a NUL byte), and nothing is stored.
TEST_F(ModelVersionStoreTest, RejectsAMethodWithANulByte) {
  ModelVersionRecord nul = Record(1);
  nul.method = std::string("d\0s", 3);
  EXPECT_THAT(store_->SaveModelVersion(nul), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->ListModelVersions(project_id_, 10), IsOkAndHolds(IsEmpty()));
}

// model_version_store.h: kVersionsChannel's payload is "the project's id"
// (what replicas reload), one notification per committed version.
TEST_F(ModelVersionStoreTest, NotifiesTheProjectIdOfEachSavedVersion) {
  struct Receiver final : pqxx::notification_receiver {
    Receiver(pqxx::connection& c, std::vector<std::string>& payloads)
        : pqxx::notification_receiver(c, ModelVersionStore::kVersionsChannel),
          payloads(payloads) {}
    void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
    std::vector<std::string>& payloads;
  };
  pqxx::connection listener(url());
  std::vector<std::string> payloads;
  Receiver receiver(listener, payloads);
  pqxx::nontransaction(listener).exec("SELECT 1");

  absl::StatusOr<ProjectRecord> created = CreateProject("other");
  ASSERT_THAT(created, IsOk());
  ModelVersionRecord record = Record(1);
  record.project_id = created->project_id;
  for (int i = 0; i < 3; ++i) ASSERT_THAT(store_->SaveModelVersion(record), IsOk());
  while (listener.await_notification(0, 200'000) > 0) {
  }
  const std::string id = std::to_string(created->project_id);
  EXPECT_THAT(payloads, ElementsAre(id, id, id));
}

// model_version_store.h: versions are numbered "1, 2, ... per project": a
// project's first version is 1 even when a project created after it already
// has versions, and its reads return its own parameters and outputs.
TEST_F(ModelVersionStoreTest, AnEarlierProjectNumbersAndReadsItsVersionsOnItsOwn) {
  absl::StatusOr<ProjectRecord> created = CreateProject("later");
  ASSERT_THAT(created, IsOk());
  ASSERT_GT(created->project_id, project_id_);

  ModelVersionRecord theirs = Record(5);
  theirs.project_id = created->project_id;
  theirs.parameters = "the later project's much longer parameters";
  ModelVersionOutputs their_outputs{"their posteriors, longer", "their profiles, longer"};
  ASSERT_THAT(store_->SaveModelVersion(theirs, their_outputs), IsOk());
  ASSERT_THAT(store_->SaveModelVersion(theirs, their_outputs), IsOk());

  ModelVersionRecord mine = Record(7);
  mine.parameters = "mine";
  absl::StatusOr<ModelVersionRecord> saved =
      store_->SaveModelVersion(mine, ModelVersionOutputs{"my post", "my prof"});
  ASSERT_THAT(saved, IsOk());
  EXPECT_EQ(saved->version, 1);
  absl::StatusOr<ModelVersionRecord> got = store_->GetModelVersion(project_id_, 1);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->parameters, "mine");
  absl::StatusOr<ModelVersionRecord> latest = store_->LatestModelVersion(project_id_);
  ASSERT_THAT(latest, IsOk());
  EXPECT_EQ(latest->version, 1);
  EXPECT_EQ(latest->parameters, "mine");
  absl::StatusOr<ModelVersionOutputs> outputs = store_->GetModelVersionOutputs(project_id_, 1);
  ASSERT_THAT(outputs, IsOk());
  EXPECT_EQ(outputs->posteriors, "my post");
  EXPECT_EQ(outputs->annotator_profiles, "my prof");
  EXPECT_THAT(store_->ListNewestVersions(),
              IsOkAndHolds(ElementsAre(std::make_pair(project_id_, 1),
                                       std::make_pair(created->project_id, 2))));
}

// model_version_store.h: GetModelVersionMetadata is "NOT_FOUND if it does not
// exist": version 0 (versions start at 1) is not the first version.
TEST_F(ModelVersionStoreTest, MetadataOfVersionZeroIsNotFound) {
  ASSERT_THAT(store_->SaveModelVersion(Record(1)), IsOk());
  ASSERT_THAT(store_->SaveModelVersion(Record(2)), IsOk());
  EXPECT_THAT(store_->GetModelVersionMetadata(project_id_, 0),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->GetModelVersion(project_id_, 0), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->GetModelVersionMetadata(project_id_, 2),
              IsOkAndHolds(Field(&ModelVersionRecord::watermark, 2)));
}

// A project refit every few seconds must not fill the disk: model_version_store.h keeps the
// checkpoint (parameters and stored outputs) of the newest kCheckpointsKept versions of each
// project and frees the older ones' when a newer version is saved; their metadata stays listed.
TEST_F(ModelVersionStoreTest, OnlyTheNewestVersionsKeepTheirCheckpoints) {
  constexpr int kKept = 3;  // model_version_store.h's promise, written out independently.
  absl::StatusOr<ProjectRecord> created = CreateProject("other");
  ASSERT_THAT(created, IsOk());
  ModelVersionRecord others = Record(1);
  others.project_id = created->project_id;
  ASSERT_THAT(store_->SaveModelVersion(others, ModelVersionOutputs{"p", "q"}), IsOk());

  constexpr int kSaved = kKept + 5;
  ModelVersionOutputs outputs;
  outputs.posteriors = std::string(1000, 'p');
  outputs.annotator_profiles = std::string(500, 'a');
  for (int i = 1; i <= kSaved; ++i) {
    ASSERT_THAT(store_->SaveModelVersion(Record(i), outputs), IsOk());
  }
  // Counted in the database: what is stored, whatever the store's reads say.
  auto count = [this](const std::string& sql, int64_t project_id) -> int64_t {
    absl::StatusOr<int64_t> n = pool().WithTransaction(
        "counting", [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
          return txn.exec_params1(sql, project_id)[0].as<int64_t>();
        });
    EXPECT_THAT(n, IsOk());
    return n.value_or(-1);
  };
  const std::string with_checkpoint =
      "SELECT count(*) FROM model_versions WHERE project_id = $1 AND octet_length(parameters) > 0";
  const std::string with_outputs =
      "SELECT count(*) FROM model_version_outputs WHERE project_id = $1";
  EXPECT_EQ(count(with_checkpoint, project_id_), kKept);
  EXPECT_EQ(count(with_outputs, project_id_), kKept);
  // Another project's saves never free this one's checkpoints, nor the reverse.
  EXPECT_EQ(count(with_checkpoint, created->project_id), 1);
  EXPECT_EQ(count(with_outputs, created->project_id), 1);

  // Every version is still listed with its metadata.
  absl::StatusOr<std::vector<ModelVersionRecord>> listed =
      store_->ListModelVersions(project_id_, 100);
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), static_cast<size_t>(kSaved));
  EXPECT_EQ(listed->back().version, 1);
  EXPECT_EQ(listed->back().watermark, 1);
  EXPECT_THAT(store_->GetModelVersionMetadata(project_id_, 1),
              IsOkAndHolds(Field(&ModelVersionRecord::watermark, 1)));
  // The kept ones read back whole; a freed one is NOT_FOUND, never an empty checkpoint.
  for (int v = kSaved - kKept + 1; v <= kSaved; ++v) {
    absl::StatusOr<ModelVersionRecord> kept = store_->GetModelVersion(project_id_, v);
    ASSERT_THAT(kept, IsOk());
    EXPECT_EQ(kept->parameters, std::string("\0\1\2checkpoint", 13));
    absl::StatusOr<ModelVersionOutputs> kept_outputs =
        store_->GetModelVersionOutputs(project_id_, v);
    ASSERT_THAT(kept_outputs, IsOk());
    EXPECT_EQ(kept_outputs->posteriors, outputs.posteriors);
  }
  for (int v = 1; v <= kSaved - kKept; ++v) {
    EXPECT_THAT(store_->GetModelVersion(project_id_, v),
                StatusIs(absl::StatusCode::kNotFound, ::testing::HasSubstr("freed")))
        << v;
    EXPECT_THAT(store_->GetModelVersionOutputs(project_id_, v),
                StatusIs(absl::StatusCode::kNotFound))
        << v;
  }
  absl::StatusOr<ModelVersionRecord> latest = store_->LatestModelVersion(project_id_);
  ASSERT_THAT(latest, IsOk());
  EXPECT_EQ(latest->version, kSaved);
  EXPECT_EQ(latest->parameters, std::string("\0\1\2checkpoint", 13));
}

// model_version_store.h: saving a version frees, "in its transaction", the checkpoints of the
// versions no longer among the newest kCheckpointsKept: the very save that makes a version the
// (kCheckpointsKept + 1)-th newest frees it, not a later one.
TEST_F(ModelVersionStoreTest, TheSaveThatPushesTheOldestOutOfTheNewestFreesItsCheckpoint) {
  constexpr int kKept = 3;  // model_version_store.h's promise, written out independently.
  for (int i = 1; i <= kKept; ++i) {
    ASSERT_THAT(store_->SaveModelVersion(Record(i), ModelVersionOutputs{"p", "a"}), IsOk());
  }
  EXPECT_THAT(store_->GetModelVersion(project_id_, 1),
              IsOkAndHolds(Field(&ModelVersionRecord::watermark, 1)));
  EXPECT_THAT(store_->GetModelVersionOutputs(project_id_, 1), IsOk());

  ASSERT_THAT(store_->SaveModelVersion(Record(kKept + 1), ModelVersionOutputs{"p", "a"}), IsOk());
  EXPECT_THAT(store_->GetModelVersion(project_id_, 1),
              StatusIs(absl::StatusCode::kNotFound, ::testing::HasSubstr("freed")));
  EXPECT_THAT(store_->GetModelVersionOutputs(project_id_, 1),
              StatusIs(absl::StatusCode::kNotFound));
  for (int v = 2; v <= kKept + 1; ++v) {
    EXPECT_THAT(store_->GetModelVersion(project_id_, v),
                IsOkAndHolds(Field(&ModelVersionRecord::watermark, v)))
        << v;
  }
}

// A database from before checkpoints were freed holds many: each save frees at most
// kCheckpointsFreedPerSave of them, the oldest first, so no save's transaction grows with the
// backlog; later saves free the rest.
TEST_F(ModelVersionStoreTest, ABacklogOfCheckpointsIsFreedAFewPerSaveOldestFirst) {
  constexpr int kBacklog = 20;
  ASSERT_THAT(pool().WithTransaction(
                  "versions stored before checkpoints were freed",
                  [&](pqxx::work& txn) -> absl::StatusOr<bool> {
                    txn.exec_params(
                        "INSERT INTO model_versions (project_id, version, method, parameters) "
                        "SELECT $1, v, 'ds', '\\x0102'::bytea FROM generate_series(1, $2) v",
                        project_id_, kBacklog);
                    txn.exec_params(
                        "INSERT INTO model_version_outputs "
                        "SELECT $1, v, 'p'::bytea, 'a'::bytea FROM generate_series(1, $2) v",
                        project_id_, kBacklog);
                    return true;
                  }),
              IsOk());
  auto kept_versions = [this]() {
    absl::StatusOr<std::vector<int32_t>> kept = pool().WithTransaction(
        "kept", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
          std::vector<int32_t> versions;
          for (const pqxx::row& row : txn.exec_params(
                   "SELECT v.version FROM model_versions v JOIN model_version_outputs o "
                   "USING (project_id, version) WHERE v.project_id = $1 "
                   "AND octet_length(v.parameters) > 0 ORDER BY v.version",
                   project_id_)) {
            versions.push_back(row[0].as<int32_t>());
          }
          return versions;
        });
    EXPECT_THAT(kept, IsOk());
    return kept.value_or(std::vector<int32_t>{});
  };
  ASSERT_THAT(store_->SaveModelVersion(Record(1), ModelVersionOutputs{"p", "a"}), IsOk());
  std::vector<int32_t> expected;
  for (int v = ModelVersionStore::kCheckpointsFreedPerSave + 1; v <= kBacklog + 1; ++v) {
    expected.push_back(v);
  }
  EXPECT_EQ(kept_versions(), expected);
  for (int save = 0; save < 3; ++save) {
    ASSERT_THAT(store_->SaveModelVersion(Record(2 + save), ModelVersionOutputs{"p", "a"}),
                IsOk());
  }
  // 24 versions: the newest 3 keep theirs.
  EXPECT_EQ(kept_versions(), (std::vector<int32_t>{22, 23, 24}));
}

// The backlog is freed per project: another project's kept checkpoints (its versions 1 to 3,
// numbered like this project's oldest) neither count against this save's
// kCheckpointsFreedPerSave nor are freed by it.
TEST_F(ModelVersionStoreTest, ABacklogIsFreedAtFullRateBesideAnotherProjectsKeptVersions) {
  absl::StatusOr<ProjectRecord> created = CreateProject("other");
  ASSERT_THAT(created, IsOk());
  ModelVersionRecord others = Record(1);
  others.project_id = created->project_id;
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(store_->SaveModelVersion(others, ModelVersionOutputs{"p", "a"}), IsOk());
  }
  constexpr int kBacklog = 20;
  ASSERT_THAT(pool().WithTransaction(
                  "versions stored before checkpoints were freed",
                  [&](pqxx::work& txn) -> absl::StatusOr<bool> {
                    txn.exec_params(
                        "INSERT INTO model_versions (project_id, version, method, parameters) "
                        "SELECT $1, v, 'ds', '\\x0102'::bytea FROM generate_series(1, $2) v",
                        project_id_, kBacklog);
                    return true;
                  }),
              IsOk());
  ASSERT_THAT(store_->SaveModelVersion(Record(1)), IsOk());
  auto kept = [this](int64_t project_id) {
    absl::StatusOr<std::vector<int32_t>> versions = pool().WithTransaction(
        "kept", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
          std::vector<int32_t> out;
          for (const pqxx::row& row :
               txn.exec_params("SELECT version FROM model_versions WHERE project_id = $1 "
                               "AND octet_length(parameters) > 0 ORDER BY version",
                               project_id)) {
            out.push_back(row[0].as<int32_t>());
          }
          return out;
        });
    EXPECT_THAT(versions, IsOk());
    return versions.value_or(std::vector<int32_t>{});
  };
  std::vector<int32_t> expected;  // Versions 1 to kCheckpointsFreedPerSave were freed.
  for (int v = ModelVersionStore::kCheckpointsFreedPerSave + 1; v <= kBacklog + 1; ++v) {
    expected.push_back(v);
  }
  EXPECT_EQ(kept(project_id_), expected);
  EXPECT_EQ(kept(created->project_id), (std::vector<int32_t>{1, 2, 3}));
}

// A save whose blobs are large closes its connection instead of returning it to the pool
// (model_version_store.cc; ConnectionPool::After::kClose: libpq keeps its send buffer at the
// largest message sent), whether the parameters or the outputs are large; a small save's
// connection goes back to the pool.
TEST_F(ModelVersionStoreTest, ALargeSaveDoesNotReturnItsConnectionToThePool) {
  std::unique_ptr<ConnectionPool> pool = NewPool(1);
  ModelVersionStore store(pool.get());
  const std::string large(size_t{16} << 20, 'x');
  ASSERT_THAT(store.SaveModelVersion(Record(1)), IsOk());
  EXPECT_EQ(pool->open_connections(), 1);

  ModelVersionRecord large_parameters = Record(2);
  large_parameters.parameters = large;
  ASSERT_THAT(store.SaveModelVersion(large_parameters), IsOk());
  EXPECT_EQ(pool->open_connections(), 0);

  ASSERT_THAT(store.SaveModelVersion(Record(3)), IsOk());
  EXPECT_EQ(pool->open_connections(), 1);
  ASSERT_THAT(store.SaveModelVersion(Record(4), ModelVersionOutputs{large, "profiles"}), IsOk());
  EXPECT_EQ(pool->open_connections(), 0);

  absl::StatusOr<ModelVersionOutputs> outputs = store.GetModelVersionOutputs(project_id_, 4);
  ASSERT_THAT(outputs, IsOk());
  EXPECT_EQ(outputs->posteriors.size(), large.size());
}

// model_version_store.cc: a save holds its project's row FOR KEY SHARE only, so that "ingest
// (which holds NO KEY UPDATE on the row) is not blocked by a large upload" — nor the upload by
// ingest. A save while an ingest transaction holds the row (as entity_index.cc's lock does)
// completes without waiting for it.
TEST_F(ModelVersionStoreTest, ASaveDoesNotWaitForAnIngestHoldingTheProjectRow) {
  pqxx::connection ingest(url());
  pqxx::work ingest_txn(ingest);
  ingest_txn.exec_params("SELECT 1 FROM projects WHERE project_id = $1 FOR NO KEY UPDATE",
                         project_id_);
  pqxx::connection observer(url());
  absl::Mutex mu;
  bool done = false;
  absl::StatusOr<ModelVersionRecord> saved = absl::UnknownError("not run");
  std::thread saver([&] {
    absl::StatusOr<ModelVersionRecord> s = store_->SaveModelVersion(Record(7));
    absl::MutexLock lock(&mu);
    saved = std::move(s);
    done = true;
  });
  bool waited = false;
  while (true) {
    {
      absl::MutexLock lock(&mu);
      if (done) break;
    }
    if (pqxx::nontransaction(observer)
            .exec1("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted)")[0]
            .as<bool>()) {
      waited = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  ingest_txn.commit();  // Lets a waiting save go on.
  saver.join();
  EXPECT_FALSE(waited) << "the save waited for the ingest transaction";
  absl::MutexLock lock(&mu);
  ASSERT_THAT(saved, IsOk());
  EXPECT_EQ(saved->version, 1);
  EXPECT_EQ(saved->watermark, 7);
}

// Errors name what failed: NOT_FOUND for a save to an unknown project names that project.
TEST_F(ModelVersionStoreTest, ASaveToAnUnknownProjectNamesIt) {
  ModelVersionRecord orphan = Record(1);
  orphan.project_id = project_id_ + 1000;
  EXPECT_THAT(store_->SaveModelVersion(orphan),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::HasSubstr(absl::StrCat("project ", project_id_ + 1000))));
}

// model_version_store.h: "Every SaveModelVersion sends NOTIFY" on kVersionsChannel, delivered
// "once the version is committed": a save with outputs notifies as one without does, and a
// save that stores nothing (ABORTED: it names a job no worker owns) notifies no one.
TEST_F(ModelVersionStoreTest, ASaveWithOutputsNotifiesAndAnAbortedSaveDoesNot) {
  struct Receiver final : pqxx::notification_receiver {
    Receiver(pqxx::connection& c, std::vector<std::string>& payloads)
        : pqxx::notification_receiver(c, ModelVersionStore::kVersionsChannel), payloads(payloads) {}
    void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
    std::vector<std::string>& payloads;
  };
  pqxx::connection listener(url());
  std::vector<std::string> payloads;
  Receiver receiver(listener, payloads);
  pqxx::nontransaction(listener).exec("SELECT 1");

  ModelVersionRecord orphan_job = Record(1);
  orphan_job.completes_job = ModelVersionRecord::JobOwnership{999'999, "nobody"};
  ASSERT_THAT(store_->SaveModelVersion(orphan_job), StatusIs(absl::StatusCode::kAborted));
  absl::StatusOr<ModelVersionRecord> saved =
      store_->SaveModelVersion(Record(2), ModelVersionOutputs{"posteriors", "profiles"});
  ASSERT_THAT(saved, IsOk());
  EXPECT_EQ(saved->version, 1);
  while (listener.await_notification(0, 200'000) > 0) {
  }
  EXPECT_THAT(payloads, ElementsAre(std::to_string(project_id_)));
}

}  // namespace
}  // namespace storage
}  // namespace verity
