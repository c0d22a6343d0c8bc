// LiveProject under several writers (server replicas) of one project: memory holds the
// database's live labels as of applied_seq(), and no label is ever applied over a newer one of
// its pair, whatever order the own commits and the catch-up reads arrive in.
//
// Every item here has labels of one annotator at most, so an item's served majority-vote
// posterior names that annotator's live label.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/state/live_project.h"
#include "storage/annotation_store.h"

namespace verity::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Optional;

std::unique_ptr<LiveProject> EmptyProject() {
  LiveProject::Identity id;
  id.project_id = 7;
  id.name = "replicated";
  id.classes = {"a", "b", "c"};
  auto project = LiveProject::Create(id, v1::ProjectSettings(), {});
  EXPECT_TRUE(project.ok()) << project.status();
  return std::move(*project);
}

// Item i's id is "i<i>"; the annotator is "w0" (index 0).
CommittedLabel Own(int32_t item, int32_t label, int64_t seq, bool changed = true) {
  static const std::vector<std::string>* ids = [] {
    auto* v = new std::vector<std::string>;
    for (int i = 0; i < 16; ++i) v->push_back(absl::StrCat("i", i));
    return v;
  }();
  return {item, (*ids)[item], 0, "w0", label, seq, changed};
}

storage::FollowedLabel Followed(int32_t item, int32_t label, int64_t seq) {
  return {item, absl::StrCat("i", item), 0, "w0", label, seq};
}

// The served label of `item` (the argmax of its posterior), or nullopt if it has no label.
std::optional<int32_t> ServedLabel(const LiveProject& project, int32_t item) {
  std::shared_ptr<const ProjectSnapshot> snapshot = project.snapshot();
  if (item >= snapshot->posteriors.num_items() || snapshot->posteriors.num_labels(item) == 0) {
    return std::nullopt;
  }
  absl::Span<const double> p = snapshot->posteriors.probabilities(item);
  int32_t best = 0;
  for (int32_t c = 1; c < static_cast<int32_t>(p.size()); ++c) {
    if (p[c] > p[best]) best = c;
  }
  return best;
}

void Publish(LiveProject& project, const std::optional<std::vector<int32_t>>& touched) {
  ASSERT_TRUE(touched.has_value());
  project.PublishCommitted(*touched);
}

TEST(LiveProjectReplicationTest, OwnCommitsThatFollowMemoryApplyDirectly) {
  auto project = EmptyProject();
  EXPECT_EQ(project->applied_seq(), 0);
  std::vector<CommittedLabel> first = {Own(0, 1, 1), Own(1, 2, 2)};
  auto touched = project->RegisterOwnCommit(first, storage::DrawnSeqs{7, 1, 2});
  EXPECT_THAT(touched, Optional(ElementsAre(0, 1)));
  Publish(*project, touched);
  EXPECT_EQ(project->applied_seq(), 2);
  EXPECT_THAT(ServedLabel(*project, 0), Optional(1));
  EXPECT_THAT(ServedLabel(*project, 1), Optional(2));

  // A commit of duplicates only draws no seqs and moves nothing.
  std::vector<CommittedLabel> resend = {Own(0, 1, 1, /*changed=*/false)};
  EXPECT_THAT(project->RegisterOwnCommit(resend, std::nullopt), Optional(IsEmpty()));
  EXPECT_EQ(project->applied_seq(), 2);
}

TEST(LiveProjectReplicationTest, AnOwnCommitAfterAnotherWritersWaitsForTheCatchUp) {
  auto project = EmptyProject();
  // Another replica committed seqs 1..4; this one's commit drew 5..6.
  std::vector<CommittedLabel> own = {Own(5, 2, 5), Own(6, 1, 6)};
  EXPECT_EQ(project->RegisterOwnCommit(own, storage::DrawnSeqs{7, 5, 6}), std::nullopt);
  EXPECT_FALSE(project->HasLabelled(5, 0)) << "nothing is applied past a gap";
  EXPECT_EQ(project->applied_seq(), 0);

  // The catch-up read, made after the own commit, holds both writers' labels.
  storage::LabelsSince since;
  for (int64_t seq = 1; seq <= 4; ++seq) since.labels.push_back(Followed(seq, 0, seq));
  since.labels.push_back(Followed(5, 2, 5));
  since.labels.push_back(Followed(6, 1, 6));
  since.drawn_through = 6;
  EXPECT_TRUE(project->ApplyFollowed(since));
  EXPECT_EQ(project->applied_seq(), 6);
  for (int32_t item = 1; item <= 4; ++item) EXPECT_THAT(ServedLabel(*project, item), Optional(0));

  // Asked again, the own commit finds itself applied: nothing more to do.
  EXPECT_THAT(project->RegisterOwnCommit(own, storage::DrawnSeqs{7, 5, 6}), Optional(IsEmpty()));
  EXPECT_THAT(ServedLabel(*project, 5), Optional(2));
  EXPECT_THAT(ServedLabel(*project, 6), Optional(1));
}

