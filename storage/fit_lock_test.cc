#include "storage/fit_lock.h"

#include <memory>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace verity::storage
