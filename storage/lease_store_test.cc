#include "storage/lease_store.h"

#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/status_matchers.h"
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

}  // namespace
}  // namespace verity::storage
