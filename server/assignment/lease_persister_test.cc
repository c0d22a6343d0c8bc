// LeasePersister's promises (lease_persister.h): it writes the queued leases "every
// Options::flush_interval (and at Shutdown)", Shutdown "flushes and stops the background
// thread", and the destructor is Shutdown(). Real PostgreSQL (storage/testing/postgres_fixture.h);
// the leases are read back through storage::LeaseStore.
//
// The flush interval is an hour, so that no timed flush runs during a test: every lease found
// in the database afterwards was written by Shutdown (or the destructor), without an explicit
// Flush().
#include "server/assignment/lease_persister.h"

#include <cstdint>
#include <memory>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "storage/lease_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Matcher;
using ::testing::UnorderedElementsAre;
using ::verity::storage::LeaseRecord;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;

Matcher<LeaseRecord> Lease(int32_t item, int32_t annotator, absl::Time expires_at) {
  return AllOf(Field(&LeaseRecord::item_index, item),
               Field(&LeaseRecord::annotator_index, annotator),
               Field(&LeaseRecord::expires_at, expires_at));
}

class LeasePersisterTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<storage::LeaseStore>(&pool());
    storage::ProjectStore projects(&pool());
    for (const char* name : {"p", "q"}) {
      storage::ProjectRecord record;
      record.name = name;
      record.classes = {"a", "b"};
      absl::StatusOr<storage::ProjectRecord> created = projects.CreateProject(record);
      ASSERT_THAT(created, IsOk());
      project_ids_.push_back(created->project_id);
    }
    p_ = project_ids_[0];
    q_ = project_ids_[1];
  }

  // No timed flush while a test runs.
  static LeasePersister::Options NoTimedFlush() {
    LeasePersister::Options options;
    options.flush_interval = absl::Hours(1);
    return options;
  }

  absl::StatusOr<std::vector<LeaseRecord>> Stored(int64_t project_id) {
    return store_->LoadOpenLeases(project_id, now_);
  }

  // Whole microseconds: what a timestamptz keeps.
  const absl::Time now_ = absl::FromUnixMicros(absl::ToUnixMicros(absl::Now()));
  const absl::Time in_10m_ = now_ + absl::Minutes(10);
  const absl::Time in_20m_ = now_ + absl::Minutes(20);
  std::unique_ptr<storage::LeaseStore> store_;
  std::vector<int64_t> project_ids_;
  int64_t p_ = 0;
  int64_t q_ = 0;
};

// "Flushes and stops the background thread": Shutdown alone, with no Flush() before it, writes
// every lease queued so far, of every project and from every Enqueue call.
TEST_F(LeasePersisterTest, ShutdownWithoutAFlushWritesEveryPendingLease) {
  LeasePersister persister(*store_, NoTimedFlush());
  persister.Enqueue(p_, {{0, 0, in_10m_}, {1, 0, in_10m_}});
  persister.Enqueue(q_, {{0, 1, in_20m_}});
  persister.Enqueue(p_, {{2, 1, in_20m_}});
  persister.Enqueue(p_, {});  // Nothing to add.
  // Queued, not written yet: the first flush is an hour away.
  ASSERT_THAT(Stored(p_), IsOkAndHolds(IsEmpty()));
  ASSERT_THAT(Stored(q_), IsOkAndHolds(IsEmpty()));

  persister.Shutdown();

  EXPECT_THAT(Stored(p_), IsOkAndHolds(UnorderedElementsAre(Lease(0, 0, in_10m_),
                                                            Lease(1, 0, in_10m_),
                                                            Lease(2, 1, in_20m_))));
  EXPECT_THAT(Stored(q_), IsOkAndHolds(ElementsAre(Lease(0, 1, in_20m_))));
}

// "~LeasePersister(); // Shutdown()": destroying the persister without Flush() or Shutdown()
// writes what was queued.
TEST_F(LeasePersisterTest, TheDestructorWritesEveryPendingLease) {
  {
    LeasePersister persister(*store_, NoTimedFlush());
    persister.Enqueue(p_, {{0, 0, in_10m_}, {1, 1, in_20m_}});
    persister.Enqueue(q_, {{3, 2, in_10m_}});
    ASSERT_THAT(Stored(p_), IsOkAndHolds(IsEmpty()));
  }
  EXPECT_THAT(Stored(p_), IsOkAndHolds(UnorderedElementsAre(Lease(0, 0, in_10m_),
                                                            Lease(1, 1, in_20m_))));
  EXPECT_THAT(Stored(q_), IsOkAndHolds(ElementsAre(Lease(3, 2, in_10m_))));
}

