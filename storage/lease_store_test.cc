#include "storage/lease_store.h"

#include <memory>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "pqxx/pqxx"
#include "storage/annotation_store.h"
#include "storage/item_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::storage {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;

class LeaseStoreTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    ProjectStore projects(&pool());
    ProjectRecord p;
    p.name = "p";
    p.classes = {"a", "b"};
    auto created = projects.CreateProject(p);
    ASSERT_THAT(created, IsOk());
    project_id_ = created->project_id;
    // Items i0, i1 and annotators w0, w1 get indices 0 and 1.
    AnnotationStore annotations(&pool());
    ASSERT_THAT(annotations.CommitAnnotations({{project_id_, "i0", "w0", 0, std::nullopt},
                                               {project_id_, "i1", "w1", 1, std::nullopt}}),
                IsOk());
    store_ = std::make_unique<LeaseStore>(&pool());
  }

  int64_t project_id_ = 0;
  std::unique_ptr<LeaseStore> store_;
};

TEST_F(LeaseStoreTest, OpenLeasesSurviveAndExpiredOrAnsweredOnesAreReleased) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  ASSERT_THAT(store_->UpsertLeases(project_id_, {{1, 0, now + absl::Minutes(10)},    // open
                                                 {0, 1, now - absl::Seconds(1)},     // expired
                                                 {0, 0, now + absl::Minutes(10)}}),  // answered
              IsOk());
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, now),
              IsOkAndHolds(ElementsAre(AllOf(Field(&LeaseRecord::item_index, 1),
                                             Field(&LeaseRecord::annotator_index, 0),
                                             Field(&LeaseRecord::expires_at,
                                                   now + absl::Minutes(10))))));
  // Extending a lease replaces its expiry; once past it, the lease is gone.
  ASSERT_THAT(store_->UpsertLeases(project_id_, {{1, 0, now + absl::Minutes(20)}}), IsOk());
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, now + absl::Minutes(15)),
              IsOkAndHolds(ElementsAre(Field(&LeaseRecord::expires_at, now + absl::Minutes(20)))));
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, now + absl::Minutes(21)), IsOkAndHolds(IsEmpty()));
}

// Promise (lease_store.h): a pair listed more than once in one UpsertLeases takes its last
// entry's expiry. The lease persister queues a pair twice when its lease expired while writes
// were failing and the pair was leased again; one INSERT ... ON CONFLICT DO UPDATE cannot touch
// a row twice, so without this every later flush of the project failed.
TEST_F(LeaseStoreTest, APairListedTwiceInOneUpsertTakesItsLastExpiry) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  ASSERT_THAT(store_->UpsertLeases(project_id_, {{1, 0, now + absl::Minutes(10)},
                                                 {0, 1, now + absl::Minutes(5)},
                                                 {1, 0, now + absl::Minutes(30)},
                                                 {1, 0, now + absl::Minutes(20)}}),
              IsOk());
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, now),
              IsOkAndHolds(UnorderedElementsAre(
                  AllOf(Field(&LeaseRecord::item_index, 1), Field(&LeaseRecord::annotator_index, 0),
                        Field(&LeaseRecord::expires_at, now + absl::Minutes(20))),
                  AllOf(Field(&LeaseRecord::item_index, 0), Field(&LeaseRecord::annotator_index, 1),
                        Field(&LeaseRecord::expires_at, now + absl::Minutes(5))))));
}

