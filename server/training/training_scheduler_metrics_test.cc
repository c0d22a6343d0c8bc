// TrainingScheduler's metrics against a real PostgreSQL (training_scheduler.h): model versions
// served by source (inprocess, worker, replica) and method, fit durations, training jobs
// enqueued, and fits left to another replica holding the fit lock; and, on the same fixture,
// RefitProjectNow's cancellation.
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "pqxx/except"
#include "server/observability/metric_sample.h"
#include "server/observability/metrics.h"
#include "server/state/project_registry.h"
#include "server/state/storage_handles.h"
#include "server/training/scheduler_test_projects.h"
#include "server/training/training_scheduler.h"
#include "server/training/training_worker.h"
#include "storage/annotation_store.h"
#include "storage/fit_lock.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {
namespace {

// The value of `series` in `metrics` as a scrape would read it; -1.0 when it is not rendered.
double Sample(const MetricsRegistry& metrics, const std::string& series) {
  return MetricSample(metrics, series).value_or(-1.0);
}

class TrainingSchedulerMetricsTest : public storage::testing::PostgresTest {
 protected:
  // A Dawid-Skene project ("ds") with 40 items x 3 labels.
  int64_t NewProject(const std::string& name) {
    absl::StatusOr<int64_t> created = testing::StoreDsProjectWithLabels(pool(), name);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.value_or(0);
  }

  // One server's state over the test database.
  struct Server {
    std::unique_ptr<StorageHandles> storage;
    std::unique_ptr<ProjectRegistry> registry;
  };
  Server Open() {
    Server server;
    auto storage = StorageHandles::Open(url(), 2);
    EXPECT_TRUE(storage.ok()) << storage.status();
    server.storage = std::move(*storage);
    server.registry = std::make_unique<ProjectRegistry>(*server.storage);
    EXPECT_TRUE(server.registry->LoadAll().ok());
    return server;
  }
  // Renames table `from` to `to`: the statements that need `from` fail from now on.
  absl::Status RenameTable(const std::string& from, const std::string& to) {
    return pool().RunInTransaction("renaming a table", [&](pqxx::work& txn) {
      txn.exec(absl::StrCat("ALTER TABLE ", from, " RENAME TO ", to));
      return absl::OkStatus();
    });
  }
  static TrainingScheduler::Options InProcess() {
    TrainingScheduler::Options options;
    options.run_in_background = false;
    return options;
  }
  // A scheduler of `server` that enqueues jobs for workers instead of fitting.
  static std::unique_ptr<TrainingScheduler> WorkerModeScheduler(const Server& server,
                                                                MetricsRegistry& metrics) {
    TrainingScheduler::Options options = InProcess();
    options.use_workers = true;
    return std::make_unique<TrainingScheduler>(*server.registry, *server.storage->versions,
                                               server.storage->jobs.get(), options, &metrics);
  }
};

TEST_F(TrainingSchedulerMetricsTest, AnInProcessFitIsCountedAsInprocessAndTimed) {
  NewProject("p");
  Server server = Open();
  MetricsRegistry metrics;
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, InProcess(),
                              &metrics);
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  ASSERT_EQ((*server.registry->Get("p"))->model_version(), 1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"inprocess\"}"), 1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"worker\"}"), -1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"replica\"}"), -1);
  EXPECT_EQ(Sample(metrics, "verity_training_duration_seconds_count{method=\"ds\"}"), 1);
  EXPECT_EQ(Sample(metrics, "verity_training_duration_seconds_bucket{method=\"ds\",le=\"+Inf\"}"),
            1);
  // Observed in seconds: the stored version's duration_ms / 1000.
  auto stored = server.storage->versions->ListModelVersions((*server.registry->Get("p"))->identity().project_id, 1);
  ASSERT_TRUE(stored.ok() && stored->size() == 1u);
  ASSERT_GT(stored->front().duration_ms, 0);
  EXPECT_NEAR(Sample(metrics, "verity_training_duration_seconds_sum{method=\"ds\"}"),
              stored->front().duration_ms / 1000.0, 1e-6);
  EXPECT_EQ(Sample(metrics, "verity_training_failures_total"), 0);
  EXPECT_EQ(Sample(metrics, "verity_training_jobs_enqueued_total"), 0);
  EXPECT_EQ(Sample(metrics, "verity_model_version_downloads_total"), 0);
  EXPECT_EQ(Sample(metrics, "verity_training_fits_left_to_other_replicas_total"), 0);
}

// "Training jobs enqueued" counts jobs, not passes: a pass that finds the project's job still
// queued (no worker has claimed it yet) is handed that job back (training_job_store.h) and
// must not count it again.
TEST_F(TrainingSchedulerMetricsTest, AJobStillQueuedIsNotCountedAgainByTheNextPass) {
  NewProject("p");
  Server server = Open();
  MetricsRegistry metrics;
  std::unique_ptr<TrainingScheduler> owned = WorkerModeScheduler(server, metrics);
  TrainingScheduler& scheduler = *owned;
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ(Sample(metrics, "verity_training_jobs_enqueued_total"), 1);
}

