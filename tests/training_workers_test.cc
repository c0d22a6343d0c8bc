// Two verity_worker processes against one real PostgreSQL: every training job is done exactly
// once (one model version per job), including a job whose first worker is SIGKILLed mid-fit —
// its lease expires and another worker runs it again.
#include <signal.h>

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "storage/annotation_store.h"
#include "storage/model_version_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"
#include "storage/training_job_store.h"
#include "server/observability/metrics.h"
#include "server/state/project_registry.h"
#include "server/state/storage_handles.h"
#include "server/training/training_scheduler.h"
#include "server/training/training_worker.h"
#include "tests/replica_harness.h"
#include "tests/server_process.h"
#include "verity/v1/projects.pb.h"

namespace verity::tests {
namespace {

using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;

// While alive, holds an EXCLUSIVE lock on model_versions (plain reads still pass): a worker
// can claim and fit a job but cannot store its version, so the test can kill it mid-job
// however fast the hardware fits, with no sleep that assumes a fit is still running.
class ModelVersionsLocked {
 public:
  explicit ModelVersionsLocked(const std::string& url) : connection_(url), txn_(connection_) {
    txn_.exec0("LOCK TABLE model_versions IN EXCLUSIVE MODE");
  }

 private:
  pqxx::connection connection_;
  pqxx::work txn_;  // Aborted, and the lock released, on destruction.
};

// The server side with --trainer=workers over the test database: its storage, every project
// loaded, and a scheduler that enqueues jobs instead of fitting (no background thread).
struct WorkerModeServer {
  static absl::StatusOr<std::unique_ptr<WorkerModeServer>> Open(const std::string& url) {
    auto storage = server::StorageHandles::Open(url, 2);
    if (!storage.ok()) return storage.status();
    auto opened = std::make_unique<WorkerModeServer>(std::move(*storage));
    if (absl::Status s = opened->registry.LoadAll(); !s.ok()) return s;
    return opened;
  }
  static server::TrainingScheduler::Options Options() {
    server::TrainingScheduler::Options options;
    options.run_in_background = false;
    options.use_workers = true;
    return options;
  }
  explicit WorkerModeServer(std::unique_ptr<server::StorageHandles> handles)
      : storage(std::move(handles)),
        registry(*storage),
        scheduler(registry, *storage->versions, storage->jobs.get(), Options()) {}

