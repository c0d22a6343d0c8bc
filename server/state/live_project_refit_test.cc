// LiveProject::Refit against a real PostgreSQL (the version is stored before it is served) while
// labels and gold keep arriving: the table a refit publishes is built off the project lock from
// the fit's input, and the items that changed during the fit are recomputed under the lock.
// Whatever the interleaving, the served posteriors must equal the full E-step of the served
// model over every live label.
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "models/calibrated_truth_model.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"
#include "server/state/live_project.h"
#include "storage/model_version_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

constexpr int32_t kClasses = 3;
constexpr int32_t kAnnotators = 30;
constexpr int32_t kItems = 20000;

class LiveProjectRefitTest : public storage::testing::PostgresTest {
 protected:
  // A project of kItems items with 4 labels each, stored in PostgreSQL (its row only: Refit
  // writes model versions) and live in memory, not yet fitted.
  // Each call starts the expected labels (labels_, label_of_pair_, gold_) afresh.
  std::unique_ptr<LiveProject> CreateProject(const v1::ProjectSettings& settings = {}) {
    labels_.clear();
    label_of_pair_.clear();
    seq_ = 0;
    storage::ProjectStore projects(&pool());
    storage::ProjectRecord record;
    record.name = absl::StrCat("refit", ++projects_created_);
    record.classes = {"a", "b", "c"};
    absl::StatusOr<storage::ProjectRecord> created = projects.CreateProject(record);
    EXPECT_THAT(created, IsOk());
    LiveProject::Identity identity;
    identity.project_id = created.ok() ? created->project_id : 0;
    identity.name = record.name;
    identity.classes = record.classes;

    models::testing::SyntheticCrowdSpec spec;
    spec.num_items = kItems;
    spec.num_classes = kClasses;
    spec.labels_per_item = 4;
    for (int a = 0; a < kAnnotators; ++a) {
      spec.confusions.push_back(models::testing::SymmetricConfusion(kClasses, a < 10 ? 0.5 : 0.8));
    }
    spec.seed = 17;
    const models::testing::SyntheticCrowd crowd = models::testing::GenerateSyntheticCrowd(spec);
    LiveProject::StoredState stored;
    for (int32_t i = 0; i < kItems; ++i) stored.item_ids.push_back(absl::StrCat("i", i));
    stored.gold.assign(kItems, -1);
    for (int32_t a = 0; a < kAnnotators; ++a) stored.annotator_ids.push_back(absl::StrCat("w", a));
    for (const models::Annotation& a : crowd.annotations) {
      stored.labels.push_back({a.item, a.annotator, a.label, ++seq_});
      label_of_pair_[{a.item, a.annotator}] = labels_.size();
      labels_.push_back(a);
    }
    gold_.assign(kItems, -1);
    last_ = {identity, settings, stored};
    absl::StatusOr<std::unique_ptr<LiveProject>> project =
        LiveProject::Create(identity, settings, std::move(stored));
    EXPECT_THAT(project, IsOk());
    return project.ok() ? std::move(*project) : nullptr;
  }

  // The last created project live a second time, as another server replica holds it.
  std::unique_ptr<LiveProject> ReplicaOfLastProject() {
    absl::StatusOr<std::unique_ptr<LiveProject>> project =
        LiveProject::Create(last_.identity, last_.settings, last_.stored);
    EXPECT_THAT(project, IsOk());
    return project.ok() ? std::move(*project) : nullptr;
  }

  // One more committed label: on a new item every 7th call, else a new (item, annotator)
  // pair or a revision of an old one; every 11th call also makes an item gold.
  void CommitOneMore(LiveProject& project, int n) {
    const int32_t item = n % 7 == 0 ? NewItem() : (n * 37) % kItems;
    const int32_t annotator = (n * 13 + item) % kAnnotators;
    const int32_t label = (n * 5 + item) % kClasses;
    project.ApplyCommitted({{item, absl::StrCat("i", item), annotator,
                             absl::StrCat("w", annotator), label, ++seq_, true}});
    auto [it, added] = label_of_pair_.emplace(std::make_pair(item, annotator), labels_.size());
    if (added) {
      labels_.push_back({item, annotator, label});
    } else {
      labels_[it->second].label = label;
    }
    if (n % 11 == 0) {
      const int32_t gold_item = (n * 53) % kItems;
      project.ApplyItems({{gold_item, absl::StrCat("i", gold_item), n % kClasses}});
      gold_[gold_item] = n % kClasses;
    }
  }