// training_scheduler.h: RefitProjectNow stops waiting once `cancelled` says true and answers
// CANCELLED; the job it enqueued stays for a worker. No worker runs here, so without the check
// the call would wait the whole train_wait (10 minutes) and answer DEADLINE_EXCEEDED.
TEST_F(TrainingSchedulerMetricsTest, ACancelledTrainModelStopsWaitingForTheWorkers) {
  NewProject("p");
  Server server = Open();
  MetricsRegistry metrics;
  TrainingScheduler::Options options = InProcess();
  options.use_workers = true;
  options.train_wait = absl::Minutes(10);
  TrainingScheduler scheduler(*server.registry, *server.storage->versions,
                              server.storage->jobs.get(), options, &metrics);
  int asked = 0;
  absl::StatusOr<storage::ModelVersionRecord> version =
      scheduler.RefitProjectNow(**server.registry->Get("p"), [&asked] { return ++asked >= 3; });
  EXPECT_EQ(version.status().code(), absl::StatusCode::kCancelled) << version.status();
  EXPECT_EQ(asked, 3);
  // The job stays queued: a worker fits it, and the next pass serves its version.
  TrainingWorker::Options worker_options;
  worker_options.name = "w";
  TrainingWorker worker(*server.storage, worker_options);
  absl::StatusOr<bool> ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_TRUE(*ran);
  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 1);
}

// The same in-process (no workers): while another replica holds the project's fit lock,
// RefitProjectNow waits for its version; a call cancelled meanwhile stops waiting (CANCELLED)
// instead of holding its thread for train_wait, and fits nothing.
TEST_F(TrainingSchedulerMetricsTest, ACancelledTrainModelStopsWaitingForAnotherReplicasFit) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  storage::FitLocks other(&pool());
  absl::StatusOr<std::unique_ptr<storage::FitLock>> held = other.TryAcquire(project_id);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(*held, nullptr);
  storage::FitLocks locks(server.storage->pool.get());
  TrainingScheduler::Options options = InProcess();
  options.fit_locks = &locks;
  // Long past the three checks (taken 100 ms apart); a call that never checked would end
  // DEADLINE_EXCEEDED here instead.
  options.train_wait = absl::Seconds(30);
  MetricsRegistry metrics;
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, options,
                              &metrics);
  int asked = 0;
  absl::StatusOr<storage::ModelVersionRecord> version =
      scheduler.RefitProjectNow(**server.registry->Get("p"), [&asked] { return ++asked >= 3; });
  EXPECT_EQ(version.status().code(), absl::StatusCode::kCancelled) << version.status();
  EXPECT_EQ(asked, 3);
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 0);
  // Released: the next call fits.
  held->reset();
  version = scheduler.RefitProjectNow(**server.registry->Get("p"), [] { return false; });
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->version, 1);
}

TEST_F(TrainingSchedulerMetricsTest, WorkerModeCountsTheJobAndTheWorkersVersion) {
  NewProject("p");
  Server server = Open();
  MetricsRegistry metrics;
  std::unique_ptr<TrainingScheduler> owned = WorkerModeScheduler(server, metrics);
  TrainingScheduler& scheduler = *owned;
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ(Sample(metrics, "verity_training_jobs_enqueued_total"), 1);
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 0);

  TrainingWorker::Options worker_options;
  worker_options.name = "w";
  TrainingWorker worker(*server.storage, worker_options);
  absl::StatusOr<bool> ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_TRUE(*ran);

  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"worker\"}"), 1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"inprocess\"}"), -1);
  EXPECT_EQ(Sample(metrics, "verity_model_version_downloads_total"), 1);
  // Nothing was fit in this process.
  EXPECT_EQ(Sample(metrics, "verity_training_duration_seconds_count{method=\"ds\"}"), -1);
}

TEST_F(TrainingSchedulerMetricsTest, AVersionAnotherReplicaFitIsAdoptedOnceAsReplica) {
  NewProject("p");
  Server a = Open();
  Server b = Open();
  TrainingScheduler fitter(*a.registry, *a.storage->versions, nullptr, InProcess());
  ASSERT_TRUE(fitter.RefitDueProjectsNow(/*force=*/true).ok());

  MetricsRegistry metrics;
  TrainingScheduler follower(*b.registry, *b.storage->versions, nullptr, InProcess(), &metrics);
  std::shared_ptr<LiveProject> project = *b.registry->Get("p");
  ASSERT_EQ(project->model_version(), 0);
  EXPECT_EQ(follower.AdoptStoredVersion(*project).value_or(-1), 1);
  EXPECT_EQ(project->model_version(), 1);
  // Served already: not read or counted again.
  EXPECT_EQ(follower.AdoptStoredVersion(*project).value_or(-1), 1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"replica\"}"), 1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"worker\"}"), -1);
  EXPECT_EQ(Sample(metrics, "verity_model_version_downloads_total"), 1);
}