  std::unique_ptr<server::StorageHandles> storage;
  server::ProjectRegistry registry;
  server::TrainingScheduler scheduler;
};

class TrainingWorkersTest : public PostgresTest {
 protected:
  // A project with `method`, 60 items x 5 labels from 8 annotators.
  int64_t NewProject(const std::string& name, v1::TruthMethod method) {
    storage::ProjectStore projects(&pool());
    storage::ProjectRecord p;
    p.name = name;
    p.classes = {"a", "b"};
    v1::ProjectSettings settings;
    settings.mutable_model()->set_method(method);
    p.settings = settings.SerializeAsString();
    auto created = projects.CreateProject(p);
    EXPECT_THAT(created, IsOk());
    std::vector<storage::AnnotationWrite> writes;
    for (int i = 0; i < 60; ++i) {
      for (int r = 0; r < 5; ++r) {
        const int annotator = (i + r * 3) % 8;
        const int truth = i % 2;
        writes.push_back({created->project_id, absl::StrCat("i", i), absl::StrCat("w", annotator),
                          annotator < 6 ? truth : 1 - truth, std::nullopt});
      }
    }
    storage::AnnotationStore annotations(&pool());
    EXPECT_THAT(annotations.CommitAnnotations(writes), IsOk());
    return created->project_id;
  }
};

TEST_F(TrainingWorkersTest, EveryJobIsDoneExactlyOnceEvenWhenAWorkerIsKilledMidJob) {
  const std::string dir = MakeTempDir("verity-workers-test");
  storage::TrainingJobStore jobs(&pool());
  storage::ModelVersionStore versions(&pool());
  // The first project's job is slow (lia, several seconds on a CPU), so its worker can be
  // killed while it fits; the others are Dawid-Skene.
  std::vector<int64_t> projects = {NewProject("slow", v1::TRUTH_METHOD_LIA)};
  for (int p = 0; p < 5; ++p) projects.push_back(NewProject(absl::StrCat("p", p), v1::TRUTH_METHOD_DAWID_SKENE));
  std::vector<int64_t> job_ids;
  for (int64_t project : projects) {
    auto job = jobs.Enqueue(project);
    ASSERT_THAT(job, IsOk());
    job_ids.push_back(job->job_id);
  }

  {
    ModelVersionsLocked no_version_stored(url());
    WorkerProcess doomed(url(), "doomed", dir + "/doomed.log", /*lease_seconds=*/2);
    // Wait until it runs the slow job, then kill it without warning.
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up) {
      auto job = jobs.GetJob(job_ids[0]);
      ASSERT_THAT(job, IsOk());
      if (job->state == "running" && job->worker == "doomed") break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_EQ(jobs.GetJob(job_ids[0])->worker, "doomed");
    doomed.Signal(SIGKILL);
  }
  ASSERT_EQ(jobs.GetJob(job_ids[0])->state, "running");  // nothing was stored for it

  WorkerProcess a(url(), "a", dir + "/a.log", /*lease_seconds=*/2);
  WorkerProcess b(url(), "b", dir + "/b.log", /*lease_seconds=*/2);
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  bool all_done = false;
  while (!all_done && absl::Now() < give_up) {
    all_done = true;
    for (int64_t id : job_ids) all_done &= jobs.GetJob(id)->state == "done";
    if (!all_done) absl::SleepFor(absl::Milliseconds(100));
  }
  a.Signal(SIGTERM);
  b.Signal(SIGTERM);
  ASSERT_TRUE(all_done) << "logs in " << dir;

  std::map<std::string, int> done_by;
  for (size_t p = 0; p < projects.size(); ++p) {
    auto job = jobs.GetJob(job_ids[p]);
    ASSERT_THAT(job, IsOk());
    ++done_by[job->worker];
    // Exactly one version per job, and it is the job's.
    auto stored = versions.ListModelVersions(projects[p], 10);
    ASSERT_THAT(stored, IsOk());
    ASSERT_EQ(stored->size(), 1u) << "project " << p;
    EXPECT_EQ(job->version, (*stored)[0].version);
    EXPECT_EQ((*stored)[0].num_labels, 300);
    EXPECT_EQ((*stored)[0].method, p == 0 ? "lia" : "ds");
  }
  EXPECT_EQ(jobs.GetJob(job_ids[0])->attempts, 2);  // the killed attempt, then the retry
  EXPECT_EQ(done_by.count("doomed"), 0u);
  EXPECT_EQ(done_by["a"] + done_by["b"], 6);
  RemoveTree(dir);
}

// A job whose worker is killed mid-job on every one of its max_attempts (3, verity_worker's
// default) claims ends failed with the reason, and the project's next job runs.
TEST_F(TrainingWorkersTest, AJobWhoseWorkersAreAllKilledEndsFailedAndTheNextJobRuns) {
  const std::string dir = MakeTempDir("verity-workers-test");
  storage::TrainingJobStore jobs(&pool());
  storage::ModelVersionStore versions(&pool());
  const int64_t project = NewProject("slow", v1::TRUTH_METHOD_LIA);  // seconds per fit
  auto job = jobs.Enqueue(project);
  ASSERT_THAT(job, IsOk());

  for (int attempt = 1; attempt <= 3; ++attempt) {
    const std::string name = absl::StrCat("doomed", attempt);
    ModelVersionsLocked no_version_stored(url());
    WorkerProcess doomed(url(), name, absl::StrCat(dir, "/", name, ".log"), /*lease_seconds=*/2);
    // It claims the job once the previous lease (2 s) has expired; kill it mid-fit.
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up && jobs.GetJob(job->job_id)->worker != name) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_EQ(jobs.GetJob(job->job_id)->worker, name) << "logs in " << dir;
    doomed.Signal(SIGKILL);
    ASSERT_EQ(jobs.GetJob(job->job_id)->state, "running");
    EXPECT_EQ(jobs.GetJob(job->job_id)->attempts, attempt);
  }

