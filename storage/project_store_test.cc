#include "storage/project_store.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
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
#include "storage/testing/postgres_fixture.h"

namespace verity {
namespace storage {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

ProjectRecord Project(const std::string& name) {
  ProjectRecord p;
  p.name = name;
  p.classes = {"cat", "dog", "bird"};
  return p;
}

class ProjectStoreTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<ProjectStore>(&pool());
  }
  std::unique_ptr<ProjectStore> store_;
};

TEST_F(ProjectStoreTest, CreateThenGetRoundTripsEveryField) {
  ProjectRecord p = Project("animals");
  p.classes = {"plain", "with,comma", "with \"quotes\"", "back\\slash", "ünï"};
  p.item_feature_dim = 16;
  p.annotator_feature_dim = 3;
  p.settings = std::string("\x00\x01binary\xff", 9);
  const absl::Time before = absl::Now() - absl::Seconds(5);

  absl::StatusOr<ProjectRecord> created = store_->CreateProject(p);
  ASSERT_THAT(created, IsOk());
  EXPECT_GT(created->project_id, 0);
  EXPECT_GT(created->created_at, before);

  for (const absl::StatusOr<ProjectRecord>& got :
       {store_->GetProject(created->project_id),
        store_->GetProjectByName("animals")}) {
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(got->project_id, created->project_id);
    EXPECT_EQ(got->name, "animals");
    EXPECT_EQ(got->classes, p.classes);
    EXPECT_EQ(got->item_feature_dim, 16);
    EXPECT_EQ(got->annotator_feature_dim, 3);
    EXPECT_EQ(got->settings, p.settings);
    EXPECT_EQ(got->created_at, created->created_at);
  }
}

// Class names may hold any byte but NUL (projects.proto: "each 1-128 bytes"). PostgreSQL
// writes a text[] element without quotes unless it is empty, NULL, or holds a quote, a
// backslash, a brace, a comma or white space, so names such as 'x (a single quote first) or
// {} reach the parser in forms a literal written by this code never has. Each is read back
// as written.
TEST_F(ProjectStoreTest, ClassNamesOfAnyCharactersAreReadBackExactly) {
  ProjectRecord p = Project("odd-classes");
  p.classes = {"'x", "'j'", "it's", "y'", "null", "NULL", " lead", "trail ", "a b", "tab\tx",
               "{", "}", "{}", ",", "\\", "\"", "'", "\"'\"", "\t", "ünï"};
  absl::StatusOr<ProjectRecord> created = store_->CreateProject(p);
  ASSERT_THAT(created, IsOk());
  absl::StatusOr<ProjectRecord> got = store_->GetProject(created->project_id);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->classes, p.classes);
  absl::StatusOr<std::vector<ProjectRecord>> listed = store_->ListProjects();
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().classes, p.classes);
}

TEST_F(ProjectStoreTest, DuplicateNameIsAlreadyExists) {
  ASSERT_THAT(store_->CreateProject(Project("dup")), IsOk());
  EXPECT_THAT(store_->CreateProject(Project("dup")),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("23505")));
}