// Two replicas claiming leases of one project: each sees what the other claimed since its last
// claim, and nothing expired, answered or already seen.
TEST_F(LeaseStoreTest, ClaimsSeeTheOtherClaimantsOpenLeasesSinceTheirLastClaim) {
  const absl::Time now = absl::Now();
  const absl::Time later = now + absl::Minutes(10);
  std::vector<LeaseRecord> seen_by_x, seen_by_y;
  absl::StatusOr<int64_t> x1 = store_->ClaimLeases(project_id_, 0, now, [&](const auto& others) {
    seen_by_x = others;
    return std::vector<LeaseRecord>{{1, 0, later}};
  });
  ASSERT_THAT(x1, IsOk());
  EXPECT_THAT(seen_by_x, IsEmpty());
  absl::StatusOr<int64_t> y1 = store_->ClaimLeases(project_id_, 0, now, [&](const auto& others) {
    seen_by_y = others;
    // (0, 0) and (1, 1) are labelled already; (0, 1) expired at once.
    return std::vector<LeaseRecord>{{0, 0, later}, {1, 1, later}, {0, 1, now - absl::Seconds(1)}};
  });
  ASSERT_THAT(y1, IsOk());
  EXPECT_GT(*y1, *x1);
  EXPECT_THAT(seen_by_y, ElementsAre(AllOf(Field(&LeaseRecord::item_index, 1),
                                           Field(&LeaseRecord::annotator_index, 0))));
  absl::StatusOr<int64_t> x2 = store_->ClaimLeases(project_id_, *x1, now, [&](const auto& others) {
    seen_by_x = others;
    return std::vector<LeaseRecord>{};
  });
  ASSERT_THAT(x2, IsOkAndHolds(*y1));
  EXPECT_THAT(seen_by_x, IsEmpty()) << "Y's leases were answered or expired";
  // A claimant that saw everything sees nothing new.
  absl::StatusOr<int64_t> y2 = store_->ClaimLeases(project_id_, *y1, now, [&](const auto& others) {
    seen_by_y = others;
    return std::vector<LeaseRecord>{};
  });
  EXPECT_THAT(y2, IsOkAndHolds(*y1));
  EXPECT_THAT(seen_by_y, IsEmpty());
}

TEST_F(LeaseStoreTest, ItemPriorityIsStoredAndLoaded) {
  ItemStore items(&pool());
  ItemWrite w;
  w.external_id = "i1";
  w.priority = 2.5;
  ASSERT_THAT(items.UpsertItems(project_id_, {w}), IsOk());
  auto loaded = items.LoadItems(project_id_);
  ASSERT_THAT(loaded, IsOk());
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0].priority, 0.0);
  EXPECT_EQ((*loaded)[1].priority, 2.5);
}

// lease_store.h, ClaimLeases: step 3 writes the chosen leases "with new
// claim_seqs" — a lease claimed again (here extended) gets a new claim_seq and
// the new expiry, so the return value grows past the other claimant's and the
// other claimant, asking for claims since its last, sees the extension.
TEST_F(LeaseStoreTest, ReclaimingALeaseGivesItANewClaimSeqAndExpiry) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const absl::Time later = now + absl::Minutes(10);
  const absl::Time much_later = now + absl::Minutes(30);
  std::vector<LeaseRecord> seen_by_x, seen_by_y;
  absl::StatusOr<int64_t> x1 = store_->ClaimLeases(project_id_, 0, now, [&](const auto&) {
    return std::vector<LeaseRecord>{{1, 0, later}};
  });
  ASSERT_THAT(x1, IsOk());
  absl::StatusOr<int64_t> y1 = store_->ClaimLeases(project_id_, 0, now, [&](const auto& others) {
    seen_by_y = others;
    return std::vector<LeaseRecord>{{0, 1, later}};
  });
  ASSERT_THAT(y1, IsOk());
  EXPECT_GT(*y1, *x1);
  // X extends its lease (1, 0).
  absl::StatusOr<int64_t> x2 = store_->ClaimLeases(project_id_, *x1, now, [&](const auto& others) {
    seen_by_x = others;
    return std::vector<LeaseRecord>{{1, 0, much_later}};
  });
  ASSERT_THAT(x2, IsOk());
  EXPECT_THAT(seen_by_x, ElementsAre(AllOf(Field(&LeaseRecord::item_index, 0),
                                           Field(&LeaseRecord::annotator_index, 1))));
  EXPECT_GT(*x2, *y1) << "the re-claim must draw a new claim_seq";
  // Y, having seen everything up to y1, sees X's extension with its new expiry.
  absl::StatusOr<int64_t> y2 = store_->ClaimLeases(project_id_, *y1, now, [&](const auto& others) {
    seen_by_y = others;
    return std::vector<LeaseRecord>{};
  });
  EXPECT_THAT(y2, IsOkAndHolds(*x2));
  EXPECT_THAT(seen_by_y, ElementsAre(AllOf(Field(&LeaseRecord::item_index, 1),
                                           Field(&LeaseRecord::annotator_index, 0),
                                           Field(&LeaseRecord::expires_at, much_later))));
}