TEST_F(TrainingSchedulerMetricsTest, AFitWhoseLockAnotherReplicaHoldsIsSkippedAndCounted) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  // Another replica (another session) fits the project.
  storage::FitLocks other(&pool());
  absl::StatusOr<std::unique_ptr<storage::FitLock>> held = other.TryAcquire(project_id);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(*held, nullptr);

  storage::FitLocks locks(server.storage->pool.get());
  TrainingScheduler::Options options = InProcess();
  options.fit_locks = &locks;
  MetricsRegistry metrics;
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, options,
                              &metrics);
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 0);
  EXPECT_EQ(Sample(metrics, "verity_training_fits_left_to_other_replicas_total"), 1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"inprocess\"}"), -1);

  // Released: this replica fits.
  held->reset();
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 1);
  EXPECT_EQ(Sample(metrics, "verity_training_fits_left_to_other_replicas_total"), 1);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"inprocess\"}"), 1);
}


// training_scheduler.h: a pass "reads a version's parameters once, and never again one that
// failed to restore"; the failure is reported once, and a newer version replaces it.
TEST_F(TrainingSchedulerMetricsTest, AVersionThatDoesNotRestoreIsReadOnceAndANewerOneServed) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  storage::ModelVersionRecord broken;
  broken.project_id = project_id;
  broken.method = "ds";
  broken.parameters = "not a serialized model";
  ASSERT_TRUE(server.storage->versions->SaveModelVersion(broken).ok());

  MetricsRegistry metrics;
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, InProcess(),
                              &metrics);
  std::shared_ptr<LiveProject> project = *server.registry->Get("p");
  absl::StatusOr<int32_t> first = scheduler.AdoptStoredVersion(*project);
  EXPECT_FALSE(first.ok());
  EXPECT_EQ(Sample(metrics, "verity_model_version_downloads_total"), 1);
  // Refused before: not read again, and the served version (none) is the answer.
  absl::StatusOr<int32_t> again = scheduler.AdoptStoredVersion(*project);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(Sample(metrics, "verity_model_version_downloads_total"), 1);
  EXPECT_EQ(project->model_version(), 0);

  // Another replica stores a good version 2: it is read and served.
  Server other = Open();
  TrainingScheduler fitter(*other.registry, *other.storage->versions, nullptr, InProcess());
  ASSERT_TRUE(fitter.RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ(scheduler.AdoptStoredVersion(*project).value_or(-1), 2);
  EXPECT_EQ(project->model_version(), 2);
  EXPECT_EQ(Sample(metrics, "verity_model_version_downloads_total"), 2);
}

// RefitDueProjectsNow(force) refits "every project with labels"; RefitProjectNow answers
// FAILED_PRECONDITION for a project with none. Nothing is stored for it either way.
TEST_F(TrainingSchedulerMetricsTest, AProjectWithoutLabelsIsNeverFit) {
  storage::ProjectStore projects(&pool());
  storage::ProjectRecord record;
  record.name = "empty";
  record.classes = {"a", "b"};
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  record.settings = settings.SerializeAsString();
  absl::StatusOr<storage::ProjectRecord> created = projects.CreateProject(record);
  ASSERT_TRUE(created.ok()) << created.status();
  Server server = Open();
  MetricsRegistry metrics;
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, InProcess(),
                              &metrics);
  std::shared_ptr<LiveProject> project = *server.registry->Get("empty");
  EXPECT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  absl::StatusOr<storage::ModelVersionRecord> now = scheduler.RefitProjectNow(*project);
  EXPECT_EQ(now.status().code(), absl::StatusCode::kFailedPrecondition) << now.status();
  EXPECT_EQ(project->model_version(), 0);
  auto stored = server.storage->versions->ListModelVersions(created->project_id, 10);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->empty());
  EXPECT_EQ(Sample(metrics, "verity_training_failures_total"), 0);
}


// training_worker.h: "A fit that fails ends the attempt (Fail: requeued, or failed after
// max_attempts)", and RunOnce still returns true (a job was claimed). A project whose stored
// settings do not parse cannot load, so every attempt fails: with max_attempts 2 the job is
// queued again after the first and failed after the second; then the queue is empty.
TEST_F(TrainingSchedulerMetricsTest, AJobWhoseFitFailsIsRequeuedThenFailedAfterMaxAttempts) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  absl::StatusOr<storage::TrainingJob> job = server.storage->jobs->Enqueue(project_id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(pool().RunInTransaction("corrupting a project", [](pqxx::work& txn) {
                      txn.exec("UPDATE projects SET settings = '\\xffffffff'::bytea "
                               "WHERE name = 'p'");
                      return absl::OkStatus();
                    }).ok());
  TrainingWorker::Options options;
  options.name = "w";
  options.max_attempts = 2;
  TrainingWorker worker(*server.storage, options);

  absl::StatusOr<bool> ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_TRUE(*ran);
  absl::StatusOr<storage::TrainingJob> after_one = server.storage->jobs->GetJob(job->job_id);
  ASSERT_TRUE(after_one.ok()) << after_one.status();
  EXPECT_EQ(after_one->state, "queued");
  EXPECT_EQ(after_one->attempts, 1);
  EXPECT_NE(after_one->error.find("settings do not parse"), std::string::npos)
      << after_one->error;

  ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_TRUE(*ran);
  absl::StatusOr<storage::TrainingJob> after_two = server.storage->jobs->GetJob(job->job_id);
  ASSERT_TRUE(after_two.ok()) << after_two.status();
  EXPECT_EQ(after_two->state, "failed");
  EXPECT_EQ(after_two->attempts, 2);
  EXPECT_FALSE(after_two->version.has_value());

  ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_FALSE(*ran) << "the queue is empty";
}

