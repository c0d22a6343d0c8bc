#include "server/state/live_project.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "models/auto_truth_model.h"
#include "models/calibrated_truth_model.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model_factory.h"

namespace verity::server {

// Holds the project lock as a committed batch or a refit's republish does.
class LiveProjectTestPeer {
 public:
  static absl::Mutex& ProjectLock(LiveProject& project) { return project.mu_; }
};

namespace {

constexpr int32_t kClasses = 3;
constexpr int32_t kAnnotators = 12;

models::testing::SyntheticCrowd MakeCrowd(int32_t items, uint64_t seed,
                                          int32_t classes = kClasses) {
  models::testing::SyntheticCrowdSpec spec;
  spec.num_items = items;
  spec.num_classes = classes;
  spec.labels_per_item = 4;
  for (int a = 0; a < kAnnotators; ++a) {
    spec.confusions.push_back(models::testing::SymmetricConfusion(classes, a < 4 ? 0.4 : 0.85));
  }
  spec.seed = seed;
  return models::testing::GenerateSyntheticCrowd(spec);
}

LiveProject::Identity TestIdentity(int32_t classes = kClasses) {
  LiveProject::Identity id;
  id.project_id = 1;
  id.name = "p";
  id.classes = {"a", "b", "c"};
  id.classes.resize(classes);
  return id;
}

// One label (class 0) on each of items i0..i99, item i by annotator w(i % 10), seqs 1..100.
std::vector<CommittedLabel> HundredLabelsByTenAnnotators() {
  std::vector<CommittedLabel> labels;
  for (int i = 0; i < 100; ++i) {
    labels.push_back({i, absl::StrCat("i", i), i % 10, absl::StrCat("w", i % 10), 0, i + 1, true});
  }
  return labels;
}

// The stored state of a project holding `crowd`'s labels (items i0.., annotators w0..w11, seqs
// 1..n in the crowd's order, no gold) and, as version 1 over all of them, `fitted` (`method`).
LiveProject::StoredState StoredFit(const models::testing::SyntheticCrowd& crowd,
                                   const models::TruthModel& fitted, const std::string& method) {
  LiveProject::StoredState stored;
  for (int32_t i = 0; i < crowd.matrix.num_items(); ++i) {
    stored.item_ids.push_back(absl::StrCat("i", i));
  }
  stored.gold.assign(crowd.matrix.num_items(), -1);
  for (int32_t a = 0; a < kAnnotators; ++a) stored.annotator_ids.push_back(absl::StrCat("w", a));
  int64_t seq = 0;
  for (const models::Annotation& a : crowd.annotations) {
    stored.labels.push_back({a.item, a.annotator, a.label, ++seq});
  }
  storage::ModelVersionRecord version;
  version.version = 1;
  version.method = method;
  version.parameters = fitted.Serialize();
  version.watermark = seq;
  version.num_labels = seq;
  stored.latest_version = version;
  return stored;
}

// A live project restored from StoredFit of `crowd` fitted by `method` (Dawid-Skene by default).
std::unique_ptr<LiveProject> RestoreFitted(const models::testing::SyntheticCrowd& crowd,
                                           std::unique_ptr<models::TruthModel>& fitted,
                                           const std::string& method = "ds",
                                           int32_t classes = kClasses,
                                           int32_t annotator_feature_dim = 0,
                                           int32_t item_feature_dim = 0) {
  fitted = *models::CreateTruthModel(method, classes, {});
  EXPECT_TRUE(fitted->Fit(crowd.matrix, {}, false).ok());
  LiveProject::StoredState stored = StoredFit(crowd, *fitted, method);
  LiveProject::Identity identity = TestIdentity(classes);
  identity.annotator_feature_dim = annotator_feature_dim;
  stored.annotator_features.assign(static_cast<size_t>(kAnnotators) * annotator_feature_dim, 0.0f);
  identity.item_feature_dim = item_feature_dim;
  stored.item_features.assign(stored.item_ids.size() * item_feature_dim, 0.0f);
  auto project = LiveProject::Create(identity, v1::ProjectSettings(), std::move(stored));
  EXPECT_TRUE(project.ok()) << project.status();
  return std::move(*project);
}

TEST(LiveProjectTest, RestoredPosteriorsEqualTheModelsFullEStep) {
  auto crowd = MakeCrowd(300, 3);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  std::vector<double> expected = models::AllPosteriors(*fitted, crowd.matrix, {});
  auto snapshot = project->snapshot();
  ASSERT_EQ(snapshot->posteriors.num_items(), 300);
  EXPECT_EQ(snapshot->model_version, 1);
  for (int32_t i = 0; i < 300; ++i) {
    for (int32_t c = 0; c < kClasses; ++c) {
      ASSERT_EQ(snapshot->posteriors.probabilities(i)[c], expected[i * kClasses + c]) << i;
    }
  }
}

// Every method at 2 and at 3 classes, where it takes that many (kos is binary only; each
// method must take at least one of them).
TEST(LiveProjectTest, EveryServedMethodRestoresToItsFullEStepAndUpdatesOnline) {
  for (std::string_view method : models::KnownTruthModelMethods()) {
    int tried = 0;
    for (int32_t k : {2, kClasses}) {
      if (!models::CreateTruthModel(std::string(method), k, {}).ok()) continue;
      ++tried;
      SCOPED_TRACE(absl::StrCat(std::string(method), ", K = ", k));
      auto crowd = MakeCrowd(200, 11, k);
      std::unique_ptr<models::TruthModel> fitted;
      auto project = RestoreFitted(crowd, fitted, std::string(method), k);
      std::vector<models::Annotation> all = crowd.annotations;
      project->ApplyCommitted({{5, "i5", 11, "w11", k - 1, 50000, true}});
      all.push_back({5, 11, k - 1});
      auto matrix = models::AnnotationMatrix::Build(200, kAnnotators, k, all);
      ASSERT_TRUE(matrix.ok());
      std::vector<double> expected = models::AllPosteriors(*fitted, *matrix, {});
      auto snapshot = project->snapshot();
      for (int32_t i = 0; i < 200; ++i) {
        for (int32_t c = 0; c < k; ++c) {
          ASSERT_EQ(snapshot->posteriors.probabilities(i)[c], expected[i * k + c]) << i;
        }
      }
    }
    EXPECT_GT(tried, 0) << std::string(method) << " takes neither 2 nor 3 classes";
  }
}

TEST(LiveProjectTest, AVersionClaimingMoreThanTheProjectHoldsIsNeverLoaded) {
  // A neural version fit on 200 items, stored for a project that holds 100 of them: its blob
  // sizes the networks beyond the project, so it is refused before allocating, and the
  // project serves majority vote (version 0), with a refit due, instead of not at all.
  auto crowd = MakeCrowd(200, 13);
  std::unique_ptr<models::TruthModel> fitted = *models::CreateTruthModel("lia", kClasses, {});
  ASSERT_TRUE(fitted->Fit(crowd.matrix, {}, false).ok());
  LiveProject::StoredState stored;
  for (int32_t i = 0; i < 100; ++i) stored.item_ids.push_back(absl::StrCat("i", i));
  stored.gold.assign(100, -1);
  for (int32_t a = 0; a < kAnnotators; ++a) stored.annotator_ids.push_back(absl::StrCat("w", a));
  int64_t seq = 0;
  for (const models::Annotation& a : crowd.annotations) {
    if (a.item < 100) stored.labels.push_back({a.item, a.annotator, a.label, ++seq});
  }
  storage::ModelVersionRecord version;
  version.version = 1;
  version.method = "lia";
  version.parameters = fitted->Serialize();
  version.watermark = seq;
  stored.latest_version = version;
  auto project = LiveProject::Create(TestIdentity(), v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  auto snapshot = (*project)->snapshot();
  EXPECT_EQ(snapshot->model_version, 0);
  EXPECT_EQ(snapshot->posteriors.num_items(), 100);
  EXPECT_TRUE((*project)->RefitDue(absl::Now(), absl::Hours(1)));
  // The same bound through the model's own interface: refused, and nothing changes.
  std::unique_ptr<models::TruthModel> other = *models::CreateTruthModel("lia", kClasses, {});
  models::TruthModel::RestoreBounds bounds;
  bounds.max_items = 100;
  const absl::Status refused = other->Restore(version.parameters, bounds);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("200 items"), absl::string_view::npos) << refused;
  EXPECT_FALSE(other->has_parameters());
  bounds.max_items = 200;
  EXPECT_TRUE(other->Restore(version.parameters, bounds).ok());
}

TEST(LiveProjectTest, OnlineUpdatesEqualAFullEStepAndLeaveOldSnapshotsAlone) {
  auto crowd = MakeCrowd(300, 5);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  std::shared_ptr<const ProjectSnapshot> before = project->snapshot();
  const std::vector<double> item7_before(before->posteriors.probabilities(7).begin(),
                                         before->posteriors.probabilities(7).end());

  // New labels: a revision, a new label on an old item, a new item and a new annotator.
  std::vector<models::Annotation> all = crowd.annotations;
  const models::Annotation& first = crowd.annotations[0];
  const int32_t revised_label = (first.label + 1) % kClasses;
  std::string first_item = absl::StrCat("i", first.item), first_worker = absl::StrCat("w", first.annotator);
  // A label of item 8 the project holds, resent: its stored seq is its position + 1.
  const auto held = std::find_if(crowd.annotations.begin(), crowd.annotations.end(),
                                 [](const models::Annotation& a) { return a.item == 8; });
  ASSERT_NE(held, crowd.annotations.end());
  const std::string held_worker = absl::StrCat("w", held->annotator);
  const int64_t held_seq = held - crowd.annotations.begin() + 1;
  std::vector<CommittedLabel> batch = {
      {first.item, first_item, first.annotator, first_worker, revised_label, 10001, true},
      {7, "i7", 12, "w-new", 2, 10002, true},
      {300, "i-new", 3, "w3", 1, 10003, true},
      // A duplicate of the held label: registers ids only.
      {8, "i8", held->annotator, held_worker, held->label, held_seq, false},
  };
  project->ApplyCommitted(batch);
  all[0].label = revised_label;
  all.push_back({7, 12, 2});
  all.push_back({300, 3, 1});

  auto matrix = models::AnnotationMatrix::Build(301, kAnnotators + 1, kClasses, all);
  ASSERT_TRUE(matrix.ok());
  std::vector<double> expected = models::AllPosteriors(*fitted, *matrix, {});
  auto after = project->snapshot();
  ASSERT_EQ(after->posteriors.num_items(), 301);
  for (int32_t i = 0; i < 301; ++i) {
    for (int32_t c = 0; c < kClasses; ++c) {
      ASSERT_DOUBLE_EQ(after->posteriors.probabilities(i)[c], expected[i * kClasses + c]) << i;
    }
  }
  EXPECT_EQ(after->posteriors.num_labels(7), before->posteriors.num_labels(7) + 1);
  EXPECT_EQ(after->posteriors.newest_seq(7), 10002);
  EXPECT_EQ(project->Counts().labels_since_version, 3);
  EXPECT_EQ(project->Counts().num_labels, static_cast<int64_t>(all.size()));
  // The reader's old snapshot did not move.
  for (int32_t c = 0; c < kClasses; ++c) {
    EXPECT_EQ(before->posteriors.probabilities(7)[c], item7_before[c]);
  }
  EXPECT_EQ(before->posteriors.num_items(), 300);
}

// live_project.h, ProjectSnapshot::ClassPrior (truth.proto: AnnotatorProfile.accuracy is
// under the current class prior): after labels that arrive between fits, the prior is the mean
// posterior of the items with labels now, as a restart's full recompute of the same state
// gives, not the one of the fit's items.
TEST(LiveProjectTest, TheClassPriorIsTheMeanPosteriorOfTheLabelledItemsAfterOnlineUpdates) {
  auto crowd = MakeCrowd(300, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  // 200 new items, each labelled class 2 by four of the reliable annotators: the mean
  // posterior moves well towards class 2.
  std::vector<CommittedLabel> batch;
  int64_t seq = 100000;
  std::vector<std::string> ids;
  for (int32_t i = 0; i < 200; ++i) ids.push_back(absl::StrCat("new", i));
  for (int32_t i = 0; i < 200; ++i) {
    for (int32_t a = 4; a < 8; ++a) {
      batch.push_back({300 + i, ids[i], a, absl::StrCat("w", a), 2, ++seq, true});
    }
  }
  project->ApplyCommitted(batch);
  // An item without labels (served uniform) is not in the prior.
  project->ApplyItems({{500, "unlabelled", std::nullopt}});
  std::shared_ptr<const ProjectSnapshot> snapshot = project->snapshot();
  const PosteriorTable& table = snapshot->posteriors;
  ASSERT_EQ(table.num_items(), 501);
  ASSERT_EQ(table.num_labels(500), 0);
  std::vector<double> mean(kClasses, 0.0);
  int32_t labelled = 0;
  for (int32_t i = 0; i < table.num_items(); ++i) {
    if (table.num_labels(i) == 0) continue;
    for (int32_t c = 0; c < kClasses; ++c) mean[c] += table.probabilities(i)[c];
    ++labelled;
  }
  ASSERT_EQ(labelled, 500);
  const std::vector<double>& prior = snapshot->ClassPrior();
  ASSERT_EQ(prior.size(), static_cast<size_t>(kClasses));
  for (int32_t c = 0; c < kClasses; ++c) EXPECT_NEAR(prior[c], mean[c] / labelled, 1e-12) << c;
}

// EstimatedBytes, which the memory budget evicts by (project_registry.h), counts the dense
// feature row the project keeps for every item and annotator once it has features, given or
// not (4 bytes a value): 100 items × 1,000 + 10 annotators × 500 values are 420,000 bytes.
TEST(LiveProjectTest, EstimatedBytesCountsTheFeatureRowsOfEveryItemAndAnnotator) {
  LiveProject::Identity with_features = TestIdentity();
  with_features.item_feature_dim = 1000;
  with_features.annotator_feature_dim = 500;
  auto plain = LiveProject::Create(TestIdentity(), v1::ProjectSettings(), {});
  auto featured = LiveProject::Create(with_features, v1::ProjectSettings(), {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(featured.ok()) << featured.status();
  const std::vector<CommittedLabel> labels = HundredLabelsByTenAnnotators();
  (*plain)->ApplyCommitted(labels);
  (*featured)->ApplyCommitted(labels);
  EXPECT_EQ((*featured)->EstimatedBytes() - (*plain)->EstimatedBytes(),
            4 * (100 * 1000 + 10 * 500));
}

TEST(LiveProjectTest, IdLookupsSeeIdsRegisteredByACommittedBatch) {
  auto crowd = MakeCrowd(50, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  project->ApplyCommitted({{50, "i-new", 12, "w-new", 1, 10001, true}});

  const std::vector<absl::string_view> ids = {"i7", "missing", "i-new", "i0", ""};
  const std::vector<std::optional<int32_t>> indices = project->FindItems(ids);
  ASSERT_EQ(indices.size(), 5u);
  EXPECT_EQ(indices[0], std::optional<int32_t>(7));
  EXPECT_EQ(indices[1], std::nullopt);
  EXPECT_EQ(indices[2], std::optional<int32_t>(50));
  EXPECT_EQ(indices[3], std::optional<int32_t>(0));
  EXPECT_EQ(indices[4], std::nullopt);
  EXPECT_TRUE(project->FindItems({}).empty());
  EXPECT_EQ(project->FindItem("i-new"), std::optional<int32_t>(50));
  EXPECT_EQ(project->FindAnnotator("w-new"), std::optional<int32_t>(12));
  EXPECT_EQ(project->ItemIds(49, 5), (std::vector<std::string>{"i49", "i-new"}));
  // [first, first + count) clipped to the known items, however large count is (first + count
  // past INT32_MAX included), and empty past the last item.
  EXPECT_EQ(project->ItemIds(49, std::numeric_limits<int32_t>::max()),
            (std::vector<std::string>{"i49", "i-new"}));
  EXPECT_TRUE(project->ItemIds(std::numeric_limits<int32_t>::max() - 5, 10000).empty());
  EXPECT_EQ(project->AnnotatorIds().back(), "w-new");
  // A page of annotator ids: the same clipping, and the count of all (13: w0..w11, w-new).
  const LiveProject::AnnotatorIdPage page = project->AnnotatorIds(11, 5);
  EXPECT_EQ(page.ids, (std::vector<std::string>{"w11", "w-new"}));
  EXPECT_EQ(page.total, 13);
  EXPECT_EQ(project->AnnotatorIds(0, 2).ids, (std::vector<std::string>{"w0", "w1"}));
  EXPECT_TRUE(project->AnnotatorIds(13, 5).ids.empty());
  EXPECT_TRUE(project->AnnotatorIds(std::numeric_limits<int64_t>::max() - 5, 10000).ids.empty());
}

TEST(LiveProjectTest, QueriesDoNotTakeTheProjectLock) {
  auto crowd = MakeCrowd(50, 13);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  // Taking it again on this thread would abort (absl's deadlock detection) or hang.
  absl::MutexLock writer(&LiveProjectTestPeer::ProjectLock(*project));
  EXPECT_EQ(project->FindItems({"i3", "i49"}),
            (std::vector<std::optional<int32_t>>{3, 49}));
  EXPECT_EQ(project->FindItem("i4"), std::optional<int32_t>(4));
  EXPECT_EQ(project->FindAnnotator("w5"), std::optional<int32_t>(5));
  EXPECT_EQ(project->ItemIds(10, 2), (std::vector<std::string>{"i10", "i11"}));
  EXPECT_EQ(project->AnnotatorIds().size(), static_cast<size_t>(kAnnotators));
  EXPECT_EQ(project->snapshot()->posteriors.num_items(), 50);
}

TEST(LiveProjectTest, GoldItemIsClampedAndRefitIsDueAfterEnoughNewLabels) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  project->ApplyItems({{4, "i4", 2}});
  auto snapshot = project->snapshot();
  EXPECT_TRUE(snapshot->posteriors.is_gold(4));
  EXPECT_EQ(snapshot->posteriors.probabilities(4)[2], 1.0);

  const absl::Time now = absl::Now();
  EXPECT_FALSE(project->RefitDue(now, absl::Hours(1)));
  std::vector<CommittedLabel> batch;
  std::vector<std::string> ids;
  ids.reserve(60);
  for (int i = 0; i < 60; ++i) ids.push_back(absl::StrCat("extra", i));
  for (int i = 0; i < 60; ++i) batch.push_back({100 + i, ids[i], 0, "w0", 1, 20000 + i, true});
  project->ApplyCommitted(batch);
  // 60 new labels >= max(50, 10% of 460).
  EXPECT_TRUE(project->RefitDue(now, absl::Hours(1)));
}

// models.proto: the calibration is "absent when ModelSettings.calibration is none". Switched
// off, the served version serves its model's own posteriors at once (no refit needed); switched
// back on, the map needs a fit, which is then due.
TEST(LiveProjectTest, CalibrationSwitchedOffServesTheModelsOwnPosteriorsAtOnce) {
  auto crowd = MakeCrowd(200, 5);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  const auto* calibrated =
      dynamic_cast<const models::CalibratedTruthModel*>(project->snapshot()->model.get());
  ASSERT_NE(calibrated, nullptr);
  ASSERT_TRUE(calibrated->fits_map());
  const std::vector<double> raw =
      models::AllPosteriors(dynamic_cast<const models::CalibratedTruthModel&>(*fitted).inner(),
                            crowd.matrix, {});
  v1::ProjectSettings settings = project->settings();
  settings.mutable_model()->set_calibration("none");
  project->SetSettings(settings);
  auto snapshot = project->snapshot();
  const auto* served = dynamic_cast<const models::CalibratedTruthModel*>(snapshot->model.get());
  ASSERT_NE(served, nullptr);
  EXPECT_FALSE(served->fits_map());
  EXPECT_EQ(snapshot->model_version, 1);
  ASSERT_EQ(snapshot->posteriors.num_items(), 200);
  for (int32_t i = 0; i < 200; ++i) {
    for (int32_t c = 0; c < kClasses; ++c) {
      EXPECT_NEAR(snapshot->posteriors.probabilities(i)[c], raw[i * kClasses + c], 1e-12) << i;
    }
  }
  EXPECT_FALSE(project->RefitDue(absl::Now(), absl::Hours(1)));
  settings.mutable_model()->set_calibration("auto");
  project->SetSettings(settings);
  EXPECT_TRUE(project->RefitDue(absl::Now(), absl::Hours(1)));
}

// projects.proto's ModelSettings reach the fit's options: each set field replaces the model's
// default, and 0 (or an empty calibration) keeps it.
TEST(LiveProjectTest, ModelSettingsBecomeTheFitsOptions) {
  const models::TruthModelOptions defaults;
  const models::TruthModelOptions unset = ModelOptionsFromSettings(v1::ModelSettings());
  EXPECT_EQ(unset.confusion_smoothing, defaults.confusion_smoothing);
  EXPECT_EQ(unset.prior_smoothing, defaults.prior_smoothing);
  EXPECT_EQ(unset.max_iterations, defaults.max_iterations);
  EXPECT_EQ(unset.tolerance, defaults.tolerance);
  EXPECT_EQ(unset.calibration, defaults.calibration);
  EXPECT_EQ(defaults.max_iterations, 100);  // "0 = default (100)"
  v1::ModelSettings settings;
  settings.set_confusion_smoothing(0.7);
  settings.set_prior_smoothing(3.5);
  settings.set_max_iterations(7);
  settings.set_tolerance(0.02);
  settings.set_calibration("none");
  const models::TruthModelOptions set = ModelOptionsFromSettings(settings);
  EXPECT_EQ(set.confusion_smoothing, 0.7);
  EXPECT_EQ(set.prior_smoothing, 3.5);
  EXPECT_EQ(set.max_iterations, 7);
  EXPECT_EQ(set.tolerance, 0.02);
  EXPECT_EQ(set.calibration, "none");
}

// live_project.h: MethodName is UNIMPLEMENTED for a method this release does not build. The
// message must say which method was asked for (a stored or sent enum value this release does
// not know has no name, only its number) and list each method the release serves once.
TEST(MethodNameTest, AnUnknownMethodIsNamedByItsNumberAndEachServedMethodIsListedOnce) {
  const absl::StatusOr<std::string> name = MethodName(static_cast<v1::TruthMethod>(999));
  ASSERT_EQ(name.status().code(), absl::StatusCode::kUnimplemented);
  const std::string message(name.status().message());
  EXPECT_NE(message.find("999"), std::string::npos) << message;
  for (const std::string served : {"TRUTH_METHOD_MACE", "TRUTH_METHOD_DAWID_SKENE",
                                   "TRUTH_METHOD_AUTO"}) {
    size_t count = 0;
    for (size_t at = message.find(served); at != std::string::npos;
         at = message.find(served, at + 1)) {
      ++count;
    }
    EXPECT_EQ(count, 1u) << served << " in: " << message;
  }
  EXPECT_EQ(*MethodName(v1::TRUTH_METHOD_MACE), "mace");
}

// projects.proto: a background refit is due once max(refit_min_new_labels,
// refit_new_label_fraction × labels) labels changed since the fit, 50 and 0.1 when unset. Each
// project starts from a fitted version over 400 labels; labels are added one at a time, and the
// due points are counted here from that rule.
TEST(LiveProjectTest, RefitIsDueAtTheDocumentedThresholds) {
  auto crowd = MakeCrowd(100, 9);
  ASSERT_EQ(crowd.annotations.size(), 400u);
  const absl::Time now = absl::Now();
  // Adds new labels (each on a new item) until RefitDue; returns how many it took.
  auto labels_until_due = [&](LiveProject& project) {
    for (int n = 1; n <= 1000; ++n) {
      const int32_t item = 99 + n;
      project.ApplyCommitted({{item, absl::StrCat("new", n), 0, "w0", 1, 10000 + n, true}});
      if (project.RefitDue(now, absl::Hours(1))) return n;
    }
    return -1;
  };
  struct Case {
    int64_t min_new_labels;  // 0: unset
    double fraction;         // 0: unset
    int expected;
  };
  // Defaults: 10% of 449 is 44 < 50, so the 50th label. 25% of 400 + n reaches n at n = 133
  // (0.25 × 533 = 133.25). With min 300 and 1%, the minimum rules: the 300th. A fraction
  // of 1e300 (validation accepts any finite value) puts the threshold beyond any label count:
  // never due by count within 1,000 labels (-1), staleness alone refits.
  for (const Case& c : {Case{0, 0, 50}, Case{20, 0.25, 133}, Case{300, 0.01, 300},
                        Case{0, 1e300, -1}}) {
    std::unique_ptr<models::TruthModel> fitted;
    auto project = RestoreFitted(crowd, fitted);
    v1::ProjectSettings settings;
    settings.mutable_model()->set_refit_min_new_labels(c.min_new_labels);
    settings.mutable_model()->set_refit_new_label_fraction(c.fraction);
    project->SetSettings(settings);
    EXPECT_FALSE(project->RefitDue(now, absl::Hours(1)));
    EXPECT_EQ(labels_until_due(*project), c.expected)
        << "min " << c.min_new_labels << ", fraction " << c.fraction;
  }
}

// live_project.h, FitIsCurrent: the version is current unless, among others, a model setting
// changed since its fit (so TrainModel fits again rather than answer with it); a change of the
// assignment settings alone leaves it current.
TEST(LiveProjectTest, AChangedModelSettingMakesTheFitNotCurrent) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  ASSERT_TRUE(project->FitIsCurrent());
  v1::ProjectSettings settings = project->settings();
  settings.mutable_assignment()->set_min_labels_per_item(3);
  project->SetSettings(settings);
  EXPECT_TRUE(project->FitIsCurrent()) << "only the assignment settings changed";
  settings.mutable_model()->set_max_iterations(3);
  project->SetSettings(settings);
  EXPECT_FALSE(project->FitIsCurrent()) << "max_iterations changed";
}

// live_project.h, RefitDue: a refit is due when enough labels changed, "or any changed and
// `max_staleness` passed since the last fit". A restored, fitted project with no label after
// its version is therefore not due even two hours past a staleness of one hour; one new label
// makes it due then (1 < 50 labels, so only by staleness).
TEST(LiveProjectTest, StalenessAloneDoesNotMakeARefitDue) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  const absl::Time later = absl::Now() + absl::Hours(2);
  ASSERT_EQ(project->Counts().labels_since_version, 0);
  EXPECT_FALSE(project->RefitDue(later, absl::Hours(1)));
  project->ApplyCommitted({{100, "new", 0, "w0", 1, 10001, true}});
  EXPECT_EQ(project->Counts().labels_since_version, 1);
  EXPECT_FALSE(project->RefitDue(absl::Now(), absl::Hours(1)));
  EXPECT_TRUE(project->RefitDue(later, absl::Hours(1)));
}

// live_project.h, CommittedLabel: a duplicate "normally repeats what memory holds": nothing to
// do. Re-applying the newest label of an item (same label, same seq as stored) changes
// nothing: no label counts toward the next version and the fit stays current (FitIsCurrent:
// "since that fit no label ... changed").
TEST(LiveProjectTest, ReapplyingAnItemsNewestLabelChangesNothing) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  ASSERT_TRUE(project->FitIsCurrent());
  // The stored seq of annotation n is n + 1 (RestoreFitted); item 8's newest is its last one.
  int64_t newest = -1;
  for (size_t n = 0; n < crowd.annotations.size(); ++n) {
    if (crowd.annotations[n].item == 8) newest = static_cast<int64_t>(n);
  }
  ASSERT_GE(newest, 0);
  const models::Annotation& a = crowd.annotations[newest];
  ASSERT_EQ(project->snapshot()->posteriors.newest_seq(8), newest + 1);
  const std::string worker = absl::StrCat("w", a.annotator);
  for (bool changed : {false, true}) {
    project->ApplyCommitted({{8, "i8", a.annotator, worker, a.label, newest + 1, changed}});
    EXPECT_EQ(project->Counts().labels_since_version, 0) << changed;
    EXPECT_TRUE(project->FitIsCurrent()) << changed;
  }
  EXPECT_EQ(project->Counts().num_labels, static_cast<int64_t>(crowd.annotations.size()));
}


// An empty project of kClasses classes, nothing stored.
std::unique_ptr<LiveProject> EmptyProject() {
  auto project = LiveProject::Create(TestIdentity(), v1::ProjectSettings(), {});
  EXPECT_TRUE(project.ok()) << project.status();
  return std::move(*project);
}

// RegisterCommitted: "A duplicate whose label (or seq) memory does not hold is applied like a
// new label". Item 0 holds w0's label 1 (seq 5) and w1's label 0 (seq 8); a resent commit of
// w0's label 2 at seq 6 (newer for its pair, older than the item's newest) replaces w0's label.
TEST(LiveProjectTest, AResentRevisionOlderThanItsItemsNewestLabelIsApplied) {
  auto project = EmptyProject();
  project->ApplyCommitted({{0, "i0", 0, "w0", 1, 5, true}, {0, "i0", 1, "w1", 0, 8, true}});
  project->ApplyCommitted({{0, "i0", 0, "w0", 2, 6, false}});
  ASSERT_TRUE(project->LiveLabelOf(0, 0).has_value());
  EXPECT_EQ(*project->LiveLabelOf(0, 0), 2);
  EXPECT_EQ(project->Counts().num_labels, 2);
  EXPECT_EQ(project->Counts().labels_since_version, 3);
  // Majority vote over {2, 0}: class 2 now has a vote, class 1 none.
  absl::Span<const double> p = project->snapshot()->posteriors.probabilities(0);
  EXPECT_GT(p[2], p[1]);
  EXPECT_EQ(p[0], p[2]);
}

// live_project.h, leases(): "A committed label of (item, annotator) releases its lease", and
// only that pair's.
TEST(LiveProjectTest, ACommittedLabelReleasesTheLeaseOfItsPair) {
  auto project = EmptyProject();
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  project->leases().Add(0, 0, now + absl::Minutes(5));
  project->leases().Add(0, 1, now + absl::Minutes(5));
  project->ApplyCommitted({{0, "i0", 0, "w0", 1, 1, true}});
  EXPECT_FALSE(project->leases().Has(0, 0, now));
  EXPECT_TRUE(project->leases().Has(0, 1, now));
  EXPECT_EQ(project->leases().size(now), 1u);
}

// live_project.h, StoredState::open_leases: the leases PostgreSQL holds are the serving copy's
// after a load (lease_book.h: "storage::LeaseStore keeps them across restarts").
TEST(LiveProjectTest, StoredOpenLeasesAreOutstandingAfterALoad) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  LiveProject::StoredState stored;
  stored.item_ids = {"i0", "i1"};
  stored.annotator_ids = {"w0", "w1"};
  stored.open_leases = {{1, 0, now + absl::Minutes(1)}, {1, 1, now + absl::Minutes(2)}};
  auto project = LiveProject::Create(TestIdentity(), v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_TRUE((*project)->leases().Has(1, 0, now));
  EXPECT_TRUE((*project)->leases().Has(1, 1, now));
  EXPECT_EQ((*project)->leases().OutstandingOn({0, 1}, now), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ((*project)->leases().OutstandingOn({1}, now + absl::Seconds(90)),
            (std::vector<int32_t>{1}));
}

// StoredState: gold -1 = none, priority by item index: a loaded project serves them.
TEST(LiveProjectTest, StoredGoldAndPrioritiesAreServedAfterALoad) {
  LiveProject::StoredState stored;
  stored.item_ids = {"i0", "i1", "i2"};
  stored.gold = {0, -1, 2};
  stored.priority = {0.0, 2.5, -1.0};
  auto project = LiveProject::Create(TestIdentity(), v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  const PosteriorTable& table = (*project)->snapshot()->posteriors;
  ASSERT_EQ(table.num_items(), 3);
  EXPECT_EQ(table.priority(0), 0.0);
  EXPECT_EQ(table.priority(1), 2.5);
  EXPECT_EQ(table.priority(2), -1.0);
  EXPECT_TRUE(table.is_gold(0));
  EXPECT_FALSE(table.is_gold(1));
  EXPECT_TRUE(table.is_gold(2));
  EXPECT_EQ((*project)->GoldItems(), (std::vector<int32_t>{0, 2}));
}

// GoldItems: "Gold items, ascending": class 0 is a gold label like any other.
TEST(LiveProjectTest, GoldItemsIncludeItemsWhoseGoldIsTheFirstClass) {
  auto project = EmptyProject();
  project->ApplyItems({{0, "i0", 0}, {1, "i1", std::nullopt}, {2, "i2", 2}, {3, "i3", 0}});
  EXPECT_EQ(project->GoldItems(), (std::vector<int32_t>{0, 2, 3}));
  EXPECT_TRUE(project->snapshot()->posteriors.is_gold(0));
  EXPECT_FALSE(project->snapshot()->posteriors.is_gold(1));
}

// EstimatedBytes, by the header's formula: 24 bytes per label, 200 + 32·K per item and
// 100 + 16·K² per annotator. K = 3, 100 labels on 100 items by 10 annotators:
// 2,400 + 100 × 296 + 10 × 244 = 34,440 bytes.
TEST(LiveProjectTest, EstimatedBytesFollowsTheDocumentedFormula) {
  auto project = EmptyProject();
  EXPECT_EQ(project->EstimatedBytes(), 0);
  const std::vector<CommittedLabel> labels = HundredLabelsByTenAnnotators();
  project->ApplyCommitted(labels);
  EXPECT_EQ(project->EstimatedBytes(), 24 * 100 + (200 + 32 * 3) * 100 + (100 + 16 * 9) * 10);
}

// FitIsCurrent: not current once a new item or a changed gold label came since the fit; a
// priority (assignment's) or a gold label set again to its value leaves the fit current.
TEST(LiveProjectTest, AnItemChangeMakesTheFitNotCurrent) {
  auto crowd = MakeCrowd(100, 9);
  for (int change = 0; change < 2; ++change) {
    SCOPED_TRACE(change);
    std::unique_ptr<models::TruthModel> fitted;
    auto project = RestoreFitted(crowd, fitted);
    ASSERT_TRUE(project->FitIsCurrent());
    if (change == 0) project->ApplyItems({{4, "i4", 2}});                      // gold
    if (change == 1) project->ApplyItems({{100, "i100", std::nullopt}});       // a new item
    EXPECT_FALSE(project->FitIsCurrent());
  }
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  project->ApplyItems({{4, "i4", std::nullopt, 3.0}});  // priority
  EXPECT_TRUE(project->FitIsCurrent());
  EXPECT_EQ(project->snapshot()->posteriors.priority(4), 3.0);
  project->ApplyItems({{4, "i4", -1}});  // "no gold", as stored
  EXPECT_TRUE(project->FitIsCurrent());
}

// FitIsCurrent: the fit is not current once a feature changed; here an annotator's features.
TEST(LiveProjectTest, AnAnnotatorFeatureChangeMakesTheFitNotCurrent) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted, "ds", kClasses, /*annotator_feature_dim=*/2);
  ASSERT_TRUE(project->FitIsCurrent());
  project->SetAnnotatorFeatures(3, {0.5f, -1.0f});
  EXPECT_FALSE(project->FitIsCurrent());
}

// FitIsCurrent: an item's features are fit input. The features it already has (zeros, as
// restored) given again leave the fit current; different ones make it not current.
TEST(LiveProjectTest, AnItemFeatureChangeMakesTheFitNotCurrent) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted, "ds", kClasses, /*annotator_feature_dim=*/0,
                               /*item_feature_dim=*/2);
  ASSERT_TRUE(project->FitIsCurrent());
  project->ApplyItems({{4, "i4", std::nullopt, std::nullopt, std::vector<float>{0.0f, 0.0f}}});
  EXPECT_TRUE(project->FitIsCurrent()) << "the item's features given again";
  project->ApplyItems({{4, "i4", std::nullopt, std::nullopt, std::vector<float>{0.0f, 2.5f}}});
  EXPECT_FALSE(project->FitIsCurrent()) << "the item's features changed";
}

