#include "storage/fit_lock.h"

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/testing/postgres_fixture.h"

namespace verity::storage {
namespace {

using ::verity::storage::testing::PostgresTest;

class FitLockTest : public PostgresTest {
 protected:
  // The backend pid of the session that holds the fit lock of `project_id` in this database.
  int64_t HolderPid(pqxx::connection& observer, int64_t project_id) {
    pqxx::result rows = pqxx::nontransaction(observer).exec_params(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1",
        FitLocks::kKeySpace, project_id);
    EXPECT_EQ(rows.size(), 1u);
    return rows.empty() ? 0 : rows[0][0].as<int64_t>();
  }

  // Ends the session `pid` (as a PostgreSQL restart or an administrator would) and waits until
  // it is gone.
  void TerminateSession(pqxx::connection& observer, int64_t pid) {
    pqxx::nontransaction(observer).exec_params("SELECT pg_terminate_backend($1::int)", pid);
    for (int i = 0; i < 1000; ++i) {
      if (pqxx::nontransaction(observer)
              .exec_params1("SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", pid)[0]
              .as<int64_t>() == 0) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "session " << pid << " did not end";
  }
};

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

// fit_lock.h: "If the holder dies, PostgreSQL drops its session and the lock with it". A FitLock
// whose session was ended under it is released without an exception leaving storage/
// (pg_status.h: none may), and the project's lock can be taken again on a fresh connection.
TEST_F(FitLockTest, ALockWhoseSessionEndedIsReleasedWithoutAnException) {
  std::unique_ptr<ConnectionPool> lock_pool = NewPool(1);
  FitLocks locks(lock_pool.get(), &pool());
  pqxx::connection observer(url());
  absl::StatusOr<std::unique_ptr<FitLock>> held = locks.TryAcquire(5);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(*held, nullptr);
  TerminateSession(observer, HolderPid(observer, 5));
  EXPECT_THAT(locks.IsHeld(5), ::verity::testing::IsOkAndHolds(false));

  EXPECT_NO_THROW(held->reset());
  absl::StatusOr<std::unique_ptr<FitLock>> again = locks.TryAcquire(5);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(*again, nullptr);
}

// fit_lock.h: TryAcquire and IsHeld are UNAVAILABLE "if PostgreSQL cannot be reached" — here a
// pooled connection whose session has ended — never an exception; the next call works on a
// fresh connection.
TEST_F(FitLockTest, ABrokenPooledConnectionIsUnavailableNotAnException) {
  std::unique_ptr<ConnectionPool> lock_pool = NewPool(1);
  FitLocks locks(lock_pool.get());
  pqxx::connection observer(url());
  {
    absl::StatusOr<std::unique_ptr<FitLock>> held = locks.TryAcquire(5);
    ASSERT_TRUE(held.ok()) << held.status();
    ASSERT_NE(*held, nullptr);
    const int64_t pid = HolderPid(observer, 5);
    held->reset();  // Back in the pool, idle.
    TerminateSession(observer, pid);
  }
  absl::StatusOr<std::unique_ptr<FitLock>> refused;
  EXPECT_NO_THROW(refused = locks.TryAcquire(6));
  EXPECT_THAT(refused.status(), ::verity::testing::StatusIs(absl::StatusCode::kUnavailable));
  absl::StatusOr<std::unique_ptr<FitLock>> held = locks.TryAcquire(6);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(*held, nullptr);

  // The same for IsHeld (the locks' pool is its query pool here).
  const int64_t pid = HolderPid(observer, 6);
  held->reset();
  TerminateSession(observer, pid);
  absl::StatusOr<bool> is_held;
  EXPECT_NO_THROW(is_held = locks.IsHeld(6));
  EXPECT_THAT(is_held.status(), ::verity::testing::StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(locks.IsHeld(6), ::verity::testing::IsOkAndHolds(false));
}

// fit_lock.h: with a pool of its own for the locks, IsHeld is asked on the query pool: a
// server whose one lock connection holds a fit still answers IsHeld at once, and a lock taken
// leaves the query pool's connections free.
TEST_F(FitLockTest, LocksAndQueriesUseTheirOwnPools) {
  std::unique_ptr<ConnectionPool> lock_pool = NewPool(1);
  std::unique_ptr<ConnectionPool> query_pool = NewPool(1);
  FitLocks locks(lock_pool.get(), query_pool.get());
  absl::StatusOr<std::unique_ptr<FitLock>> held = locks.TryAcquire(5);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(*held, nullptr);
  EXPECT_EQ(lock_pool->in_use_connections(), 1);
  EXPECT_EQ(query_pool->in_use_connections(), 0);
  EXPECT_THAT(locks.IsHeld(5), ::verity::testing::IsOkAndHolds(true));
  EXPECT_EQ(query_pool->open_connections(), 1);
}

// The fit lock is the advisory lock of one bigint key (fit_lock.h). The lock of the two int4
// keys (kKeySpace, project id) is another lock, though pg_locks shows the same halves: it is
// not the project's fit lock, and leaves that free.
TEST_F(FitLockTest, ALockOfTwoIntegerKeysWithTheSameHalvesIsNotTheFitLock) {
  pqxx::connection other(url());
  pqxx::nontransaction(other).exec_params("SELECT pg_advisory_lock($1::int, $2::int)",
                                          FitLocks::kKeySpace, 5);
  FitLocks locks(&pool());
  EXPECT_THAT(locks.IsHeld(5), ::verity::testing::IsOkAndHolds(false));
  absl::StatusOr<std::unique_ptr<FitLock>> held = locks.TryAcquire(5);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_NE(*held, nullptr);
}

// Errors name what failed: when the pooled connection's session has ended, TryAcquire's and
// IsHeld's UNAVAILABLE name the project whose fit lock they were taking or reading.
TEST_F(FitLockTest, UnavailableErrorsNameTheProject) {
  std::unique_ptr<ConnectionPool> lock_pool = NewPool(1);
  FitLocks locks(lock_pool.get());
  pqxx::connection observer(url());
  // Ends the session of the pool's one (idle) connection, found through the lock it held.
  auto end_pooled_session = [&](int64_t project_id) {
    absl::StatusOr<std::unique_ptr<FitLock>> held = locks.TryAcquire(project_id);
    ASSERT_TRUE(held.ok()) << held.status();
    ASSERT_NE(*held, nullptr);
    const int64_t pid = HolderPid(observer, project_id);
    held->reset();
    TerminateSession(observer, pid);
  };
  end_pooled_session(41);
  EXPECT_THAT(locks.TryAcquire(42),
              ::verity::testing::StatusIs(absl::StatusCode::kUnavailable,
                                          ::testing::HasSubstr("project 42")));
  end_pooled_session(41);
  EXPECT_THAT(locks.IsHeld(43), ::verity::testing::StatusIs(absl::StatusCode::kUnavailable,
                                                            ::testing::HasSubstr("project 43")));
}

// fit_lock.h: the key holds the project id's low 32 bits, all of them: a project whose id has
// the 32nd bit set is locked and seen held like any other, and ids above 2^32 "share keys"
// with the id of their low bits (a skipped fit, never two fits at once).
TEST_F(FitLockTest, IdsWithTheHighLowBitAndAbove32BitsLockTheirLowBitsKey) {
  std::unique_ptr<ConnectionPool> other_pool = NewPool(2);
  FitLocks mine(&pool());
  FitLocks theirs(other_pool.get());
  const int64_t high_bit = int64_t{0xfffffffe};
  absl::StatusOr<std::unique_ptr<FitLock>> held = mine.TryAcquire(high_bit);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(*held, nullptr);
  EXPECT_THAT(theirs.IsHeld(high_bit), ::verity::testing::IsOkAndHolds(true));
  EXPECT_THAT(theirs.IsHeld(high_bit - 1), ::verity::testing::IsOkAndHolds(false));
  absl::StatusOr<std::unique_ptr<FitLock>> refused = theirs.TryAcquire(high_bit);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(*refused, nullptr);

  const int64_t above = (int64_t{1} << 32) + 7;
  absl::StatusOr<std::unique_ptr<FitLock>> above_held = mine.TryAcquire(above);
  ASSERT_TRUE(above_held.ok()) << above_held.status();
  ASSERT_NE(*above_held, nullptr);
  EXPECT_THAT(theirs.IsHeld(7), ::verity::testing::IsOkAndHolds(true));
  EXPECT_THAT(theirs.IsHeld(above), ::verity::testing::IsOkAndHolds(true));
  absl::StatusOr<std::unique_ptr<FitLock>> seven = theirs.TryAcquire(7);
  ASSERT_TRUE(seven.ok()) << seven.status();
  EXPECT_EQ(*seven, nullptr) << "project 7 shares the key of project 2^32 + 7";
}

}  // namespace
}  // namespace verity::storage
