// WebConsole against a real PostgreSQL and ProjectRegistry: the history ring buffer (driven
// step by step through SampleProjects with explicit times) and the reliability diagram on
// gold items, whose labels the console reads from PostgreSQL. The page itself is tested in
// headless Chromium by //console:console_browser_test.
#include "server/console/console.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "models/truth_model.h"
#include "server/state/project_registry.h"
#include "server/state/storage_handles.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

class WebConsoleTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    auto storage = StorageHandles::Open(url(), 4);
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_ = std::move(*storage);
    registry_ = std::make_unique<ProjectRegistry>(*storage_);
    v1::Project project;
    project.set_name("p");
    project.add_classes("no");
    project.add_classes("yes");
    auto created = registry_->Create(project);
    ASSERT_TRUE(created.ok()) << created.status();
    project_ = *created;
    console_ = std::make_unique<WebConsole>(*registry_, *storage_->versions, WebConsole::Access{},
                                            storage_->annotations.get());
  }

  void TearDown() override {
    console_.reset();
    registry_.reset();
    storage_.reset();
    PostgresTest::TearDown();
  }

  std::string Get(const std::string& path) {
    const HttpResponse response = console_->Handle(HttpPageRequest{path, "localhost", ""});
    EXPECT_EQ(response.status, 200) << path << ": " << response.body;
    return response.body;
  }

  // The JSON array that follows "key": in `json` (no nesting inside it).
  static std::string ArrayOf(const std::string& json, const std::string& key) {
    const std::string opening = absl::StrCat("\"", key, "\":[");
    const size_t start = json.find(opening);
    if (start == std::string::npos) return "<no " + key + ">";
    const size_t from = start + opening.size();
    return json.substr(from, json.find(']', from) - from);
  }

  std::unique_ptr<StorageHandles> storage_;
  std::unique_ptr<ProjectRegistry> registry_;
  std::shared_ptr<LiveProject> project_;
  std::unique_ptr<WebConsole> console_;
};

TEST_F(WebConsoleTest, HistoryKeepsOneSamplePerIntervalAndTheLastKHistorySamples) {
  // Two hours ahead of the clock, so that the sampling thread's own samples (at the real time)
  // are older than every one of these, and none of its later ones is taken.
  const absl::Time base = absl::Now() + absl::Hours(2);
  const int32_t n = WebConsole::kHistorySamples + 5;
  for (int32_t i = 0; i < n; ++i) {
    console_->SampleProjects(base + i * WebConsole::kSampleInterval);
    // Within the interval of the last sample: not taken.
    console_->SampleProjects(base + i * WebConsole::kSampleInterval + absl::Seconds(1));
  }
  const std::string json = Get("/api/projects/p");
  // The last kHistorySamples, every kSampleInterval; the oldest (base, and the thread's own
  // first sample if it took one before) dropped.
  std::string want_times;
  for (int32_t i = n - WebConsole::kHistorySamples; i < n; ++i) {
    absl::StrAppend(&want_times, want_times.empty() ? "" : ",",
                    absl::ToUnixMillis(base + i * WebConsole::kSampleInterval));
  }
  EXPECT_EQ(ArrayOf(json, "time_ms"), want_times);
  // No labels and no resolution rule: rates of 0 after the first, shares null.
  std::string want_rates = "null";
  std::string want_shares = "null";
  for (int32_t i = 1; i < WebConsole::kHistorySamples; ++i) {
    absl::StrAppend(&want_rates, ",0");
    absl::StrAppend(&want_shares, ",null");
  }
  EXPECT_EQ(ArrayOf(json, "labels_per_second"), want_rates);
  EXPECT_EQ(ArrayOf(json, "resolved_share"), want_shares);
}

TEST_F(WebConsoleTest, ANewProjectHasASampleAtItsFirstRequest) {
  const std::string json = Get("/api/projects/p");
  // Exactly one sample unless the sampling thread took one since the project was created;
  // either way at least one, with its 0 labels.
  EXPECT_NE(ArrayOf(json, "time_ms"), "");
  EXPECT_EQ(ArrayOf(json, "labels").substr(0, 1), "0");
}

