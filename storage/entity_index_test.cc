#include "storage/entity_index.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/item_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity {
namespace storage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

class EntityIndexTest : public PostgresTest {
 protected:
  int64_t CreateProject(const std::string& name) {
    ProjectStore projects(&pool());
    ProjectRecord p;
    p.name = name;
    p.classes = {"a", "b"};
    absl::StatusOr<ProjectRecord> created = projects.CreateProject(p);
    EXPECT_THAT(created, IsOk());
    return created.ok() ? created->project_id : -1;
  }

  absl::StatusOr<std::vector<LockedProject>> Lock(std::vector<int64_t> ids) {
    return pool().WithTransaction(
        "locking projects", [&](pqxx::work& txn) { return LockProjects(txn, ids); });
  }
};

// entity_index.h: LockProjects returns the projects "sorted by id" with the
// index counters as read under the lock; "Duplicates are ignored".
TEST_F(EntityIndexTest, LockProjectsIgnoresDuplicatesAndReportsEachCounter) {
  const int64_t a = CreateProject("a");
  const int64_t b = CreateProject("b");
  ItemStore items(&pool());
  ASSERT_THAT(items.UpsertItems(a, {ItemWrite{"x"}, ItemWrite{"y"}, ItemWrite{"z"}}), IsOk());
  ASSERT_THAT(items.UpsertAnnotators(a, {AnnotatorWrite{"ann"}}), IsOk());

  absl::StatusOr<std::vector<LockedProject>> locked = Lock({b, a, b, a});
  ASSERT_THAT(locked, IsOk());
  ASSERT_EQ(locked->size(), 2u);
  EXPECT_EQ((*locked)[0].project_id, a);
  EXPECT_EQ((*locked)[0].num_classes, 2);
  EXPECT_EQ((*locked)[0].next_item_index, 3);
  EXPECT_EQ((*locked)[0].next_annotator_index, 1);
  EXPECT_EQ((*locked)[1].project_id, b);
  EXPECT_EQ((*locked)[1].next_item_index, 0);
  EXPECT_EQ((*locked)[1].next_annotator_index, 0);
}

// entity_index.h: "Returns NOT_FOUND naming the first missing project", also
// when a project after it exists.
TEST_F(EntityIndexTest, LockProjectsNamesTheFirstMissingProject) {
  const int64_t a = CreateProject("a");
  const int64_t missing = a + 100;
  EXPECT_THAT(Lock({a, missing}),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(absl::StrCat("project ", missing, " not found"))));
  // A missing id below an existing one is the first missing.
  EXPECT_THAT(Lock({a, 0}), StatusIs(absl::StatusCode::kNotFound, HasSubstr("project 0 not found")));
}