TEST(LiveProjectReplicationTest, AnOwnCommitNeverRevertsALaterRevisionAlreadyFollowed) {
  auto project = EmptyProject();
  // This replica commits item 3 = label 1 at seq 3; before its pipeline registers it, another
  // replica revises the same pair to label 2 at seq 4, and the follower applies a read of both
  // (the read shows only the live row: seq 4).
  storage::LabelsSince since;
  since.labels = {Followed(1, 0, 1), Followed(2, 0, 2), Followed(3, 2, 4)};
  since.drawn_through = 4;
  EXPECT_TRUE(project->ApplyFollowed(since));
  std::vector<CommittedLabel> own = {Own(3, 1, 3)};
  auto touched = project->RegisterOwnCommit(own, storage::DrawnSeqs{7, 3, 3});
  EXPECT_THAT(touched, Optional(IsEmpty()));
  Publish(*project, touched);
  EXPECT_THAT(ServedLabel(*project, 3), Optional(2));
  EXPECT_EQ(project->applied_seq(), 4);
}

TEST(LiveProjectReplicationTest, AReadOlderThanMemoryIsIgnored) {
  auto project = EmptyProject();
  std::vector<CommittedLabel> own = {Own(0, 1, 1), Own(0, 2, 2)};  // a revision
  Publish(*project, project->RegisterOwnCommit(own, storage::DrawnSeqs{7, 1, 2}));
  EXPECT_THAT(ServedLabel(*project, 0), Optional(2));
  // A read made between the two commits (through seq 1) arrives late.
  storage::LabelsSince stale;
  stale.labels = {Followed(0, 1, 1)};
  stale.drawn_through = 1;
  EXPECT_FALSE(project->ApplyFollowed(stale));
  EXPECT_THAT(ServedLabel(*project, 0), Optional(2));
  EXPECT_EQ(project->applied_seq(), 2);
}

TEST(LiveProjectReplicationTest, AnOutOfOrderCommitRefusesReadsThatDoNotIncludeIt) {
  auto project = EmptyProject();
  // The catch-up read failed: the own commit (item 0 revised to 1 at seq 5) is served anyway.
  std::vector<CommittedLabel> own = {Own(0, 1, 5)};
  project->PublishCommitted(
      project->RegisterOwnCommitOutOfOrder(own, storage::DrawnSeqs{7, 5, 5}));
  EXPECT_THAT(ServedLabel(*project, 0), Optional(1));
  EXPECT_EQ(project->applied_seq(), 0);

  // A read through seq 4 holds the pair's older label: applying it would revert the pair.
  storage::LabelsSince before;
  before.labels = {Followed(0, 0, 3), Followed(1, 2, 4)};
  before.drawn_through = 4;
  EXPECT_FALSE(project->ApplyFollowed(before));
  EXPECT_THAT(ServedLabel(*project, 0), Optional(1));
  EXPECT_FALSE(project->HasLabelled(1, 0));

  // A read that includes the commit fills the gap.
  storage::LabelsSince after;
  after.labels = {Followed(1, 2, 4), Followed(0, 1, 5)};
  after.drawn_through = 5;
  EXPECT_TRUE(project->ApplyFollowed(after));
  EXPECT_EQ(project->applied_seq(), 5);
  EXPECT_THAT(ServedLabel(*project, 0), Optional(1));
  EXPECT_THAT(ServedLabel(*project, 1), Optional(2));
}

// A resend after an UNAVAILABLE commit: its writes are duplicates (they draw no seq), but the
// first commit's outcome never reached memory, so the duplicate is applied, ahead of
// applied_seq(). A catch-up read from before that commit must then be refused: it holds the
// pair's older label.
TEST(LiveProjectReplicationTest, ADuplicateAppliedAheadRefusesReadsFromBeforeIt) {
  auto project = EmptyProject();
  std::vector<CommittedLabel> resent = {Own(0, 1, 3, /*changed=*/false)};
  Publish(*project, project->RegisterOwnCommit(resent, std::nullopt));
  EXPECT_THAT(ServedLabel(*project, 0), Optional(1));
  storage::LabelsSince before;
  before.labels = {Followed(0, 0, 2)};
  before.drawn_through = 2;
  EXPECT_FALSE(project->ApplyFollowed(before));
  EXPECT_THAT(ServedLabel(*project, 0), Optional(1));
}

