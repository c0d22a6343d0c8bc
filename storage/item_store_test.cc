#include "storage/item_store.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/project_changes.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity {
namespace storage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

class ItemStoreTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<ItemStore>(&pool());
    absl::StatusOr<int64_t> created = CreateProject("p");
    ASSERT_THAT(created, IsOk());
    project_id_ = *created;
  }

  // A project `name` of 3 classes, 2 item features and 1 annotator feature; its id.
  absl::StatusOr<int64_t> CreateProject(const std::string& name) {
    ProjectStore projects(&pool());
    ProjectRecord p;
    p.name = name;
    p.classes = {"a", "b", "c"};
    p.item_feature_dim = 2;
    p.annotator_feature_dim = 1;
    absl::StatusOr<ProjectRecord> created = projects.CreateProject(p);
    if (!created.ok()) return created.status();
    return created->project_id;
  }

  static ItemWrite Item(std::string id,
                        std::optional<std::vector<float>> features = {},
                        std::optional<int32_t> gold = {}) {
    return ItemWrite{std::move(id), std::move(features), gold};
  }

  std::unique_ptr<ItemStore> store_;
  int64_t project_id_ = 0;
};

TEST_F(ItemStoreTest, AllocatesDenseIndicesInOrderOfFirstAppearance) {
  EXPECT_THAT(store_->UpsertItems(project_id_, {Item("x"), Item("y"), Item("x"),
                                                Item("z")}),
              IsOkAndHolds(ElementsAre(0, 1, 0, 2)));
  EXPECT_THAT(store_->UpsertItems(project_id_, {Item("w"), Item("y")}),
              IsOkAndHolds(ElementsAre(3, 1)));
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 4u);
  const std::vector<std::string> ids = {"x", "y", "z", "w"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*items)[i].index, i);
    EXPECT_EQ((*items)[i].external_id, ids[i]);
    EXPECT_FALSE((*items)[i].gold_label.has_value());
    EXPECT_FALSE((*items)[i].features.has_value());
  }
}

TEST_F(ItemStoreTest, StoresFeaturesAndGoldAndKeepsThemWhenNotGiven) {
  ASSERT_THAT(store_->UpsertItems(
                  project_id_, {Item("x", std::vector<float>{0.5f, -1.25f}, 2),
                                Item("y", std::vector<float>{1, 2})}),
              IsOk());
  // Only gold for x, only features for y; the later write for y wins.
  ASSERT_THAT(store_->UpsertItems(
                  project_id_, {Item("x", std::nullopt, 1),
                                Item("y", std::vector<float>{3, 4}),
                                Item("y", std::vector<float>{5, 6})}),
              IsOk());
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].gold_label, 1);
  EXPECT_EQ((*items)[0].features, (std::vector<float>{0.5f, -1.25f}));
  EXPECT_FALSE((*items)[1].gold_label.has_value());
  EXPECT_EQ((*items)[1].features, (std::vector<float>{5, 6}));
}