  int32_t NewItem() {
    const auto item = static_cast<int32_t>(gold_.size());
    gold_.push_back(-1);
    return item;
  }

  // Checks the served snapshot against the full E-step of its model over labels_ and gold_.
  void ExpectServedEqualsFullEStep(LiveProject& project) {
    std::shared_ptr<const ProjectSnapshot> snapshot = project.snapshot();
    const auto items = static_cast<int32_t>(gold_.size());
    ASSERT_EQ(snapshot->posteriors.num_items(), items);
    absl::StatusOr<models::AnnotationMatrix> matrix =
        models::AnnotationMatrix::Build(items, kAnnotators, kClasses, labels_);
    ASSERT_THAT(matrix, IsOk());
    const std::vector<double> expected = models::AllPosteriors(*snapshot->model, *matrix, gold_);
    for (int32_t i = 0; i < items; ++i) {
      ASSERT_EQ(snapshot->posteriors.num_labels(i),
                static_cast<int32_t>(matrix->LabelsOfItem(i).size()))
          << i;
      ASSERT_EQ(snapshot->posteriors.is_gold(i), gold_[i] >= 0) << i;
      for (int32_t c = 0; c < kClasses; ++c) {
        ASSERT_NEAR(snapshot->posteriors.probabilities(i)[c], expected[i * kClasses + c], 1e-12)
            << "item " << i << " class " << c;
      }
    }
  }

  // Refits `project` and, between the fit's store and its publish, adopts the version that
  // `to_adopt` gives for the stored one (as a replica follower may). Then what must hold
  // whichever version that was, if not newer: the fit's own version is served, no label is
  // outstanding, 3 more labels are 3, and the served posteriors are the full E-step's.
  void RefitAdoptingMidway(
      LiveProject& project, storage::ModelVersionStore& versions,
      const std::function<storage::ModelVersionRecord(const storage::ModelVersionRecord&)>&
          to_adopt) {
    bool adopted = false;
    project.SetAfterVersionStoredForTesting([&](const storage::ModelVersionRecord& stored) {
      absl::StatusOr<bool> adoption = project.AdoptVersion(to_adopt(stored));
      ASSERT_THAT(adoption, IsOk());
      adopted = *adoption;
    });
    absl::StatusOr<LiveProject::RefitResult> refit = project.Refit(versions);
    ASSERT_THAT(refit, IsOk());
    EXPECT_TRUE(adopted);
    EXPECT_EQ(project.model_version(), refit->version.version);
    EXPECT_EQ(project.Counts().labels_since_version, 0);
    ExpectServedEqualsFullEStep(project);
    for (int n = 1; n <= 3; ++n) CommitOneMore(project, n);
    EXPECT_EQ(project.Counts().labels_since_version, 3);
    ExpectServedEqualsFullEStep(project);
  }

  int projects_created_ = 0;  // Each CreateProject stores a project of its own name.
  struct {
    LiveProject::Identity identity;
    v1::ProjectSettings settings;
    LiveProject::StoredState stored;
  } last_;  // What the last CreateProject made its project from.
  int64_t seq_ = 0;
  std::vector<models::Annotation> labels_;  // The live labels, one per pair.
  absl::flat_hash_map<std::pair<int32_t, int32_t>, size_t> label_of_pair_;  // Into labels_.
  std::vector<int32_t> gold_;
};

