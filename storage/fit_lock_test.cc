#include "storage/fit_lock.h"

#include <cstdint>
#include <memory>
#include <string>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/testing/postgres_fixture.h"

namespace verity::storage {
namespace {

using ::verity::storage::testing::PostgresTest;

class FitLockTest : public PostgresTest {};

TEST_F(FitLockTest, OneHolderPerProjectAcrossPoolsUntilReleased) {
  // Two pools stand for two server replicas.
  std::unique_ptr<ConnectionPool> other_pool = NewPool(2);
  FitLocks mine(&pool());
  FitLocks theirs(other_pool.get());

  absl::StatusOr<std::unique_ptr<FitLock>> held = mine.TryAcquire(5);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(*held, nullptr);

  absl::StatusOr<std::unique_ptr<FitLock>> refused = theirs.TryAcquire(5);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(*refused, nullptr) << "project 5 is being fitted by the other replica";

  absl::StatusOr<std::unique_ptr<FitLock>> other_project = theirs.TryAcquire(6);
  ASSERT_TRUE(other_project.ok()) << other_project.status();
  EXPECT_NE(*other_project, nullptr) << "another project's lock is independent";

  held->reset();  // The fit ends.
  absl::StatusOr<std::unique_ptr<FitLock>> after = theirs.TryAcquire(5);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(*after, nullptr);
}

TEST_F(FitLockTest, KeysKeepTheProjectIdInTheLowBitsOfTheirOwnSpace) {
  EXPECT_EQ(FitLocks::KeyOf(1), (FitLocks::kKeySpace << 32) | 1);
  EXPECT_NE(FitLocks::KeyOf(1), FitLocks::KeyOf(2));
}

// fit_lock.h: IsHeld says whether "some session of this database, this
// replica's own included, holds the lock of `project_id` now": true from
// either replica while one holds it, false for another project and after the
// holder releases it.
TEST_F(FitLockTest, IsHeldWhileAnyReplicaHoldsTheProjectsLock) {
  std::unique_ptr<ConnectionPool> other_pool = NewPool(2);
  FitLocks mine(&pool());
  FitLocks theirs(other_pool.get());
  EXPECT_THAT(mine.IsHeld(5), ::verity::testing::IsOkAndHolds(false));

  absl::StatusOr<std::unique_ptr<FitLock>> held = mine.TryAcquire(5);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(*held, nullptr);
  EXPECT_THAT(mine.IsHeld(5), ::verity::testing::IsOkAndHolds(true));
  EXPECT_THAT(theirs.IsHeld(5), ::verity::testing::IsOkAndHolds(true));
  EXPECT_THAT(theirs.IsHeld(6), ::verity::testing::IsOkAndHolds(false));

  held->reset();
  EXPECT_THAT(mine.IsHeld(5), ::verity::testing::IsOkAndHolds(false));
  EXPECT_THAT(theirs.IsHeld(5), ::verity::testing::IsOkAndHolds(false));
}

// fit_lock.h: "project ids above 2^32 would share keys" — with the id's low
// 32 bits — and every key lies in kKeySpace's high half.
TEST_F(FitLockTest, KeysOfIdsAbove32BitsShareTheirLowBitsKey) {
  EXPECT_EQ(FitLocks::KeyOf((int64_t{1} << 32) + 7), FitLocks::KeyOf(7));
  EXPECT_EQ(FitLocks::KeyOf(0xffffffff), (FitLocks::kKeySpace << 32) | 0xffffffff);
  EXPECT_EQ(static_cast<uint64_t>(FitLocks::KeyOf(123456)) >> 32,
            static_cast<uint64_t>(FitLocks::kKeySpace));
}

// fit_lock.h: IsHeld asks whether "some session of this database" holds the lock: the same
// key held in another database of the cluster (another deployment sharing the server) is no fit
// of this database's project, and leaves it free to take here.
TEST_F(FitLockTest, ALockHeldInAnotherDatabaseIsNotHeldHere) {
  absl::StatusOr<std::string> other_url = cluster().CreateDatabase(/*migrate=*/false);
  ASSERT_TRUE(other_url.ok()) << other_url.status();
  {
    pqxx::connection other(*other_url);
    pqxx::nontransaction(other).exec_params("SELECT pg_advisory_lock($1)", FitLocks::KeyOf(5));
    FitLocks mine(&pool());
    EXPECT_THAT(mine.IsHeld(5), ::verity::testing::IsOkAndHolds(false));
    absl::StatusOr<std::unique_ptr<FitLock>> held = mine.TryAcquire(5);
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_NE(*held, nullptr);
    EXPECT_THAT(mine.IsHeld(5), ::verity::testing::IsOkAndHolds(true));
  }
  absl::Status dropped = cluster().DropDatabase(*other_url);
  EXPECT_TRUE(dropped.ok()) << dropped;
}

}  // namespace
}  // namespace verity::storage