TEST_F(ItemStoreTest, RejectsBadWritesAndWritesNothing) {
  EXPECT_THAT(store_->UpsertItems(project_id_,
                                  {Item("ok"), Item("x", std::vector<float>{1})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("feature dimension is 2")));
  EXPECT_THAT(store_->UpsertItems(project_id_, {Item("ok"), Item("x", {}, 3)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out of range")));
  EXPECT_THAT(store_->UpsertItems(project_id_, {Item("ok"), Item("x", {}, -1)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->UpsertItems(project_id_, {Item("")}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->UpsertItems(
                  project_id_, {Item("x", std::vector<float>{1, NAN})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not finite")));
  EXPECT_THAT(store_->LoadItems(project_id_), IsOkAndHolds(IsEmpty()));
}

TEST_F(ItemStoreTest, UnknownProjectIsNotFound) {
  EXPECT_THAT(store_->UpsertItems(project_id_ + 99, {Item("x")}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->LoadItems(project_id_ + 99),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->LoadAnnotators(project_id_ + 99),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ItemStoreTest, AnnotatorsHaveTheirOwnIndicesAndFeatures) {
  ASSERT_THAT(store_->UpsertItems(project_id_, {Item("x")}), IsOk());
  EXPECT_THAT(
      store_->UpsertAnnotators(
          project_id_, {AnnotatorWrite{"alice", std::vector<float>{0.25f}},
                        AnnotatorWrite{"bob", std::nullopt}}),
      IsOkAndHolds(ElementsAre(0, 1)));
  EXPECT_THAT(store_->UpsertAnnotators(
                  project_id_, {AnnotatorWrite{"bob", std::vector<float>{1, 2}}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<std::vector<AnnotatorRecord>> annotators =
      store_->LoadAnnotators(project_id_);
  ASSERT_THAT(annotators, IsOk());
  ASSERT_EQ(annotators->size(), 2u);
  EXPECT_EQ((*annotators)[0].external_id, "alice");
  EXPECT_EQ((*annotators)[0].features, std::vector<float>{0.25f});
  EXPECT_EQ((*annotators)[1].external_id, "bob");
  EXPECT_FALSE((*annotators)[1].features.has_value());
}

TEST_F(ItemStoreTest, ExternalIdsMayContainAnyText) {
  const std::vector<std::string> ids = {"a,b", "{x}", "q\"uote", "back\\", "NULL",
                                        " sp ", "ünï"};
  std::vector<ItemWrite> writes;
  for (const std::string& id : ids) writes.push_back(Item(id));
  ASSERT_THAT(store_->UpsertItems(project_id_, writes), IsOk());
  EXPECT_THAT(store_->UpsertItems(project_id_, writes),
              IsOkAndHolds(ElementsAre(0, 1, 2, 3, 4, 5, 6)));
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ((*items)[i].external_id, ids[i]);
  }
}

// item_store.h: "attributes a write leaves unset keep their stored value"
// (ItemWrite::priority: "unset leaves it as it was"). A features-only update
// of x keeps its gold label 2 and priority 4, as read back from the database.
TEST_F(ItemStoreTest, AFeaturesOnlyUpdateKeepsGoldAndPriority) {
  ItemWrite x = Item("x", std::nullopt, 2);
  x.priority = 4;
  ASSERT_THAT(store_->UpsertItems(project_id_, {x}), IsOk());
  ASSERT_THAT(store_->UpsertItems(project_id_, {Item("x", std::vector<float>{1, 2})}),
              IsOk());
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].features, (std::vector<float>{1, 2}));
  EXPECT_EQ((*items)[0].gold_label, 2);
  EXPECT_EQ((*items)[0].priority, 4.0);
}

// The same promise for a priority-only update: gold and features stay.
TEST_F(ItemStoreTest, APriorityOnlyUpdateKeepsGoldAndFeatures) {
  ASSERT_THAT(store_->UpsertItems(project_id_,
                                  {Item("x", std::vector<float>{0.5f, 1.5f}, 1)}),
              IsOk());
  ItemWrite p = Item("x");
  p.priority = -3;
  ASSERT_THAT(store_->UpsertItems(project_id_, {p}), IsOk());
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].gold_label, 1);
  EXPECT_EQ((*items)[0].features, (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ((*items)[0].priority, -3.0);
}

// ItemRecord::priority is a double and ItemWrite::priority "finite": a value
// with more digits than a float holds comes back exactly.
TEST_F(ItemStoreTest, PrioritiesRoundTripExactly) {
  ItemWrite x = Item("x");
  x.priority = 0.1234567890123;
  ItemWrite y = Item("y");
  y.priority = 1e300;
  ASSERT_THAT(store_->UpsertItems(project_id_, {x, y}), IsOk());
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].priority, 0.1234567890123);
  EXPECT_EQ((*items)[1].priority, 1e300);
}

// item_store.h: a write's features replace the stored ones (the later write
// wins); for annotators as for items: alice {0.25} then {0.75} is {0.75}.
TEST_F(ItemStoreTest, AnnotatorFeaturesAreReplacedByALaterWrite) {
  ASSERT_THAT(store_->UpsertAnnotators(
                  project_id_, {AnnotatorWrite{"alice", std::vector<float>{0.25f}}}),
              IsOk());
  ASSERT_THAT(store_->UpsertAnnotators(
                  project_id_, {AnnotatorWrite{"alice", std::vector<float>{0.75f}}}),
              IsOk());
  // A write without features keeps them.
  ASSERT_THAT(store_->UpsertAnnotators(project_id_, {AnnotatorWrite{"alice", std::nullopt}}),
              IsOk());
  absl::StatusOr<std::vector<AnnotatorRecord>> annotators =
      store_->LoadAnnotators(project_id_);
  ASSERT_THAT(annotators, IsOk());
  ASSERT_EQ(annotators->size(), 1u);
  EXPECT_EQ((*annotators)[0].features, std::vector<float>{0.75f});
}

// item_store.h / project_changes.h: UpsertItems marks the project changed
// "always for items" (a new plain item included) and returns the project's
// new change_seq; annotators "when a write creates one or carries features" (change_seq
// "left as is otherwise"). ProjectRecord::change_seq reads the same counter.
TEST_F(ItemStoreTest, ItemWritesNewAnnotatorsAndAnnotatorFeaturesBumpTheProjectsChangeSeq) {
  ProjectStore projects(&pool());
  absl::StatusOr<ProjectRecord> before = projects.GetProject(project_id_);
  ASSERT_THAT(before, IsOk());

  int64_t seq = -1;
  ASSERT_THAT(store_->UpsertItems(project_id_, {Item("plain")}, &seq), IsOk());
  EXPECT_GT(seq, before->change_seq);
  EXPECT_EQ(projects.GetProject(project_id_)->change_seq, seq);

  // Re-sending the same plain item is an item write too.
  int64_t again = -1;
  ASSERT_THAT(store_->UpsertItems(project_id_, {Item("plain")}, &again), IsOk());
  EXPECT_GT(again, seq);

  // A new annotator without features: the other replicas must learn of it, a bump.
  int64_t created = -1;
  ASSERT_THAT(store_->UpsertAnnotators(project_id_, {AnnotatorWrite{"bob", std::nullopt}},
                                       &created),
              IsOk());
  EXPECT_GT(created, again);
  EXPECT_EQ(projects.GetProject(project_id_)->change_seq, created);

  // The same annotator again, without features: nothing to re-read, no bump.
  int64_t untouched = -7;
  ASSERT_THAT(store_->UpsertAnnotators(project_id_, {AnnotatorWrite{"bob", std::nullopt}},
                                       &untouched),
              IsOk());
  EXPECT_EQ(untouched, -7);
  EXPECT_EQ(projects.GetProject(project_id_)->change_seq, created);

  int64_t with_features = -1;
  ASSERT_THAT(store_->UpsertAnnotators(
                  project_id_, {AnnotatorWrite{"bob", std::vector<float>{1}}},
                  &with_features),
              IsOk());
  EXPECT_GT(with_features, created);
  EXPECT_EQ(projects.GetProject(project_id_)->change_seq, with_features);
}

// item_store.h: items and annotators are "of a project", indexed 0..n-1 per
// project. Two projects both have an item and an annotator at index 0: writing
// attributes of one project's leaves the other's as stored, and loads return
// only the project's own entities.
// project_changes.h: every write of a project's items "bumps projects.change_seq and sends NOTIFY
// on kProjectChangesChannel with the project's id": a listening replica hears each writing
// project's own id, once per write, and the change_seq returned is the next one.
TEST_F(ItemStoreTest, EachWriteNotifiesItsOwnProjectAndBumpsItsChangeSeqByOne) {
  struct Receiver final : pqxx::notification_receiver {
    Receiver(pqxx::connection& c, std::vector<std::string>& payloads)
        : pqxx::notification_receiver(c, kProjectChangesChannel), payloads(payloads) {}
    void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
    std::vector<std::string>& payloads;
  };
  pqxx::connection listener(url());
  std::vector<std::string> payloads;
  Receiver receiver(listener, payloads);
  pqxx::nontransaction(listener).exec("SELECT 1");  // The LISTEN is in place.

  absl::StatusOr<int64_t> other = CreateProject("other");
  ASSERT_THAT(other, IsOk());
  int64_t first = 0, second = 0, theirs = 0;
  ASSERT_THAT(store_->UpsertItems(project_id_, {Item("x")}, &first), IsOk());
  ASSERT_THAT(store_->UpsertItems(*other, {Item("y")}, &theirs), IsOk());
  ASSERT_THAT(store_->UpsertItems(project_id_, {Item("z")}, &second), IsOk());
  EXPECT_EQ(second, first + 1);
  while (listener.await_notification(0, 200'000) > 0) {
  }
  EXPECT_THAT(payloads, ElementsAre(std::to_string(project_id_), std::to_string(*other),
                                    std::to_string(project_id_)));
}

TEST_F(ItemStoreTest, WritesAndLoadsStayWithinTheirProject) {
  absl::StatusOr<int64_t> created = CreateProject("other");
  ASSERT_THAT(created, IsOk());
  const int64_t other_id = *created;

  ItemWrite theirs = Item("theirs", std::vector<float>{7, 8}, 2);
  theirs.priority = 9;
  ASSERT_THAT(store_->UpsertItems(other_id, {theirs}), IsOkAndHolds(ElementsAre(0)));
  ASSERT_THAT(store_->UpsertAnnotators(other_id,
                                       {AnnotatorWrite{"carol", std::vector<float>{0.5f}}}),
              IsOkAndHolds(ElementsAre(0)));

  ItemWrite mine = Item("mine", std::vector<float>{1, 2}, 1);
  mine.priority = 3;
  ASSERT_THAT(store_->UpsertItems(project_id_, {mine}), IsOkAndHolds(ElementsAre(0)));
  ASSERT_THAT(store_->UpsertAnnotators(project_id_,
                                       {AnnotatorWrite{"alice", std::vector<float>{0.25f}}}),
              IsOkAndHolds(ElementsAre(0)));

  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(other_id);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].external_id, "theirs");
  EXPECT_EQ((*items)[0].features, (std::vector<float>{7, 8}));
  EXPECT_EQ((*items)[0].gold_label, 2);
  EXPECT_EQ((*items)[0].priority, 9.0);
  absl::StatusOr<std::vector<AnnotatorRecord>> annotators = store_->LoadAnnotators(other_id);
  ASSERT_THAT(annotators, IsOk());
  ASSERT_EQ(annotators->size(), 1u);
  EXPECT_EQ((*annotators)[0].external_id, "carol");
  EXPECT_EQ((*annotators)[0].features, std::vector<float>{0.5f});

  items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].external_id, "mine");
  EXPECT_EQ((*items)[0].gold_label, 1);
  annotators = store_->LoadAnnotators(project_id_);
  ASSERT_THAT(annotators, IsOk());
  ASSERT_EQ(annotators->size(), 1u);
  EXPECT_EQ((*annotators)[0].external_id, "alice");
}

// item_store.h: a gold label is valid "in [0, K)": both ends of the range
// are stored (the project has K = 3 classes).
TEST_F(ItemStoreTest, GoldLabelsAtBothEndsOfTheRangeAreStored) {
  ASSERT_THAT(store_->UpsertItems(project_id_, {Item("first", {}, 0), Item("last", {}, 2)}),
              IsOk());
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].gold_label, 0);
  EXPECT_EQ((*items)[1].gold_label, 2);
}

// item_store.h: ItemWrite::priority must be finite; a write with a NaN or
// infinite priority is INVALID_ARGUMENT, and (all or nothing) stores nothing.
TEST_F(ItemStoreTest, RejectsANonFinitePriorityAndWritesNothing) {
  for (double bad : {static_cast<double>(NAN), static_cast<double>(INFINITY)}) {
    SCOPED_TRACE(bad);
    ItemWrite x = Item("x");
    x.priority = bad;
    EXPECT_THAT(store_->UpsertItems(project_id_, {Item("ok"), x}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not finite")));
  }
  EXPECT_THAT(store_->LoadItems(project_id_), IsOkAndHolds(IsEmpty()));
}

// item_store.h: annotator writes are validated like item writes (an empty
// external id, features that are not finite: INVALID_ARGUMENT), all or nothing.
TEST_F(ItemStoreTest, RejectsBadAnnotatorWritesAndWritesNothing) {
  EXPECT_THAT(store_->UpsertAnnotators(project_id_, {AnnotatorWrite{"ok", std::nullopt},
                                                     AnnotatorWrite{"", std::nullopt}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->UpsertAnnotators(
                  project_id_, {AnnotatorWrite{"ok", std::nullopt},
                                AnnotatorWrite{"x", std::vector<float>{INFINITY}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not finite")));
  EXPECT_THAT(store_->LoadAnnotators(project_id_), IsOkAndHolds(IsEmpty()));
}

// item_store.h: "for an id listed twice, the later write wins" — for the gold
// label and the priority as for features, within one call.
TEST_F(ItemStoreTest, TheLaterWriteOfAnIdInOneCallWinsForGoldAndPriority) {
  ItemWrite first = Item("x", std::nullopt, 0);
  first.priority = 1;
  ItemWrite second = Item("x", std::nullopt, 2);
  second.priority = 5;
  ASSERT_THAT(store_->UpsertItems(project_id_, {first, second}), IsOkAndHolds(ElementsAre(0, 0)));
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].gold_label, 2);
  EXPECT_EQ((*items)[0].priority, 5.0);
}

// project_store.h: ProjectRecord.num_items and num_annotators are the items
// and annotators stored so far (the project's next dense indices), each
// counting its own kind; an id written twice is one entity.
TEST_F(ItemStoreTest, TheProjectCountsItsStoredItemsAndAnnotatorsSeparately) {
  ASSERT_THAT(store_->UpsertItems(project_id_, {Item("x"), Item("y"), Item("x"), Item("z")}),
              IsOkAndHolds(ElementsAre(0, 1, 0, 2)));
  ASSERT_THAT(store_->UpsertAnnotators(project_id_, {AnnotatorWrite{"ann", std::nullopt},
                                                     AnnotatorWrite{"bob", std::nullopt}}),
              IsOkAndHolds(ElementsAre(0, 1)));
  ProjectStore projects(&pool());
  absl::StatusOr<ProjectRecord> project = projects.GetProject(project_id_);
  ASSERT_THAT(project, IsOk());
  EXPECT_EQ(project->num_items, 3);
  EXPECT_EQ(project->num_annotators, 2);
  absl::StatusOr<std::vector<ProjectRecord>> listed = projects.ListProjects();
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].num_items, 3);
  EXPECT_EQ((*listed)[0].num_annotators, 2);
}

// item_store.h: items are named by external ids "of a project": an id that
// another project already holds is a new item here, with this project's next
// index, and does not resolve to the other project's index.
TEST_F(ItemStoreTest, AnIdThatAnotherProjectHoldsIsANewEntityHere) {
  absl::StatusOr<int64_t> created = CreateProject("other");
  ASSERT_THAT(created, IsOk());
  const int64_t other_id = *created;
  ASSERT_THAT(store_->UpsertItems(other_id, {Item("theirs"), Item("shared")}),
              IsOkAndHolds(ElementsAre(0, 1)));
  ASSERT_THAT(store_->UpsertAnnotators(other_id, {AnnotatorWrite{"carol", std::nullopt},
                                                  AnnotatorWrite{"dan", std::nullopt}}),
              IsOkAndHolds(ElementsAre(0, 1)));

  EXPECT_THAT(store_->UpsertItems(project_id_, {Item("shared")}), IsOkAndHolds(ElementsAre(0)));
  EXPECT_THAT(store_->UpsertAnnotators(project_id_, {AnnotatorWrite{"dan", std::nullopt}}),
              IsOkAndHolds(ElementsAre(0)));
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].external_id, "shared");
  absl::StatusOr<std::vector<AnnotatorRecord>> annotators = store_->LoadAnnotators(project_id_);
  ASSERT_THAT(annotators, IsOk());
  ASSERT_EQ(annotators->size(), 1u);
  EXPECT_EQ((*annotators)[0].external_id, "dan");
}

// item_store.h: "attributes a write leaves unset keep their stored value", also
// within one call: a later write of the id that carries only features keeps
// the gold label and priority an earlier write of that call gave.
TEST_F(ItemStoreTest, ALaterWriteInOneCallKeepsTheAttributesItLeavesUnset) {
  ItemWrite first = Item("x", std::nullopt, 2);
  first.priority = 4;
  ItemWrite second = Item("x", std::vector<float>{1, 2});
  ASSERT_THAT(store_->UpsertItems(project_id_, {first, second}), IsOkAndHolds(ElementsAre(0, 0)));
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].gold_label, 2);
  EXPECT_EQ((*items)[0].priority, 4.0);
  EXPECT_EQ((*items)[0].features, (std::vector<float>{1, 2}));
}

// item_store.h: "attributes a write leaves unset keep their stored value", also within one
// call: a later write of the id that carries only a gold label and a priority keeps the
// features an earlier write of that call gave (the mirror of the test above).
TEST_F(ItemStoreTest, ALaterGoldOnlyWriteInOneCallKeepsTheFeaturesOfAnEarlierOne) {
  ItemWrite first = Item("x", std::vector<float>{1, 2});
  ItemWrite second = Item("x", std::nullopt, 2);
  second.priority = 4;
  ASSERT_THAT(store_->UpsertItems(project_id_, {first, second}), IsOkAndHolds(ElementsAre(0, 0)));
  absl::StatusOr<std::vector<ItemRecord>> items = store_->LoadItems(project_id_);
  ASSERT_THAT(items, IsOk());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].features, (std::vector<float>{1, 2}));
  EXPECT_EQ((*items)[0].gold_label, 2);
  EXPECT_EQ((*items)[0].priority, 4.0);
}

// item_store.h: features are only for a kind whose dimension is "> 0": in a
// project without item or annotator features, even an empty feature vector
// is INVALID_ARGUMENT, and nothing is written.
TEST_F(ItemStoreTest, EmptyFeaturesAreRefusedWhenTheProjectHasNoFeatures) {
  ProjectStore projects(&pool());
  ProjectRecord plain;
  plain.name = "plain";
  plain.classes = {"a", "b"};
  absl::StatusOr<ProjectRecord> created = projects.CreateProject(plain);
  ASSERT_THAT(created, IsOk());
  EXPECT_THAT(store_->UpsertItems(created->project_id, {Item("x", std::vector<float>{})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("feature dimension 0")));
  EXPECT_THAT(store_->UpsertAnnotators(created->project_id,
                                       {AnnotatorWrite{"ann", std::vector<float>{}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("feature dimension 0")));
  EXPECT_THAT(store_->LoadItems(created->project_id), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store_->LoadAnnotators(created->project_id), IsOkAndHolds(IsEmpty()));
}

// item_store.h: loads return annotators "ordered by index (so result[i].index == i)", which
// is the order of first appearance, not of their ids: "zed", "amy", "mia" load in that order.
TEST_F(ItemStoreTest, AnnotatorsLoadInIndexOrderNotInIdOrder) {
  ASSERT_THAT(store_->UpsertAnnotators(project_id_, {AnnotatorWrite{"zed", std::nullopt},
                                                     AnnotatorWrite{"amy", std::nullopt}}),
              IsOkAndHolds(ElementsAre(0, 1)));
  ASSERT_THAT(store_->UpsertAnnotators(project_id_, {AnnotatorWrite{"mia", std::nullopt}}),
              IsOkAndHolds(ElementsAre(2)));
  absl::StatusOr<std::vector<AnnotatorRecord>> annotators = store_->LoadAnnotators(project_id_);
  ASSERT_THAT(annotators, IsOk());
  ASSERT_EQ(annotators->size(), 3u);
  const std::vector<std::string> ids = {"zed", "amy", "mia"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*annotators)[i].index, i);
    EXPECT_EQ((*annotators)[i].external_id, ids[i]);
  }
}

}  // namespace
}  // namespace storage
}  // namespace verity