// training_scheduler.h, RefitAndLog: a due fit that takes the fit lock "serves any version
// stored meanwhile and fits only if that did not make the fit unnecessary". Replica B fits the
// project (version 1, every label); replica A, for which the refit is due (its memory has
// never fit), takes the lock in a background-style pass, serves B's version and fits nothing:
// no version 2 is stored.
TEST_F(TrainingSchedulerMetricsTest, ADueFitMadeUnnecessaryByAnotherReplicasVersionIsSkipped) {
  const int64_t project_id = NewProject("p");
  Server a = Open();
  Server b = Open();
  TrainingScheduler fitter(*b.registry, *b.storage->versions, nullptr, InProcess());
  ASSERT_TRUE(fitter.RefitDueProjectsNow(/*force=*/true).ok());
  ASSERT_EQ((*b.registry->Get("p"))->model_version(), 1);

  storage::FitLocks locks(a.storage->pool.get());
  TrainingScheduler::Options options = InProcess();
  options.fit_locks = &locks;
  options.max_staleness = absl::ZeroDuration();
  TrainingScheduler scheduler(*a.registry, *a.storage->versions, nullptr, options);
  std::shared_ptr<LiveProject> project = *a.registry->Get("p");
  ASSERT_TRUE(project->RefitDue(absl::Now(), options.max_staleness));
  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  EXPECT_EQ(project->model_version(), 1);
  auto stored = a.storage->versions->ListModelVersions(project_id, 10);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->size(), 1u);
}

// training_scheduler.h: with workers, a pass "first serves any newer model version a worker
// process stored ..., then enqueues a training job for each due project": a project whose
// stored version already saw every label is served that version and gets no job, although the
// refit was due before the pass served it.
TEST_F(TrainingSchedulerMetricsTest, WorkerModeServesAStoredVersionInsteadOfEnqueueingAgain) {
  const int64_t project_id = NewProject("p");
  Server a = Open();
  Server b = Open();
  TrainingScheduler fitter(*b.registry, *b.storage->versions, nullptr, InProcess());
  ASSERT_TRUE(fitter.RefitDueProjectsNow(/*force=*/true).ok());

  TrainingScheduler::Options options = InProcess();
  options.use_workers = true;
  options.max_staleness = absl::ZeroDuration();
  MetricsRegistry metrics;
  TrainingScheduler scheduler(*a.registry, *a.storage->versions, a.storage->jobs.get(), options,
                              &metrics);
  std::shared_ptr<LiveProject> project = *a.registry->Get("p");
  ASSERT_TRUE(project->RefitDue(absl::Now(), options.max_staleness));
  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  EXPECT_EQ(project->model_version(), 1);
  auto jobs = a.storage->jobs->ListJobs(project_id);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty()) << jobs->size() << " jobs";
  EXPECT_EQ(Sample(metrics, "verity_training_jobs_enqueued_total"), 0);
}

// training_scheduler.h: RefitDueProjectsNow(force) refits "every project with labels whose
// fit is not current". A second forced pass with no new label fits nothing: still version 1.
TEST_F(TrainingSchedulerMetricsTest, AForcedPassDoesNotRefitAProjectWhoseFitIsCurrent) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, InProcess());
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  ASSERT_EQ((*server.registry->Get("p"))->model_version(), 1);
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 1);
  auto stored = server.storage->versions->ListModelVersions(project_id, 10);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->size(), 1u);
}

// training_scheduler.h, Metrics: verity_training_failures_total counts "in-process fits that
// failed", and a pass returns the error. Here the database refuses every new model version (a
// trigger), so each fit fails when it stores its version.
TEST_F(TrainingSchedulerMetricsTest, AFailedInProcessFitIsReportedAndCounted) {
  NewProject("p");
  ASSERT_TRUE(pool().RunInTransaction("refusing model versions", [](pqxx::work& txn) {
                      txn.exec("CREATE FUNCTION refuse_version() RETURNS trigger AS $$ BEGIN "
                               "RAISE EXCEPTION 'no versions today'; END $$ LANGUAGE plpgsql");
                      txn.exec("CREATE TRIGGER refuse_version BEFORE INSERT ON model_versions "
                               "FOR EACH ROW EXECUTE FUNCTION refuse_version()");
                      return absl::OkStatus();
                    }).ok());
  Server server = Open();
  MetricsRegistry metrics;
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, InProcess(),
                              &metrics);
  std::shared_ptr<LiveProject> project = *server.registry->Get("p");
  const absl::Status pass = scheduler.RefitDueProjectsNow(/*force=*/true);
  EXPECT_FALSE(pass.ok());
  EXPECT_NE(pass.message().find("no versions today"), std::string::npos) << pass;
  EXPECT_EQ(Sample(metrics, "verity_training_failures_total"), 1);
  absl::StatusOr<storage::ModelVersionRecord> now = scheduler.RefitProjectNow(*project);
  EXPECT_FALSE(now.ok());
  EXPECT_EQ(Sample(metrics, "verity_training_failures_total"), 2);
  EXPECT_EQ(project->model_version(), 0);
  EXPECT_EQ(Sample(metrics, "verity_model_versions_total{method=\"ds\",source=\"inprocess\"}"), -1);
}