// True when every served posterior of `project` is a finite number.
bool AllServedPosteriorsFinite(LiveProject& project) {
  std::shared_ptr<const ProjectSnapshot> snapshot = project.snapshot();
  for (int32_t i = 0; i < snapshot->posteriors.num_items(); ++i) {
    for (double p : snapshot->posteriors.probabilities(i)) {
      if (!std::isfinite(p)) return false;
    }
  }
  return true;
}

// A fit whose posteriors are not finite numbers is neither stored nor served: a pseudo-count
// near DBL_MAX (which settings validation now refuses, but a project stored before may hold)
// overflowed, and every posterior of the project was NaN. The fit fails naming the method, and
// the project keeps serving what it served. Before, the NaN model was served, and the next fit,
// warm-started from it, stayed NaN even with the settings put back.
TEST_F(LiveProjectRefitTest, AFitWithNonFinitePosteriorsIsNotStoredOrServed) {
  storage::ModelVersionStore versions(&pool());
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_confusion_smoothing(1e308);
  std::unique_ptr<LiveProject> project = CreateProject(settings);
  ASSERT_NE(project, nullptr);
  ASSERT_TRUE(AllServedPosteriorsFinite(*project));
  absl::StatusOr<LiveProject::RefitResult> refit = project->Refit(versions);
  EXPECT_THAT(refit, StatusIs(absl::StatusCode::kFailedPrecondition,
                              ::testing::HasSubstr("not finite")));
  EXPECT_EQ(project->model_version(), 0);
  EXPECT_TRUE(AllServedPosteriorsFinite(*project));
  // With the settings put back the next fit is stored and served.
  settings.mutable_model()->clear_confusion_smoothing();
  project->SetSettings(settings);
  refit = project->Refit(versions);
  ASSERT_THAT(refit, IsOk());
  EXPECT_EQ(project->model_version(), refit->version.version);
  EXPECT_TRUE(AllServedPosteriorsFinite(*project));
}

// live_project.h, RefitDue: after a failed Refit none is due for 1 s, then 2 s after a second
// failure in a row, never longer than max_staleness; a change of the model settings ends the
// back-off (the fit that failed here overflows: a pseudo-count near DBL_MAX, as above).
// Before, a project whose fit kept failing was refitted back to back, every scheduler pass.
TEST_F(LiveProjectRefitTest, AFailedFitBacksOffBeforeTheNextIsDue) {
  storage::ModelVersionStore versions(&pool());
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_confusion_smoothing(1e308);
  std::unique_ptr<LiveProject> project = CreateProject(settings);
  ASSERT_NE(project, nullptr);
  ASSERT_TRUE(project->RefitDue(absl::Now(), absl::Hours(1)));
  ASSERT_FALSE(project->Refit(versions).ok());
  absl::Time failed = absl::Now();
  EXPECT_FALSE(project->RefitDue(failed + absl::Milliseconds(500), absl::Hours(1)));
  EXPECT_TRUE(project->RefitDue(failed + absl::Milliseconds(1500), absl::Hours(1)));
  ASSERT_FALSE(project->Refit(versions).ok());
  failed = absl::Now();
  EXPECT_FALSE(project->RefitDue(failed + absl::Milliseconds(1500), absl::Hours(1)));
  EXPECT_TRUE(project->RefitDue(failed + absl::Milliseconds(2500), absl::Hours(1)));
  EXPECT_TRUE(project->RefitDue(failed + absl::Milliseconds(600), absl::Milliseconds(500)));
  settings.mutable_model()->clear_confusion_smoothing();
  project->SetSettings(settings);
  EXPECT_TRUE(project->RefitDue(absl::Now(), absl::Hours(1)));
  ASSERT_THAT(project->Refit(versions), IsOk());
}