// AdoptVersion: "Labels the version did not see still count toward the next refit". A version
// fit through seq 402 (402 live labels) is adopted while memory also holds a revision at seq
// 403: exactly that one label is outstanding. A version is never adopted twice or backwards.
TEST(LiveProjectTest, AnAdoptedVersionCountsOnlyTheLabelsItDidNotSee) {
  auto crowd = MakeCrowd(100, 9);
  ASSERT_EQ(crowd.annotations.size(), 400u);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);  // Version 1 through seq 400.
  const models::Annotation& first = crowd.annotations[0];
  project->ApplyCommitted({{100, "i100", 0, "w0", 1, 401, true}});
  project->ApplyCommitted({{101, "i101", 1, "w1", 2, 402, true}});
  project->ApplyCommitted({{first.item, absl::StrCat("i", first.item), first.annotator,
                            absl::StrCat("w", first.annotator), (first.label + 1) % kClasses,
                            403, true}});
  ASSERT_EQ(project->Counts().labels_since_version, 3);
  ASSERT_EQ(project->Counts().num_labels, 402);

  storage::ModelVersionRecord v2;
  v2.version = 2;
  v2.method = "ds";
  v2.parameters = fitted->Serialize();
  v2.watermark = 402;
  v2.num_labels = 402;
  absl::StatusOr<bool> adopted = project->AdoptVersion(v2);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_TRUE(*adopted);
  EXPECT_EQ(project->model_version(), 2);
  EXPECT_EQ(project->snapshot()->model_version, 2);
  EXPECT_EQ(project->snapshot()->model_watermark, 402);
  EXPECT_EQ(project->Counts().labels_since_version, 1);

  // The same version again, or an older one: not adopted, nothing changes.
  EXPECT_EQ(project->AdoptVersion(v2).value_or(true), false);
  storage::ModelVersionRecord v1 = v2;
  v1.version = 1;
  v1.watermark = 400;
  v1.num_labels = 400;
  EXPECT_EQ(project->AdoptVersion(v1).value_or(true), false);
  EXPECT_EQ(project->model_version(), 2);
  EXPECT_EQ(project->Counts().labels_since_version, 1);
}