// training_scheduler.h: a forced pass refits "every project with labels whose fit is not
// current", whether or not a refit is due. One revised label after version 1 is far from
// due (refit_min_new_labels 50, max_staleness an hour) but makes the fit not current.
TEST_F(TrainingSchedulerMetricsTest, AForcedPassRefitsAProjectWhoseRefitIsNotDueYet) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  TrainingScheduler::Options options = InProcess();
  options.max_staleness = absl::Hours(1);
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, options);
  std::shared_ptr<LiveProject> project = *server.registry->Get("p");
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  ASSERT_EQ(project->model_version(), 1);

  // NewProject: w0 labels i0 with class 0; it now says 1.
  storage::AnnotationStore annotations(&pool());
  auto written = annotations.CommitAnnotations(
      std::vector<storage::AnnotationWrite>{{project_id, "i0", "w0", 1, std::nullopt}});
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ((*written)[0].outcome, storage::WriteOutcome::kRevised);
  const std::optional<int32_t> item = project->FindItem("i0");
  const std::optional<int32_t> annotator = project->FindAnnotator("w0");
  ASSERT_TRUE(item.has_value() && annotator.has_value());
  const CommittedLabel revision{*item, "i0", *annotator, "w0", 1, (*written)[0].seq, true};
  project->ApplyCommitted({&revision, 1});
  ASSERT_FALSE(project->RefitDue(absl::Now(), options.max_staleness));
  ASSERT_FALSE(project->FitIsCurrent());

  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  EXPECT_EQ(project->model_version(), 1) << "a plain pass waits until the refit is due";
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ(project->model_version(), 2);
  EXPECT_TRUE(project->FitIsCurrent());
}

// training_scheduler.h: with workers, TrainModel (RefitProjectNow) enqueues a job and waits
// for its version; a job that ends failed ends the wait at once with the job's error, not at
// train_wait.
TEST_F(TrainingSchedulerMetricsTest, WorkerModeTrainModelAnswersAFailedJobsError) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  TrainingScheduler::Options options = InProcess();
  options.use_workers = true;
  options.train_wait = absl::Seconds(20);
  TrainingScheduler scheduler(*server.registry, *server.storage->versions,
                              server.storage->jobs.get(), options);
  absl::StatusOr<storage::ModelVersionRecord> answer = absl::UnknownError("not answered");
  std::thread train([&] { answer = scheduler.RefitProjectNow(**server.registry->Get("p")); });
  // A worker claims the job and its only attempt fails.
  std::optional<storage::TrainingJob> claimed;
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  while (!claimed.has_value() && absl::Now() < give_up) {
    absl::StatusOr<std::optional<storage::TrainingJob>> claim =
        server.storage->jobs->Claim("w", absl::Seconds(30));
    ASSERT_TRUE(claim.ok()) << claim.status();
    claimed = *claim;
    if (!claimed.has_value()) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(claimed.has_value()) << "TrainModel enqueued no job";
  EXPECT_EQ(claimed->project_id, project_id);
  ASSERT_TRUE(server.storage->jobs->Fail(claimed->job_id, "w", "out of GPU memory", 1).ok());
  train.join();
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInternal) << answer.status();
  EXPECT_NE(answer.status().message().find("out of GPU memory"), std::string::npos)
      << answer.status();
}

// training_scheduler.h: RefitProjectNow "when nothing changed since the current version's fit"
// answers that version and writes nothing; with workers, no job is enqueued and nothing waits.
TEST_F(TrainingSchedulerMetricsTest, WorkerModeTrainModelOnACurrentFitAnswersItWithoutAJob) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  TrainingScheduler::Options options = InProcess();
  options.use_workers = true;
  options.train_wait = absl::Seconds(3);
  MetricsRegistry metrics;
  TrainingScheduler scheduler(*server.registry, *server.storage->versions,
                              server.storage->jobs.get(), options, &metrics);
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  TrainingWorker::Options worker_options;
  worker_options.name = "w";
  TrainingWorker worker(*server.storage, worker_options);
  absl::StatusOr<bool> ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok() && *ran) << ran.status();
  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  std::shared_ptr<LiveProject> project = *server.registry->Get("p");
  ASSERT_EQ(project->model_version(), 1);
  ASSERT_TRUE(project->FitIsCurrent());

  absl::StatusOr<storage::ModelVersionRecord> current = scheduler.RefitProjectNow(*project);
  ASSERT_TRUE(current.ok()) << current.status();
  EXPECT_EQ(current->version, 1);
  auto jobs = server.storage->jobs->ListJobs(project_id);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u) << "the first job only";
  EXPECT_EQ(Sample(metrics, "verity_training_jobs_enqueued_total"), 1);
}