TEST_F(LiveProjectRefitTest, ChangesDuringARefitAreInThePosteriorsItPublishes) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  storage::ModelVersionStore versions(&pool());
  int committed = 0;
  int refits_with_changes = 0;
  // Each round fits while this thread commits labels; a round counts when labels arrived after
  // the fit copied its input: its watermark is more than one seq behind (one label may come
  // after the publish, before the loop sees the fit end).
  for (int round = 0; round < 5 && refits_with_changes < 2; ++round) {
    std::atomic<bool> fitting{true};
    absl::StatusOr<LiveProject::RefitResult> refit;
    std::thread fit([&] {
      refit = project->Refit(versions);
      fitting = false;
    });
    while (fitting) CommitOneMore(*project, ++committed);
    fit.join();
    ASSERT_THAT(refit, IsOk());
    if (refit->version.watermark < seq_ - 1) ++refits_with_changes;
    ExpectServedEqualsFullEStep(*project);
  }
  EXPECT_GE(refits_with_changes, 1) << "no label arrived during any of the fits";
  // Online updates after the last refit still agree with its model.
  for (int n = 0; n < 50; ++n) CommitOneMore(*project, ++committed);
  ExpectServedEqualsFullEStep(*project);
}

// The project's ModelSettings reach the fit: a Dawid-Skene fit capped at 3 EM iterations
// stores a version of 3 iterations, where the same fit uncapped takes more.
TEST_F(LiveProjectRefitTest, TheIterationCapOfTheSettingsBoundsTheStoredFit) {
  storage::ModelVersionStore versions(&pool());
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  std::unique_ptr<LiveProject> uncapped = CreateProject(settings);
  ASSERT_NE(uncapped, nullptr);
  absl::StatusOr<LiveProject::RefitResult> free_fit = uncapped->Refit(versions);
  ASSERT_THAT(free_fit, IsOk());
  EXPECT_GT(free_fit->version.iterations, 3);
  settings.mutable_model()->set_max_iterations(3);
  std::unique_ptr<LiveProject> capped = CreateProject(settings);
  ASSERT_NE(capped, nullptr);
  absl::StatusOr<LiveProject::RefitResult> capped_fit = capped->Refit(versions);
  ASSERT_THAT(capped_fit, IsOk());
  EXPECT_EQ(capped_fit->version.method, "ds");
  EXPECT_EQ(capped_fit->version.iterations, 3);
}

// A replica follower is notified of every stored version, the server's own included, and may
// adopt it between Refit's store and its publish. The count of labels since the served version
// must still be what arrived after that version's input: none here, then one per new label.
TEST_F(LiveProjectRefitTest, AVersionAdoptedBeforeItsOwnRefitPublishesItKeepsTheCountsRight) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  EXPECT_EQ(project->Counts().labels_since_version, kItems * 4);
  storage::ModelVersionStore versions(&pool());
  RefitAdoptingMidway(*project, versions,
                      [](const storage::ModelVersionRecord& stored) { return stored; });
}

// Another replica's version, older than this fit's, adopted between this fit's store and its
// publish: the fit's own (newer) version is published, and the labels since it are counted
// against it. The replica fitted the same labels, so none are outstanding; 3 more are 3.
TEST_F(LiveProjectRefitTest, AnOlderVersionAdoptedDuringARefitLeavesTheCountsToTheNewer) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  std::unique_ptr<LiveProject> replica = ReplicaOfLastProject();
  ASSERT_NE(replica, nullptr);
  storage::ModelVersionStore versions(&pool());
  // The replica's version is stored first; this project's fit, started before it could see
  // it, adopts it from the hook, after storing its own.
  absl::StatusOr<LiveProject::RefitResult> replicas_fit = replica->Refit(versions);
  ASSERT_THAT(replicas_fit, IsOk());
  RefitAdoptingMidway(*project, versions, [&](const storage::ModelVersionRecord& stored) {
    EXPECT_GT(stored.version, replicas_fit->version.version);
    return replicas_fit->version;
  });
}