// Leases, labels and claims are per project (every table is keyed by
// project_id first, ARCHITECTURE.md): a label of pair (0, 0) in project B
// answers B's lease of that pair, not A's; B's claimant sees none of A's
// claims; loading B's leases releases nothing of A's.
TEST_F(LeaseStoreTest, LeasesLabelsAndClaimsOfAnotherProjectDoNotInterfere) {
  // B: the fixture's project, where (0, 0) and (1, 1) are labelled.
  const int64_t b = project_id_;
  ProjectStore projects(&pool());
  ProjectRecord pa;
  pa.name = "a";
  pa.classes = {"x", "y"};
  absl::StatusOr<ProjectRecord> created = projects.CreateProject(pa);
  ASSERT_THAT(created, IsOk());
  const int64_t a = created->project_id;
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const absl::Time later = now + absl::Minutes(10);

  // X claims (0, 0) and (0, 1) in A; (0, 1) is unlabelled in B as well.
  absl::StatusOr<int64_t> x1 = store_->ClaimLeases(a, 0, now, [&](const auto&) {
    return std::vector<LeaseRecord>{{0, 0, later}, {0, 1, later}};
  });
  ASSERT_THAT(x1, IsOk());
  // Y, a claimant of A, sees both: B's label of (0, 0) does not answer A's lease.
  std::vector<LeaseRecord> seen;
  ASSERT_THAT(store_->ClaimLeases(a, 0, now, [&](const auto& others) {
    seen = others;
    return std::vector<LeaseRecord>{};
  }),
              IsOkAndHolds(*x1));
  EXPECT_THAT(seen, ::testing::UnorderedElementsAre(
                        AllOf(Field(&LeaseRecord::item_index, 0),
                              Field(&LeaseRecord::annotator_index, 0)),
                        AllOf(Field(&LeaseRecord::item_index, 0),
                              Field(&LeaseRecord::annotator_index, 1))));
  // A claimant of B sees nothing of A, and has seen no claim of B.
  seen = {{9, 9, later}};
  EXPECT_THAT(store_->ClaimLeases(b, 0, now, [&](const auto& others) {
    seen = others;
    return std::vector<LeaseRecord>{};
  }),
              IsOkAndHolds(0));
  EXPECT_THAT(seen, IsEmpty());

  // Loading B's open leases releases nothing of A's; A's are both still open.
  EXPECT_THAT(store_->LoadOpenLeases(b, now), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store_->LoadOpenLeases(a, now),
              IsOkAndHolds(::testing::UnorderedElementsAre(
                  AllOf(Field(&LeaseRecord::item_index, 0),
                        Field(&LeaseRecord::annotator_index, 0),
                        Field(&LeaseRecord::expires_at, later)),
                  AllOf(Field(&LeaseRecord::item_index, 0),
                        Field(&LeaseRecord::annotator_index, 1)))));
}

// A lease reserves its slot "until it expires" (lease_store.h); the serving
// copy drops leases that "expired at or before the `now` it is given"
// (server/state/lease_book.h). So a lease expiring exactly at `now` is not
// open at `now`, though it is one microsecond earlier.
TEST_F(LeaseStoreTest, ALeaseExpiringExactlyAtNowIsNotOpen) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  // Claimed by X at an earlier time, expiring exactly at `now`.
  ASSERT_THAT(store_->ClaimLeases(project_id_, 0, now - absl::Minutes(1), [&](const auto&) {
    return std::vector<LeaseRecord>{{1, 0, now}};
  }),
              IsOk());
  std::vector<LeaseRecord> seen = {{9, 9, now}};
  ASSERT_THAT(store_->ClaimLeases(project_id_, 0, now, [&](const auto& others) {
    seen = others;
    return std::vector<LeaseRecord>{};
  }),
              IsOk());
  EXPECT_THAT(seen, IsEmpty());
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, now - absl::Microseconds(1)),
              IsOkAndHolds(ElementsAre(Field(&LeaseRecord::expires_at, now))));
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, now), IsOkAndHolds(IsEmpty()));
}