// training_scheduler.h: a replica that takes the fit lock first "serves any version stored
// meanwhile and fits only if that did not make the fit unnecessary"; a background pass
// (RefitDueProjectsNow without force) refits only what is still due (LiveProject::RefitDue).
// Replica A has never fit (every label is new: due); B fits version 1 over every stored label;
// then A holds one label more. Serving B's version leaves A one new label (1 < 50, and the
// staleness bound of 30 s starts again): not due, though not current either. No version 2.
TEST_F(TrainingSchedulerMetricsTest, APassDoesNotFitWhatAnotherReplicasVersionLeftNotDue) {
  const int64_t project_id = NewProject("p");
  Server a = Open();
  Server b = Open();
  TrainingScheduler fitter(*b.registry, *b.storage->versions, nullptr, InProcess());
  ASSERT_TRUE(fitter.RefitDueProjectsNow(/*force=*/true).ok());
  ASSERT_EQ((*b.registry->Get("p"))->model_version(), 1);

  std::shared_ptr<LiveProject> project = *a.registry->Get("p");
  const std::optional<int32_t> item = project->FindItem("i0");
  const std::optional<int32_t> annotator = project->FindAnnotator("w3");  // i0: w0, w1, w2.
  ASSERT_TRUE(item.has_value() && annotator.has_value());
  project->ApplyCommitted({{*item, "i0", *annotator, "w3", 1, 1000, true}});
  storage::FitLocks locks(a.storage->pool.get());
  TrainingScheduler::Options options = InProcess();
  options.fit_locks = &locks;
  TrainingScheduler scheduler(*a.registry, *a.storage->versions, nullptr, options);
  ASSERT_TRUE(project->RefitDue(absl::Now(), options.max_staleness));
  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  EXPECT_EQ(project->model_version(), 1);
  EXPECT_EQ(project->Counts().labels_since_version, 1);
  auto stored = a.storage->versions->ListModelVersions(project_id, 10);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->size(), 1u);
}

// training_scheduler.h: RefitDueProjectsNow "returns the first error (after trying all
// projects)". In worker mode a stored version that does not restore is that error, and the
// project, still due, gets its job all the same (the next version replaces the broken one).
TEST_F(TrainingSchedulerMetricsTest, AWorkerModePassReportsAVersionThatDoesNotRestore) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  storage::ModelVersionRecord broken;
  broken.project_id = project_id;
  broken.method = "ds";
  broken.parameters = "not a serialized model";
  ASSERT_TRUE(server.storage->versions->SaveModelVersion(broken).ok());
  MetricsRegistry metrics;
  std::unique_ptr<TrainingScheduler> scheduler = WorkerModeScheduler(server, metrics);
  const absl::Status pass = scheduler->RefitDueProjectsNow();
  EXPECT_EQ(pass.code(), absl::StatusCode::kInternal) << pass;
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 0);
  absl::StatusOr<std::vector<storage::TrainingJob>> jobs =
      server.storage->jobs->ListJobs(project_id);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
}

// training_scheduler.h: RefitDueProjectsNow refits "every project whose refit is due", on up
// to max_concurrent_fits threads: with three due projects and two slots, all three are fit.
TEST_F(TrainingSchedulerMetricsTest, APassFitsEveryDueProject) {
  NewProject("p");
  NewProject("q");
  NewProject("r");
  Server server = Open();
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, InProcess());
  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  for (const std::string name : {"p", "q", "r"}) {
    EXPECT_EQ((*server.registry->Get(name))->model_version(), 1) << name;
  }
}

// Sets `project`'s method to majority vote, as a settings change another replica stored and this
// one follows (the refresh_before_fit hook).
void FollowAMethodChangeToMajorityVote(LiveProject& project) {
  v1::ProjectSettings settings = project.settings();
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  project.SetSettings(settings);
}

// training_scheduler.h, refresh_before_fit: "Also called first by RefitProjectNow (TrainModel),
// before it decides that nothing changed". Version 1 (ds) is current; the refresh brings a
// method change, so TrainModel fits version 2 with majority vote instead of answering version 1.
TEST_F(TrainingSchedulerMetricsTest, TrainModelRefreshesTheSettingsBeforeDecidingNothingChanged) {
  NewProject("p");
  Server server = Open();
  TrainingScheduler::Options options = InProcess();
  bool refresh = false;
  options.refresh_before_fit = [&refresh](LiveProject& project) {
    if (refresh) FollowAMethodChangeToMajorityVote(project);
  };
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, options);
  std::shared_ptr<LiveProject> project = *server.registry->Get("p");
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  ASSERT_EQ(project->model_version(), 1);
  ASSERT_TRUE(project->FitIsCurrent());
  refresh = true;
  absl::StatusOr<storage::ModelVersionRecord> version = scheduler.RefitProjectNow(*project);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->version, 2);
  EXPECT_EQ(version->method, "mv");
}