  WorkerProcess survivor(url(), "survivor", dir + "/survivor.log", /*lease_seconds=*/2);
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (absl::Now() < give_up && jobs.GetJob(job->job_id)->state == "running") {
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto failed = jobs.GetJob(job->job_id);
  ASSERT_THAT(failed, IsOk());
  EXPECT_EQ(failed->state, "failed") << "logs in " << dir;
  EXPECT_EQ(failed->attempts, 3);
  EXPECT_EQ(failed->error, "attempt 3 of 3: worker doomed3 lost its lease (it died or hung)");

  // The project is free again: its next job is a new one, and the surviving worker runs it.
  auto next = jobs.Enqueue(project);
  ASSERT_THAT(next, IsOk());
  ASSERT_NE(next->job_id, job->job_id);
  while (absl::Now() < give_up + absl::Seconds(60) && jobs.GetJob(next->job_id)->state != "done") {
    absl::SleepFor(absl::Milliseconds(100));
  }
  auto done = jobs.GetJob(next->job_id);
  ASSERT_THAT(done, IsOk());
  ASSERT_EQ(done->state, "done") << "logs in " << dir;
  EXPECT_EQ(done->worker, "survivor");
  EXPECT_EQ(done->attempts, 1);
  auto stored = versions.ListModelVersions(project, 10);
  ASSERT_THAT(stored, IsOk());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ(done->version, (*stored)[0].version);
  survivor.Signal(SIGTERM);
  RemoveTree(dir);
}

// The server side with --trainer=workers: the scheduler enqueues a job instead of fitting, a
// worker (in-process here) stores the version, and the scheduler's next pass serves it; a
// version never goes backwards.
TEST_F(TrainingWorkersTest, TheServerEnqueuesJobsAndServesTheWorkersVersions) {
  const int64_t project_id = NewProject("served", v1::TRUTH_METHOD_DAWID_SKENE);
  auto server = WorkerModeServer::Open(url());
  ASSERT_THAT(server, IsOk());
  auto& storage = (*server)->storage;
  server::ProjectRegistry& registry = (*server)->registry;
  server::TrainingScheduler& scheduler = (*server)->scheduler;
  auto project = registry.Get("served");
  ASSERT_THAT(project, IsOk());

  ASSERT_THAT(scheduler.RefitDueProjectsNow(/*force=*/true), IsOk());
  EXPECT_EQ((*project)->model_version(), 0);  // nothing fitted in the server
  auto open = storage->jobs->ListJobs(project_id);
  ASSERT_THAT(open, IsOk());
  ASSERT_EQ(open->size(), 1u);
  EXPECT_EQ((*open)[0].state, "queued");

  server::TrainingWorker::Options worker_options;
  worker_options.name = "in-process";
  server::TrainingWorker worker(*storage, worker_options);
  EXPECT_THAT(worker.RunOnce(), ::verity::testing::IsOkAndHolds(true));
  EXPECT_THAT(worker.RunOnce(), ::verity::testing::IsOkAndHolds(false));  // queue empty

  ASSERT_THAT(scheduler.RefitDueProjectsNow(), IsOk());
  EXPECT_EQ((*project)->model_version(), 1);
  EXPECT_EQ((*project)->snapshot()->model_version, 1);
  // An older version is never served over a newer one.
  storage::ModelVersionRecord old;
  old.version = 1;
  old.method = "ds";
  EXPECT_THAT((*project)->AdoptVersion(old), ::verity::testing::IsOkAndHolds(false));
  // No new labels: no new job.
  ASSERT_THAT(scheduler.RefitDueProjectsNow(), IsOk());
  EXPECT_EQ(storage->jobs->ListJobs(project_id)->size(), 1u);
}

// A label revised after a worker copied the labels, and before its version is adopted, leaves
// the count of labels unchanged: the adopted version must still count it as a change, so that
// the project is not "current" and TrainModel does not return that version as if it had seen it.
TEST_F(TrainingWorkersTest, ARevisionTheWorkersVersionDidNotSeeStillCountsAsAChange) {
  const int64_t project_id = NewProject("revised", v1::TRUTH_METHOD_DAWID_SKENE);
  auto server = WorkerModeServer::Open(url());
  ASSERT_THAT(server, IsOk());
  auto& storage = (*server)->storage;
  server::ProjectRegistry& registry = (*server)->registry;
  server::TrainingScheduler& scheduler = (*server)->scheduler;
  auto project = registry.Get("revised");
  ASSERT_THAT(project, IsOk());
  ASSERT_THAT(scheduler.RefitDueProjectsNow(/*force=*/true), IsOk());
  server::TrainingWorker::Options worker_options;
  worker_options.name = "in-process";
  server::TrainingWorker worker(*storage, worker_options);
  ASSERT_THAT(worker.RunOnce(), ::verity::testing::IsOkAndHolds(true));  // version 1 stored

  // Annotator w0 revises its label of i0 (NewProject: w0 labels i0 with class 0).
  storage::AnnotationStore annotations(&pool());
  auto written = annotations.CommitAnnotations(
      std::vector<storage::AnnotationWrite>{{project_id, "i0", "w0", 1, std::nullopt}});
  ASSERT_THAT(written, IsOk());
  ASSERT_EQ((*written)[0].outcome, storage::WriteOutcome::kRevised);
  const auto item = (*project)->FindItem("i0");
  const auto annotator = (*project)->FindAnnotator("w0");
  ASSERT_TRUE(item.has_value() && annotator.has_value());
  const server::CommittedLabel revision{*item, "i0", *annotator, "w0", 1, (*written)[0].seq, true};
  (*project)->ApplyCommitted({&revision, 1});
  const int64_t labels = (*project)->Counts().num_labels;

  ASSERT_THAT(scheduler.RefitDueProjectsNow(), IsOk());  // adopts version 1
  ASSERT_EQ((*project)->model_version(), 1);
  EXPECT_EQ((*project)->Counts().num_labels, labels);
  EXPECT_GE((*project)->Counts().labels_since_version, 1);
  EXPECT_FALSE((*project)->FitIsCurrent());
}

// A stored version that does not restore (here: parameters of another method's format) must
// not keep the project from getting a new job: the pass reports the error and still enqueues.
TEST_F(TrainingWorkersTest, AVersionThatDoesNotRestoreStillLetsTheProjectBeRefit) {
  const int64_t project_id = NewProject("unrestorable", v1::TRUTH_METHOD_DAWID_SKENE);
  auto storage = server::StorageHandles::Open(url(), 2);
  ASSERT_THAT(storage, IsOk());
  storage::ModelVersionRecord bad;
  bad.project_id = project_id;
  bad.method = "ds";
  bad.parameters = "not a model";
  bad.watermark = 1;
  bad.num_labels = 1;
  ASSERT_THAT((*storage)->versions->SaveModelVersion(bad, storage::ModelVersionOutputs{}), IsOk());
  server::ProjectRegistry registry(**storage);
  ASSERT_THAT(registry.LoadAll(), IsOk());
  server::TrainingScheduler::Options options;
  options.run_in_background = false;
  options.use_workers = true;
  server::TrainingScheduler scheduler(registry, *(*storage)->versions, (*storage)->jobs.get(), options);
  EXPECT_FALSE(scheduler.RefitDueProjectsNow(/*force=*/true).ok());  // the bad version, reported
  auto jobs = (*storage)->jobs->ListJobs(project_id);
  ASSERT_THAT(jobs, IsOk());
  EXPECT_EQ(jobs->size(), 1u);
}

// Issue 19: in worker mode a pass polls the newest version's number and reads a version's
// parameters once: not on every pass, and not again after they failed to restore. Counted by
// verity_model_version_downloads_total.
TEST_F(TrainingWorkersTest, StoredParametersAreReadOncePerVersion) {
  const int64_t project_id = NewProject("read-once", v1::TRUTH_METHOD_DAWID_SKENE);
  auto storage = server::StorageHandles::Open(url(), 2);
  ASSERT_THAT(storage, IsOk());
  server::ProjectRegistry registry(**storage);
  ASSERT_THAT(registry.LoadAll(), IsOk());
  server::MetricsRegistry metrics;
  server::TrainingScheduler::Options options;
  options.run_in_background = false;
  options.use_workers = true;
  server::TrainingScheduler scheduler(registry, *(*storage)->versions, (*storage)->jobs.get(),
                                      options, &metrics);
  auto downloads = [&] {
    const std::string text = metrics.RenderText();
    const std::string name = "\nverity_model_version_downloads_total ";
    const size_t at = text.find(name);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size()));
  };
  // No version yet: nothing to read.
  ASSERT_THAT(scheduler.RefitDueProjectsNow(), IsOk());
  EXPECT_EQ(downloads(), 0);