// AdoptVersion: "INTERNAL if the parameters do not restore"; the served version stays.
TEST(LiveProjectTest, AVersionWhoseParametersDoNotRestoreIsInternalAndNotServed) {
  auto crowd = MakeCrowd(50, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  storage::ModelVersionRecord broken;
  broken.version = 2;
  broken.method = "ds";
  broken.parameters = "not a serialized model";
  broken.watermark = 1000;
  absl::StatusOr<bool> adopted = project->AdoptVersion(broken);
  ASSERT_FALSE(adopted.ok());
  EXPECT_EQ(adopted.status().code(), absl::StatusCode::kInternal) << adopted.status();
  EXPECT_EQ(project->model_version(), 1);
  EXPECT_EQ(project->snapshot()->model_version, 1);
}

// KnownIdPrefixes: "How many leading item and annotator indices have their ids registered".
TEST(LiveProjectTest, KnownIdPrefixesStopAtTheFirstIndexWithoutAnId) {
  auto project = EmptyProject();
  EXPECT_EQ(project->KnownIdPrefixes(), std::make_pair(0, 0));
  // Items 0 and 2, annotators 0 and 2: index 1 of each is not known yet.
  project->ApplyCommitted({{0, "i0", 0, "w0", 1, 1, true}, {2, "i2", 2, "w2", 0, 2, true}});
  EXPECT_EQ(project->KnownIdPrefixes(), std::make_pair(1, 1));
  project->ApplyCommitted({{1, "i1", 1, "w1", 2, 3, true}});
  EXPECT_EQ(project->KnownIdPrefixes(), std::make_pair(3, 3));
}

// IngestHints: each write's registered indices (-1 if unknown), whether the pair has no live
// label, and how many items and annotators are registered (ids, not index slots).
TEST(LiveProjectTest, IngestHintsNameKnownIndicesUnlabelledPairsAndRegisteredCounts) {
  auto project = EmptyProject();
  // Items 0 and 2 (item 1 has no id yet), annotators 0, 1 and 3 (2 has none).
  project->ApplyCommitted({{0, "i0", 0, "w0", 1, 1, true}, {2, "i2", 0, "w0", 0, 2, true}});
  project->RegisterAnnotators({{1, "w1"}, {3, "w3"}});
  const std::vector<storage::AnnotationWrite> writes = {
      {1, "i0", "w0", 0, std::nullopt},       // labelled pair
      {1, "i2", "w3", 0, std::nullopt},       // known, unlabelled
      {1, "i2", "w-new", 0, std::nullopt},    // unknown annotator
      {1, "i-new", "w1", 0, std::nullopt},    // unknown item
  };
  const storage::WriteHints hints = project->IngestHints(writes);
  ASSERT_EQ(hints.writes.size(), 4u);
  EXPECT_EQ(hints.writes[0].item_index, 0);
  EXPECT_EQ(hints.writes[0].annotator_index, 0);
  EXPECT_FALSE(hints.writes[0].unlabelled);
  EXPECT_EQ(hints.writes[1].item_index, 2);
  EXPECT_EQ(hints.writes[1].annotator_index, 3);
  EXPECT_TRUE(hints.writes[1].unlabelled);
  EXPECT_EQ(hints.writes[2].item_index, 2);
  EXPECT_EQ(hints.writes[2].annotator_index, -1);
  EXPECT_FALSE(hints.writes[2].unlabelled);
  EXPECT_EQ(hints.writes[3].item_index, -1);
  EXPECT_EQ(hints.writes[3].annotator_index, 1);
  EXPECT_FALSE(hints.writes[3].unlabelled);
  ASSERT_EQ(hints.projects.size(), 1u);
  EXPECT_EQ(hints.projects[0].project_id, 1);
  EXPECT_EQ(hints.projects[0].num_items, 2);
  EXPECT_EQ(hints.projects[0].num_annotators, 3);
}

// An annotator's label count is its live labels: a revision of its label replaces one.
TEST(LiveProjectTest, ARevisionDoesNotAddToTheAnnotatorsLabelCount) {
  auto project = EmptyProject();
  project->ApplyCommitted({{0, "i0", 0, "w0", 0, 1, true}, {1, "i1", 0, "w0", 1, 2, true},
                           {1, "i1", 1, "w1", 1, 3, true}});
  project->ApplyCommitted({{0, "i0", 0, "w0", 2, 4, true}});  // a revision
  EXPECT_EQ(project->AnnotatorLabelCount(0), 2);
  EXPECT_EQ(project->AnnotatorLabelCount(1), 1);
  EXPECT_EQ(project->AnnotatorLabelCount(7), 0);
  EXPECT_EQ(project->Counts().num_labels, 3);
}

// live_project.h, RefitDue: the method rule needs a version; "before the first version the
// served model is the majority-vote placeholder, and the label rules above decide". A project
// configured for Dawid-Skene with 10 labels and no version is not due (10 < 50, not stale);
// the 50th label makes it due.
TEST(LiveProjectTest, BeforeTheFirstVersionOnlyTheLabelRulesMakeARefitDue) {
  LiveProject::StoredState stored;
  for (int i = 0; i < 10; ++i) {
    stored.item_ids.push_back(absl::StrCat("i", i));
    stored.gold.push_back(-1);
    stored.labels.push_back({i, 0, 0, i + 1});
  }
  stored.annotator_ids = {"w0"};
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  auto project = LiveProject::Create(TestIdentity(), settings, std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  ASSERT_EQ((*project)->model_version(), 0);
  const absl::Time now = absl::Now();
  EXPECT_FALSE((*project)->RefitDue(now, absl::Hours(1)));
  std::vector<std::string> ids;
  for (int i = 10; i < 50; ++i) ids.push_back(absl::StrCat("i", i));
  std::vector<CommittedLabel> batch;
  for (int i = 10; i < 49; ++i) batch.push_back({i, ids[i - 10], 0, "w0", 1, i + 1, true});
  (*project)->ApplyCommitted(batch);
  EXPECT_FALSE((*project)->RefitDue(now, absl::Hours(1))) << "49 labels";
  (*project)->ApplyCommitted({{49, ids[39], 0, "w0", 1, 50, true}});
  EXPECT_TRUE((*project)->RefitDue(now, absl::Hours(1))) << "50 labels";
}

// live_project.h, FitIsCurrent: current only if "since that fit no label ... changed". A
// restored version over every label is current; one new label, or a revision, makes it not.
TEST(LiveProjectTest, ANewOrRevisedLabelMakesTheFitNotCurrent) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  ASSERT_TRUE(project->FitIsCurrent());
  project->ApplyCommitted({{100, "new", 0, "w0", 1, 10001, true}});
  EXPECT_FALSE(project->FitIsCurrent()) << "a new label";

  auto revised = RestoreFitted(crowd, fitted);
  ASSERT_TRUE(revised->FitIsCurrent());
  const models::Annotation& first = crowd.annotations.front();
  revised->ApplyCommitted(
      {{first.item, absl::StrCat("i", first.item), first.annotator,
        absl::StrCat("w", first.annotator), (first.label + 1) % kClasses, 10001, true}});
  EXPECT_FALSE(revised->FitIsCurrent()) << "a revised label";
}

// live_project.h, RefitDue: a label makes a refit due once "`max_staleness` passed since the
// last fit"; an adopted version (AdoptVersion) is such a fit, so staleness counts from its
// adoption, not from the load before it. The bound here is the time from the load to just
// after the adoption: reached for the load, not for the adoption.
TEST(LiveProjectTest, StalenessCountsFromTheAdoptedVersion) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);  // Version 1 through seq 400.
  const absl::Time loaded = absl::Now();
  project->ApplyCommitted({{100, "i100", 0, "w0", 1, 401, true}});
  absl::SleepFor(absl::Milliseconds(5));  // Adopted strictly after `loaded`.
  storage::ModelVersionRecord v2;
  v2.version = 2;
  v2.method = "ds";
  v2.parameters = fitted->Serialize();
  v2.watermark = 400;
  v2.num_labels = 400;
  ASSERT_EQ(project->AdoptVersion(v2).value_or(false), true);
  const absl::Time adopted = absl::Now();
  ASSERT_EQ(project->Counts().labels_since_version, 1);
  const absl::Duration staleness = adopted - loaded;
  EXPECT_FALSE(project->RefitDue(adopted, staleness));
  EXPECT_TRUE(project->RefitDue(adopted + staleness, staleness));
}