TEST_F(WebConsoleTest, ReliabilityScoresGoldItemsFromTheirLabelsWithTheGoldHeldOut) {
  // Gold: g1 yes, g2 no, g3 yes, g4 no (no labels: not scored); n1 is not gold.
  std::vector<storage::ItemWrite> items(5);
  const char* ids[] = {"g1", "g2", "g3", "g4", "n1"};
  const int32_t gold[] = {1, 0, 1, 0, -1};
  for (int i = 0; i < 5; ++i) {
    items[i].external_id = ids[i];
    if (gold[i] >= 0) items[i].gold_label = gold[i];
  }
  ASSERT_TRUE(registry_->AddItems(*project_, items).ok());
  // Labels (1 = yes): g1 yes, yes, no; g2 yes; g3 yes, yes; n1 no, no.
  std::vector<storage::AnnotationWrite> writes;
  auto label = [&](const std::string& item, const std::string& annotator, int32_t value) {
    storage::AnnotationWrite w;
    w.project_id = project_->identity().project_id;
    w.item_id = item;
    w.annotator_id = annotator;
    w.label = value;
    writes.push_back(w);
  };
  label("g1", "a", 1);
  label("g1", "b", 1);
  label("g1", "c", 0);
  label("g2", "a", 1);
  label("g3", "a", 1);
  label("g3", "b", 1);
  label("n1", "a", 0);
  label("n1", "b", 0);
  ASSERT_TRUE(storage_->annotations->CommitAnnotations(writes).ok());

  // Before any fit the project serves majority vote with smoothing s (the default options):
  // p(yes) = (yes votes + s) / (votes + 2 s). g1: 2 of 3, right; g2: 1 of 1 for yes, wrong
  // (gold no); g3: 2 of 2, right.
  const double s = models::TruthModelOptions().vote_smoothing;
  const double g1 = (2 + s) / (3 + 2 * s);
  const double g2 = (1 + s) / (1 + 2 * s);
  const double g3 = (2 + s) / (2 + 2 * s);
  ASSERT_GE(g1, 0.6);
  ASSERT_LT(g1, 0.7);
  ASSERT_GE(g2, 0.9);
  ASSERT_GE(g3, 0.9);
  // Bin 6 holds g1 (accuracy 1), bin 9 g2 and g3 (accuracy 1/2).
  const double bin9 = (g2 + g3) / 2;
  const double ece = (1 - g1) / 3 + 2.0 / 3 * (bin9 - 0.5);
  const std::string json = Get("/api/projects/p");
  EXPECT_NE(json.find("\"gold_items\":4,\"gold_items_with_labels\":3,"), std::string::npos)
      << json;
  auto num = [](double x) { return absl::StrFormat("%.10g", x); };
  std::string want = absl::StrCat(
      "\"reliability\":{\"count\":3,\"accuracy\":", num(2.0 / 3),
      ",\"expected_calibration_error\":", num(ece), ",\"bins\":[");
  for (int b = 0; b < WebConsole::kReliabilityBins; ++b) {
    const std::string bounds = absl::StrCat("{\"low\":", num(b / 10.0), ",\"high\":",
                                            num((b + 1) / 10.0), ",\"count\":");
    if (b == 6) {
      absl::StrAppend(&want, bounds, "1,\"mean_confidence\":", num(g1), ",\"accuracy\":1}");
    } else if (b == 9) {
      absl::StrAppend(&want, bounds, "2,\"mean_confidence\":", num(bin9), ",\"accuracy\":0.5}");
    } else {
      absl::StrAppend(&want, bounds, "0,\"mean_confidence\":null,\"accuracy\":null}");
    }
    if (b + 1 < WebConsole::kReliabilityBins) want += ",";
  }
  want += "]}";
  EXPECT_NE(json.find(want), std::string::npos) << "want " << want << "\nin " << json;
}