// lease_store.h, ClaimLeases "returns the newest claim_seq the caller has seen, its own
// included". LoadOpenLeases deletes expired leases, the newest claim among them: a claimant
// that saw claim xb still gets xb back (not the newest claim_seq left in the table), or its
// next claim would ask again for claims it has seen.
TEST_F(LeaseStoreTest, TheNewestClaimSeqSeenStaysAfterItsLeaseIsReleased) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  absl::StatusOr<int64_t> xa = store_->ClaimLeases(project_id_, 0, now, [&](const auto&) {
    return std::vector<LeaseRecord>{{1, 0, now + absl::Minutes(10)}};
  });
  ASSERT_THAT(xa, IsOk());
  absl::StatusOr<int64_t> xb = store_->ClaimLeases(project_id_, *xa, now, [&](const auto&) {
    return std::vector<LeaseRecord>{{0, 1, now + absl::Minutes(1)}};
  });
  ASSERT_THAT(xb, IsOk());
  ASSERT_GT(*xb, *xa);
  // At now + 2 minutes (0, 1) has expired and is deleted; (1, 0) stays, with claim_seq xa.
  const absl::Time later = now + absl::Minutes(2);
  ASSERT_THAT(store_->LoadOpenLeases(project_id_, later),
              IsOkAndHolds(ElementsAre(AllOf(Field(&LeaseRecord::item_index, 1),
                                             Field(&LeaseRecord::annotator_index, 0)))));
  std::vector<LeaseRecord> seen = {{9, 9, later}};
  EXPECT_THAT(store_->ClaimLeases(project_id_, *xb, later, [&](const auto& others) {
    seen = others;
    return std::vector<LeaseRecord>{};
  }),
              IsOkAndHolds(*xb));
  EXPECT_THAT(seen, IsEmpty());
}

// lease_store.h, ClaimLeases: claims of a project run "one at a time" under its assignment
// lock, "exclusively among every server replica". A claim that starts while another is still
// choosing waits for it, and then counts the lease it took: two replicas never lease the same
// slot without seeing each other's lease.
TEST_F(LeaseStoreTest, AClaimStartedWhileAnotherChoosesWaitsAndSeesItsLease) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const absl::Time later = now + absl::Minutes(10);
  std::unique_ptr<ConnectionPool> pool = NewPool(2);
  LeaseStore store(pool.get());
  pqxx::connection observer(url());
  absl::Mutex mu;
  bool y_chose = false;
  std::vector<LeaseRecord> seen_by_y = {{9, 9, now}};
  std::thread y;
  absl::StatusOr<int64_t> x = store.ClaimLeases(project_id_, 0, now, [&](const auto&) {
    if (!y.joinable()) {  // `choose` may run again on a retry.
      y = std::thread([&] {
        EXPECT_THAT(store.ClaimLeases(project_id_, 0, now,
                                      [&](const auto& others) {
                                        absl::MutexLock lock(&mu);
                                        seen_by_y = others;
                                        y_chose = true;
                                        return std::vector<LeaseRecord>{};
                                      }),
                    IsOk());
      });
    }
    // X goes on once Y waits for the claim lock (or, were there none, has chosen already).
    while (true) {
      {
        absl::MutexLock lock(&mu);
        if (y_chose) break;
      }
      if (pqxx::nontransaction(observer)
              .exec1("SELECT EXISTS (SELECT 1 FROM pg_locks "
                     "WHERE locktype = 'advisory' AND NOT granted)")[0]
              .as<bool>()) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return std::vector<LeaseRecord>{{1, 0, later}};
  });
  ASSERT_THAT(x, IsOk());
  y.join();
  absl::MutexLock lock(&mu);
  EXPECT_THAT(seen_by_y, ElementsAre(AllOf(Field(&LeaseRecord::item_index, 1),
                                           Field(&LeaseRecord::annotator_index, 0),
                                           Field(&LeaseRecord::expires_at, later))));
}