// Create: a stored label outside the project's items, annotators or classes is INTERNAL,
// naming the label. Class 3 of 3, item 2 of 2 items and annotator 1 of 1 are one past the end.
TEST(LiveProjectTest, AStoredLabelOutOfRangeIsInternalAndNamesIt) {
  for (const LiveProject::StoredState::Label bad :
       {LiveProject::StoredState::Label{1, 0, 3, 1}, LiveProject::StoredState::Label{2, 0, 0, 1},
        LiveProject::StoredState::Label{0, 1, 0, 1}}) {
    SCOPED_TRACE(absl::StrCat(bad.item, " ", bad.annotator, " ", bad.label));
    LiveProject::StoredState stored;
    stored.item_ids = {"i0", "i1"};
    stored.annotator_ids = {"w0"};
    stored.labels = {{0, 0, 2, 1}, bad};
    auto project = LiveProject::Create(TestIdentity(), v1::ProjectSettings(), std::move(stored));
    ASSERT_FALSE(project.ok());
    EXPECT_EQ(project.status().code(), absl::StatusCode::kInternal) << project.status();
    EXPECT_NE(project.status().message().find("stored label out of range"), absl::string_view::npos)
        << project.status();
  }
}

// AnnotatorLabelCount is the annotator's live labels, those loaded from storage included:
// w0 holds 3 stored labels, w1 one, w2 none.
TEST(LiveProjectTest, AnnotatorLabelCountsIncludeTheStoredLabels) {
  LiveProject::StoredState stored;
  stored.item_ids = {"i0", "i1", "i2"};
  stored.annotator_ids = {"w0", "w1", "w2"};
  stored.labels = {{0, 0, 0, 1}, {1, 0, 1, 2}, {2, 0, 2, 3}, {1, 1, 1, 4}};
  auto project = LiveProject::Create(TestIdentity(), v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ((*project)->AnnotatorLabelCount(0), 3);
  EXPECT_EQ((*project)->AnnotatorLabelCount(1), 1);
  EXPECT_EQ((*project)->AnnotatorLabelCount(2), 0);
  // A new label adds to the loaded count.
  (*project)->ApplyCommitted({{2, "i2", 1, "w1", 0, 5, true}});
  EXPECT_EQ((*project)->AnnotatorLabelCount(1), 2);
}

// ProjectSnapshot::ClassPrior: "uniform when none has" labels.
TEST(LiveProjectTest, TheClassPriorIsUniformWhileNoItemHasLabels) {
  auto project = EmptyProject();
  project->ApplyItems({{0, "i0", std::nullopt}, {1, "i1", 2}});
  const std::vector<double>& prior = project->snapshot()->ClassPrior();
  ASSERT_EQ(prior.size(), static_cast<size_t>(kClasses));
  for (double p : prior) EXPECT_DOUBLE_EQ(p, 1.0 / 3.0);
}

// PosteriorTable::entropy: "Entropy of probabilities(item) in nats", computed here as
// -sum p ln p from the served probabilities, for a restored item, an updated one and a new one.
TEST(LiveProjectTest, ServedEntropyIsThePosteriorsEntropyInNats) {
  auto crowd = MakeCrowd(50, 7);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);
  // Item 3 gains a label; new item 50 has one label, by an unreliable annotator.
  project->ApplyCommitted(
      {{3, "i3", 11, "w11", 2, 10001, true}, {50, "i50", 0, "w0", 1, 10002, true}});
  auto snapshot = project->snapshot();
  for (int32_t i : {0, 3, 50}) {
    double expected = 0;
    for (double p : snapshot->posteriors.probabilities(i)) {
      if (p > 0) expected -= p * std::log(p);
    }
    ASSERT_GT(expected, 0.0) << i;
    EXPECT_NEAR(snapshot->posteriors.entropy(i), expected, 1e-12) << i;
  }
}