// console.h: the annotators endpoint lists at most kMaxListedConfusionCells / K² annotators
// with confusion matrices (2^20 / 32² = 1,024 at 32 classes), those with the most labels first,
// and says how many there are. 1,025 annotators: w0 gave 1 label, every other one 2; w0 is the
// one left out, and the others come in registration order.
TEST_F(WebConsoleTest, TheAnnotatorListIsBoundedToThoseWithTheMostLabels) {
  v1::Project many;
  many.set_name("many");
  for (int c = 0; c < 32; ++c) many.add_classes(absl::StrCat("c", c));
  absl::StatusOr<std::shared_ptr<LiveProject>> created = registry_->Create(many);
  ASSERT_TRUE(created.ok()) << created.status();
  const int32_t annotators = 1025;
  std::vector<std::string> annotator_ids, item_ids = {"i0", "i1"};
  for (int32_t a = 0; a < annotators; ++a) annotator_ids.push_back(absl::StrCat("w", a));
  std::vector<CommittedLabel> labels;
  int64_t seq = 0;
  for (int32_t a = 0; a < annotators; ++a) {
    for (int32_t i = 0; i < (a == 0 ? 1 : 2); ++i) {
      labels.push_back({i, item_ids[i], a, annotator_ids[a], (a + i) % 32, ++seq, true});
    }
  }
  (*created)->ApplyCommitted(labels);

  const std::string json = Get("/api/projects/many/annotators");
  EXPECT_NE(json.find("\"annotators_total\":1025,"), std::string::npos) << json.substr(0, 300);
  std::vector<std::string> listed;
  for (size_t at = json.find("{\"id\":\""); at != std::string::npos;
       at = json.find("{\"id\":\"", at + 1)) {
    const size_t from = at + 7;
    listed.push_back(json.substr(from, json.find('"', from) - from));
  }
  ASSERT_EQ(listed.size(), 1024u);
  for (int32_t a = 1; a < annotators; ++a) EXPECT_EQ(listed[a - 1], annotator_ids[a]);
  EXPECT_NE(json.find("{\"id\":\"w1\",\"labels\":2,"), std::string::npos);
}

// console.h: however few cells each annotator's confusion takes (none past 32 classes), at
// most 10,000 annotators are listed, those with the most labels. 33 classes, 10,001
// annotators, w0 with one label and the others with two: w1..w10000 are listed, w0 is not.
TEST_F(WebConsoleTest, TheAnnotatorListIsBoundedToTenThousandWithoutConfusions) {
  v1::Project many;
  many.set_name("many-classes");
  for (int c = 0; c < 33; ++c) many.add_classes(absl::StrCat("c", c));
  absl::StatusOr<std::shared_ptr<LiveProject>> created = registry_->Create(many);
  ASSERT_TRUE(created.ok()) << created.status();
  const int32_t annotators = 10001;
  std::vector<std::string> item_ids = {"i0", "i1"};
  std::vector<CommittedLabel> labels;
  int64_t seq = 0;
  for (int32_t a = 0; a < annotators; ++a) {
    for (int32_t i = 0; i < (a == 0 ? 1 : 2); ++i) {
      labels.push_back({i, item_ids[i], a, absl::StrCat("w", a), (a + i) % 33, ++seq, true});
    }
  }
  (*created)->ApplyCommitted(labels);

  const std::string json = Get("/api/projects/many-classes/annotators");
  EXPECT_NE(json.find("\"annotators_total\":10001,"), std::string::npos) << json.substr(0, 300);
  std::vector<std::string> listed;
  for (size_t at = json.find("{\"id\":\""); at != std::string::npos;
       at = json.find("{\"id\":\"", at + 1)) {
    const size_t from = at + 7;
    listed.push_back(json.substr(from, json.find('"', from) - from));
  }
  ASSERT_EQ(listed.size(), 10000u);
  EXPECT_EQ(listed.front(), "w1");
  EXPECT_EQ(listed.back(), "w10000");
}

TEST_F(WebConsoleTest, DsHasNoSpamScoresOrEmbeddings) {
  const std::string json = Get("/api/projects/p/annotators");
  EXPECT_NE(json.find("\"spam_scores\":false,\"embedding_dim\":0,"), std::string::npos) << json;
}

}  // namespace
}  // namespace verity::server