TEST_F(ProjectStoreTest, MissingProjectIsNotFound) {
  EXPECT_THAT(store_->GetProject(12345),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("12345")));
  EXPECT_THAT(store_->GetProjectByName("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  EXPECT_THAT(store_->UpdateSettings(12345, "x"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ProjectStoreTest, RejectsInvalidProjects) {
  ProjectRecord one_class = Project("one");
  one_class.classes = {"only"};
  EXPECT_THAT(store_->CreateProject(one_class),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->CreateProject(Project("")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ProjectRecord negative = Project("negative");
  negative.item_feature_dim = -1;
  EXPECT_THAT(store_->CreateProject(negative),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->ListProjects(), ::verity::testing::IsOkAndHolds(
                                          ::testing::IsEmpty()));
}

TEST_F(ProjectStoreTest, ListsProjectsInCreationOrder) {
  ASSERT_THAT(store_->CreateProject(Project("b")), IsOk());
  ASSERT_THAT(store_->CreateProject(Project("a")), IsOk());
  absl::StatusOr<std::vector<ProjectRecord>> all = store_->ListProjects();
  ASSERT_THAT(all, IsOk());
  EXPECT_THAT(*all, ElementsAre(Field(&ProjectRecord::name, "b"),
                                Field(&ProjectRecord::name, "a")));
}

TEST_F(ProjectStoreTest, UpdateSettingsReplacesTheBlob) {
  absl::StatusOr<ProjectRecord> p = store_->CreateProject(Project("s"));
  ASSERT_THAT(p, IsOk());
  ASSERT_THAT(store_->UpdateSettings(p->project_id, std::string("v2\0", 3)),
              IsOk());
  EXPECT_EQ(store_->GetProject(p->project_id)->settings,
            std::string("v2\0", 3));
}

// project_store.h: UpdateSettings replaces the settings blob of the project
// it names; another project's settings stay as they were.
TEST_F(ProjectStoreTest, UpdateSettingsChangesOnlyThatProject) {
  ProjectRecord a = Project("a");
  a.settings = "settings of a";
  ProjectRecord b = Project("b");
  b.settings = "settings of b";
  absl::StatusOr<ProjectRecord> created_a = store_->CreateProject(a);
  absl::StatusOr<ProjectRecord> created_b = store_->CreateProject(b);
  ASSERT_THAT(created_a, IsOk());
  ASSERT_THAT(created_b, IsOk());
  const int64_t b_seq = store_->GetProject(created_b->project_id)->change_seq;

  ASSERT_THAT(store_->UpdateSettings(created_a->project_id, "new settings of a"), IsOk());
  EXPECT_EQ(store_->GetProject(created_a->project_id)->settings, "new settings of a");
  absl::StatusOr<ProjectRecord> got_b = store_->GetProject(created_b->project_id);
  ASSERT_THAT(got_b, IsOk());
  EXPECT_EQ(got_b->settings, "settings of b");
  EXPECT_EQ(got_b->change_seq, b_seq);
}

// project_store.h / project_changes.h: UpdateSettings marks the project
// changed: its change_seq grows, `change_seq` receives the new value, and
// ListChangeSeqs / GetProject report it.
TEST_F(ProjectStoreTest, UpdateSettingsBumpsTheChangeSeq) {
  absl::StatusOr<ProjectRecord> p = store_->CreateProject(Project("s"));
  ASSERT_THAT(p, IsOk());
  const int64_t before = store_->GetProject(p->project_id)->change_seq;
  int64_t seq = -1;
  ASSERT_THAT(store_->UpdateSettings(p->project_id, "v2", &seq), IsOk());
  EXPECT_GT(seq, before);
  EXPECT_EQ(store_->GetProject(p->project_id)->change_seq, seq);
  int64_t seq2 = -1;
  ASSERT_THAT(store_->UpdateSettings(p->project_id, "v3", &seq2), IsOk());
  EXPECT_GT(seq2, seq);
  EXPECT_THAT(store_->ListChangeSeqs(),
              ::verity::testing::IsOkAndHolds(
                  ElementsAre(std::make_pair(p->project_id, seq2))));
}

// project_store.h: UpdateSettingsFrom reads and writes "under the project row's lock", so that
// "concurrent updates, through any server replica, each build on the one before it". B starts
// while A's `next` is still building on the stored blob: B waits for A and builds on A's result
// (with no lock, B's write would be lost under A's, which was built on the older blob).
TEST_F(ProjectStoreTest, ConcurrentUpdateSettingsFromEachBuildOnTheOneBefore) {
  ProjectRecord project = Project("s");
  project.settings = "s";
  absl::StatusOr<ProjectRecord> created = store_->CreateProject(project);
  ASSERT_THAT(created, IsOk());
  const int64_t id = created->project_id;
  std::unique_ptr<ConnectionPool> pool = NewPool(2);
  ProjectStore store(pool.get());
  pqxx::connection observer(url());
  absl::Mutex mu;
  bool b_done = false;
  std::thread b;
  absl::Status a = store.UpdateSettingsFrom(id, [&](absl::string_view stored) {
    if (!b.joinable()) {  // The transaction may run `next` again on a retry.
      b = std::thread([&] {
        EXPECT_THAT(store.UpdateSettingsFrom(id,
                                             [](absl::string_view stored) {
                                               return absl::StatusOr<std::string>(
                                                   absl::StrCat(stored, "b"));
                                             }),
                    IsOk());
        absl::MutexLock lock(&mu);
        b_done = true;
      });
    }
    // A goes on once B waits for a lock (or, were there none, has written already).
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      {
        absl::MutexLock lock(&mu);
        if (b_done) break;
      }
      if (pqxx::nontransaction(observer)
              .exec1("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted)")[0]
              .as<bool>()) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::StatusOr<std::string>(absl::StrCat(stored, "a"));
  });
  b.join();
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(store_->GetProject(id)->settings, "sab");
}

// project_store.h: "An error from `next` writes nothing and is returned": the stored blob and
// the change_seq stay as they were.
TEST_F(ProjectStoreTest, AnErrorFromNextIsReturnedAndWritesNothing) {
  ProjectRecord project = Project("s");
  project.settings = "kept";
  absl::StatusOr<ProjectRecord> created = store_->CreateProject(project);
  ASSERT_THAT(created, IsOk());
  const int64_t before = store_->GetProject(created->project_id)->change_seq;
  int64_t seq = -7;
  EXPECT_THAT(store_->UpdateSettingsFrom(
                  created->project_id,
                  [](absl::string_view) -> absl::StatusOr<std::string> {
                    return absl::FailedPreconditionError("refused");
                  },
                  &seq),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("refused")));
  EXPECT_EQ(seq, -7);
  absl::StatusOr<ProjectRecord> after = store_->GetProject(created->project_id);
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(after->settings, "kept");
  EXPECT_EQ(after->change_seq, before);
}

// project_store.h: INVALID_ARGUMENT for a name or class that PostgreSQL text
// cannot hold (a NUL byte), and no project is created.
TEST_F(ProjectStoreTest, RejectsNulBytesInNamesAndClasses) {
  EXPECT_THAT(store_->CreateProject(Project(std::string("n\0ul", 4))),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ProjectRecord nul_class = Project("nul-class");
  nul_class.classes = {"cat", std::string("d\0g", 3)};
  EXPECT_THAT(store_->CreateProject(nul_class),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->ListProjects(), ::verity::testing::IsOkAndHolds(::testing::IsEmpty()));
  // No project can have such a name: looking one up is NOT_FOUND.
  ASSERT_THAT(store_->CreateProject(Project("n")), IsOk());
  EXPECT_THAT(store_->GetProjectByName(std::string("n\0ul", 4)),
              StatusIs(absl::StatusCode::kNotFound));
}

// project_store.h: ListChangeSeqs gives every project's change_seq "by
// project id", each with its own counter.
TEST_F(ProjectStoreTest, ListChangeSeqsListsEveryProjectByIdWithItsOwnSeq) {
  absl::StatusOr<ProjectRecord> a = store_->CreateProject(Project("a"));
  absl::StatusOr<ProjectRecord> b = store_->CreateProject(Project("b"));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  int64_t b_seq = -1;
  ASSERT_THAT(store_->UpdateSettings(b->project_id, "b2", &b_seq), IsOk());
  const int64_t a_seq = store_->GetProject(a->project_id)->change_seq;
  EXPECT_THAT(store_->ListChangeSeqs(),
              ::verity::testing::IsOkAndHolds(ElementsAre(
                  std::make_pair(a->project_id, a_seq), std::make_pair(b->project_id, b_seq))));
}

// project_store.h: ListChangeSeqs is "by project id", not by counter: the
// first project keeps its place after it has changed more than the second.
TEST_F(ProjectStoreTest, ListChangeSeqsStaysByIdWhenAnEarlierProjectChangedMore) {
  absl::StatusOr<ProjectRecord> a = store_->CreateProject(Project("a"));
  absl::StatusOr<ProjectRecord> b = store_->CreateProject(Project("b"));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  int64_t a_seq = -1;
  ASSERT_THAT(store_->UpdateSettings(a->project_id, "a2"), IsOk());
  ASSERT_THAT(store_->UpdateSettings(a->project_id, "a3", &a_seq), IsOk());
  const int64_t b_seq = store_->GetProject(b->project_id)->change_seq;
  ASSERT_GT(a_seq, b_seq);
  EXPECT_THAT(store_->ListChangeSeqs(),
              ::verity::testing::IsOkAndHolds(ElementsAre(
                  std::make_pair(a->project_id, a_seq), std::make_pair(b->project_id, b_seq))));
}

// project_store.h: GetProjectByName returns the project of exactly that
// name, among others whose names sort before and after it.
TEST_F(ProjectStoreTest, GetProjectByNameReturnsExactlyTheNamedProject) {
  absl::StatusOr<ProjectRecord> b = store_->CreateProject(Project("b"));
  absl::StatusOr<ProjectRecord> a = store_->CreateProject(Project("a"));
  absl::StatusOr<ProjectRecord> c = store_->CreateProject(Project("c"));
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(c, IsOk());
  for (const ProjectRecord& want : {*a, *b, *c}) {
    absl::StatusOr<ProjectRecord> got = store_->GetProjectByName(want.name);
    ASSERT_THAT(got, IsOk()) << want.name;
    EXPECT_EQ(got->project_id, want.project_id) << want.name;
    EXPECT_EQ(got->name, want.name);
  }
  EXPECT_THAT(store_->GetProjectByName("bb"), StatusIs(absl::StatusCode::kNotFound));
}

// project_store.h: GetProject returns the project with exactly that id, among others with
// larger and smaller ids, whichever order their rows were last written in.
TEST_F(ProjectStoreTest, GetProjectReturnsExactlyTheProjectWithThatId) {
  absl::StatusOr<ProjectRecord> a = store_->CreateProject(Project("a"));
  absl::StatusOr<ProjectRecord> b = store_->CreateProject(Project("b"));
  absl::StatusOr<ProjectRecord> c = store_->CreateProject(Project("c"));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(c, IsOk());
  // Rewriting a's and b's rows places them after c's in the table.
  ASSERT_THAT(store_->UpdateSettings(a->project_id, "a2"), IsOk());
  ASSERT_THAT(store_->UpdateSettings(b->project_id, "b2"), IsOk());
  for (const ProjectRecord& want : {*a, *b, *c}) {
    absl::StatusOr<ProjectRecord> got = store_->GetProject(want.project_id);
    ASSERT_THAT(got, IsOk()) << want.name;
    EXPECT_EQ(got->project_id, want.project_id);
    EXPECT_EQ(got->name, want.name);
  }
  EXPECT_THAT(store_->GetProject(c->project_id + 1), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->GetProject(a->project_id - 1), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace storage
}  // namespace verity