// ProjectSnapshot::version_metadata: "The stored record of version model_version without its
// parameters". It stays that version's record when labels arrive between fits.
TEST(LiveProjectTest, OnlineUpdatesKeepTheServedVersionsRecord) {
  auto crowd = MakeCrowd(50, 7);
  std::unique_ptr<models::TruthModel> fitted = *models::CreateTruthModel("ds", kClasses, {});
  ASSERT_TRUE(fitted->Fit(crowd.matrix, {}, false).ok());
  LiveProject::StoredState stored = StoredFit(crowd, *fitted, "ds");
  const int64_t seq = static_cast<int64_t>(stored.labels.size());
  storage::ModelVersionRecord& version = *stored.latest_version;
  version.project_id = 1;
  version.version = 4;
  version.log_likelihood = -123.5;
  version.iterations = 17;
  version.duration_ms = 250.0;
  version.created_at = absl::FromUnixSeconds(1'800'000'000);
  auto project = LiveProject::Create(TestIdentity(), v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  (*project)->ApplyCommitted({{50, "i50", 0, "w0", 1, seq + 1, true}});
  auto snapshot = (*project)->snapshot();
  ASSERT_EQ(snapshot->posteriors.num_items(), 51);
  ASSERT_NE(snapshot->version_metadata, nullptr);
  const storage::ModelVersionRecord& served = *snapshot->version_metadata;
  EXPECT_EQ(served.version, 4);
  EXPECT_EQ(served.method, "ds");
  EXPECT_EQ(served.watermark, seq);
  EXPECT_EQ(served.log_likelihood, -123.5);
  EXPECT_EQ(served.iterations, 17);
  EXPECT_EQ(served.duration_ms, 250.0);
  EXPECT_EQ(served.num_labels, seq);
  EXPECT_EQ(served.created_at, absl::FromUnixSeconds(1'800'000'000));
  EXPECT_TRUE(served.parameters.empty());
}

// RefitDue: due once "a version exists and the configured method differs from its model's";
// FitIsCurrent: only if "the configured method is the version's". A one-coin version loaded
// for a project configured for Dawid-Skene (the default) is neither, with no label new; a
// Dawid-Skene version is current.
TEST(LiveProjectTest, AVersionOfAnotherMethodThanConfiguredIsNotCurrentAndARefitIsDue) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto other = RestoreFitted(crowd, fitted, "one_coin");
  ASSERT_EQ(other->model_version(), 1);
  ASSERT_EQ(other->Counts().labels_since_version, 0);
  EXPECT_FALSE(other->FitIsCurrent());
  EXPECT_TRUE(other->RefitDue(absl::Now(), absl::Hours(1)));
  auto same = RestoreFitted(crowd, fitted, "ds");
  EXPECT_TRUE(same->FitIsCurrent());
  EXPECT_FALSE(same->RefitDue(absl::Now(), absl::Hours(1)));
}

// FitIsCurrent: "a value set again unchanged is no change". An annotator's stored features
// set again leave the fit current; other values do not.
TEST(LiveProjectTest, AnAnnotatorsFeaturesSetAgainLeaveTheFitCurrent) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted = *models::CreateTruthModel("ds", kClasses, {});
  ASSERT_TRUE(fitted->Fit(crowd.matrix, {}, false).ok());
  LiveProject::StoredState stored = StoredFit(crowd, *fitted, "ds");
  stored.annotator_features.assign(kAnnotators * 2, 0.0f);
  stored.annotator_features[6] = 0.5f;  // w3: (0.5, -1)
  stored.annotator_features[7] = -1.0f;
  stored.annotator_has_features.assign(kAnnotators, false);
  stored.annotator_has_features[3] = true;
  LiveProject::Identity identity = TestIdentity();
  identity.annotator_feature_dim = 2;
  auto project = LiveProject::Create(identity, v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  ASSERT_TRUE((*project)->FitIsCurrent());
  (*project)->SetAnnotatorFeatures(3, {0.5f, -1.0f});
  EXPECT_TRUE((*project)->FitIsCurrent()) << "w3's features set again";
  (*project)->SetAnnotatorFeatures(3, {0.5f, 1.0f});
  EXPECT_FALSE((*project)->FitIsCurrent()) << "w3's features changed";
}

// ProjectSummary: the served version and its method, and for auto the method it chose (the
// fitted model's own choice).
TEST(LiveProjectTest, TheSummaryShowsTheServedVersionAndAutosChoice) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted, "auto");
  const models::TruthModel* inner = fitted.get();
  if (const auto* calibrated = dynamic_cast<const models::CalibratedTruthModel*>(inner)) {
    inner = &calibrated->inner();
  }
  const auto* automatic = dynamic_cast<const models::AutoTruthModel*>(inner);
  ASSERT_NE(automatic, nullptr);
  ASSERT_FALSE(automatic->choice().method.empty());
  const ProjectSummary summary = project->Summary();
  EXPECT_EQ(summary.name, "p");
  EXPECT_EQ(summary.classes, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(summary.model_version, 1);
  EXPECT_EQ(summary.model_method, "auto");
  EXPECT_EQ(summary.chosen_method, automatic->choice().method);
  EXPECT_EQ(summary.counts.num_labels, 400);
}

// SetTrainingDevice: "auto", "cpu", "cuda" or "cuda:N"; INVALID_ARGUMENT naming the flag for
// anything else, "which changes nothing". The device set reaches the fit's options.
TEST(LiveProjectTest, OnlyTheDocumentedTrainingDevicesAreAccepted) {
  ASSERT_TRUE(SetTrainingDevice("cuda:1").ok());
  EXPECT_EQ(ModelOptionsFromSettings(v1::ModelSettings()).neural.device, "cuda:1");
  for (const char* bad : {"cuda:", "cuda:x", "cuda:1a", "gpu", "CPU", ""}) {
    const absl::Status refused = SetTrainingDevice(bad);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.message().find("--device"), absl::string_view::npos) << refused;
    EXPECT_EQ(ModelOptionsFromSettings(v1::ModelSettings()).neural.device, "cuda:1") << bad;
  }
  for (const char* good : {"cpu", "cuda", "cuda:12", "auto"}) {
    EXPECT_TRUE(SetTrainingDevice(good).ok()) << good;
    EXPECT_EQ(ModelOptionsFromSettings(v1::ModelSettings()).neural.device, good);
  }
}

// LiveLabelOf: "The live label of `annotator` on `item`, if any (nullopt for out-of-range
// indices)"; HasLabelled likewise false.
TEST(LiveProjectTest, LiveLabelOfIsThePairsLabelAndNulloptOutOfRange) {
  auto project = EmptyProject();
  project->ApplyCommitted({{0, "i0", 0, "w0", 2, 1, true}, {1, "i1", 1, "w1", 1, 2, true}});
  project->ApplyCommitted({{0, "i0", 0, "w0", 1, 3, true}});  // a revision
  EXPECT_EQ(project->LiveLabelOf(0, 0), std::optional<int32_t>(1));
  EXPECT_EQ(project->LiveLabelOf(1, 1), std::optional<int32_t>(1));
  EXPECT_EQ(project->LiveLabelOf(0, 1), std::nullopt);
  EXPECT_EQ(project->LiveLabelOf(1, 0), std::nullopt);
  for (auto [item, annotator] :
       {std::pair{0, 2}, std::pair{0, -1}, std::pair{2, 0}, std::pair{-1, 0}}) {
    EXPECT_EQ(project->LiveLabelOf(item, annotator), std::nullopt) << item << " " << annotator;
    EXPECT_FALSE(project->HasLabelled(item, annotator)) << item << " " << annotator;
  }
}

// FitIsCurrent: "only labels are known to the stored version: item changes made before the
// restart and not yet fit count as current". A version adopted from storage (a worker's fit,
// AdoptVersion) is such a stored version: over every live label, it is current though a gold
// label changed before it was adopted.
TEST(LiveProjectTest, AnAdoptedVersionOverEveryLabelIsCurrent) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);  // Version 1 through seq 400.
  project->ApplyItems({{4, "i4", 2}});
  ASSERT_FALSE(project->FitIsCurrent());
  storage::ModelVersionRecord v2;
  v2.version = 2;
  v2.method = "ds";
  v2.parameters = fitted->Serialize();
  v2.watermark = 400;
  v2.num_labels = 400;
  ASSERT_EQ(project->AdoptVersion(v2).value_or(false), true);
  EXPECT_TRUE(project->FitIsCurrent());
  EXPECT_EQ(project->snapshot()->posteriors.probabilities(4)[2], 1.0);
}

