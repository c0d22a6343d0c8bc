// WebConsole against a real PostgreSQL and ProjectRegistry: the history ring buffer (driven
// step by step through SampleProjects with explicit times) and the ingest rate, the
// reliability diagram on gold items, whose labels the console reads from PostgreSQL, the
// confidence histogram, resolution, class prior, spam scores and embedding map, and the access
// checks (Host header, API key). The page itself is tested in headless Chromium by
// //console:console_browser_test.
#include "server/console/console.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
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

  // A project with classes no, yes and `method` (UNSPECIFIED: the default).
  absl::StatusOr<std::shared_ptr<LiveProject>> CreateProject(
      const std::string& name, v1::TruthMethod method = v1::TRUTH_METHOD_UNSPECIFIED) {
    v1::Project project;
    project.set_name(name);
    project.add_classes("no");
    project.add_classes("yes");
    if (method != v1::TRUTH_METHOD_UNSPECIFIED) {
      project.mutable_settings()->mutable_model()->set_method(method);
    }
    return registry_->Create(project);
  }

  // Items of `project` (PostgreSQL and memory), with their gold labels (-1: none).
  void AddItems(LiveProject& project, const std::vector<std::pair<std::string, int32_t>>& items) {
    std::vector<storage::ItemWrite> writes;
    for (const auto& [id, gold] : items) {
      storage::ItemWrite w;
      w.external_id = id;
      if (gold >= 0) w.gold_label = gold;
      writes.push_back(w);
    }
    absl::StatusOr<std::vector<int32_t>> added = registry_->AddItems(project, writes);
    ASSERT_TRUE(added.ok()) << added.status();
  }

  struct Label {
    std::string item;
    std::string annotator;
    int32_t label;
  };
  // Commits `labels` of `project` to PostgreSQL and applies them to its live state, as the
  // ingest pipeline does.
  void Commit(LiveProject& project, const std::vector<Label>& labels) {
    std::vector<storage::AnnotationWrite> writes;
    for (const Label& l : labels) {
      storage::AnnotationWrite w;
      w.project_id = project.identity().project_id;
      w.item_id = l.item;
      w.annotator_id = l.annotator;
      w.label = l.label;
      writes.push_back(w);
    }
    absl::StatusOr<std::vector<storage::WriteResult>> results =
        storage_->annotations->CommitAnnotations(writes);
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->size(), writes.size());
    std::vector<CommittedLabel> committed;
    for (size_t i = 0; i < writes.size(); ++i) {
      const storage::WriteResult& r = (*results)[i];
      committed.push_back({r.item_index, writes[i].item_id, r.annotator_index,
                           writes[i].annotator_id, r.label, r.seq,
                           r.outcome != storage::WriteOutcome::kDuplicate});
    }
    project.ApplyCommitted(committed);
  }

  // The text of the value of the first "key": in `json` at or after `from` (up to the next
  // ',', '}' or ']').
  static std::string ValueOf(const std::string& json, const std::string& key, size_t from = 0) {
    const std::string opening = absl::StrCat("\"", key, "\":");
    const size_t start = json.find(opening, from);
    if (start == std::string::npos) return "<no " + key + ">";
    const size_t begin = start + opening.size();
    return json.substr(begin, json.find_first_of(",}]", begin) - begin);
  }

  // labels_per_second of project `name` in /api/projects.
  std::string LabelsPerSecond(const std::string& name) {
    const std::string json = Get("/api/projects");
    const size_t at = json.find(absl::StrCat("{\"name\":\"", name, "\""));
    if (at == std::string::npos) return "<no project " + name + "> in " + json;
    return ValueOf(json, "labels_per_second", at);
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

// console.h: unknown projects answer 404 with {"error": "..."}.
TEST_F(WebConsoleTest, AnUnknownProjectIs404) {
  for (const std::string path : {"/api/projects/nope", "/api/projects/nope/annotators"}) {
    const HttpResponse response = console_->Handle(HttpPageRequest{path, "localhost", ""});
    EXPECT_EQ(response.status, 404) << path << ": " << response.body;
    EXPECT_EQ(response.body.substr(0, 10), "{\"error\":\"") << path;
  }
}

// console.h (Access): the Host header must name a loopback name, the bound address or an
// allowed host; a console bound to 0.0.0.0 has no bound address of its own ("" or 0.0.0.0:
// none), so Host: 0.0.0.0 is refused. A request without a Host header (HTTP/1.0) comes from no
// browser, so DNS rebinding cannot send it: it is answered.
TEST_F(WebConsoleTest, TheHostHeaderMustNameThisConsole) {
  WebConsole::Access every_interface;
  every_interface.bound_host = "0.0.0.0";
  WebConsole console(*registry_, *storage_->versions, every_interface);
  auto status = [&console](const std::string& host) {
    return console.Handle(HttpPageRequest{"/api/projects", host, ""}).status;
  };
  EXPECT_EQ(status("localhost:9464"), 200);
  EXPECT_EQ(status("127.0.0.1:9464"), 200);
  EXPECT_EQ(status("[::1]:9464"), 200);
  EXPECT_EQ(status(""), 200);
  EXPECT_EQ(status("0.0.0.0:9464"), 403);
  EXPECT_EQ(status("0.0.0.0"), 403);
  EXPECT_EQ(status("rebind.example:9464"), 403);

  WebConsole::Access one_address;
  one_address.bound_host = "192.0.2.7";
  WebConsole bound(*registry_, *storage_->versions, one_address);
  EXPECT_EQ(bound.Handle(HttpPageRequest{"/api/projects", "192.0.2.7:9464", ""}).status, 200);
  EXPECT_EQ(bound.Handle(HttpPageRequest{"/api/projects", "192.0.2.8:9464", ""}).status, 403);
  EXPECT_EQ(bound.Handle(HttpPageRequest{"/api/projects", "", ""}).status, 200);
}

// console.h (Access): with authentication on every /api/ request needs "Authorization: Bearer
// KEY"; without a key (no header, another scheme, or "Bearer " with nothing after it) the
// answer is 401 asking for one, and the key check is never called with an empty key.
TEST_F(WebConsoleTest, ARequestWithoutAKeyIsRefusedBeforeTheKeyCheck) {
  std::vector<std::string> checked;
  WebConsole::Access access;
  access.authenticate =
      [&checked](absl::string_view key) -> absl::StatusOr<WebConsole::ProjectFilter> {
    checked.emplace_back(key);
    if (key != "k") return absl::UnauthenticatedError("unknown API key");
    return WebConsole::ProjectFilter([](absl::string_view) { return true; });
  };
  WebConsole console(*registry_, *storage_->versions, access);
  for (const std::string authorization : {"", "Bearer ", "Basic k", "bearer k"}) {
    const HttpResponse response =
        console.Handle(HttpPageRequest{"/api/projects", "localhost", authorization});
    EXPECT_EQ(response.status, 401) << authorization;
    EXPECT_NE(response.body.find("send an API key"), std::string::npos)
        << authorization << ": " << response.body;
  }
  EXPECT_TRUE(checked.empty()) << checked.front();
  const HttpResponse wrong =
      console.Handle(HttpPageRequest{"/api/projects", "localhost", "Bearer nope"});
  EXPECT_EQ(wrong.status, 401);
  EXPECT_NE(wrong.body.find("unknown API key"), std::string::npos) << wrong.body;
  EXPECT_EQ(console.Handle(HttpPageRequest{"/api/projects", "localhost", "Bearer k"}).status,
            200);
  EXPECT_EQ(checked, (std::vector<std::string>{"nope", "k"}));
}

// The posterior-confidence histogram: kHistogramBins (10) even bins from its "low" (1/K, the
// least possible confidence) to its "high" (1), the top one closed. K = 2, majority vote with
// smoothing s before any fit: u (no labels) 0.5, bin 0; m (yes, yes, no) (2 + s) / (3 + 2 s),
// bin 3; y (yes, yes) (2 + s) / (2 + 2 s), bin 9; g (gold, clamped) 1, the top bin too.
TEST_F(WebConsoleTest, TheConfidenceHistogramSpansOneOverKToOne) {
  AddItems(*project_, {{"g", 1}, {"u", -1}, {"y", -1}, {"m", -1}});
  Commit(*project_, {{"y", "a", 1}, {"y", "b", 1}, {"m", "a", 1}, {"m", "b", 1}, {"m", "c", 0}});
  const double s = models::TruthModelOptions().vote_smoothing;
  ASSERT_GE((2 + s) / (3 + 2 * s), 0.65);
  ASSERT_LT((2 + s) / (3 + 2 * s), 0.7);
  ASSERT_GE((2 + s) / (2 + 2 * s), 0.95);
  const std::string json = Get("/api/projects/p");
  EXPECT_NE(json.find("\"confidence_histogram\":{\"low\":0.5,\"high\":1,"
                      "\"counts\":[1,0,0,1,0,0,0,0,0,2]}"),
            std::string::npos)
      << json;
}

// A confidence target alone defines resolution (max_labels_per_item 0 = unlimited): an item
// is resolved once its confidence reaches the target. y (yes, yes: ~0.995) is; m (yes, yes,
// no: ~0.67) and u (no label) are not: 1 resolved, 2 open, a share of 1/3, in the project's
// assignment and in its history.
TEST_F(WebConsoleTest, AConfidenceTargetAloneDefinesResolution) {
  v1::ProjectSettings settings = project_->settings();
  settings.mutable_assignment()->set_confidence_target(0.9);
  ASSERT_TRUE(registry_->UpdateSettings(*project_, settings).ok());
  AddItems(*project_, {{"u", -1}, {"y", -1}, {"m", -1}});
  Commit(*project_, {{"y", "a", 1}, {"y", "b", 1}, {"m", "a", 1}, {"m", "b", 1}, {"m", "c", 0}});
  // Ahead of the clock, so that this sample is the history's last.
  console_->SampleProjects(absl::Now() + absl::Hours(2));
  const std::string json = Get("/api/projects/p");
  EXPECT_NE(json.find("\"max_labels_per_item\":0,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"resolved_items\":1,\"resolved_share\":0.3333333333,\"open_items\":2}"),
            std::string::npos)
      << json;
  const std::string shares = ArrayOf(json, "resolved_share");
  EXPECT_EQ(shares.substr(shares.rfind(',') + 1), "0.3333333333") << shares;
}

// The class prior the console shows is the served snapshot's (the mean posterior of the
// labelled items at the last full recompute, live_project.h), and an annotator's estimated
// accuracy is its confusion diagonal weighted by it (README.md). After a ds fit on 3 items of
// "yes" and 1 of "no" the prior is far from uniform, and c, wrong on one item of each class,
// has a diagonal far from constant.
TEST_F(WebConsoleTest, TheClassPriorIsTheFittedOneAndWeighsTheAccuracy) {
  absl::StatusOr<std::shared_ptr<LiveProject>> created =
      CreateProject("ds", v1::TRUTH_METHOD_DAWID_SKENE);
  ASSERT_TRUE(created.ok()) << created.status();
  LiveProject& ds = **created;
  std::vector<Label> labels;
  for (const std::string item : {"y1", "y2", "y3", "y4", "y5", "y6", "n1", "n2"}) {
    const int32_t truth = item[0] == 'y' ? 1 : 0;
    labels.push_back({item, "a", truth});
    labels.push_back({item, "b", truth});
    labels.push_back({item, "c", item == "y1" || item == "n1" ? 1 - truth : truth});
  }
  Commit(ds, labels);
  ASSERT_TRUE(ds.Refit(*storage_->versions).ok());
  std::shared_ptr<const ProjectSnapshot> snapshot = ds.snapshot();
  const PosteriorTable& table = snapshot->posteriors;
  std::vector<double> prior(2, 0.0);
  int32_t labelled = 0;
  for (int32_t item = 0; item < table.num_items(); ++item) {
    if (table.num_labels(item) == 0) continue;
    for (int32_t c = 0; c < 2; ++c) prior[c] += table.probabilities(item)[c];
    ++labelled;
  }
  ASSERT_EQ(labelled, 8);
  for (double& p : prior) p /= labelled;
  ASSERT_GT(prior[1], 0.6);

  const std::string json = Get("/api/projects/ds");
  const std::vector<std::string> shown = absl::StrSplit(ArrayOf(json, "class_prior"), ',');
  ASSERT_EQ(shown.size(), 2u) << json;
  for (int32_t c = 0; c < 2; ++c) EXPECT_NEAR(std::stod(shown[c]), prior[c], 1e-9) << json;

  const std::optional<int32_t> c = ds.FindAnnotator("c");
  ASSERT_TRUE(c.has_value());
  const std::vector<double> diagonal = snapshot->model->AnnotatorConfusionDiagonal(*c);
  ASSERT_EQ(diagonal.size(), 2u);
  ASSERT_GT(std::abs(diagonal[0] - diagonal[1]), 0.1);
  const std::string annotators = Get("/api/projects/ds/annotators");
  const size_t at = annotators.find("{\"id\":\"c\"");
  ASSERT_NE(at, std::string::npos) << annotators;
  EXPECT_NEAR(std::stod(ValueOf(annotators, "accuracy", at)),
              prior[0] * diagonal[0] + prior[1] * diagonal[1], 1e-9)
      << annotators;
}

// README.md (server/console): spam_score is mace's 1 − θ_j, the chance that the annotator
// labels at random. a, b and c label every item alike; s answers "no" whatever the item.
// README.md (--memory_budget_mb) and server/console/README.md: a project the memory budget
// unloaded while idle stays listed, with the counts and version it had, and listing it does not
// load it again.
TEST_F(WebConsoleTest, AProjectTheBudgetUnloadedStaysListedAsItWas) {
  {
    auto idle = CreateProject("idle", v1::TRUTH_METHOD_DAWID_SKENE);
    ASSERT_TRUE(idle.ok()) << idle.status();
    Commit(**idle, {{"a", "w1", 1}, {"a", "w2", 1}, {"b", "w1", 0}, {"b", "w2", 0},
                    {"c", "w1", 1}, {"c", "w2", 0}, {"c", "w3", 1}});
    ASSERT_TRUE((*idle)->Refit(*storage_->versions).ok());
  }
  registry_->EnforceMemoryBudget(1, absl::Seconds(30));
  ASSERT_THAT(registry_->EvictOverBudget(absl::Now() + absl::Minutes(1)),
              ::testing::ElementsAre("idle"));
  const std::string json = Get("/api/projects");
  const size_t at = json.find("{\"name\":\"idle\"");
  ASSERT_NE(at, std::string::npos) << json;
  EXPECT_EQ(ValueOf(json, "items", at), "3") << json;
  EXPECT_EQ(ValueOf(json, "annotators", at), "3") << json;
  EXPECT_EQ(ValueOf(json, "labels", at), "7") << json;
  EXPECT_EQ(ValueOf(json, "method", at), "\"ds\"") << json;
  EXPECT_EQ(ValueOf(json, "model_version", at), "1") << json;
  EXPECT_EQ(ValueOf(json, "model_method", at), "\"ds\"") << json;
  EXPECT_EQ(ValueOf(json, "loaded", at), "false") << json;
  const size_t held = json.find("{\"name\":\"p\"");
  ASSERT_NE(held, std::string::npos) << json;
  EXPECT_EQ(ValueOf(json, "loaded", held), "true") << json;
  EXPECT_EQ(registry_->IfLoaded("idle"), nullptr) << "listing must not load it";
}

TEST_F(WebConsoleTest, MaceSpamScoresAreLowForAgreeingAnnotators) {
  absl::StatusOr<std::shared_ptr<LiveProject>> created =
      CreateProject("mace", v1::TRUTH_METHOD_MACE);
  ASSERT_TRUE(created.ok()) << created.status();
  std::vector<Label> labels;
  for (int32_t i = 0; i < 20; ++i) {
    const std::string item = absl::StrCat("i", i);
    for (const std::string annotator : {"a", "b", "c"}) labels.push_back({item, annotator, i % 2});
    labels.push_back({item, "s", 0});
  }
  Commit(**created, labels);
  ASSERT_TRUE((*created)->Refit(*storage_->versions).ok());
  const std::string json = Get("/api/projects/mace/annotators");
  EXPECT_NE(json.find("\"spam_scores\":true,"), std::string::npos) << json;
  auto spam = [&json](const std::string& id) {
    const size_t at = json.find(absl::StrCat("{\"id\":\"", id, "\""));
    return at == std::string::npos ? std::string("<no annotator>")
                                   : ValueOf(json, "spam_score", at);
  };
  for (const std::string id : {"a", "b", "c"}) {
    EXPECT_LT(std::stod(spam(id)), 0.5) << id << " in " << json;
    EXPECT_GT(std::stod(spam("s")), std::stod(spam(id))) << id << " in " << json;
  }
}

// console.h: the 2-D map of learned embeddings (lia) is drawn for a project of up to
// kMaxEmbeddingAnnotators annotators: embedding_dim > 0 and a position per annotator.
TEST_F(WebConsoleTest, LiaAnnotatorsHaveAnEmbeddingMap) {
  absl::StatusOr<std::shared_ptr<LiveProject>> created =
      CreateProject("lia", v1::TRUTH_METHOD_LIA);
  ASSERT_TRUE(created.ok()) << created.status();
  std::vector<Label> labels;
  for (int32_t i = 0; i < 20; ++i) {
    const std::string item = absl::StrCat("i", i);
    for (const std::string annotator : {"a", "b", "c"}) labels.push_back({item, annotator, i % 2});
  }
  Commit(**created, labels);
  ASSERT_TRUE((*created)->Refit(*storage_->versions).ok());
  const std::string json = Get("/api/projects/lia/annotators");
  EXPECT_NE(ValueOf(json, "embedding_dim"), "0") << json;
  for (const std::string id : {"a", "b", "c"}) {
    const size_t at = json.find(absl::StrCat("{\"id\":\"", id, "\""));
    ASSERT_NE(at, std::string::npos) << json;
    EXPECT_EQ(ValueOf(json, "embedding_2d", at).substr(0, 1), "[") << id << " in " << json;
  }
}

// console.h: /api/projects's labels_per_second is measured from the oldest history sample
// within kRateWindow to the request. "r" is created after the sampling thread's first pass,
// so it has no sample until its next one (kSampleInterval later) and these, in the past, are
// its first: 0 labels 10 minutes ago (outside the window), 10 labels 100 s ago, 30 now: 20
// labels in 100 s (and the moments since).
TEST_F(WebConsoleTest, TheIngestRateIsMeasuredWithinTheRateWindow) {
  // The thread's first pass has sampled p once p has a rate (a sample a second old); the
  // listing itself samples nothing.
  for (int i = 0; i < 100 && LabelsPerSecond("p") == "null"; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(LabelsPerSecond("p"), "0");
  // The sampling thread may sample a new project between its creation and the explicit
  // samples below (then those are not taken): tried again on another project, at most 3 times.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string name = absl::StrCat("r", attempt);
    absl::StatusOr<std::shared_ptr<LiveProject>> created = CreateProject(name);
    ASSERT_TRUE(created.ok()) << created.status();
    const absl::Time start = absl::Now();
    console_->SampleProjects(start - absl::Minutes(10));
    std::vector<Label> first, then;
    for (int32_t i = 0; i < 10; ++i) {
      const std::string item = absl::StrCat("i", i);
      first.push_back({item, "a", 1});
      then.push_back({item, "b", 1});
      then.push_back({item, "c", 1});
    }
    Commit(**created, first);
    console_->SampleProjects(start - absl::Seconds(100));
    Commit(**created, then);
    const std::string rate = LabelsPerSecond(name);
    // Were the samples above the project's first (not taken after one of the thread's)?
    if (ArrayOf(Get(absl::StrCat("/api/projects/", name)), "time_ms").substr(0, 27) !=
        absl::StrCat(absl::ToUnixMillis(start - absl::Minutes(10)), ",",
                     absl::ToUnixMillis(start - absl::Seconds(100)))) {
      continue;
    }
    // 20 labels since the sample 100 s old; the one 10 minutes old is outside the window.
    EXPECT_LE(std::stod(rate), 0.2) << rate;
    EXPECT_GT(std::stod(rate), 0.19) << rate;
    return;
  }
  FAIL() << "the sampling thread sampled each new project before the test could";
}

// console.h: labels_per_second is null until the oldest sample within the window is a second
// old.
TEST_F(WebConsoleTest, TheIngestRateIsNullUntilItsSampleIsASecondOld) {
  absl::StatusOr<std::shared_ptr<LiveProject>> created = CreateProject("r");
  ASSERT_TRUE(created.ok()) << created.status();
  console_->SampleProjects(absl::Now());
  Commit(**created, {{"i0", "a", 1}, {"i1", "a", 0}});
  EXPECT_EQ(LabelsPerSecond("r"), "null");
}

// console.h: the gold items' labels are read from PostgreSQL at most every
// kReliabilityRefresh, and again once it has passed when the label count changed (the model
// version did not: no fit runs here).
TEST_F(WebConsoleTest, GoldLabelsAreReadAgainAfterTheRefreshWhenLabelsChanged) {
  AddItems(*project_, {{"g1", 1}, {"g2", 0}});
  Commit(*project_, {{"g1", "a", 1}});
  EXPECT_NE(Get("/api/projects/p").find("\"gold_items\":2,\"gold_items_with_labels\":1,"),
            std::string::npos);
  Commit(*project_, {{"g2", "a", 0}});
  // Within kReliabilityRefresh of the last read: not read again.
  EXPECT_NE(Get("/api/projects/p").find("\"gold_items\":2,\"gold_items_with_labels\":1,"),
            std::string::npos);
  absl::SleepFor(WebConsole::kReliabilityRefresh + absl::Seconds(1));
  const std::string json = Get("/api/projects/p");
  EXPECT_NE(json.find("\"gold_items\":2,\"gold_items_with_labels\":2,"), std::string::npos)
      << json;
}

// console.h (Access): the Host header names a loopback address when its bracketed IPv6 literal is
// closed; "[::1" without its "]" names no address, so it is refused like any foreign host.
TEST_F(WebConsoleTest, AnUnclosedIpv6LiteralInTheHostHeaderIsRefused) {
  EXPECT_EQ(console_->Handle(HttpPageRequest{"/api/projects", "[::1]", ""}).status, 200);
  for (const std::string host : {"[::1", "[::1:9464"}) {
    const HttpResponse response = console_->Handle(HttpPageRequest{"/api/projects", host, ""});
    EXPECT_EQ(response.status, 403) << host;
    EXPECT_EQ(response.body.substr(0, 10), "{\"error\":\"") << host;
  }
}

// The authentication of WebConsoleTest below: key "k" may read project p only.
WebConsole::Access KeyOfProjectP() {
  WebConsole::Access access;
  access.authenticate = [](absl::string_view key) -> absl::StatusOr<WebConsole::ProjectFilter> {
    if (key != "k") return absl::UnauthenticatedError("unknown API key");
    return WebConsole::ProjectFilter([](absl::string_view project) { return project == "p"; });
  };
  return access;
}

// console.h (Access): a key "sees only the projects the key may touch ...: a reader of project A
// lists only A, and B answers 403"; docs/SECURITY.md: a reader key may not "see another
// project's name ... over gRPC or the console". So every other name answers 403, whether a
// project has it (q) or none does (nope): a 404 would tell the key which projects exist.
TEST_F(WebConsoleTest, AKeySeesItsProjectsOnlyAndLearnsNoOtherName) {
  ASSERT_TRUE(CreateProject("q").ok());
  WebConsole console(*registry_, *storage_->versions, KeyOfProjectP());
  auto get = [&console](const std::string& path) {
    return console.Handle(HttpPageRequest{path, "localhost", "Bearer k"});
  };
  const HttpResponse list = get("/api/projects");
  EXPECT_EQ(list.status, 200);
  EXPECT_NE(list.body.find("{\"name\":\"p\""), std::string::npos) << list.body;
  EXPECT_EQ(list.body.find("\"q\""), std::string::npos) << list.body;
  EXPECT_EQ(get("/api/projects/p").status, 200);
  EXPECT_EQ(get("/api/projects/p/annotators").status, 200);
  for (const std::string path : {"/api/projects/q", "/api/projects/q/annotators",
                                 "/api/projects/nope", "/api/projects/nope/annotators"}) {
    const HttpResponse response = get(path);
    EXPECT_EQ(response.status, 403) << path << ": " << response.body;
    EXPECT_EQ(response.body.substr(0, 10), "{\"error\":\"") << path;
  }
}

// README.md (server/console): /api/projects lists the projects the memory budget unloaded too;
// console.h (Access): a key lists only its projects. An unloaded project of another key's is
// listed neither loaded nor unloaded.
TEST_F(WebConsoleTest, AKeyListsNoUnloadedProjectOfAnother) {
  {
    auto idle = CreateProject("idle", v1::TRUTH_METHOD_DAWID_SKENE);
    ASSERT_TRUE(idle.ok()) << idle.status();
    Commit(**idle, {{"a", "w1", 1}, {"a", "w2", 1}, {"b", "w1", 0}, {"b", "w2", 0}});
    ASSERT_TRUE((*idle)->Refit(*storage_->versions).ok());
  }
  registry_->EnforceMemoryBudget(1, absl::Seconds(30));
  ASSERT_THAT(registry_->EvictOverBudget(absl::Now() + absl::Minutes(1)),
              ::testing::ElementsAre("idle"));
  // Without authentication the unloaded project is listed (what the key must not see).
  ASSERT_NE(Get("/api/projects").find("{\"name\":\"idle\""), std::string::npos);
  WebConsole console(*registry_, *storage_->versions, KeyOfProjectP());
  const HttpResponse list =
      console.Handle(HttpPageRequest{"/api/projects", "localhost", "Bearer k"});
  EXPECT_EQ(list.status, 200);
  EXPECT_NE(list.body.find("{\"name\":\"p\""), std::string::npos) << list.body;
  EXPECT_EQ(list.body.find("idle"), std::string::npos) << list.body;
}

// console.h: the project view shows its "open items and leases": outstanding_leases counts every
// lease, items_with_leases the items that have one. Annotators 0 and 1 leasing item 0 and
// annotator 0 item 1: 3 leases on 2 items.
TEST_F(WebConsoleTest, LeasesAreCountedEachAndItemsOnce) {
  AddItems(*project_, {{"i0", -1}, {"i1", -1}, {"i2", -1}});
  const absl::Time expires = absl::Now() + absl::Hours(1);
  project_->leases().Add(0, 0, expires);
  project_->leases().Add(0, 1, expires);
  project_->leases().Add(1, 0, expires);
  const std::string json = Get("/api/projects/p");
  EXPECT_NE(json.find("\"outstanding_leases\":3,\"items_with_leases\":2,"), std::string::npos)
      << json;
}

// console.h: "a failed database read answers 503", in the {"error": "..."} form. With PostgreSQL
// stopped, the project view, whose model versions are read there, answers 503.
TEST_F(WebConsoleTest, AFailedDatabaseReadAnswers503) {
  ASSERT_TRUE(cluster().Stop().ok());
  const HttpResponse down = console_->Handle(HttpPageRequest{"/api/projects/p", "localhost", ""});
  ASSERT_TRUE(cluster().Start().ok());
  EXPECT_EQ(down.status, 503) << down.body;
  EXPECT_EQ(down.body.substr(0, 10), "{\"error\":\"") << down.body;
}

// console.h: a project's endpoints are /api/projects/{name} and /api/projects/{name}/annotators;
// "Unknown paths ... answer 404 with {"error": "..."}", below an existing project too.
TEST_F(WebConsoleTest, OtherPathsBelowAnExistingProjectAre404) {
  for (const std::string path : {"/api/projects/p/", "/api/projects/p/versions",
                                 "/api/projects/p/annotators/a", "/api/projects/p/x/annotators"}) {
    const HttpResponse response = console_->Handle(HttpPageRequest{path, "localhost", ""});
    EXPECT_EQ(response.status, 404) << path << ": " << response.body;
    EXPECT_EQ(response.body.substr(0, 10), "{\"error\":\"") << path;
  }
}

}  // namespace
}  // namespace verity::server