// live_project.h: a refit is never due "while a fit runs", and a fit is current only if "no
// fit runs"; ProjectCounts::training says a fit runs. Checked from inside two fits (after the
// version is stored, before it is published): the first from no version, with every label new
// and a staleness long passed; the second over exactly the inputs of the first.
TEST_F(LiveProjectRefitTest, WhileAFitRunsNoRefitIsDueAndTheFitIsNotCurrent) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  storage::ModelVersionStore versions(&pool());
  const absl::Time later = absl::Now() + absl::Hours(2);
  ASSERT_TRUE(project->RefitDue(later, absl::Hours(1)));
  EXPECT_FALSE(project->Counts().training);
  int hooks = 0;
  project->SetAfterVersionStoredForTesting([&](const storage::ModelVersionRecord&) {
    ++hooks;
    EXPECT_TRUE(project->Counts().training);
    EXPECT_FALSE(project->RefitDue(later, absl::Hours(1)));
    EXPECT_FALSE(project->FitIsCurrent());
  });
  ASSERT_THAT(project->Refit(versions), IsOk());
  EXPECT_FALSE(project->Counts().training);
  ASSERT_TRUE(project->FitIsCurrent());
  ASSERT_THAT(project->Refit(versions), IsOk());
  EXPECT_EQ(hooks, 2);
  EXPECT_FALSE(project->Counts().training);
  EXPECT_TRUE(project->FitIsCurrent());
  EXPECT_FALSE(project->RefitDue(later, absl::Hours(1)));
}

// live_project.h: Refit fits the labels as of when it copied its input; the labels committed
// during the fit are served, and still count toward the next refit (labels_since_version).
TEST_F(LiveProjectRefitTest, LabelsCommittedDuringAFitCountTowardTheNextOne) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  storage::ModelVersionStore versions(&pool());
  bool committed = false;
  project->SetAfterVersionStoredForTesting([&](const storage::ModelVersionRecord&) {
    if (committed) return;
    committed = true;
    for (int n = 1; n <= 3; ++n) CommitOneMore(*project, n);
  });
  ASSERT_THAT(project->Refit(versions), IsOk());
  ASSERT_TRUE(committed);
  EXPECT_EQ(project->Counts().labels_since_version, 3);
  EXPECT_FALSE(project->FitIsCurrent());
  ExpectServedEqualsFullEStep(*project);
}

// live_project.h: a warm start clones the served model, its options included, so a refit is
// warm only while the ModelSettings it is built with are equal (otherwise "the new settings
// would wait for a restart"); and a setting changed after the fit copied its input is a change
// the fit did not see (FitIsCurrent). A tolerance tightened during a fit makes that fit not
// current, and the next fit is the one of a project configured with it from the start.
TEST_F(LiveProjectRefitTest, AToleranceSetDuringAFitTakesEffectAtTheNextFit) {
  storage::ModelVersionStore versions(&pool());
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_tolerance(1e-9);
  std::unique_ptr<LiveProject> tight = CreateProject(settings);
  ASSERT_NE(tight, nullptr);
  absl::StatusOr<LiveProject::RefitResult> tight_fit = tight->Refit(versions);
  ASSERT_THAT(tight_fit, IsOk());

  settings.mutable_model()->set_tolerance(0.5);
  std::unique_ptr<LiveProject> project = CreateProject(settings);
  ASSERT_NE(project, nullptr);
  bool tightened = false;
  project->SetAfterVersionStoredForTesting([&](const storage::ModelVersionRecord&) {
    if (tightened) return;
    tightened = true;
    v1::ProjectSettings tighter = settings;
    tighter.mutable_model()->set_tolerance(1e-9);
    project->SetSettings(tighter);
  });
  absl::StatusOr<LiveProject::RefitResult> loose_fit = project->Refit(versions);
  ASSERT_THAT(loose_fit, IsOk());
  ASSERT_TRUE(tightened);
  ASSERT_LT(loose_fit->version.iterations, tight_fit->version.iterations);
  EXPECT_FALSE(project->FitIsCurrent());
  absl::StatusOr<LiveProject::RefitResult> refit = project->Refit(versions);
  ASSERT_THAT(refit, IsOk());
  EXPECT_EQ(refit->version.iterations, tight_fit->version.iterations);
  EXPECT_NEAR(refit->version.log_likelihood, tight_fit->version.log_likelihood,
              1e-9 * std::abs(tight_fit->version.log_likelihood));
  EXPECT_TRUE(project->FitIsCurrent());
}