// entity_index.h: RESOURCE_EXHAUSTED only "past 2^31 - 1 entities": the
// entity that takes the last index (2^31 - 2) and leaves the counter at
// 2^31 - 1 is still created; the next one is refused.
TEST_F(EntityIndexTest, TheLastIndexBelowTwoToThe31IsStillAllocated) {
  const int64_t a = CreateProject("a");
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  ASSERT_THAT(pool().RunInTransaction("moving the counter",
                                      [&](pqxx::work& txn) {
                                        txn.exec_params0(
                                            "UPDATE projects SET next_item_index = $2 "
                                            "WHERE project_id = $1",
                                            a, kMax - 1);
                                        return absl::OkStatus();
                                      }),
              IsOk());
  const std::vector<absl::string_view> last = {"last"};
  EXPECT_THAT(pool().WithTransaction(
                  "creating the last item",
                  [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
                    VERITY_ASSIGN_OR_RETURN(std::vector<LockedProject> locked,
                                            LockProjects(txn, {a}));
                    (void)locked;
                    return ResolveOrCreateIndices(txn, a, EntityKind::kItem, last);
                  }),
              IsOkAndHolds(ElementsAre(kMax - 1)));
  const std::vector<absl::string_view> one_more = {"one more"};
  EXPECT_THAT(pool().WithTransaction(
                  "creating one item too many",
                  [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
                    VERITY_ASSIGN_OR_RETURN(std::vector<LockedProject> locked,
                                            LockProjects(txn, {a}));
                    (void)locked;
                    return ResolveOrCreateIndices(txn, a, EntityKind::kItem, one_more);
                  }),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

// entity_index.h: LockProjects "locks the rows of `project_ids` ... until the end of the
// transaction", which serialises the project's writers: meanwhile another transaction cannot
// take the row's lock at once, while another project's row stays free; after the commit it can.
TEST_F(EntityIndexTest, LockProjectsHoldsTheRowLockUntilTheTransactionEnds) {
  const int64_t a = CreateProject("a");
  const int64_t b = CreateProject("b");
  pqxx::connection holder_connection(url());
  pqxx::connection other(url());
  // Whether another transaction gets the project row's writer lock without waiting.
  auto locks_at_once = [&](int64_t project_id) {
    pqxx::work txn(other);
    try {
      txn.exec_params("SELECT 1 FROM projects WHERE project_id = $1 FOR NO KEY UPDATE NOWAIT",
                      project_id);
      return true;
    } catch (const pqxx::sql_error&) {
      return false;
    }
  };
  pqxx::work holder(holder_connection);
  ASSERT_THAT(LockProjects(holder, {a}), IsOk());
  EXPECT_FALSE(locks_at_once(a));
  EXPECT_TRUE(locks_at_once(b));
  holder.commit();
  EXPECT_TRUE(locks_at_once(a));
}

// entity_index.h: "All writers of items, annotators and annotations of a project hold this
// lock, which serialises them per project": while one transaction holds LockProjects on a
// project, a second transaction's LockProjects of it waits (it gives up here after a short
// lock_timeout) instead of reading the same index counters; another project's row is free.
TEST_F(EntityIndexTest, TwoLockProjectsOfOneProjectSerialise) {
  const int64_t a = CreateProject("a");
  const int64_t b = CreateProject("b");
  pqxx::connection holder_connection(url());
  pqxx::connection other(url());
  // Whether LockProjects in another transaction gets `project_id` within 200 ms.
  auto other_locks = [&](int64_t project_id) {
    pqxx::work txn(other);
    txn.exec0("SET LOCAL lock_timeout = '200ms'");
    try {
      return LockProjects(txn, {project_id}).ok();
    } catch (const pqxx::sql_error&) {
      return false;
    }
  };
  pqxx::work holder(holder_connection);
  ASSERT_THAT(LockProjects(holder, {a}), IsOk());
  EXPECT_FALSE(other_locks(a));
  EXPECT_TRUE(other_locks(b));
  holder.commit();
  EXPECT_TRUE(other_locks(a));
}

// entity_index.h: new indices come from "the project row's next_item_index /
// next_annotator_index counters": a project's first items and annotators are 0, 1, ... even
// while another project (here the one created first) already holds some of each kind, and
// that project's counters stay where they were.
TEST_F(EntityIndexTest, NewIndicesComeFromTheirOwnProjectsCounters) {
  const int64_t a = CreateProject("a");
  const int64_t b = CreateProject("b");
  ItemStore items(&pool());
  ASSERT_THAT(items.UpsertItems(a, {ItemWrite{"x"}, ItemWrite{"y"}, ItemWrite{"z"}}), IsOk());
  ASSERT_THAT(items.UpsertAnnotators(a, {AnnotatorWrite{"ann"}}), IsOk());

  const std::vector<absl::string_view> ids = {"p", "q", "p"};
  auto resolve = [&](EntityKind kind) {
    return pool().WithTransaction(
        "resolving ids", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
          VERITY_ASSIGN_OR_RETURN(std::vector<LockedProject> locked, LockProjects(txn, {b}));
          (void)locked;
          return ResolveOrCreateIndices(txn, b, kind, ids);
        });
  };
  EXPECT_THAT(resolve(EntityKind::kItem), IsOkAndHolds(ElementsAre(0, 1, 0)));
  EXPECT_THAT(resolve(EntityKind::kAnnotator), IsOkAndHolds(ElementsAre(0, 1, 0)));

  absl::StatusOr<std::vector<LockedProject>> locked = Lock({a, b});
  ASSERT_THAT(locked, IsOk());
  ASSERT_EQ(locked->size(), 2u);
  EXPECT_EQ((*locked)[0].next_item_index, 3);
  EXPECT_EQ((*locked)[0].next_annotator_index, 1);
  EXPECT_EQ((*locked)[1].next_item_index, 2);
  EXPECT_EQ((*locked)[1].next_annotator_index, 2);
}

}  // namespace
}  // namespace storage
}  // namespace verity