// lease_store.h, ReadClaimsSince: without claiming, "the open leases claimed since
// `after_claim`" (not expired at `now`, pair not labelled) and "the newest claim_seq stored".
TEST_F(LeaseStoreTest, ReadClaimsSinceReturnsTheOpenLeasesClaimedAfterItsArgument) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const absl::Time later = now + absl::Minutes(10);
  const absl::Time soon = now + absl::Minutes(1);
  absl::StatusOr<int64_t> x1 = store_->ClaimLeases(project_id_, 0, now, [&](const auto&) {
    return std::vector<LeaseRecord>{{1, 0, later}};
  });
  ASSERT_THAT(x1, IsOk());
  absl::StatusOr<int64_t> x2 = store_->ClaimLeases(project_id_, *x1, now, [&](const auto&) {
    return std::vector<LeaseRecord>{{0, 1, soon}};
  });
  ASSERT_THAT(x2, IsOk());
  ASSERT_GT(*x2, *x1);

  absl::StatusOr<LeaseStore::Claims> all = store_->ReadClaimsSince(project_id_, 0, now);
  ASSERT_THAT(all, IsOk());
  EXPECT_EQ(all->newest, *x2);
  EXPECT_THAT(all->open,
              UnorderedElementsAre(
                  AllOf(Field(&LeaseRecord::item_index, 1), Field(&LeaseRecord::annotator_index, 0),
                        Field(&LeaseRecord::expires_at, later)),
                  AllOf(Field(&LeaseRecord::item_index, 0), Field(&LeaseRecord::annotator_index, 1),
                        Field(&LeaseRecord::expires_at, soon))));
  // Since x1: only the later claim.
  absl::StatusOr<LeaseStore::Claims> since_x1 = store_->ReadClaimsSince(project_id_, *x1, now);
  ASSERT_THAT(since_x1, IsOk());
  EXPECT_EQ(since_x1->newest, *x2);
  EXPECT_THAT(since_x1->open, ElementsAre(AllOf(Field(&LeaseRecord::item_index, 0),
                                                Field(&LeaseRecord::annotator_index, 1))));
  // Once (0, 1) has expired, only (1, 0) is open.
  absl::StatusOr<LeaseStore::Claims> after_expiry =
      store_->ReadClaimsSince(project_id_, 0, now + absl::Minutes(2));
  ASSERT_THAT(after_expiry, IsOk());
  EXPECT_EQ(after_expiry->newest, *x2);
  EXPECT_THAT(after_expiry->open, ElementsAre(AllOf(Field(&LeaseRecord::item_index, 1),
                                                    Field(&LeaseRecord::annotator_index, 0))));
  // Reading claimed nothing: a claimant that saw x2 sees nothing new.
  EXPECT_THAT(store_->ClaimLeases(project_id_, *x2, now,
                                  [&](const auto& others) {
                                    EXPECT_THAT(others, IsEmpty());
                                    return std::vector<LeaseRecord>{};
                                  }),
              IsOkAndHolds(*x2));
}

// Schema migration 11: only ClaimLeases gives a lease a claim_seq; "leases written otherwise
// keep 0". A lease of UpsertLeases is open, yet no claim: ReadClaimsSince(0) and a claimant
// that has seen nothing see none, and the newest claim is still 0.
TEST_F(LeaseStoreTest, UpsertedLeasesAreNoClaims) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const absl::Time later = now + absl::Minutes(10);
  ASSERT_THAT(store_->UpsertLeases(project_id_, {{1, 0, later}, {0, 1, later}}), IsOk());
  absl::StatusOr<LeaseStore::Claims> claims = store_->ReadClaimsSince(project_id_, 0, now);
  ASSERT_THAT(claims, IsOk());
  EXPECT_EQ(claims->newest, 0);
  EXPECT_THAT(claims->open, IsEmpty());
  std::vector<LeaseRecord> seen = {{9, 9, now}};
  EXPECT_THAT(store_->ClaimLeases(project_id_, 0, now,
                                  [&](const auto& others) {
                                    seen = others;
                                    return std::vector<LeaseRecord>{};
                                  }),
              IsOkAndHolds(0));
  EXPECT_THAT(seen, IsEmpty());
  // They are open leases all the same.
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, now),
              IsOkAndHolds(UnorderedElementsAre(Field(&LeaseRecord::item_index, 1),
                                                Field(&LeaseRecord::item_index, 0))));
}