  // A worker's version (fitted here in-process, stored as a worker stores it): read once,
  // served, and not read again by the passes after.
  {
    auto worker_storage = server::StorageHandles::Open(url(), 1);
    ASSERT_THAT(worker_storage, IsOk());
    server::ProjectRegistry worker_registry(**worker_storage);
    ASSERT_THAT(worker_registry.LoadAll(), IsOk());
    server::TrainingScheduler::Options in_process;
    in_process.run_in_background = false;
    server::TrainingScheduler fitter(worker_registry, *(*worker_storage)->versions, nullptr,
                                     in_process);
    ASSERT_THAT(fitter.RefitDueProjectsNow(/*force=*/true), IsOk());
  }
  for (int pass = 0; pass < 4; ++pass) ASSERT_THAT(scheduler.RefitDueProjectsNow(), IsOk());
  EXPECT_EQ((*registry.Get("read-once"))->model_version(), 1);
  EXPECT_EQ(downloads(), 1);

  // A version that does not restore: read and reported once, then skipped until a newer one.
  storage::ModelVersionRecord bad;
  bad.project_id = project_id;
  bad.method = "ds";
  bad.parameters = "not a model";
  bad.watermark = 1;
  bad.num_labels = 1;
  ASSERT_THAT((*storage)->versions->SaveModelVersion(bad, storage::ModelVersionOutputs{}), IsOk());
  EXPECT_FALSE(scheduler.RefitDueProjectsNow().ok());
  for (int pass = 0; pass < 3; ++pass) scheduler.RefitDueProjectsNow().IgnoreError();
  EXPECT_EQ(downloads(), 2);
  EXPECT_EQ((*registry.Get("read-once"))->model_version(), 1);
}

}  // namespace
}  // namespace verity::tests