// PublishCommitted "recomputes those items (and any item added since the last snapshot)": an
// item registered by RegisterCommitted is served even when the publish names no item.
TEST(LiveProjectTest, PublishCommittedServesItemsAddedSinceTheLastSnapshot) {
  auto project = EmptyProject();
  const std::vector<int32_t> touched =
      project->RegisterCommitted({{0, "i0", 0, "w0", 2, 1, true}, {1, "i1", 0, "w0", 1, 2, true}});
  EXPECT_EQ(touched, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(project->snapshot()->posteriors.num_items(), 0);
  project->PublishCommitted({});
  std::shared_ptr<const ProjectSnapshot> snapshot = project->snapshot();
  ASSERT_EQ(snapshot->posteriors.num_items(), 2);
  EXPECT_EQ(snapshot->posteriors.num_labels(0), 1);
  EXPECT_EQ(snapshot->posteriors.num_labels(1), 1);
  EXPECT_EQ(snapshot->posteriors.newest_seq(1), 2);
}

// ConfusionPredictedFromFeatures: "empty when the annotator was given no features". A lia
// version fit with annotator features: w12, added after the fit without features, gets no
// prediction (its zero row is not features); once given features, it gets one (K × K).
TEST(LiveProjectTest, NoConfusionIsPredictedForAnAnnotatorWithoutFeatures) {
  auto crowd = MakeCrowd(100, 9);
  std::vector<float> features;
  for (int32_t a = 0; a < kAnnotators; ++a) {
    features.push_back(a < 4 ? -1.0f : 1.0f);
    features.push_back(0.1f * static_cast<float>(a));
  }
  std::unique_ptr<models::TruthModel> fitted = *models::CreateTruthModel("lia", kClasses, {});
  ASSERT_TRUE(fitted->SetAnnotatorFeatures(2, features).ok());
  ASSERT_TRUE(fitted->Fit(crowd.matrix, {}, false).ok());
  LiveProject::StoredState stored = StoredFit(crowd, *fitted, "lia");
  stored.annotator_ids.push_back(absl::StrCat("w", kAnnotators));  // no labels, no features
  stored.annotator_features = features;
  stored.annotator_features.resize((kAnnotators + 1) * 2, 0.0f);
  stored.annotator_has_features.assign(kAnnotators, true);
  stored.annotator_has_features.push_back(false);
  LiveProject::Identity identity = TestIdentity();
  identity.annotator_feature_dim = 2;
  auto project = LiveProject::Create(identity, v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  ASSERT_EQ((*project)->model_version(), 1);
  EXPECT_TRUE(
      (*project)->ConfusionPredictedFromFeatures(*(*project)->snapshot(), kAnnotators).empty());
  (*project)->SetAnnotatorFeatures(kAnnotators, {1.0f, 0.5f});
  EXPECT_EQ((*project)->ConfusionPredictedFromFeatures(*(*project)->snapshot(), kAnnotators).size(),
            static_cast<size_t>(kClasses * kClasses));
}

// AdoptVersion: "Labels the version did not see still count toward the next refit": three
// new labels on one new item after a version through seq 400 are three, not one item.
TEST(LiveProjectTest, AnAdoptedVersionCountsEveryNewLabelOfAnItem) {
  auto crowd = MakeCrowd(100, 9);
  std::unique_ptr<models::TruthModel> fitted;
  auto project = RestoreFitted(crowd, fitted);  // Version 1 through seq 400, 400 labels.
  project->ApplyCommitted({{100, "i100", 0, "w0", 1, 401, true},
                           {100, "i100", 1, "w1", 1, 402, true},
                           {100, "i100", 2, "w2", 0, 403, true}});
  ASSERT_EQ(project->Counts().labels_since_version, 3);
  storage::ModelVersionRecord v2;
  v2.version = 2;
  v2.method = "ds";
  v2.parameters = fitted->Serialize();
  v2.watermark = 400;
  v2.num_labels = 400;
  ASSERT_EQ(project->AdoptVersion(v2).value_or(false), true);
  EXPECT_EQ(project->Counts().labels_since_version, 3);
}

// RegisterCommitted: "A duplicate whose label (or seq) memory does not hold is applied like a
// new label". Item 0 holds w1's label 2 (seq 5); a resent duplicate of w0's label 2 (seq 3),
// which memory lacks, is applied: the same label by another annotator is not w0's.
TEST(LiveProjectTest, AResentDuplicateOfAPairMemoryLacksIsApplied) {
  auto project = EmptyProject();
  project->ApplyCommitted({{0, "i0", 1, "w1", 2, 5, true}});
  project->RegisterAnnotators({{0, "w0"}});
  project->ApplyCommitted({{0, "i0", 0, "w0", 2, 3, false}});
  EXPECT_EQ(project->LiveLabelOf(0, 0), std::optional<int32_t>(2));
  EXPECT_EQ(project->Counts().num_labels, 2);
  EXPECT_EQ(project->AnnotatorLabelCount(0), 1);
  EXPECT_EQ(project->snapshot()->posteriors.num_labels(0), 2);
}

// RegisterCommitted "returns the items whose posteriors changed (ascending)": each item once,
// however many of the batch's labels it got.
TEST(LiveProjectTest, RegisterCommittedNamesEachChangedItemOnce) {
  auto project = EmptyProject();
  const std::vector<int32_t> touched = project->RegisterCommitted({{2, "i2", 0, "w0", 1, 1, true},
                                                                   {0, "i0", 0, "w0", 2, 2, true},
                                                                   {0, "i0", 1, "w1", 2, 3, true},
                                                                   {2, "i2", 1, "w1", 0, 4, true}});
  EXPECT_EQ(touched, (std::vector<int32_t>{0, 2}));
}

}  // namespace
}  // namespace verity::server