// Refit: "Callers run at most one Refit per project at a time"; a second one started while a
// fit runs is refused (FAILED_PRECONDITION: retry once the running fit ends) and stores no
// version: the running fit's own version is then served.
TEST_F(LiveProjectRefitTest, ARefitWhileAFitRunsIsRefusedAndStoresNothing) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  storage::ModelVersionStore versions(&pool());
  bool started = false;
  std::optional<absl::Status> second;
  project->SetAfterVersionStoredForTesting([&](const storage::ModelVersionRecord&) {
    if (started) return;
    started = true;
    second = project->Refit(versions).status();
  });
  absl::StatusOr<LiveProject::RefitResult> refit = project->Refit(versions);
  ASSERT_THAT(refit, IsOk());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->code(), absl::StatusCode::kFailedPrecondition) << *second;
  EXPECT_EQ(refit->version.version, 1);
  EXPECT_EQ(project->model_version(), 1);
  EXPECT_EQ(project->snapshot()->model_version, 1);
}

// Refit: "the fit starts from the current model when the method is the same and the labels
// have grown less than kMaxWarmStartGrowth times since the last fit from scratch". A second
// fit over the same labels starts from the first one's converged model, so its EM stops in
// fewer iterations than the first fit (from scratch) took. The model settings changed before
// the first fit, which was built with them: the second is still warm.
TEST_F(LiveProjectRefitTest, ARefitOverTheSameLabelsStartsFromTheServedModel) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  storage::ModelVersionStore versions(&pool());
  v1::ProjectSettings settings = project->settings();
  settings.mutable_model()->set_max_iterations(200);
  project->SetSettings(settings);
  absl::StatusOr<LiveProject::RefitResult> scratch = project->Refit(versions);
  ASSERT_THAT(scratch, IsOk());
  ASSERT_GT(scratch->version.iterations, 2);
  absl::StatusOr<LiveProject::RefitResult> warm = project->Refit(versions);
  ASSERT_THAT(warm, IsOk());
  EXPECT_LT(warm->version.iterations, scratch->version.iterations);
  EXPECT_EQ(project->model_version(), warm->version.version);
}

// A warm start clones the served model, options included, so it is warm "only while they are
// equal: otherwise the new settings would wait for a restart". An iteration cap of 3 lifted
// after a fit: the next fit runs as an uncapped fit from scratch does.
TEST_F(LiveProjectRefitTest, AnIterationCapLiftedAfterAFitIsLiftedAtTheNextFit) {
  storage::ModelVersionStore versions(&pool());
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  std::unique_ptr<LiveProject> uncapped = CreateProject(settings);
  ASSERT_NE(uncapped, nullptr);
  absl::StatusOr<LiveProject::RefitResult> free_fit = uncapped->Refit(versions);
  ASSERT_THAT(free_fit, IsOk());
  ASSERT_GT(free_fit->version.iterations, 3);

  settings.mutable_model()->set_max_iterations(3);
  std::unique_ptr<LiveProject> project = CreateProject(settings);
  ASSERT_NE(project, nullptr);
  absl::StatusOr<LiveProject::RefitResult> capped = project->Refit(versions);
  ASSERT_THAT(capped, IsOk());
  ASSERT_EQ(capped->version.iterations, 3);
  settings.mutable_model()->clear_max_iterations();
  project->SetSettings(settings);
  absl::StatusOr<LiveProject::RefitResult> refit = project->Refit(versions);
  ASSERT_THAT(refit, IsOk());
  EXPECT_EQ(refit->version.iterations, free_fit->version.iterations);
  EXPECT_NEAR(refit->version.log_likelihood, free_fit->version.log_likelihood,
              1e-9 * std::abs(free_fit->version.log_likelihood));
}