// A lease is kept "until expires_at" exactly: expiries with microseconds (the precision of
// PostgreSQL's timestamptz) come back unchanged, from LoadOpenLeases and from the claims.
TEST_F(LeaseStoreTest, ExpiriesComeBackToTheMicrosecond) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const absl::Time upserted = now + absl::Microseconds(1'234'567);
  const absl::Time claimed = now + absl::Microseconds(7'654'321);
  ASSERT_THAT(store_->UpsertLeases(project_id_, {{1, 0, upserted}}), IsOk());
  ASSERT_THAT(store_->ClaimLeases(project_id_, 0, now,
                                  [&](const auto&) {
                                    return std::vector<LeaseRecord>{{0, 1, claimed}};
                                  }),
              IsOk());
  EXPECT_THAT(
      store_->LoadOpenLeases(project_id_, now),
      IsOkAndHolds(UnorderedElementsAre(
          AllOf(Field(&LeaseRecord::item_index, 1), Field(&LeaseRecord::expires_at, upserted)),
          AllOf(Field(&LeaseRecord::item_index, 0), Field(&LeaseRecord::expires_at, claimed)))));
  absl::StatusOr<LeaseStore::Claims> claims = store_->ReadClaimsSince(project_id_, 0, now);
  ASSERT_THAT(claims, IsOk());
  EXPECT_THAT(claims->open, ElementsAre(Field(&LeaseRecord::expires_at, claimed)));
  // One microsecond before its expiry the upserted lease is open, at it not.
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, upserted - absl::Microseconds(1)),
              IsOkAndHolds(UnorderedElementsAre(Field(&LeaseRecord::item_index, 1),
                                                Field(&LeaseRecord::item_index, 0))));
  EXPECT_THAT(store_->LoadOpenLeases(project_id_, upserted),
              IsOkAndHolds(ElementsAre(Field(&LeaseRecord::item_index, 0))));
}

// lease_store.h, ClaimLeases runs "under the project's assignment lock": claims of one project
// run one at a time, but a claim of another project does not wait for a claim in progress.
TEST_F(LeaseStoreTest, AClaimOfAnotherProjectDoesNotWaitForAClaimInProgress) {
  ProjectRecord q;
  q.name = "q";
  q.classes = {"a", "b"};
  absl::StatusOr<ProjectRecord> other = ProjectStore(&pool()).CreateProject(q);
  ASSERT_THAT(other, IsOk());
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const absl::Time later = now + absl::Minutes(10);
  std::unique_ptr<ConnectionPool> pool = NewPool(2);
  LeaseStore store(pool.get());
  pqxx::connection observer(url());
  absl::Mutex mu;
  bool y_done = false;
  absl::StatusOr<int64_t> y_claim = absl::UnknownError("not run");
  bool y_waited = false;
  std::thread y;
  absl::StatusOr<int64_t> x = store.ClaimLeases(project_id_, 0, now, [&](const auto&) {
    if (!y.joinable()) {  // `choose` may run again on a retry.
      y = std::thread([&] {
        absl::StatusOr<int64_t> claimed =
            store.ClaimLeases(other->project_id, 0, now, [&](const auto&) {
              return std::vector<LeaseRecord>{{0, 0, later}};
            });
        absl::MutexLock lock(&mu);
        y_claim = claimed;
        y_done = true;
      });
    }
    // X keeps its claim open until Y, a claim of the other project, is done or waits for a lock.
    while (true) {
      {
        absl::MutexLock lock(&mu);
        if (y_done) break;
      }
      if (pqxx::nontransaction(observer)
              .exec1("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted)")[0]
              .as<bool>()) {
        y_waited = true;
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return std::vector<LeaseRecord>{{1, 0, later}};
  });
  ASSERT_THAT(x, IsOk());
  y.join();
  EXPECT_FALSE(y_waited) << "a claim of project q waited for a claim of project p";
  absl::MutexLock lock(&mu);
  EXPECT_THAT(y_claim, IsOk());
  EXPECT_THAT(store.LoadOpenLeases(other->project_id, now),
              IsOkAndHolds(ElementsAre(AllOf(Field(&LeaseRecord::item_index, 0),
                                             Field(&LeaseRecord::annotator_index, 0)))));
}

}  // namespace
}  // namespace verity::storage