// training_scheduler.h, refresh_before_fit: with fit_locks, "called under the project's fit
// lock, after serving the newest stored version and before deciding whether the fit is still
// due". A forced pass whose refresh brings a method change fits the new method.
TEST_F(TrainingSchedulerMetricsTest, AFitUnderTheFitLockUsesTheRefreshedSettings) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  storage::FitLocks locks(server.storage->pool.get());
  TrainingScheduler::Options options = InProcess();
  options.fit_locks = &locks;
  int refreshed = 0;
  options.refresh_before_fit = [&refreshed](LiveProject& project) {
    ++refreshed;
    FollowAMethodChangeToMajorityVote(project);
  };
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, options);
  ASSERT_TRUE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ(refreshed, 1);
  auto stored = server.storage->versions->ListModelVersions(project_id, 10);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ(stored->front().method, "mv");
}

// training_scheduler.h: RefitDueProjectsNow "returns the first error"; with workers, a job that
// cannot be enqueued (here the job table is missing) is that error.
TEST_F(TrainingSchedulerMetricsTest, AWorkerModePassReportsAJobThatCannotBeEnqueued) {
  NewProject("p");
  Server server = Open();
  MetricsRegistry metrics;
  std::unique_ptr<TrainingScheduler> scheduler = WorkerModeScheduler(server, metrics);
  ASSERT_TRUE(RenameTable("training_jobs", "training_jobs_hidden").ok());
  EXPECT_FALSE(scheduler->RefitDueProjectsNow(/*force=*/true).ok());
  EXPECT_EQ(Sample(metrics, "verity_training_jobs_enqueued_total"), 0);
}

// With workers, TrainModel on a current fit answers the served version's metadata; when that
// read fails for another reason than NOT_FOUND (here the versions table is missing), the error
// is the answer: no job is enqueued and nothing waits for train_wait.
TEST_F(TrainingSchedulerMetricsTest, WorkerModeTrainModelAnswersAFailedMetadataRead) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  TrainingScheduler fitter(*server.registry, *server.storage->versions, nullptr, InProcess());
  ASSERT_TRUE(fitter.RefitDueProjectsNow(/*force=*/true).ok());
  std::shared_ptr<LiveProject> project = *server.registry->Get("p");
  ASSERT_TRUE(project->FitIsCurrent());
  TrainingScheduler::Options options = InProcess();
  options.use_workers = true;
  options.train_wait = absl::Seconds(2);
  TrainingScheduler scheduler(*server.registry, *server.storage->versions,
                              server.storage->jobs.get(), options);
  ASSERT_TRUE(RenameTable("model_versions", "model_versions_hidden").ok());
  absl::StatusOr<storage::ModelVersionRecord> answer = scheduler.RefitProjectNow(*project);
  EXPECT_FALSE(answer.ok());
  EXPECT_NE(answer.status().code(), absl::StatusCode::kDeadlineExceeded) << answer.status();
  auto jobs = server.storage->jobs->ListJobs(project_id);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty()) << jobs->size() << " jobs";
}

// training_scheduler.h: `cancelled` is asked while RefitAndLog waits "and once more before the
// fit". Here nothing waits (no other fit, a free slot): TrainModel asks once before its wait
// (not cancelled yet), then once before the fit (cancelled): CANCELLED, and nothing is fit.
TEST_F(TrainingSchedulerMetricsTest, ATrainModelCancelledJustBeforeItsFitFitsNothing) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  TrainingScheduler scheduler(*server.registry, *server.storage->versions, nullptr, InProcess());
  std::shared_ptr<LiveProject> project = *server.registry->Get("p");
  int asked = 0;
  absl::StatusOr<storage::ModelVersionRecord> version =
      scheduler.RefitProjectNow(*project, [&asked] { return ++asked >= 2; });
  EXPECT_EQ(version.status().code(), absl::StatusCode::kCancelled) << version.status();
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(project->model_version(), 0);
  auto stored = server.storage->versions->ListModelVersions(project_id, 10);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->empty());
}

// training_worker.h: "after max_attempts claims the next Claim marks the job failed". A job
// whose only claim's worker died (its lease ran out) is failed by a worker with max_attempts 1,
// which then finds the queue empty instead of running the job a second time.
TEST_F(TrainingSchedulerMetricsTest, AWorkerFailsAnExpiredJobThatHasHadMaxAttemptsClaims) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  absl::StatusOr<storage::TrainingJob> job = server.storage->jobs->Enqueue(project_id);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::optional<storage::TrainingJob>> dead =
      server.storage->jobs->Claim("dead", absl::Milliseconds(10));
  ASSERT_TRUE(dead.ok() && dead->has_value()) << dead.status();
  absl::SleepFor(absl::Milliseconds(200));  // The dead worker's lease runs out.
  TrainingWorker::Options options;
  options.name = "w";
  options.max_attempts = 1;
  TrainingWorker worker(*server.storage, options);
  absl::StatusOr<bool> ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_FALSE(*ran);
  absl::StatusOr<storage::TrainingJob> after = server.storage->jobs->GetJob(job->job_id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->state, "failed");
  EXPECT_EQ(after->attempts, 1);
  EXPECT_EQ((*server.registry->Get("p"))->model_version(), 0);
}

