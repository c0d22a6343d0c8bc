#include "storage/annotation_store.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "pqxx/result"
#include "storage/item_store.h"
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

// (label, seq, revision) of a row in annotation_history.
using HistoryRow = std::tuple<int32_t, int64_t, int32_t>;

class AnnotationStoreTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<AnnotationStore>(&pool());
    project_id_ = CreateProject("p", 3);
  }

  int64_t CreateProject(const std::string& name, int num_classes) {
    ProjectStore projects(&pool());
    ProjectRecord p;
    p.name = name;
    for (int k = 0; k < num_classes; ++k) p.classes.push_back(absl::StrCat("c", k));
    absl::StatusOr<ProjectRecord> created = projects.CreateProject(p);
    EXPECT_THAT(created, IsOk());
    return created.ok() ? created->project_id : -1;
  }

  AnnotationWrite Write(const std::string& item, const std::string& annotator,
                        int32_t label) const {
    AnnotationWrite w;
    w.project_id = project_id_;
    w.item_id = item;
    w.annotator_id = annotator;
    w.label = label;
    return w;
  }

  std::vector<HistoryRow> History(int32_t item, int32_t annotator) {
    return *pool().WithTransaction(
        "history", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<HistoryRow>> {
          std::vector<HistoryRow> rows;
          for (const pqxx::row& r : txn.exec_params(
                   "SELECT label, seq, revision FROM annotation_history "
                   "WHERE project_id = $1 AND item_index = $2 AND "
                   "annotator_index = $3 ORDER BY revision",
                   project_id_, item, annotator)) {
            rows.emplace_back(r[0].as<int32_t>(), r[1].as<int64_t>(),
                              r[2].as<int32_t>());
          }
          return rows;
        });
  }

  int64_t CountRows(const std::string& table) {
    return *pool().WithTransaction(
        "count", [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
          return txn.exec1("SELECT count(*) FROM " + table)[0].as<int64_t>();
        });
  }

  std::unique_ptr<AnnotationStore> store_;
  int64_t project_id_ = 0;
};

TEST_F(AnnotationStoreTest, AcceptsThenDuplicateThenRevisionKeepingHistory) {
  absl::StatusOr<std::vector<WriteResult>> first =
      store_->CommitAnnotations({Write("i", "a", 1)});
  ASSERT_THAT(first, IsOk());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].outcome, WriteOutcome::kAccepted);
  EXPECT_EQ((*first)[0].item_index, 0);
  EXPECT_EQ((*first)[0].annotator_index, 0);
  const int64_t seq1 = (*first)[0].seq;
  EXPECT_GT(seq1, 0);

  absl::StatusOr<std::vector<WriteResult>> resend =
      store_->CommitAnnotations({Write("i", "a", 1)});
  ASSERT_THAT(resend, IsOk());
  EXPECT_EQ((*resend)[0].outcome, WriteOutcome::kDuplicate);
  EXPECT_EQ((*resend)[0].seq, seq1);
  EXPECT_THAT(History(0, 0), IsEmpty());

  absl::StatusOr<std::vector<WriteResult>> revised =
      store_->CommitAnnotations({Write("i", "a", 2)});
  ASSERT_THAT(revised, IsOk());
  EXPECT_EQ((*revised)[0].outcome, WriteOutcome::kRevised);
  const int64_t seq2 = (*revised)[0].seq;
  EXPECT_GT(seq2, seq1);
  EXPECT_THAT(History(0, 0), ElementsAre(HistoryRow{1, seq1, 0}));

  absl::StatusOr<std::vector<LiveAnnotation>> live =
      store_->LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].label, 2);
  EXPECT_EQ((*live)[0].seq, seq2);
  EXPECT_THAT(store_->CountLiveAnnotations(project_id_), IsOkAndHolds(1));
}

// A late retry of an old label must not replace a newer one: when both carry client_time,
// the newer client_time stays live and the older label goes to the history, acked stale.
TEST_F(AnnotationStoreTest, AnOlderClientTimeArrivingLaterIsStaleAndKeptInHistory) {
  const absl::Time t2 = absl::FromUnixSeconds(1700000000) + absl::Microseconds(2);
  const absl::Time t1 = t2 - absl::Microseconds(1);
  AnnotationWrite a = Write("i", "a", 1);
  a.client_time = t2;
  absl::StatusOr<std::vector<WriteResult>> first = store_->CommitAnnotations({a});
  ASSERT_THAT(first, IsOk());
  const int64_t seq_a = (*first)[0].seq;

  AnnotationWrite b = Write("i", "a", 2);
  b.client_time = t1;
  absl::StatusOr<std::vector<WriteResult>> late = store_->CommitAnnotations({b});
  ASSERT_THAT(late, IsOk());
  EXPECT_EQ((*late)[0].outcome, WriteOutcome::kStale);
  // The result describes the live row, which is still A.
  EXPECT_EQ((*late)[0].label, 1);
  EXPECT_EQ((*late)[0].seq, seq_a);
  absl::StatusOr<std::vector<LiveAnnotation>> live = store_->LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].label, 1);
  EXPECT_EQ((*live)[0].seq, seq_a);
  const std::vector<HistoryRow> history = History(0, 0);
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(std::get<0>(history[0]), 2);
  EXPECT_GT(std::get<1>(history[0]), seq_a);  // Its own seq: every stored version has one.

  // The same label with an older time is still a duplicate; a newer time revises.
  AnnotationWrite same = Write("i", "a", 1);
  same.client_time = t1;
  AnnotationWrite newer = Write("i", "a", 0);
  newer.client_time = t2 + absl::Seconds(1);
  absl::StatusOr<std::vector<WriteResult>> more = store_->CommitAnnotations({same, newer});
  ASSERT_THAT(more, IsOk());
  EXPECT_EQ((*more)[0].outcome, WriteOutcome::kDuplicate);
  EXPECT_EQ((*more)[1].outcome, WriteOutcome::kRevised);
  EXPECT_EQ((*more)[1].label, 0);
  EXPECT_EQ(History(0, 0).size(), 2u);
}

// A resend of the live label made later (a later client_time, or the only one) keeps the
// label's version (label, seq, no history) but moves its client_time, so a different label
// made between the two and arriving last is stale. A resend made earlier, or without a time,
// leaves the time as it was. No resend draws a seq: the stale label gets the next one.
TEST_F(AnnotationStoreTest, ALaterResendOfTheLiveLabelMovesItsClientTime) {
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  AnnotationWrite first = Write("i", "a", 0);
  first.client_time = t;
  absl::StatusOr<std::vector<WriteResult>> r = store_->CommitAnnotations({first});
  ASSERT_THAT(r, IsOk());
  const int64_t seq = (*r)[0].seq;
  AnnotationWrite again = Write("i", "a", 0);
  again.client_time = t + absl::Seconds(100);
  AnnotationWrite earlier = Write("i", "a", 0);
  earlier.client_time = t + absl::Seconds(50);
  r = store_->CommitAnnotations({again, earlier, Write("i", "a", 0)});
  ASSERT_THAT(r, IsOk());
  for (const WriteResult& result : *r) {
    EXPECT_EQ(result.outcome, WriteOutcome::kDuplicate);
    EXPECT_EQ(result.seq, seq);
  }
  EXPECT_THAT(History(0, 0), IsEmpty());
  AnnotationWrite between = Write("i", "a", 1);
  between.client_time = t + absl::Seconds(75);
  r = store_->CommitAnnotations({between});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kStale);
  EXPECT_EQ((*r)[0].label, 0);
  EXPECT_THAT(History(0, 0), ElementsAre(HistoryRow{1, seq + 1, 0}));

  // A live label without a time takes the time of a resend that has one.
  r = store_->CommitAnnotations({Write("j", "a", 0)});
  ASSERT_THAT(r, IsOk());
  AnnotationWrite timed = Write("j", "a", 0);
  timed.client_time = t;
  AnnotationWrite before = Write("j", "a", 1);
  before.client_time = t - absl::Seconds(1);
  r = store_->CommitAnnotations({timed, before});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kDuplicate);
  EXPECT_EQ((*r)[1].outcome, WriteOutcome::kStale);
  absl::StatusOr<std::vector<LiveAnnotation>> live = store_->LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 2u);
  EXPECT_EQ((*live)[0].label, 0);
  EXPECT_EQ((*live)[1].label, 0);
}