// The label at exactly applied_seq() is memory's already: registering it again (the follower
// applied its commit first) changes nothing, even when memory has since taken a newer label of
// its pair out of order.
TEST(LiveProjectReplicationTest, AnOwnCommitAtTheAppliedSeqIsNotAppliedAgain) {
  auto project = EmptyProject();
  storage::LabelsSince since;
  since.labels = {Followed(1, 0, 1), Followed(2, 0, 2), Followed(3, 0, 3), Followed(0, 1, 4)};
  since.drawn_through = 4;
  EXPECT_TRUE(project->ApplyFollowed(since));
  project->PublishCommitted(
      project->RegisterOwnCommitOutOfOrder({Own(0, 2, 6)}, storage::DrawnSeqs{7, 6, 6}));
  EXPECT_THAT(ServedLabel(*project, 0), Optional(2));
  std::vector<CommittedLabel> own = {Own(0, 1, 4)};
  auto touched = project->RegisterOwnCommit(own, storage::DrawnSeqs{7, 4, 4});
  EXPECT_THAT(touched, Optional(IsEmpty()));
  Publish(*project, touched);
  EXPECT_THAT(ServedLabel(*project, 0), Optional(2));
}

// ProjectCounts::num_revisions: the revisions kept in history "as of the load or this server's
// latest commit to the project (each commit reports the count over every replica's commits)".
TEST(LiveProjectReplicationTest, RevisionsAreCountedAsOfTheLoadAndEachOwnCommit) {
  LiveProject::Identity id;
  id.project_id = 7;
  id.name = "revised";
  id.classes = {"a", "b"};
  LiveProject::StoredState stored;
  stored.item_ids = {"i0", "i1"};
  stored.annotator_ids = {"w0"};
  stored.labels = {{0, 0, 1, 3}};
  stored.history_rows = 4;
  auto project = LiveProject::Create(id, v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ((*project)->Counts().num_revisions, 4);
  // An own commit that revised item 0's label (seq 4 follows memory): history holds 5 rows.
  std::vector<CommittedLabel> revision = {{0, "i0", 0, "w0", 0, 4, true}};
  EXPECT_THAT((*project)->RegisterOwnCommit(revision, storage::DrawnSeqs{7, 4, 4, 5}),
              Optional(ElementsAre(0)));
  EXPECT_EQ((*project)->Counts().num_revisions, 5);
  // One that arrives out of order reports the count over every replica's commits too.
  std::vector<CommittedLabel> later = {{1, "i1", 0, "w0", 1, 9, true}};
  (*project)->RegisterOwnCommitOutOfOrder(later, storage::DrawnSeqs{7, 9, 9, 8});
  EXPECT_EQ((*project)->Counts().num_revisions, 8);
}

TEST(LiveProjectReplicationTest, RestoredProjectsStartAtTheirNewestStoredSeq) {
  LiveProject::Identity id;
  id.project_id = 7;
  id.name = "restored";
  id.classes = {"a", "b"};
  LiveProject::StoredState stored;
  stored.item_ids = {"i0", "i1"};
  stored.gold = {-1, -1};
  stored.annotator_ids = {"w0"};
  stored.labels = {{0, 0, 1, 3}, {1, 0, 0, 9}};
  auto project = LiveProject::Create(id, v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ((*project)->applied_seq(), 9);
  // The next own commit that drew 10 follows it directly.
  std::vector<CommittedLabel> own = {{0, "i0", 0, "w0", 0, 10, true}};
  EXPECT_THAT((*project)->RegisterOwnCommit(own, storage::DrawnSeqs{7, 10, 10}),
              Optional(ElementsAre(0)));
}

TEST(LiveProjectReplicationTest, StoredEntitiesApplyOnlyWhatDiffersFromMemory) {
  auto project = EmptyProject();
  ASSERT_EQ(project->followed_change_seq(), 0);
  // This server's own write (change 1) directly follows: memory stays current.
  project->ApplyItems({{0, "i0", 1, std::nullopt, std::nullopt}});
  project->NoteOwnChange(1);
  EXPECT_EQ(project->followed_change_seq(), 1);
  // Another replica's write came first (change 2): this one's (3) leaves memory behind.
  project->NoteOwnChange(3);
  EXPECT_EQ(project->followed_change_seq(), 1);

  std::vector<storage::ItemRecord> items(3);
  items[0] = {0, "i0", 1, 0.0, std::nullopt};  // as memory holds it
  items[1] = {1, "i1", 2, 0.5, std::nullopt};  // new, gold 2, priority 0.5
  items[2] = {2, "i2", std::nullopt, 0.0, std::nullopt};  // new
  std::vector<storage::AnnotatorRecord> annotators = {{0, "w0", std::nullopt}};
  v1::ProjectSettings settings;
  settings.mutable_assignment()->set_max_labels_per_item(4);
  EXPECT_TRUE(project->ApplyStoredEntities(settings, items, annotators, 3));
  EXPECT_EQ(project->followed_change_seq(), 3);
  EXPECT_EQ(project->settings().assignment().max_labels_per_item(), 4);
  EXPECT_THAT(project->GoldItems(), ElementsAre(0, 1));
  EXPECT_EQ(project->snapshot()->posteriors.num_items(), 3);
  EXPECT_THAT(project->FindAnnotator("w0"), Optional(0));
  // The same state again, or an older one, changes nothing.
  EXPECT_FALSE(project->ApplyStoredEntities(settings, items, annotators, 4));
  EXPECT_FALSE(project->ApplyStoredEntities(v1::ProjectSettings(), {}, {}, 2));
  EXPECT_EQ(project->settings().assignment().max_labels_per_item(), 4);
}


// followed_change_seq() is the change_seq memory reflects: a stored state read as of it (or
// before) is no news. Here the own change 3 is in memory but not yet followed (another
// replica's change 2 lies before it); a late read as of change 1 must not take the item's
// priority back.
TEST(LiveProjectReplicationTest, StoredEntitiesAsOfTheFollowedChangeAreIgnored) {
  auto project = EmptyProject();
  project->ApplyItems({{0, "i0", std::nullopt, 0.5}});
  project->NoteOwnChange(1);
  project->ApplyItems({{0, "i0", std::nullopt, 0.9}});
  project->NoteOwnChange(3);
  ASSERT_EQ(project->followed_change_seq(), 1);
  std::vector<storage::ItemRecord> as_of_1(1);
  as_of_1[0] = {0, "i0", std::nullopt, 0.5, std::nullopt};
  EXPECT_FALSE(project->ApplyStoredEntities(v1::ProjectSettings(), as_of_1, {}, 1));
  EXPECT_EQ(project->snapshot()->posteriors.priority(0), 0.9);
  EXPECT_EQ(project->followed_change_seq(), 1);
}

// ApplyStoredEntities applies "where memory differs (new items, gold labels, priorities, ...)":
// a known item's changed gold label, and a new item's priority, are served; true is returned.
TEST(LiveProjectReplicationTest, StoredEntitiesApplyAChangedGoldLabelAndANewItemsPriority) {
  auto project = EmptyProject();
  project->ApplyItems({{0, "i0", 1, std::nullopt, std::nullopt}});
  project->NoteOwnChange(1);
  std::vector<storage::ItemRecord> items(2);
  items[0] = {0, "i0", 2, 0.0, std::nullopt};             // gold 1 -> 2
  items[1] = {1, "i1", std::nullopt, 0.5, std::nullopt};  // new, priority 0.5
  EXPECT_TRUE(project->ApplyStoredEntities(v1::ProjectSettings(), items, {}, 2));
  std::shared_ptr<const ProjectSnapshot> snapshot = project->snapshot();
  ASSERT_EQ(snapshot->posteriors.num_items(), 2);
  EXPECT_EQ(snapshot->posteriors.probabilities(0)[2], 1.0);
  EXPECT_EQ(snapshot->posteriors.priority(1), 0.5);
  EXPECT_THAT(project->GoldItems(), ElementsAre(0));
  // Only item 0's gold label differs from memory now.
  items[0].gold_label = 0;
  EXPECT_TRUE(project->ApplyStoredEntities(v1::ProjectSettings(), items, {}, 3));
  EXPECT_EQ(project->snapshot()->posteriors.probabilities(0)[0], 1.0);
}

// ApplyFollowed "Returns whether any item changed": a read past applied_seq() that holds no
// label memory lacks changes none (it still advances applied_seq()).
TEST(LiveProjectReplicationTest, AReadWithNothingNewChangesNoItem) {
  auto project = EmptyProject();
  storage::LabelsSince first;
  first.labels = {Followed(0, 1, 1)};
  first.drawn_through = 1;
  EXPECT_TRUE(project->ApplyFollowed(first));
  storage::LabelsSince empty;
  empty.drawn_through = 4;
  EXPECT_FALSE(project->ApplyFollowed(empty));
  EXPECT_EQ(project->applied_seq(), 4);
  EXPECT_THAT(ServedLabel(*project, 0), Optional(1));
}

// followed_change_seq() "is the project's change_seq that memory reflects": after a load, the
// change_seq read with the stored state (StoredState::change_seq); a stored state as of it is
// no news.
TEST(LiveProjectReplicationTest, ALoadedProjectFollowsTheChangeSeqItWasReadAt) {
  LiveProject::Identity id;
  id.project_id = 7;
  id.name = "loaded";
  id.classes = {"a", "b"};
  LiveProject::StoredState stored;
  stored.item_ids = {"i0"};
  stored.gold = {-1};
  stored.change_seq = 5;
  auto project = LiveProject::Create(id, v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ((*project)->followed_change_seq(), 5);
  std::vector<storage::ItemRecord> items(1);
  items[0] = {0, "i0", 1, 0.0, std::nullopt};
  EXPECT_FALSE((*project)->ApplyStoredEntities(v1::ProjectSettings(), items, {}, 5));
  EXPECT_THAT((*project)->GoldItems(), IsEmpty());
  (*project)->NoteOwnChange(6);
  EXPECT_EQ((*project)->followed_change_seq(), 6);
}

// ProjectCounts::num_revisions counts the revisions kept in history, which only grow: an own
// commit reports 6, and a late catch-up read from before it (ignored) reports 3: still 6.
TEST(LiveProjectReplicationTest, ALateReadNeverLowersTheRevisionCount) {
  auto project = EmptyProject();
  std::vector<CommittedLabel> own = {Own(0, 1, 1), Own(1, 2, 2)};
  EXPECT_THAT(project->RegisterOwnCommit(own, storage::DrawnSeqs{7, 1, 2, 6}),
              Optional(ElementsAre(0, 1)));
  EXPECT_EQ(project->Counts().num_revisions, 6);
  storage::LabelsSince late;
  late.labels = {Followed(0, 1, 1)};
  late.drawn_through = 1;
  late.history_rows = 3;
  EXPECT_FALSE(project->ApplyFollowed(late));
  EXPECT_EQ(project->Counts().num_revisions, 6);
  EXPECT_EQ(project->applied_seq(), 2);
}

// ApplyStoredEntities applies an annotator's features where they differ from memory;
// "Whatever equals memory is no change". w0's stored features (1, 2) differ from the zeros it
// was loaded with; read again as of a later change, they equal memory.
TEST(LiveProjectReplicationTest, StoredAnnotatorFeaturesApplyOnlyWhereTheyDiffer) {
  LiveProject::Identity id;
  id.project_id = 7;
  id.name = "featured";
  id.classes = {"a", "b"};
  id.annotator_feature_dim = 2;
  LiveProject::StoredState stored;
  stored.annotator_ids = {"w0"};
  stored.annotator_features = {0.0f, 0.0f};
  auto project = LiveProject::Create(id, v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  const std::vector<storage::AnnotatorRecord> annotators = {
      {0, "w0", std::vector<float>{1.0f, 2.0f}}};
  EXPECT_TRUE((*project)->ApplyStoredEntities(v1::ProjectSettings(), {}, annotators, 1));
  EXPECT_FALSE((*project)->ApplyStoredEntities(v1::ProjectSettings(), {}, annotators, 2));
  EXPECT_EQ((*project)->followed_change_seq(), 2);
}

// ApplyStoredEntities: "Whatever equals memory is no change". An item's stored features equal
// to those memory holds change nothing; different ones do.
TEST(LiveProjectReplicationTest, StoredItemFeaturesEqualToMemoryAreNoChange) {
  LiveProject::Identity id;
  id.project_id = 7;
  id.name = "item-features";
  id.classes = {"a", "b"};
  id.item_feature_dim = 2;
  LiveProject::StoredState stored;
  stored.item_ids = {"i0"};
  stored.gold = {-1};
  stored.item_features = {1.0f, 2.0f};
  auto project = LiveProject::Create(id, v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  std::vector<storage::ItemRecord> items(1);
  items[0] = {0, "i0", std::nullopt, 0.0, std::vector<float>{1.0f, 2.0f}};
  EXPECT_FALSE((*project)->ApplyStoredEntities(v1::ProjectSettings(), items, {}, 1));
  items[0].features = std::vector<float>{1.0f, 3.0f};
  EXPECT_TRUE((*project)->ApplyStoredEntities(v1::ProjectSettings(), items, {}, 2));
  EXPECT_EQ((*project)->followed_change_seq(), 2);
}

}  // namespace
}  // namespace verity::server