// Warm start after a restart: "After a restart, the label count of the restored version" is
// the last fit from scratch's, so a restored version over the same labels is warm-started
// from, and the next fit stops in fewer iterations than the fit from scratch took.
TEST_F(LiveProjectRefitTest, TheFirstRefitAfterARestartStartsFromTheRestoredVersion) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  storage::ModelVersionStore versions(&pool());
  absl::StatusOr<LiveProject::RefitResult> scratch = project->Refit(versions);
  ASSERT_THAT(scratch, IsOk());
  ASSERT_GT(scratch->version.iterations, 2);
  last_.stored.latest_version = scratch->version;
  std::unique_ptr<LiveProject> restarted = ReplicaOfLastProject();
  ASSERT_NE(restarted, nullptr);
  ASSERT_EQ(restarted->model_version(), scratch->version.version);
  absl::StatusOr<LiveProject::RefitResult> warm = restarted->Refit(versions);
  ASSERT_THAT(warm, IsOk());
  EXPECT_LT(warm->version.iterations, scratch->version.iterations);
}

// AdoptVersion: the adopted version was built with the settings of its adoption, so the next
// fit warm-starts from it (a warm start needs the served model's options to be the current
// ones). Here the settings change before a replica's version is adopted.
TEST_F(LiveProjectRefitTest, AFitAfterAnAdoptionStartsFromTheAdoptedVersion) {
  std::unique_ptr<LiveProject> project = CreateProject();
  ASSERT_NE(project, nullptr);
  std::unique_ptr<LiveProject> replica = ReplicaOfLastProject();
  ASSERT_NE(replica, nullptr);
  storage::ModelVersionStore versions(&pool());
  absl::StatusOr<LiveProject::RefitResult> scratch = project->Refit(versions);
  ASSERT_THAT(scratch, IsOk());
  ASSERT_GT(scratch->version.iterations, 2);
  absl::StatusOr<LiveProject::RefitResult> replicas = replica->Refit(versions);
  ASSERT_THAT(replicas, IsOk());
  ASSERT_GT(replicas->version.version, scratch->version.version);
  v1::ProjectSettings settings = project->settings();
  settings.mutable_model()->set_max_iterations(200);
  project->SetSettings(settings);
  ASSERT_EQ(project->AdoptVersion(replicas->version).value_or(false), true);
  absl::StatusOr<LiveProject::RefitResult> warm = project->Refit(versions);
  ASSERT_THAT(warm, IsOk());
  EXPECT_LT(warm->version.iterations, scratch->version.iterations);
}