// Without client_time on either label, or with equal ones, commit order decides.
TEST_F(AnnotationStoreTest, WithoutBothClientTimesCommitOrderDecides) {
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  AnnotationWrite timed_new = Write("i", "a", 1);
  timed_new.client_time = t;
  AnnotationWrite untimed = Write("i", "a", 2);
  AnnotationWrite timed_old = Write("i", "a", 0);
  timed_old.client_time = t - absl::Hours(1);
  AnnotationWrite timed_equal = Write("i", "a", 1);
  timed_equal.client_time = t;
  // In one call and across calls alike: later writes win.
  absl::StatusOr<std::vector<WriteResult>> r =
      store_->CommitAnnotations({timed_new, untimed, timed_old});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kAccepted);
  EXPECT_EQ((*r)[1].outcome, WriteOutcome::kRevised);
  EXPECT_EQ((*r)[2].outcome, WriteOutcome::kRevised);  // The live label had no client_time.
  r = store_->CommitAnnotations({timed_equal});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kRevised);  // Newer than t - 1h.
  timed_old.label = 2;
  r = store_->CommitAnnotations({timed_old});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kStale);  // Older than t.
  timed_equal.label = 0;
  r = store_->CommitAnnotations({timed_equal});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kRevised);  // As old as the live label: it wins.
  r = store_->CommitAnnotations({untimed});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kRevised);
  absl::StatusOr<std::vector<LiveAnnotation>> live = store_->LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].label, 2);
  EXPECT_EQ(History(0, 0).size(), 6u);  // Every version but the live one, the stale included.
}

// In one call, a stale write after a newer label of a pair the call itself creates.
TEST_F(AnnotationStoreTest, StaleWithinOneCallOnANewPair) {
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  AnnotationWrite newer = Write("n", "a", 1);
  newer.client_time = t;
  AnnotationWrite older = Write("n", "a", 2);
  older.client_time = t - absl::Seconds(5);
  absl::StatusOr<std::vector<WriteResult>> r = store_->CommitAnnotations({newer, older});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kAccepted);
  EXPECT_EQ((*r)[1].outcome, WriteOutcome::kStale);
  EXPECT_EQ((*r)[1].seq, (*r)[0].seq);
  EXPECT_EQ((*r)[1].label, 1);
  absl::StatusOr<std::vector<LiveAnnotation>> live = store_->LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].label, 1);
  ASSERT_EQ(History(0, 0).size(), 1u);
  EXPECT_EQ(std::get<0>(History(0, 0)[0]), 2);
}

TEST_F(AnnotationStoreTest, SamePairSeveralTimesInOneCallAppliesInOrder) {
  absl::StatusOr<std::vector<WriteResult>> results = store_->CommitAnnotations(
      {Write("i", "a", 1), Write("i", "a", 1), Write("i", "a", 2),
       Write("j", "a", 0), Write("i", "a", 2), Write("i", "a", 1)});
  ASSERT_THAT(results, IsOk());
  const std::vector<WriteResult>& r = *results;
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(r[0].outcome, WriteOutcome::kAccepted);
  EXPECT_EQ(r[1].outcome, WriteOutcome::kDuplicate);
  EXPECT_EQ(r[1].seq, r[0].seq);
  EXPECT_EQ(r[2].outcome, WriteOutcome::kRevised);
  EXPECT_GT(r[2].seq, r[0].seq);
  EXPECT_EQ(r[3].outcome, WriteOutcome::kAccepted);
  EXPECT_EQ(r[3].item_index, 1);
  EXPECT_EQ(r[4].outcome, WriteOutcome::kDuplicate);
  EXPECT_EQ(r[4].seq, r[2].seq);
  EXPECT_EQ(r[5].outcome, WriteOutcome::kRevised);
  EXPECT_GT(r[5].seq, r[2].seq);

  // Every superseded label is in the history; the last one is live.
  EXPECT_THAT(History(0, 0), ElementsAre(HistoryRow{1, r[0].seq, 0},
                                         HistoryRow{2, r[2].seq, 1}));
  absl::StatusOr<std::vector<LiveAnnotation>> live =
      store_->LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 2u);  // By seq: (j, a) before the final (i, a).
  EXPECT_EQ((*live)[0].item_index, 1);
  EXPECT_EQ((*live)[1].item_index, 0);
  EXPECT_EQ((*live)[1].label, 1);
  EXPECT_EQ((*live)[1].seq, r[5].seq);

  // Resending the whole call changes nothing.
  absl::StatusOr<std::vector<WriteResult>> again = store_->CommitAnnotations(
      {Write("i", "a", 1), Write("j", "a", 0)});
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ((*again)[0].outcome, WriteOutcome::kDuplicate);
  EXPECT_EQ((*again)[1].outcome, WriteOutcome::kDuplicate);
}

TEST_F(AnnotationStoreTest, AllocatesDenseIndicesOnFirstUse) {
  absl::StatusOr<std::vector<WriteResult>> results = store_->CommitAnnotations(
      {Write("i0", "a0", 0), Write("i1", "a0", 1), Write("i0", "a1", 2),
       Write("i2", "a2", 0), Write("i1", "a2", 0)});
  ASSERT_THAT(results, IsOk());
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (const WriteResult& r : *results) {
    pairs.emplace_back(r.item_index, r.annotator_index);
  }
  EXPECT_THAT(pairs, ElementsAre(std::pair(0, 0), std::pair(1, 0),
                                 std::pair(0, 1), std::pair(2, 2),
                                 std::pair(1, 2)));
  ItemStore items(&pool());
  absl::StatusOr<std::vector<ItemRecord>> loaded = items.LoadItems(project_id_);
  ASSERT_THAT(loaded, IsOk());
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_EQ((*loaded)[2].external_id, "i2");
  // Items registered beforehand keep their index; new ones continue densely.
  ASSERT_THAT(items.UpsertItems(project_id_, {ItemWrite{"i3", {}, {}}}),
              IsOkAndHolds(ElementsAre(3)));
  absl::StatusOr<std::vector<WriteResult>> more = store_->CommitAnnotations(
      {Write("i3", "a0", 0), Write("i4", "a0", 0)});
  ASSERT_THAT(more, IsOk());
  EXPECT_EQ((*more)[0].item_index, 3);
  EXPECT_EQ((*more)[1].item_index, 4);
}