// Shutdown after a Flush() writes what was queued after that flush too, and the persister's
// destructor after an explicit Shutdown() is harmless.
TEST_F(LeasePersisterTest, ShutdownWritesWhatWasQueuedAfterTheLastFlush) {
  LeasePersister persister(*store_, NoTimedFlush());
  persister.Enqueue(p_, {{0, 0, in_10m_}});
  ASSERT_THAT(persister.Flush(), IsOk());
  ASSERT_THAT(Stored(p_), IsOkAndHolds(ElementsAre(Lease(0, 0, in_10m_))));
  persister.Enqueue(p_, {{1, 0, in_20m_}});
  persister.Enqueue(q_, {{0, 0, in_20m_}});

  persister.Shutdown();

  EXPECT_THAT(Stored(p_), IsOkAndHolds(UnorderedElementsAre(Lease(0, 0, in_10m_),
                                                            Lease(1, 0, in_20m_))));
  EXPECT_THAT(Stored(q_), IsOkAndHolds(ElementsAre(Lease(0, 0, in_20m_))));
}

// SuggestItems enqueues a lease again when it suggests the same item to the same annotator
// again (a later expiry). Two such suggestions within one flush interval leave two leases of
// one (item, annotator) pending; Shutdown must still write every pending lease, the pair with
// its latest expiry (leases are upserts), and the other leases of the project with it.
TEST_F(LeasePersisterTest, ShutdownWritesALeaseExtendedWithinOneFlushIntervalWithItsLatestExpiry) {
  LeasePersister persister(*store_, NoTimedFlush());
  persister.Enqueue(p_, {{0, 0, in_10m_}, {1, 0, in_10m_}});
  persister.Enqueue(p_, {{0, 0, in_20m_}});

  persister.Shutdown();

  EXPECT_THAT(Stored(p_), IsOkAndHolds(UnorderedElementsAre(Lease(0, 0, in_20m_),
                                                            Lease(1, 0, in_10m_))));
}

// lease_persister.h: Flush "returns the first error", and "a failed write is retried at the
// next flush". A CHECK constraint refuses project p's batch (it holds item 7) while q's is
// written; once the constraint is gone, the next Flush() writes p's leases, which the failed
// one kept.
TEST_F(LeasePersisterTest, AFailedWriteIsReportedAndRetriedAtTheNextFlush) {
  auto sql = [&](const char* statement) {
    return pool().RunInTransaction("test", [&](pqxx::work& txn) {
      txn.exec0(statement);
      return absl::OkStatus();
    });
  };
  ASSERT_THAT(sql("ALTER TABLE assignment_leases ADD CONSTRAINT test_refuses_item_7 "
                  "CHECK (item_index <> 7)"),
              IsOk());
  LeasePersister persister(*store_, NoTimedFlush());
  persister.Enqueue(p_, {{7, 0, in_10m_}, {1, 0, in_10m_}});
  persister.Enqueue(q_, {{0, 1, in_20m_}});

  EXPECT_FALSE(persister.Flush().ok());
  EXPECT_THAT(Stored(p_), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(Stored(q_), IsOkAndHolds(ElementsAre(Lease(0, 1, in_20m_))));

  ASSERT_THAT(sql("ALTER TABLE assignment_leases DROP CONSTRAINT test_refuses_item_7"), IsOk());
  EXPECT_THAT(persister.Flush(), IsOk());
  EXPECT_THAT(Stored(p_),
              IsOkAndHolds(UnorderedElementsAre(Lease(7, 0, in_10m_), Lease(1, 0, in_10m_))));
  EXPECT_THAT(Stored(q_), IsOkAndHolds(ElementsAre(Lease(0, 1, in_20m_))));
}

}  // namespace
}  // namespace verity::server