// training_worker.h RunOnce: "Errors are those of the job table itself". The connection of the
// claim's COMMIT breaks (outcome unknown): RunOnce answers UNAVAILABLE, not "queue empty".
TEST_F(TrainingSchedulerMetricsTest, AWorkerAnswersAClaimThatFailsWithItsError) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  ASSERT_TRUE(server.storage->jobs->Enqueue(project_id).ok());
  server.storage->pool->SetAfterCommitHookForTesting(
      [](pqxx::connection&) { throw pqxx::broken_connection("injected: claim's ack lost"); });
  TrainingWorker::Options options;
  options.name = "w";
  TrainingWorker worker(*server.storage, options);
  absl::StatusOr<bool> ran = worker.RunOnce();
  server.storage->pool->SetAfterCommitHookForTesting(nullptr);
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kUnavailable) << ran.status();
}

// training_worker.h RunOnce: "a failed fit is recorded on the job and returns true", but errors
// "of the job table itself" are returned. After the claim every COMMIT loses its connection: the
// project cannot be read (the attempt fails) and recording that failure fails too, so RunOnce
// answers UNAVAILABLE rather than reporting the job as handled.
TEST_F(TrainingSchedulerMetricsTest, AWorkerAnswersAFailureItCouldNotRecordWithItsError) {
  const int64_t project_id = NewProject("p");
  Server server = Open();
  ASSERT_TRUE(server.storage->jobs->Enqueue(project_id).ok());
  std::atomic<int> commits{0};
  server.storage->pool->SetAfterCommitHookForTesting([&](pqxx::connection&) {
    if (commits.fetch_add(1) > 0) throw pqxx::broken_connection("injected: connection lost");
  });
  TrainingWorker::Options options;
  options.name = "w";
  TrainingWorker worker(*server.storage, options);
  absl::StatusOr<bool> ran = worker.RunOnce();
  server.storage->pool->SetAfterCommitHookForTesting(nullptr);
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kUnavailable) << ran.status();
  EXPECT_GE(commits.load(), 3) << "the claim, the project's read and the failure's record";
}

// training_worker.h: "A fit that fails ends the attempt (Fail: requeued, or failed after
// max_attempts)". A project whose stored settings name a truth method this release does not
// know loads (its labels are read) but cannot be fit: with max_attempts 1 the job is failed,
// with an error recorded, and no version is stored.
TEST_F(TrainingSchedulerMetricsTest, AJobWhoseRefitFailsIsFailedWithNoVersion) {
  const int64_t project_id = NewProject("p");
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(static_cast<v1::TruthMethod>(999));
  ASSERT_TRUE(pool()
                  .RunInTransaction("storing an unknown method",
                                    [&](pqxx::work& txn) {
                                      txn.exec_params(
                                          "UPDATE projects SET settings = decode($1, 'hex') "
                                          "WHERE project_id = $2",
                                          absl::BytesToHexString(settings.SerializeAsString()),
                                          project_id);
                                      return absl::OkStatus();
                                    })
                  .ok());
  Server server = Open();
  absl::StatusOr<storage::TrainingJob> job = server.storage->jobs->Enqueue(project_id);
  ASSERT_TRUE(job.ok()) << job.status();
  TrainingWorker::Options options;
  options.name = "w";
  options.max_attempts = 1;
  TrainingWorker worker(*server.storage, options);
  absl::StatusOr<bool> ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_TRUE(*ran);
  absl::StatusOr<storage::TrainingJob> after = server.storage->jobs->GetJob(job->job_id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->state, "failed");
  EXPECT_EQ(after->attempts, 1);
  EXPECT_FALSE(after->error.empty());
  EXPECT_FALSE(after->version.has_value());
}

// training_scheduler.h: "in worker mode the poll rests after a pass the same way"
// (busy·(1 − f)/f, at most max_staleness). A pass reads PostgreSQL, so it takes more than
// 60 µs; with f = 1e-6 the rest after it is the whole max_staleness (a minute). The first pass
// (one poll interval after the start) enqueues p's job; a worker then stores version 1, and no
// pass serves it within the next second. A pass run by hand serves it: it was there to serve.
TEST_F(TrainingSchedulerMetricsTest, WorkerModePollRestsAfterAPass) {
  NewProject("p");
  Server server = Open();
  MetricsRegistry metrics;
  TrainingScheduler::Options options;
  options.use_workers = true;
  options.poll_interval = absl::Milliseconds(20);
  options.max_busy_fraction = 1e-6;
  options.max_staleness = absl::Minutes(1);
  TrainingScheduler scheduler(*server.registry, *server.storage->versions,
                              server.storage->jobs.get(), options, &metrics);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (Sample(metrics, "verity_training_jobs_enqueued_total") < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(Sample(metrics, "verity_training_jobs_enqueued_total"), 1);
  TrainingWorker::Options worker_options;
  worker_options.name = "w";
  TrainingWorker worker(*server.storage, worker_options);
  absl::StatusOr<bool> ran = worker.RunOnce();
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_TRUE(*ran);
  LiveProject& project = **server.registry->Get("p");
  const absl::Time watch_until = absl::Now() + absl::Seconds(1);
  while (project.model_version() == 0 && absl::Now() < watch_until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(project.model_version(), 0) << "a pass ran before the rest was over";
  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  EXPECT_EQ(project.model_version(), 1);
}

}  // namespace
}  // namespace verity::server