TEST_F(AnnotationStoreTest, LabelOutOfRangeIsInvalidArgumentAndWritesNothing) {
  EXPECT_THAT(store_->CommitAnnotations(
                  {Write("i", "a", 0), Write("j", "a", 3)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotation #1: label 3 is out of range")));
  EXPECT_THAT(store_->CommitAnnotations({Write("i", "a", -1)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->CommitAnnotations({Write("", "a", 0)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("item_id")));
  EXPECT_THAT(store_->CountLiveAnnotations(project_id_), IsOkAndHolds(0));
  EXPECT_EQ(CountRows("items"), 0);
  EXPECT_EQ(CountRows("annotators"), 0);
}

TEST_F(AnnotationStoreTest, UnknownProjectIsNotFoundAndWritesNothing) {
  AnnotationWrite orphan = Write("i", "a", 0);
  orphan.project_id = project_id_ + 100;
  EXPECT_THAT(store_->CommitAnnotations({Write("i", "a", 0), orphan}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(CountRows("annotations"), 0);
  EXPECT_THAT(store_->LoadLiveAnnotations(project_id_ + 100),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->CountLiveAnnotations(project_id_ + 100),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(AnnotationStoreTest, OneCallMaySpanProjects) {
  const int64_t other = CreateProject("other", 2);
  AnnotationWrite w = Write("i", "a", 1);
  w.project_id = other;
  absl::StatusOr<std::vector<WriteResult>> results =
      store_->CommitAnnotations({Write("x", "y", 2), w, Write("i", "a", 0)});
  ASSERT_THAT(results, IsOk());
  for (const WriteResult& r : *results) {
    EXPECT_EQ(r.outcome, WriteOutcome::kAccepted);
  }
  EXPECT_EQ((*results)[1].item_index, 0);  // Indices are per project.
  EXPECT_EQ((*results)[2].item_index, 1);
  EXPECT_THAT(store_->CountLiveAnnotations(project_id_), IsOkAndHolds(2));
  EXPECT_THAT(store_->CountLiveAnnotations(other), IsOkAndHolds(1));
}

TEST_F(AnnotationStoreTest, StoresClientTime) {
  AnnotationWrite w = Write("i", "a", 0);
  w.client_time = absl::FromUnixMicros(1700000000123456);
  ASSERT_THAT(store_->CommitAnnotations({w, Write("j", "a", 0)}), IsOk());
  absl::StatusOr<std::vector<std::optional<int64_t>>> times =
      pool().WithTransaction(
          "times",
          [&](pqxx::work& txn)
              -> absl::StatusOr<std::vector<std::optional<int64_t>>> {
            std::vector<std::optional<int64_t>> out;
            for (const pqxx::row& r : txn.exec(
                     "SELECT (extract(epoch from client_time) * 1000000)::bigint "
                     "FROM annotations ORDER BY item_index")) {
              out.push_back(r[0].is_null()
                                ? std::nullopt
                                : std::make_optional(r[0].as<int64_t>()));
            }
            return out;
          });
  EXPECT_THAT(times, IsOkAndHolds(ElementsAre(1700000000123456, std::nullopt)));
}

TEST_F(AnnotationStoreTest, LoadsOnlyLabelsNewerThanAWatermark) {
  absl::StatusOr<std::vector<WriteResult>> first =
      store_->CommitAnnotations({Write("i", "a", 0), Write("j", "a", 1)});
  ASSERT_THAT(first, IsOk());
  const int64_t watermark = std::max((*first)[0].seq, (*first)[1].seq);
  ASSERT_THAT(store_->CommitAnnotations({Write("k", "a", 2), Write("i", "a", 1)}),
              IsOk());
  absl::StatusOr<std::vector<LiveAnnotation>> newer =
      store_->LoadLiveAnnotations(project_id_, watermark);
  ASSERT_THAT(newer, IsOk());
  ASSERT_EQ(newer->size(), 2u);
  std::set<std::pair<int32_t, int32_t>> got;
  for (const LiveAnnotation& a : *newer) got.emplace(a.item_index, a.label);
  EXPECT_EQ(got, (std::set<std::pair<int32_t, int32_t>>{{2, 2}, {0, 1}}));
}

TEST_F(AnnotationStoreTest, StoresClientTimesExactlyAndRejectsOutOfRange) {
  AnnotationWrite before_epoch = Write("i", "a", 0);
  before_epoch.client_time = absl::FromUnixMicros(-1234567);  // 1969, not a whole second
  AnnotationWrite first_day = Write("j", "a", 0);
  first_day.client_time = absl::FromUnixSeconds(-62135596800);  // 0001-01-01
  AnnotationWrite last = Write("k", "a", 0);
  last.client_time = absl::FromUnixMicros(int64_t{253402300799} * 1000000 + 999999);
  ASSERT_THAT(store_->CommitAnnotations({before_epoch, first_day, last}), IsOk());
  absl::StatusOr<std::vector<int64_t>> times = pool().WithTransaction(
      "times", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int64_t>> {
        std::vector<int64_t> out;
        for (const pqxx::row& r : txn.exec(
                 "SELECT (extract(epoch from client_time) * 1000000)::bigint "
                 "FROM annotations ORDER BY item_index")) {
          out.push_back(r[0].as<int64_t>());
        }
        return out;
      });
  EXPECT_THAT(times, IsOkAndHolds(ElementsAre(-1234567, int64_t{-62135596800} * 1000000,
                                              int64_t{253402300799} * 1000000 + 999999)));

  AnnotationWrite too_late = Write("l", "a", 0);
  too_late.client_time = absl::FromUnixSeconds(253402300800);  // 10000-01-01
  EXPECT_THAT(store_->CommitAnnotations({Write("m", "a", 0), too_late}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotation #1: client_time")));
  EXPECT_EQ(CountRows("annotations"), 3);
}

TEST_F(AnnotationStoreTest, IdsWithCopySpecialCharactersRoundTrip) {
  const std::vector<std::string> ids = {"tab\there", "new\nline", "back\\slash\\N",
                                        "\\N", "carriage\rreturn", "ünïcødé ✓", "'quote\""};
  std::vector<AnnotationWrite> writes;
  for (const std::string& id : ids) writes.push_back(Write(id, id, 1));
  ASSERT_THAT(store_->CommitAnnotations(writes), IsOk());
  ItemStore items(&pool());
  absl::StatusOr<std::vector<ItemRecord>> loaded = items.LoadItems(project_id_);
  ASSERT_THAT(loaded, IsOk());
  std::vector<std::string> item_ids;
  for (const ItemRecord& r : *loaded) item_ids.push_back(r.external_id);
  EXPECT_EQ(item_ids, ids);
  absl::StatusOr<std::vector<AnnotatorRecord>> annotators = items.LoadAnnotators(project_id_);
  ASSERT_THAT(annotators, IsOk());
  std::vector<std::string> annotator_ids;
  for (const AnnotatorRecord& r : *annotators) annotator_ids.push_back(r.external_id);
  EXPECT_EQ(annotator_ids, ids);
  // Resolved again by lookup, the same ids are the same entities.
  absl::StatusOr<std::vector<WriteResult>> again = store_->CommitAnnotations(writes);
  ASSERT_THAT(again, IsOk());
  for (const WriteResult& r : *again) EXPECT_EQ(r.outcome, WriteOutcome::kDuplicate);
}

// What an up-to-date caller would know after `results` of `writes` (ids in the order their
// indices were given, pairs that have a label).
struct Memory {
  std::map<std::string, int32_t> items, annotators;
  std::set<std::pair<int32_t, int32_t>> labelled;

  void Learn(const std::vector<AnnotationWrite>& writes, const std::vector<WriteResult>& results) {
    for (size_t i = 0; i < writes.size(); ++i) {
      items[writes[i].item_id] = results[i].item_index;
      annotators[writes[i].annotator_id] = results[i].annotator_index;
      labelled.emplace(results[i].item_index, results[i].annotator_index);
    }
  }
  WriteHints HintsFor(int64_t project_id, const std::vector<AnnotationWrite>& writes) const {
    WriteHints hints;
    for (const AnnotationWrite& w : writes) {
      KnownWrite k;
      if (auto it = items.find(w.item_id); it != items.end()) k.item_index = it->second;
      if (auto it = annotators.find(w.annotator_id); it != annotators.end()) {
        k.annotator_index = it->second;
      }
      k.unlabelled = k.item_index >= 0 && k.annotator_index >= 0 &&
                     !labelled.count({k.item_index, k.annotator_index});
      hints.writes.push_back(k);
    }
    hints.projects.push_back({project_id, static_cast<int32_t>(items.size()),
                              static_cast<int32_t>(annotators.size())});
    return hints;
  }
};

TEST_F(AnnotationStoreTest, HintsGiveTheSameResultsAsReading) {
  // The same calls with and without hints, in two projects.
  const int64_t plain = CreateProject("plain", 3);
  const std::vector<std::vector<std::tuple<std::string, std::string, int32_t>>> calls = {
      {{"i", "a", 1}, {"j", "a", 0}, {"i", "b", 2}},
      {{"i", "a", 1}, {"k", "b", 0}, {"i", "a", 2}, {"j", "b", 1}, {"i", "a", 2}},
      {{"k", "a", 0}, {"k", "b", 1}, {"l", "c", 2}, {"l", "c", 2}},
  };
  Memory memory;
  for (const auto& call : calls) {
    std::vector<AnnotationWrite> hinted, unhinted;
    for (const auto& [item, annotator, label] : call) {
      hinted.push_back(Write(item, annotator, label));
      unhinted.push_back(Write(item, annotator, label));
      unhinted.back().project_id = plain;
    }
    const WriteHints hints = memory.HintsFor(project_id_, hinted);
    absl::StatusOr<std::vector<WriteResult>> with = store_->CommitAnnotations(hinted, &hints);
    absl::StatusOr<std::vector<WriteResult>> without = store_->CommitAnnotations(unhinted);
    ASSERT_THAT(with, IsOk());
    ASSERT_THAT(without, IsOk());
    ASSERT_EQ(with->size(), without->size());
    for (size_t i = 0; i < with->size(); ++i) {
      EXPECT_EQ((*with)[i].outcome, (*without)[i].outcome) << i;
      EXPECT_EQ((*with)[i].item_index, (*without)[i].item_index) << i;
      EXPECT_EQ((*with)[i].annotator_index, (*without)[i].annotator_index) << i;
    }
    memory.Learn(hinted, *with);
  }
  // Same live labels (by pair) and history in both projects.
  auto live_pairs = [&](int64_t project) {
    std::map<std::pair<int32_t, int32_t>, int32_t> out;
    absl::StatusOr<std::vector<LiveAnnotation>> live = store_->LoadLiveAnnotations(project);
    EXPECT_THAT(live, IsOk());
    if (live.ok()) {
      for (const LiveAnnotation& a : *live) out[{a.item_index, a.annotator_index}] = a.label;
    }
    return out;
  };
  EXPECT_EQ(live_pairs(project_id_), live_pairs(plain));
  EXPECT_EQ(live_pairs(project_id_).size(), 7u);
  // (i, a) and (k, b) were revised once in each project.
  EXPECT_EQ(CountRows("annotation_history"), 2 * 2);
}

TEST_F(AnnotationStoreTest, WrongHintsCostARetryNotCorrectness) {
  ASSERT_THAT(store_->CommitAnnotations({Write("i", "a", 1), Write("j", "a", 2)}), IsOk());
  // A caller that forgot everything but claims to know all 0 items: "i" and "a" look new.
  const std::vector<AnnotationWrite> writes = {Write("i", "a", 1), Write("j", "a", 0),
                                               Write("k", "a", 0)};
  WriteHints forgetful;
  forgetful.writes.resize(writes.size());
  forgetful.projects.push_back({project_id_, 2, 1});  // Counts right, ids unknown.
  absl::StatusOr<std::vector<WriteResult>> r1 = store_->CommitAnnotations(writes, &forgetful);
  ASSERT_THAT(r1, IsOk());
  EXPECT_EQ((*r1)[0].outcome, WriteOutcome::kDuplicate);
  EXPECT_EQ((*r1)[1].outcome, WriteOutcome::kRevised);
  EXPECT_EQ((*r1)[2].outcome, WriteOutcome::kAccepted);
  EXPECT_EQ((*r1)[2].item_index, 2);

  // Indices right but a labelled pair claimed unlabelled: the insert fails, the retry reads.
  WriteHints stale;
  stale.writes = {{0, 0, true}};
  stale.projects.push_back({project_id_, 3, 1});
  absl::StatusOr<std::vector<WriteResult>> r2 =
      store_->CommitAnnotations({Write("i", "a", 2)}, &stale);
  ASSERT_THAT(r2, IsOk());
  EXPECT_EQ((*r2)[0].outcome, WriteOutcome::kRevised);

  // Counts that lag the database (items added elsewhere): unknown ids are looked up.
  ItemStore items(&pool());
  ASSERT_THAT(items.UpsertItems(project_id_, {ItemWrite{"added", {}, {}}}),
              IsOkAndHolds(ElementsAre(3)));
  WriteHints lagging;
  lagging.writes = {{-1, 0, false}, {-1, 0, false}};
  lagging.projects.push_back({project_id_, 3, 1});
  absl::StatusOr<std::vector<WriteResult>> r3 = store_->CommitAnnotations(
      {Write("added", "a", 1), Write("fresh", "a", 1)}, &lagging);
  ASSERT_THAT(r3, IsOk());
  EXPECT_EQ((*r3)[0].item_index, 3);
  EXPECT_EQ((*r3)[1].item_index, 4);
  EXPECT_EQ(CountRows("items"), 5);
  EXPECT_THAT(store_->CountLiveAnnotations(project_id_), IsOkAndHolds(5));
  EXPECT_THAT(History(0, 0), ElementsAre(HistoryRow{1, (*r1)[0].seq, 0}));
}

TEST_F(AnnotationStoreTest, HintsNotAlignedWithWritesAreInvalidArgument) {
  WriteHints hints;
  hints.writes.resize(1);
  EXPECT_THAT(store_->CommitAnnotations({Write("i", "a", 0), Write("j", "a", 0)}, &hints),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hints for 1 writes")));
  EXPECT_EQ(CountRows("annotations"), 0);
}

TEST_F(AnnotationStoreTest, OneCommitToTwoProjectsNumbersEachProjectsLabelsApart) {
  const int64_t other = CreateProject("other", 2);
  std::vector<AnnotationWrite> writes;
  for (int n = 0; n < 6; ++n) {
    AnnotationWrite w = Write(absl::StrCat("i", n), "a", n % 2);
    if (n % 2 == 1) w.project_id = other;
    writes.push_back(w);
  }
  absl::StatusOr<std::vector<WriteResult>> first = store_->CommitAnnotations(writes);
  ASSERT_THAT(first, IsOk());
  // Writes 0, 2, 4 are this project's, 1, 3, 5 the other's: each counts on from its own seqs.
  for (int n = 2; n < 6; ++n) EXPECT_EQ((*first)[n].seq, (*first)[n - 2].seq + 1) << n;
  for (AnnotationWrite& w : writes) w.annotator_id = "b";
  absl::StatusOr<std::vector<WriteResult>> second = store_->CommitAnnotations(writes);
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ((*second)[0].seq, (*first)[4].seq + 1);
  EXPECT_EQ((*second)[1].seq, (*first)[5].seq + 1);
}

TEST_F(AnnotationStoreTest, ConcurrentCommitsToDifferentProjectsEachCountTheirOwnSeqs) {
  // Commits to different projects draw seqs at the same time, each from its own project's
  // counter: every project's seqs ascend in commit and input order without gaps.
  constexpr int kThreads = 4, kCalls = 15, kWrites = 200;
  std::vector<int64_t> projects;
  for (int t = 0; t < kThreads; ++t) projects.push_back(CreateProject(absl::StrCat("q", t), 2));
  std::unique_ptr<ConnectionPool> shared_pool = NewPool(kThreads);
  AnnotationStore store(shared_pool.get());
  std::vector<std::vector<int64_t>> seqs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        std::vector<AnnotationWrite> writes;
        for (int n = 0; n < kWrites; ++n) {
          AnnotationWrite w = Write(absl::StrCat("i", c * kWrites + n), "a", n % 2);
          w.project_id = projects[t];
          writes.push_back(w);
        }
        absl::StatusOr<std::vector<WriteResult>> results = store.CommitAnnotations(writes);
        ASSERT_THAT(results, IsOk());
        for (const WriteResult& r : *results) seqs[t].push_back(r.seq);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::vector<int64_t>& per_project : seqs) {
    ASSERT_EQ(per_project.size(), static_cast<size_t>(kCalls * kWrites));
    for (size_t k = 0; k < per_project.size(); ++k) {
      ASSERT_EQ(per_project[k], per_project[0] + static_cast<int64_t>(k)) << "label " << k;
    }
  }
}

// Several threads commit overlapping batches at once. Every thread writes the
// same label for a given pair (first f, later g), so the final state is
// known whatever the interleaving.
TEST_F(AnnotationStoreTest, ConcurrentGroupCommitsLoseAndDuplicateNothing) {
  constexpr int kThreads = 4;
  constexpr int kItems = 40;
  constexpr int kAnnotators = 8;
  constexpr int kBatches = 10;
  constexpr int kBatchSize = 60;
  auto f = [](int item, int annotator) { return (item + annotator) % 3; };
  auto g = [](int item, int annotator) { return (item + annotator + 1) % 3; };
  auto item_id = [](int i) { return absl::StrCat("item-", i); };
  auto annotator_id = [](int a) { return absl::StrCat("annotator-", a); };

  std::unique_ptr<ConnectionPool> shared_pool = NewPool(kThreads);
  AnnotationStore store(shared_pool.get());
  // Per thread and phase: (item id, annotator id) -> results.
  struct Seen {
    std::string item, annotator;
    WriteResult result;
  };
  std::vector<std::vector<Seen>> seen[2];
  for (int phase = 0; phase < 2; ++phase) {
    seen[phase].resize(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t, phase] {
        for (int b = 0; b < kBatches; ++b) {
          std::vector<AnnotationWrite> batch;
          for (int n = 0; n < kBatchSize; ++n) {
            // Overlapping, thread-specific walks over the pairs.
            const int k = (t * 7919 + b * 104729 + n * 31) % (kItems * kAnnotators);
            const int i = k / kAnnotators, a = k % kAnnotators;
            AnnotationWrite w = Write(item_id(i), annotator_id(a),
                                      phase == 0 ? f(i, a) : g(i, a));
            batch.push_back(w);
          }
          absl::StatusOr<std::vector<WriteResult>> results =
              store.CommitAnnotations(batch);
          ASSERT_THAT(results, IsOk());
          ASSERT_EQ(results->size(), batch.size());
          for (size_t n = 0; n < batch.size(); ++n) {
            seen[phase][t].push_back(
                {batch[n].item_id, batch[n].annotator_id, (*results)[n]});
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }

  // Each id maps to one index everywhere, and indices are dense.
  std::map<std::string, int32_t> item_index, annotator_index;
  std::map<std::pair<std::string, std::string>, int> accepted, revised;
  for (int phase = 0; phase < 2; ++phase) {
    for (const auto& per_thread : seen[phase]) {
      for (const Seen& s : per_thread) {
        auto [it, inserted] = item_index.emplace(s.item, s.result.item_index);
        EXPECT_EQ(it->second, s.result.item_index) << s.item;
        auto [at, a_inserted] =
            annotator_index.emplace(s.annotator, s.result.annotator_index);
        EXPECT_EQ(at->second, s.result.annotator_index) << s.annotator;
        if (s.result.outcome == WriteOutcome::kAccepted) {
          EXPECT_EQ(phase, 0);
          ++accepted[{s.item, s.annotator}];
        }
        if (s.result.outcome == WriteOutcome::kRevised) {
          EXPECT_EQ(phase, 1);
          ++revised[{s.item, s.annotator}];
        }
      }
    }
  }
  std::set<int32_t> item_indices, annotator_indices;
  for (const auto& [id, index] : item_index) item_indices.insert(index);
  for (const auto& [id, index] : annotator_index) annotator_indices.insert(index);
  ASSERT_FALSE(item_indices.empty());
  EXPECT_EQ(*item_indices.begin(), 0);
  EXPECT_EQ(*item_indices.rbegin() + 1, static_cast<int32_t>(item_indices.size()));
  EXPECT_EQ(item_indices.size(), item_index.size());
  EXPECT_EQ(*annotator_indices.rbegin() + 1,
            static_cast<int32_t>(annotator_indices.size()));
  ItemStore items(&pool());
  EXPECT_THAT(items.LoadItems(project_id_),
              IsOkAndHolds(::testing::SizeIs(item_index.size())));

  // Each written pair: accepted exactly once (phase 0), revised exactly once
  // (phase 1), one live row with label g, one history row with label f.
  std::set<std::pair<std::string, std::string>> pairs;
  for (const auto& per_thread : seen[0]) {
    for (const Seen& s : per_thread) pairs.emplace(s.item, s.annotator);
  }
  for (const auto& pair : pairs) {
    EXPECT_EQ(accepted[pair], 1) << pair.first << "/" << pair.second;
    EXPECT_EQ(revised[pair], 1) << pair.first << "/" << pair.second;
  }
  absl::StatusOr<std::vector<LiveAnnotation>> live =
      store.LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  EXPECT_EQ(live->size(), pairs.size());
  std::map<std::pair<int32_t, int32_t>, int32_t> live_labels;
  std::set<int64_t> seqs;
  for (const LiveAnnotation& a : *live) {
    live_labels[{a.item_index, a.annotator_index}] = a.label;
    seqs.insert(a.seq);
  }
  EXPECT_EQ(seqs.size(), live->size());  // Unique watermarks.
  for (const auto& [item, annotator] : pairs) {
    const int i = std::stoi(item.substr(5));
    const int a = std::stoi(annotator.substr(10));
    EXPECT_EQ((live_labels[{item_index[item], annotator_index[annotator]}]),
              g(i, a));
  }
  EXPECT_EQ(CountRows("annotation_history"), static_cast<int64_t>(pairs.size()));
}

// Several server replicas follow each other through what these three give: the seqs a commit
// drew, a NOTIFY once it committed, and the labels since a seq with their ids.
TEST_F(AnnotationStoreTest, ACommitReportsItsSeqsAndNotifiesListenersAfterCommit) {
  struct Receiver final : pqxx::notification_receiver {
    Receiver(pqxx::connection& c, std::vector<std::string>& payloads)
        : pqxx::notification_receiver(c, AnnotationStore::kLabelsChannel), payloads(payloads) {}
    void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
    std::vector<std::string>& payloads;
  };
  pqxx::connection listener(url());
  std::vector<std::string> payloads;
  Receiver receiver(listener, payloads);
  pqxx::nontransaction(listener).exec("SELECT 1");  // LISTEN has taken effect.
  const int64_t other = CreateProject("other", 2);

  std::vector<DrawnSeqs> drawn;
  AnnotationWrite in_other = Write("x", "a", 1);
  in_other.project_id = other;
  ASSERT_THAT(store_->CommitAnnotations(
                  {Write("i0", "a", 0), Write("i1", "a", 2), in_other, Write("i0", "b", 1)},
                  nullptr, &drawn),
              IsOk());
  ASSERT_EQ(drawn.size(), 2u);
  std::sort(drawn.begin(), drawn.end(),
            [](const DrawnSeqs& x, const DrawnSeqs& y) { return x.project_id < y.project_id; });
  EXPECT_EQ(drawn[0].project_id, project_id_);
  EXPECT_EQ(drawn[0].first, 1);
  EXPECT_EQ(drawn[0].last, 3);
  EXPECT_EQ(drawn[1].project_id, other);
  EXPECT_EQ(drawn[1].first, 1);
  EXPECT_EQ(drawn[1].last, 1);

  // A resend of a live label draws nothing, and a revision the next seq.
  ASSERT_THAT(store_->CommitAnnotations({Write("i0", "a", 0)}, nullptr, &drawn), IsOk());
  EXPECT_THAT(drawn, IsEmpty());
  ASSERT_THAT(store_->CommitAnnotations({Write("i1", "a", 0)}, nullptr, &drawn), IsOk());
  ASSERT_EQ(drawn.size(), 1u);
  EXPECT_EQ(drawn[0].first, 4);
  EXPECT_EQ(drawn[0].last, 4);

  // A refused call draws and notifies nothing.
  const size_t notified_before = [&] {
    while (listener.await_notification(0, 200'000) > 0) {
    }
    return payloads.size();
  }();
  EXPECT_EQ(notified_before, 3u) << "one per project per commit that drew seqs";
  EXPECT_THAT(payloads, ::testing::Contains(std::to_string(other)));
  EXPECT_THAT(store_->CommitAnnotations({Write("i9", "a", 99)}, nullptr, &drawn),
              ::testing::Not(IsOk()));
  EXPECT_THAT(drawn, IsEmpty());
  EXPECT_EQ(listener.await_notification(0, 200'000), 0);
}

// DrawnSeqs.history_rows and projects.history_rows: every revised or stale label adds one
// history row to its own project's count, which equals the rows of annotation_history; new
// labels and duplicates add none, and a commit reports the count after it.
TEST_F(AnnotationStoreTest, EachRevisedOrStaleLabelCountsOneHistoryRowOfItsProject) {
  const int64_t other = CreateProject("other-history", 3);
  auto history_rows = [&](int64_t project) {
    absl::StatusOr<ProjectRecord> record = ProjectStore(&pool()).GetProject(project);
    EXPECT_THAT(record, IsOk());
    return record.ok() ? record->history_rows : -1;
  };
  std::vector<DrawnSeqs> drawn;
  AnnotationWrite in_other = Write("x", "a", 1);
  in_other.project_id = other;
  ASSERT_THAT(store_->CommitAnnotations({Write("i", "a", 0), Write("j", "a", 1), in_other},
                                        nullptr, &drawn),
              IsOk());
  EXPECT_EQ(history_rows(project_id_), 0);
  // One call: a duplicate, a revision, the same pair revised again, and one in the other
  // project; then a stale label (older client time) on a pair with a newer one.
  AnnotationWrite other_revised = in_other;
  other_revised.label = 2;
  ASSERT_THAT(store_->CommitAnnotations({Write("i", "a", 0), Write("j", "a", 2),
                                         Write("j", "a", 0), other_revised},
                                        nullptr, &drawn),
              IsOk());
  ASSERT_EQ(drawn.size(), 2u);
  for (const DrawnSeqs& d : drawn) {
    EXPECT_EQ(d.history_rows, d.project_id == other ? 1 : 2) << d.project_id;
  }
  AnnotationWrite newer = Write("k", "a", 1);
  newer.client_time = absl::FromUnixSeconds(1'700'000'000);
  AnnotationWrite older = newer;
  older.label = 0;
  older.client_time = *newer.client_time - absl::Seconds(1);
  ASSERT_THAT(store_->CommitAnnotations({newer}), IsOk());
  ASSERT_THAT(store_->CommitAnnotations({older}, nullptr, &drawn), IsOk());
  ASSERT_EQ(drawn.size(), 1u);
  EXPECT_EQ(drawn[0].history_rows, 3);
  EXPECT_EQ(history_rows(project_id_), 3);
  EXPECT_EQ(history_rows(other), 1);
  EXPECT_EQ(CountRows("annotation_history"), 3 + 1);
}

// HistoryLimit: the commit that would take a project's history rows past its bound writes
// nothing and fails RESOURCE_EXHAUSTED; one that fits, or adds no history row (new labels,
// duplicates), commits even at the bound; another project's bound does not apply; and
// ReadLabelsSince reports the count. Bound 2, one row held: [flip, flip] adds 2 and is refused.
TEST_F(AnnotationStoreTest, ACommitThatWouldPassItsProjectsHistoryLimitWritesNothing) {
  const int64_t other = CreateProject("other-limit", 3);
  const HistoryLimit limit[] = {{project_id_, 2}};
  ASSERT_THAT(store_->CommitAnnotations({Write("i", "a", 0), Write("i", "a", 1)}, nullptr,
                                        nullptr, limit),
              IsOk());  // One revision: 1 of 2.
  const int64_t rows_before = CountRows("annotations");
  EXPECT_THAT(store_->CommitAnnotations({Write("j", "a", 0), Write("i", "a", 2),
                                         Write("i", "a", 0)},
                                        nullptr, nullptr, limit),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("max_revisions (2")));
  EXPECT_EQ(CountRows("annotations"), rows_before);  // j was not written either.
  EXPECT_EQ(CountRows("annotation_history"), 1);
  // Without the bound the same commit is taken (the refusal was the bound's).
  std::vector<DrawnSeqs> drawn;
  ASSERT_THAT(store_->CommitAnnotations({Write("i", "a", 2)}, nullptr, &drawn, limit),
              IsOk());  // 2 of 2: at the bound is allowed.
  ASSERT_EQ(drawn.size(), 1u);
  EXPECT_EQ(drawn[0].history_rows, 2);
  // At the bound: new labels and duplicates still commit; a revision does not.
  EXPECT_THAT(store_->CommitAnnotations({Write("j", "a", 0), Write("i", "a", 2)}, nullptr,
                                        nullptr, limit),
              IsOk());
  EXPECT_THAT(store_->CommitAnnotations({Write("j", "a", 1)}, nullptr, nullptr, limit),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr(
                           "has 2 revised or stale labels and this commit adds 1")));
  // A bound of another project, or none, does not refuse it.
  const HistoryLimit others[] = {{other, 1}};
  EXPECT_THAT(store_->CommitAnnotations({Write("j", "a", 1)}, nullptr, nullptr, others), IsOk());
  absl::StatusOr<LabelsSince> since = store_->ReadLabelsSince(project_id_, 0);
  ASSERT_THAT(since, IsOk());
  EXPECT_EQ(since->history_rows, 3);
}

TEST_F(AnnotationStoreTest, ReadLabelsSinceGivesTheLiveLabelsAfterASeqWithTheirIds) {
  ASSERT_THAT(store_->CommitAnnotations({Write("i0", "a", 0), Write("i1", "b", 1)}), IsOk());
  ASSERT_THAT(store_->CommitAnnotations({Write("i0", "a", 2), Write("i2", "a", 1)}), IsOk());
  // Seqs: i0/a 1 (revised to 3), i1/b 2, i2/a 4.
  absl::StatusOr<LabelsSince> since = store_->ReadLabelsSince(project_id_, 1);
  ASSERT_THAT(since, IsOk());
  EXPECT_EQ(since->drawn_through, 4);
  ASSERT_EQ(since->labels.size(), 3u);
  EXPECT_EQ(since->labels[0].item_id, "i1");
  EXPECT_EQ(since->labels[0].annotator_id, "b");
  EXPECT_EQ(since->labels[0].seq, 2);
  EXPECT_EQ(since->labels[1].item_id, "i0");
  EXPECT_EQ(since->labels[1].label, 2);
  EXPECT_EQ(since->labels[1].seq, 3);
  EXPECT_EQ(since->labels[2].item_id, "i2");
  EXPECT_EQ(since->labels[2].item_index, 2);
  EXPECT_EQ(since->labels[2].annotator_index, 0);

  // Ids only from item index 2 and annotator index 1 on: the caller knows the others.
  since = store_->ReadLabelsSince(project_id_, 0, 2, 1);
  ASSERT_THAT(since, IsOk());
  ASSERT_EQ(since->labels.size(), 3u);
  EXPECT_EQ(since->labels[0].item_id, "");           // i1 (index 1)
  EXPECT_EQ(since->labels[0].annotator_id, "b");     // index 1
  EXPECT_EQ(since->labels[2].item_id, "i2");         // index 2
  EXPECT_EQ(since->labels[2].annotator_id, "");      // a (index 0)

  since = store_->ReadLabelsSince(project_id_, 4);
  ASSERT_THAT(since, IsOk());
  EXPECT_THAT(since->labels, IsEmpty());
  EXPECT_EQ(since->drawn_through, 4);
  EXPECT_THAT(store_->ReadLabelsSince(987654, 0), StatusIs(absl::StatusCode::kNotFound));

  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> all = store_->ListDrawnThrough();
  ASSERT_THAT(all, IsOk());
  EXPECT_THAT(*all, ::testing::Contains(std::make_pair(project_id_, int64_t{4})));
}

// A pair the call creates and revises in the same call gets a live row with revision 1 (its
// first label is history revision 0), so a later revision in another call adds revision 1 to
// the history instead of colliding with revision 0.
TEST_F(AnnotationStoreTest, APairCreatedAndRevisedInOneCallCanBeRevisedAgainLater) {
  absl::StatusOr<std::vector<WriteResult>> first =
      store_->CommitAnnotations({Write("i", "a", 1), Write("i", "a", 2)});
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ((*first)[0].outcome, WriteOutcome::kAccepted);
  EXPECT_EQ((*first)[1].outcome, WriteOutcome::kRevised);
  absl::StatusOr<std::vector<WriteResult>> later = store_->CommitAnnotations({Write("i", "a", 0)});
  ASSERT_THAT(later, IsOk());
  EXPECT_EQ((*later)[0].outcome, WriteOutcome::kRevised);
  EXPECT_EQ((*later)[0].label, 0);
  EXPECT_THAT(History(0, 0), ElementsAre(HistoryRow{1, (*first)[0].seq, 0},
                                         HistoryRow{2, (*first)[1].seq, 1}));
  absl::StatusOr<std::vector<LiveAnnotation>> live = store_->LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].label, 0);
  EXPECT_EQ((*live)[0].seq, (*later)[0].seq);
}

// A stale label is kept in the history as it was sent: its label and its client_time.
TEST_F(AnnotationStoreTest, AStaleLabelKeepsItsClientTimeInTheHistory) {
  const absl::Time t = absl::FromUnixMicros(1700000000123456);
  AnnotationWrite live_label = Write("i", "a", 1);
  live_label.client_time = t;
  ASSERT_THAT(store_->CommitAnnotations({live_label}), IsOk());
  AnnotationWrite late = Write("i", "a", 2);
  late.client_time = t - absl::Microseconds(7);
  absl::StatusOr<std::vector<WriteResult>> r = store_->CommitAnnotations({late});
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ((*r)[0].outcome, WriteOutcome::kStale);
  absl::StatusOr<std::vector<std::pair<int32_t, std::optional<int64_t>>>> rows =
      pool().WithTransaction(
          "stale history",
          [&](pqxx::work& txn)
              -> absl::StatusOr<std::vector<std::pair<int32_t, std::optional<int64_t>>>> {
            std::vector<std::pair<int32_t, std::optional<int64_t>>> out;
            for (const pqxx::row& row : txn.exec(
                     "SELECT label, (extract(epoch from client_time) * 1000000)::bigint "
                     "FROM annotation_history ORDER BY revision")) {
              out.emplace_back(row[0].as<int32_t>(),
                               row[1].is_null() ? std::nullopt
                                                : std::make_optional(row[1].as<int64_t>()));
            }
            return out;
          });
  EXPECT_THAT(rows, IsOkAndHolds(ElementsAre(std::make_pair(
                        2, std::make_optional(absl::ToUnixMicros(late.client_time.value()))))));
}

// committed_at says when a label was committed: a revision's live row carries the revising
// commit's time, and a history row the time of the commit that wrote the superseded label
// ("the row as it was before each revision").
TEST_F(AnnotationStoreTest, CommittedAtFollowsTheCommitThatWroteEachVersion) {
  auto committed_at = [&](const std::string& sql) {
    return *pool().WithTransaction(
        "committed_at", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int64_t>> {
          std::vector<int64_t> out;
          for (const pqxx::row& row : txn.exec(sql)) out.push_back(row[0].as<int64_t>());
          return out;
        });
  };
  const std::string live_sql =
      "SELECT (extract(epoch from committed_at) * 1000000)::bigint FROM annotations";
  const std::string history_sql =
      "SELECT (extract(epoch from committed_at) * 1000000)::bigint FROM annotation_history "
      "ORDER BY revision";
  ASSERT_THAT(store_->CommitAnnotations({Write("i", "a", 0)}), IsOk());
  const std::vector<int64_t> t1 = committed_at(live_sql);
  ASSERT_EQ(t1.size(), 1u);
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_THAT(store_->CommitAnnotations({Write("i", "a", 1)}), IsOk());
  const std::vector<int64_t> t2 = committed_at(live_sql);
  ASSERT_EQ(t2.size(), 1u);
  EXPECT_GT(t2[0], t1[0]);
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_THAT(store_->CommitAnnotations({Write("i", "a", 2)}), IsOk());
  const std::vector<int64_t> t3 = committed_at(live_sql);
  ASSERT_EQ(t3.size(), 1u);
  EXPECT_GT(t3[0], t2[0]);
  EXPECT_THAT(committed_at(history_sql), ElementsAre(t1[0], t2[0]));
}

// A hinted index the project's counter has not reached yet cannot be the id's: the id is
// treated as unknown and created, with the same results as without hints.
TEST_F(AnnotationStoreTest, AHintedIndexNotYetAllocatedIsTreatedAsUnknown) {
  WriteHints hints;
  hints.writes = {{0, 0, true}};  // Nothing exists yet: indices 0 are not the database's.
  hints.projects.push_back({project_id_, 0, 0});
  absl::StatusOr<std::vector<WriteResult>> r =
      store_->CommitAnnotations({Write("i", "a", 1)}, &hints);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kAccepted);
  EXPECT_EQ((*r)[0].item_index, 0);
  EXPECT_EQ((*r)[0].annotator_index, 0);
  ItemStore items(&pool());
  absl::StatusOr<std::vector<ItemRecord>> loaded = items.LoadItems(project_id_);
  ASSERT_THAT(loaded, IsOk());
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].external_id, "i");
  absl::StatusOr<std::vector<AnnotatorRecord>> annotators = items.LoadAnnotators(project_id_);
  ASSERT_THAT(annotators, IsOk());
  ASSERT_EQ(annotators->size(), 1u);
  EXPECT_EQ((*annotators)[0].external_id, "a");
  // Looked up again without hints, the ids resolve to the same pair.
  absl::StatusOr<std::vector<WriteResult>> again = store_->CommitAnnotations({Write("i", "a", 1)});
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ((*again)[0].outcome, WriteOutcome::kDuplicate);
}

// annotation_store.h: LoadLiveAnnotations gives "the live label of every (item, annotator) of
// the project" and ReadLabelsSince "the live labels of the project": another project's label,
// committed in the same call, is in neither.
TEST_F(AnnotationStoreTest, LoadsAndReadsOnlyTheGivenProjectsLabels) {
  const int64_t other = CreateProject("other-scope", 3);
  AnnotationWrite theirs = Write("t", "b", 2);
  theirs.project_id = other;
  ASSERT_THAT(store_->CommitAnnotations({Write("m", "a", 1), theirs}), IsOk());
  absl::StatusOr<std::vector<LiveAnnotation>> live = store_->LoadLiveAnnotations(project_id_);
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].label, 1);
  absl::StatusOr<LabelsSince> since = store_->ReadLabelsSince(project_id_, 0);
  ASSERT_THAT(since, IsOk());
  ASSERT_EQ(since->labels.size(), 1u);
  EXPECT_EQ(since->labels[0].item_id, "m");
  EXPECT_EQ(since->labels[0].label, 1);
}

// annotation_store.h: "one live label per (project, item, annotator)". In two projects whose
// pairs have the same indices (item 0, annotator 0), each write is compared with its own
// project's live label: sending each project the other's label revises both, and sending it
// again is a duplicate in both.
TEST_F(AnnotationStoreTest, EachWriteIsComparedWithItsOwnProjectsLiveLabel) {
  const int64_t other = CreateProject("other-pairs", 3);
  auto there = [&](int32_t label) {
    AnnotationWrite w = Write("i", "a", label);
    w.project_id = other;
    return w;
  };
  absl::StatusOr<std::vector<WriteResult>> r =
      store_->CommitAnnotations({Write("i", "a", 1), there(2)});
  ASSERT_THAT(r, IsOk());
  const int64_t here_seq = (*r)[0].seq;
  r = store_->CommitAnnotations({Write("i", "a", 2), there(1)});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kRevised);
  EXPECT_EQ((*r)[1].outcome, WriteOutcome::kRevised);
  r = store_->CommitAnnotations({Write("i", "a", 2), there(1)});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].outcome, WriteOutcome::kDuplicate);
  EXPECT_EQ((*r)[1].outcome, WriteOutcome::kDuplicate);
  EXPECT_THAT(History(0, 0), ElementsAre(HistoryRow{1, here_seq, 0}));
}

// annotation_store.h: bad input is INVALID_ARGUMENT and nothing is committed. The message names
// the input position and the field at fault: an empty annotator_id at position 1 is reported as
// annotation #1's annotator_id, not as its item_id.
TEST_F(AnnotationStoreTest, AnEmptyAnnotatorIdIsRejectedNamingItsPositionAndField) {
  EXPECT_THAT(store_->CommitAnnotations({Write("i", "a", 0), Write("j", "", 0)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotation #1: annotator_id must not be empty")));
  EXPECT_EQ(CountRows("annotations"), 0);
  EXPECT_EQ(CountRows("items"), 0);
}

// annotation_store.h: `drawn` "receives the seqs the committed transaction drew", and on any
// error nothing is committed. A call whose first project draws seqs before its second project's
// history limit refuses it leaves `drawn` empty.
TEST_F(AnnotationStoreTest, AFailedCommitReportsNoDrawnSeqs) {
  const int64_t other = CreateProject("other-drawn", 3);  // Locked after project_id_.
  auto there = [&](const std::string& item, int32_t label) {
    AnnotationWrite w = Write(item, "a", label);
    w.project_id = other;
    return w;
  };
  ASSERT_THAT(store_->CommitAnnotations({there("i", 0), there("j", 0)}), IsOk());
  const HistoryLimit limit[] = {{other, 1}};
  std::vector<DrawnSeqs> drawn;
  // Two revisions of the other project: two history rows, past its bound of 1.
  EXPECT_THAT(store_->CommitAnnotations({Write("n", "a", 0), there("i", 1), there("j", 1)}, nullptr,
                                        &drawn, limit),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(drawn, IsEmpty());
  EXPECT_THAT(store_->CountLiveAnnotations(project_id_), IsOkAndHolds(0));
}

}  // namespace
}  // namespace storage
}  // namespace verity