// Refit warm-starts while the labels "have grown less than kMaxWarmStartGrowth times since the
// last fit from scratch (not the last fit: chained warm starts must not creep past it)". Fits
// at 400 labels (from scratch), 600 (warm) and 900: 900 is 2.25 times the 400 of the last fit
// from scratch, so the third fit is from scratch, as a new project's first fit over the same
// 900 labels is.
TEST_F(LiveProjectRefitTest, ChainedWarmStartsCountTheGrowthFromTheLastFitFromScratch) {
  models::testing::SyntheticCrowdSpec spec;
  spec.num_items = 225;
  spec.num_classes = kClasses;
  spec.labels_per_item = 4;
  for (int a = 0; a < kAnnotators; ++a) {
    spec.confusions.push_back(models::testing::SymmetricConfusion(kClasses, a < 10 ? 0.5 : 0.8));
  }
  spec.seed = 23;
  const models::testing::SyntheticCrowd crowd = models::testing::GenerateSyntheticCrowd(spec);
  ASSERT_EQ(crowd.annotations.size(), 900u);
  storage::ProjectStore projects(&pool());
  storage::ModelVersionStore versions(&pool());
  auto live = [&](const std::string& name, LiveProject::StoredState stored) {
    storage::ProjectRecord record;
    record.name = name;
    record.classes = {"a", "b", "c"};
    absl::StatusOr<storage::ProjectRecord> created = projects.CreateProject(record);
    EXPECT_THAT(created, IsOk());
    LiveProject::Identity identity;
    identity.project_id = created.ok() ? created->project_id : 0;
    identity.name = name;
    identity.classes = record.classes;
    absl::StatusOr<std::unique_ptr<LiveProject>> project =
        LiveProject::Create(identity, v1::ProjectSettings(), std::move(stored));
    EXPECT_THAT(project, IsOk());
    return project.ok() ? std::move(*project) : nullptr;
  };
  std::unique_ptr<LiveProject> growing = live("growing", {});
  ASSERT_NE(growing, nullptr);
  int64_t seq = 0;
  std::vector<std::string> item_ids, annotator_ids;
  for (int32_t i = 0; i < 225; ++i) item_ids.push_back(absl::StrCat("i", i));
  for (int32_t a = 0; a < kAnnotators; ++a) annotator_ids.push_back(absl::StrCat("w", a));
  LiveProject::StoredState all;
  all.item_ids = item_ids;
  all.gold.assign(225, -1);
  all.annotator_ids = annotator_ids;
  std::vector<int64_t> fit_iterations;
  int32_t from = 0;
  for (int32_t items : {100, 150, 225}) {
    std::vector<CommittedLabel> batch;
    for (const models::Annotation& a : crowd.annotations) {
      if (a.item < from || a.item >= items) continue;
      batch.push_back({a.item, item_ids[a.item], a.annotator, annotator_ids[a.annotator], a.label,
                       ++seq, true});
      all.labels.push_back({a.item, a.annotator, a.label, seq});
    }
    growing->ApplyCommitted(batch);
    ASSERT_EQ(growing->Counts().num_labels, items * 4);
    absl::StatusOr<LiveProject::RefitResult> fit = growing->Refit(versions);
    ASSERT_THAT(fit, IsOk());
    fit_iterations.push_back(fit->version.iterations);
    from = items;
  }
  std::unique_ptr<LiveProject> fresh = live("fresh", std::move(all));
  ASSERT_NE(fresh, nullptr);
  absl::StatusOr<LiveProject::RefitResult> scratch = fresh->Refit(versions);
  ASSERT_THAT(scratch, IsOk());
  EXPECT_EQ(fit_iterations[2], scratch->version.iterations);
  EXPECT_EQ(growing->snapshot()->model_version, 3);
}

// Refit: "a change of ModelSettings.calibration takes effect at once, through a cold fit".
// Fitted with calibration "none", then switched to "auto": the next fit serves a calibrated
// model that fits its map (models.proto), as a project fit with "auto" from the start does.
TEST_F(LiveProjectRefitTest, CalibrationSwitchedOnTakesEffectAtTheNextFit) {
  storage::ModelVersionStore versions(&pool());
  std::unique_ptr<LiveProject> plain = CreateProject();
  ASSERT_NE(plain, nullptr);
  absl::StatusOr<LiveProject::RefitResult> scratch = plain->Refit(versions);
  ASSERT_THAT(scratch, IsOk());

  v1::ProjectSettings settings;
  settings.mutable_model()->set_calibration("none");
  std::unique_ptr<LiveProject> project = CreateProject(settings);
  ASSERT_NE(project, nullptr);
  ASSERT_THAT(project->Refit(versions), IsOk());
  const auto* before =
      dynamic_cast<const models::CalibratedTruthModel*>(project->snapshot()->model.get());
  ASSERT_NE(before, nullptr);
  ASSERT_FALSE(before->fits_map());
  settings.mutable_model()->set_calibration("auto");
  project->SetSettings(settings);
  absl::StatusOr<LiveProject::RefitResult> refit = project->Refit(versions);
  ASSERT_THAT(refit, IsOk());
  const auto* after =
      dynamic_cast<const models::CalibratedTruthModel*>(project->snapshot()->model.get());
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(after->fits_map());
  EXPECT_EQ(refit->version.iterations, scratch->version.iterations);
}

}  // namespace
}  // namespace verity::server
