// The verity_worker binary as an operator runs it (README.md "Training workers",
// server/training/worker_main.cc): --once drains the queue and exits, a bad --postgres_url ends
// the worker at once with the reason, and each job's fit is warm-started from the project's
// latest version.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli.h"
#include "common/status_matchers.h"
#include "models/testing/dataset_path.h"
#include "storage/annotation_store.h"
#include "storage/model_version_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"
#include "storage/training_job_store.h"
#include "tests/replica_harness.h"
#include "tests/server_process.h"
#include "verity/v1/projects.pb.h"

namespace verity::tests {
namespace {

using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;

struct Exit {
  bool exited = false;  // false: still running at the deadline (then killed)
  int code = -1;
  std::string log;
};

// Starts verity_worker with `flags`, its stdout and stderr to `log`.
pid_t StartWorker(const std::vector<std::string>& flags, const std::string& log) {
  const std::string binary = RunfilePath("server/training/verity_worker");
  std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
  for (const std::string& f : flags) argv.push_back(const_cast<char*>(f.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `timeout` for the worker `pid` to exit (then SIGKILLs it) and reads its log.
Exit WaitForWorker(pid_t pid, const std::string& log, absl::Duration timeout) {
  Exit result;
  const absl::Time give_up = absl::Now() + timeout;
  int status = 0;
  bool reaped = false;
  while (!reaped && absl::Now() < give_up) {
    reaped = waitpid(pid, &status, WNOHANG) == pid;
    if (!reaped) absl::SleepFor(absl::Milliseconds(50));
  }
  if (!reaped) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  result.exited = reaped && WIFEXITED(status);
  result.code = result.exited ? WEXITSTATUS(status) : -1;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  result.log = text.str();
  return result;
}

// Runs verity_worker with `flags` (stdout and stderr to `log`) and waits up to `timeout` for it
// to exit.
Exit RunWorker(const std::vector<std::string>& flags, const std::string& log,
               absl::Duration timeout) {
  return WaitForWorker(StartWorker(flags, log), log, timeout);
}

class TrainingWorkerProcessTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    dir_ = MakeTempDir("verity-worker-process-test");
  }
  void TearDown() override {
    RemoveTree(dir_);
    PostgresTest::TearDown();
  }

  // A project with classes false,true (Dawid-Skene unless told).
  int64_t NewProject(const std::string& name,
                     v1::TruthMethod method = v1::TRUTH_METHOD_DAWID_SKENE) {
    storage::ProjectStore projects(&pool());
    storage::ProjectRecord p;
    p.name = name;
    p.classes = {"false", "true"};
    v1::ProjectSettings settings;
    settings.mutable_model()->set_method(method);
    p.settings = settings.SerializeAsString();
    auto created = projects.CreateProject(p);
    EXPECT_THAT(created, IsOk());
    return created->project_id;
  }

  // Commits labels [begin, end) of ../shared/datasets/bluebirds/labels.csv (4,212 labels, 39
  // annotators) to `project`.
  void AddBluebirds(int64_t project, size_t begin = 0, size_t end = 4212) {
    auto datasets = models::testing::FindDatasetsDirectory();
    ASSERT_TRUE(datasets.ok()) << datasets.status();
    std::ifstream in(*datasets + "/bluebirds/labels.csv");
    ASSERT_TRUE(in.good());
    std::string line;
    std::getline(in, line);  // header
    std::vector<storage::AnnotationWrite> writes;
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ',');
      ASSERT_EQ(f.size(), 3u) << line;
      writes.push_back({project, f[0], f[1], f[2] == "true" ? 1 : 0, std::nullopt});
    }
    ASSERT_EQ(writes.size(), 4212u);
    ASSERT_LE(begin, end);
    ASSERT_LE(end, writes.size());
    storage::AnnotationStore annotations(&pool());
    ASSERT_THAT(annotations.CommitAnnotations(std::vector<storage::AnnotationWrite>(
                    writes.begin() + begin, writes.begin() + end)),
                IsOk());
  }

  void AddLabel(int64_t project, const std::string& item, const std::string& annotator, int label) {
    storage::AnnotationStore annotations(&pool());
    ASSERT_THAT(annotations.CommitAnnotations(std::vector<storage::AnnotationWrite>{
                    {project, item, annotator, label, std::nullopt}}),
                IsOk());
  }

  Exit RunOnce(const std::string& name, std::vector<std::string> more_flags = {}) {
    std::vector<std::string> flags = {"--postgres_url=" + url(), "--name=" + name, "--device=cpu",
                                      "--once", "--poll_ms=100"};
    flags.insert(flags.end(), more_flags.begin(), more_flags.end());
    return RunWorker(flags, absl::StrCat(dir_, "/", name, ".log"), absl::Seconds(120));
  }

  std::string dir_;
};

// worker_main.cc --once: "Exit when the queue is empty". With nothing queued the worker exits
// 0 at once; with jobs queued it runs every one (one version each), then exits 0.
TEST_F(TrainingWorkerProcessTest, OnceRunsEveryQueuedJobThenExitsZero) {
  const Exit idle = RunOnce("idle");
  ASSERT_TRUE(idle.exited) << idle.log;
  EXPECT_EQ(idle.code, 0) << idle.log;

  storage::TrainingJobStore jobs(&pool());
  storage::ModelVersionStore versions(&pool());
  std::vector<int64_t> projects, job_ids;
  for (int p = 0; p < 3; ++p) {
    projects.push_back(NewProject(absl::StrCat("p", p)));
    for (int i = 0; i < 6; ++i) {
      for (int a = 0; a < 3; ++a)
        AddLabel(projects[p], absl::StrCat("i", i), absl::StrCat("w", a), i % 2);
    }
    auto job = jobs.Enqueue(projects[p]);
    ASSERT_THAT(job, IsOk());
    job_ids.push_back(job->job_id);
  }
  const Exit drained = RunOnce("drainer");
  ASSERT_TRUE(drained.exited) << drained.log;
  EXPECT_EQ(drained.code, 0) << drained.log;
  for (size_t p = 0; p < projects.size(); ++p) {
    auto job = jobs.GetJob(job_ids[p]);
    ASSERT_THAT(job, IsOk());
    EXPECT_EQ(job->state, "done") << drained.log;
    EXPECT_EQ(job->worker, "drainer");
    EXPECT_EQ(job->attempts, 1);
    auto stored = versions.ListModelVersions(projects[p], 10);
    ASSERT_THAT(stored, IsOk());
    ASSERT_EQ(stored->size(), 1u);
    EXPECT_EQ(job->version, (*stored)[0].version);
    EXPECT_EQ((*stored)[0].num_labels, 18);
  }
}

// A worker given a database it cannot use stops at once (it does not poll forever) with a
// nonzero status and an event=fatal line that says why: an unknown connection option is
// named, an unreachable server names the socket it tried.
TEST_F(TrainingWorkerProcessTest, ABadPostgresUrlEndsTheWorkerWithTheReason) {
  const Exit malformed = RunWorker({"--postgres_url=nosuchoption=1", "--device=cpu"},
                                   dir_ + "/malformed.log", absl::Seconds(60));
  ASSERT_TRUE(malformed.exited) << malformed.log;
  EXPECT_EQ(malformed.code, 1) << malformed.log;
  EXPECT_NE(malformed.log.find("event=fatal"), std::string::npos) << malformed.log;
  EXPECT_NE(malformed.log.find("nosuchoption"), std::string::npos) << malformed.log;

  const std::string no_server = dir_ + "/no-server";
  const Exit unreachable = RunWorker({"--postgres_url=host=" + no_server + " dbname=verity",
                                      "--device=cpu", "--db_timeout_seconds=5"},
                                     dir_ + "/unreachable.log", absl::Seconds(60));
  ASSERT_TRUE(unreachable.exited) << unreachable.log;
  EXPECT_EQ(unreachable.code, 1) << unreachable.log;
  EXPECT_NE(unreachable.log.find("event=fatal"), std::string::npos) << unreachable.log;
  EXPECT_NE(unreachable.log.find(no_server), std::string::npos) << unreachable.log;

  const Exit missing = RunWorker({"--device=cpu"}, dir_ + "/missing.log", absl::Seconds(60));
  ASSERT_TRUE(missing.exited) << missing.log;
  EXPECT_NE(missing.code, 0) << missing.log;
  EXPECT_NE(missing.log.find("--postgres_url is required"), std::string::npos) << missing.log;
}

// README.md: a worker "fits the project's method warm-started from its latest version". One
// more label on bluebirds: the worker's second version starts from its first and converges in
// fewer EM iterations than a fit from scratch of the very same labels (another project, whose
// first job the same worker runs).
TEST_F(TrainingWorkerProcessTest, AJobIsWarmStartedFromTheProjectsLatestVersion) {
  storage::TrainingJobStore jobs(&pool());
  storage::ModelVersionStore versions(&pool());
  const int64_t warm = NewProject("warm");
  ASSERT_NO_FATAL_FAILURE(AddBluebirds(warm));
  ASSERT_THAT(jobs.Enqueue(warm), IsOk());
  ASSERT_EQ(RunOnce("first").code, 0);

  ASSERT_NO_FATAL_FAILURE(AddLabel(warm, "11573", "newcomer", 0));
  const int64_t cold = NewProject("cold");
  ASSERT_NO_FATAL_FAILURE(AddBluebirds(cold));
  ASSERT_NO_FATAL_FAILURE(AddLabel(cold, "11573", "newcomer", 0));
  ASSERT_THAT(jobs.Enqueue(warm), IsOk());
  ASSERT_THAT(jobs.Enqueue(cold), IsOk());
  const Exit second = RunOnce("second");
  ASSERT_EQ(second.code, 0) << second.log;

  auto warm_versions = versions.ListModelVersions(warm, 10);
  auto cold_versions = versions.ListModelVersions(cold, 10);
  ASSERT_THAT(warm_versions, IsOk());
  ASSERT_THAT(cold_versions, IsOk());
  ASSERT_EQ(warm_versions->size(), 2u);
  ASSERT_EQ(cold_versions->size(), 1u);
  const storage::ModelVersionRecord& warm_fit = warm_versions->front();  // newest first
  const storage::ModelVersionRecord& cold_fit = cold_versions->front();
  ASSERT_EQ(warm_fit.version, 2);
  EXPECT_EQ(warm_fit.num_labels, 4213);
  EXPECT_EQ(cold_fit.num_labels, 4213);
  EXPECT_LT(warm_fit.iterations, cold_fit.iterations);
  // Both reach the same optimum of the same labels.
  EXPECT_NEAR(warm_fit.log_likelihood, cold_fit.log_likelihood,
              1e-3 * std::abs(cold_fit.log_likelihood));
}

// live_project.h Refit: a fit is warm-started only while the labels have grown less than
// kMaxWarmStartGrowth (2) times since the last fit from scratch — "not the last fit: chained
// warm starts must not creep past it; each version stores that fit's label count". Each job
// here is run by a fresh worker process, which knows the chain's base only from the stored
// version: 1,000 labels (from scratch), 1,900 (warm, base 1,000), 2,100 (>= 2 x 1,000: from
// scratch again, base 2,100), 4,000 (warm, base 2,100).
TEST_F(TrainingWorkerProcessTest, AWorkersWarmStartsDoNotCreepPastTwiceTheLastColdFit) {
  storage::TrainingJobStore jobs(&pool());
  storage::ModelVersionStore versions(&pool());
  const int64_t project = NewProject("chain");
  const std::vector<size_t> sizes = {1000, 1900, 2100, 4000};
  const std::vector<int64_t> expected_base = {1000, 1000, 2100, 2100};
  size_t committed = 0;
  for (size_t step = 0; step < sizes.size(); ++step) {
    ASSERT_NO_FATAL_FAILURE(AddBluebirds(project, committed, sizes[step]));
    committed = sizes[step];
    ASSERT_THAT(jobs.Enqueue(project), IsOk());
    const Exit run = RunOnce(absl::StrCat("w", step));
    ASSERT_EQ(run.code, 0) << run.log;
    auto latest = versions.ListModelVersions(project, 1);
    ASSERT_THAT(latest, IsOk());
    ASSERT_EQ(latest->size(), 1u);
    EXPECT_EQ(latest->front().version, static_cast<int32_t>(step) + 1);
    EXPECT_EQ(latest->front().num_labels, static_cast<int64_t>(sizes[step]));
    EXPECT_EQ(latest->front().scratch_num_labels, expected_base[step]) << "step " << step;
  }
}

// README.md: "a job whose lease expires on each of its `--max_attempts` claims ends `failed`,
// which frees the project for its next job"; worker_main.cc: --max_attempts counts "attempts
// that failed" too. A fit that always fails (common.proto: mmsr serves "projects of at most
// 5,000 annotators with labels"; here 5,001) under --max_attempts=2: two claims, then the job
// is failed with the fit's reason, the worker goes on (--once: exits 0 on the empty queue),
// nothing is stored, and the project's next job is a new one.
TEST_F(TrainingWorkerProcessTest, AJobWhoseFitFailsMaxAttemptsTimesEndsFailedWithTheReason) {
  storage::TrainingJobStore jobs(&pool());
  storage::ModelVersionStore versions(&pool());
  const int64_t project = NewProject("too-many-annotators", v1::TRUTH_METHOD_MMSR);
  std::vector<storage::AnnotationWrite> writes;
  for (int a = 0; a < 5001; ++a) {
    writes.push_back(
        {project, absl::StrCat("i", a % 50), absl::StrCat("w", a), a % 2, std::nullopt});
  }
  storage::AnnotationStore annotations(&pool());
  ASSERT_THAT(annotations.CommitAnnotations(writes), IsOk());
  auto job = jobs.Enqueue(project);
  ASSERT_THAT(job, IsOk());

  const Exit run = RunOnce("unlucky", {"--max_attempts=2"});
  ASSERT_TRUE(run.exited) << run.log;
  EXPECT_EQ(run.code, 0) << run.log;
  auto failed = jobs.GetJob(job->job_id);
  ASSERT_THAT(failed, IsOk());
  EXPECT_EQ(failed->state, "failed") << run.log;
  EXPECT_EQ(failed->attempts, 2);
  EXPECT_NE(failed->error.find("5001"), std::string::npos) << failed->error;
  EXPECT_NE(failed->error.find("5000"), std::string::npos) << failed->error;
  auto stored = versions.ListModelVersions(project, 10);
  ASSERT_THAT(stored, IsOk());
  EXPECT_TRUE(stored->empty());
  auto next = jobs.Enqueue(project);
  ASSERT_THAT(next, IsOk());
  EXPECT_NE(next->job_id, job->job_id);
  EXPECT_EQ(next->state, "queued");
}

struct CliResult {
  int code = -1;
  std::string out, err;
};

// The `verity` CLI's command `args` against `server`.
CliResult RunCliOn(const ServerProcess& server, std::vector<std::string> args) {
  args.push_back("--server=" + server.address());
  std::ostringstream out, err;
  CliResult r;
  r.code = client::RunCli(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// `verity model train` against a verity_server process with --trainer=workers (README.md
// "Training: in-process or workers"): "With no worker running, nothing trains: jobs wait in the
// table and TrainModel calls time out". Once a worker has stored the job's version, model train
// answers that version (nothing changed since its fit: models.proto "returns that version and
// writes nothing") without another job, and model status serves it.
TEST_F(TrainingWorkerProcessTest, ModelTrainWithWorkersTimesOutWithoutOneAndServesItsVersion) {
  ASSERT_EQ(mkdir((dir_ + "/server").c_str(), 0755), 0);
  ServerProcess server(RunfilePath("server/verity_server"), dir_ + "/server",
                       {"--postgres_url=" + url(), "--metrics_port=0", "--trainer=workers"});
  ASSERT_THAT(server.Start(), IsOk());
  auto cli = [&](std::vector<std::string> args) { return RunCliOn(server, std::move(args)); };
  ASSERT_EQ(cli({"project", "create", "birds", "--classes=false,true"}).code, 0);
  ASSERT_EQ(cli({"project", "settings", "birds", "--method=ds"}).code, 0);
  auto datasets = models::testing::FindDatasetsDirectory();
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  const CliResult submitted =
      cli({"submit", "--project=birds", "--csv=" + *datasets + "/bluebirds/labels.csv"});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  ASSERT_NE(submitted.out.find("accepted=4212"), std::string::npos) << submitted.out;
  storage::ProjectStore projects(&pool());
  auto record = projects.GetProjectByName("birds");
  ASSERT_THAT(record, IsOk());
  const int64_t project_id = record->project_id;

  const CliResult waited = cli({"model", "train", "--project=birds", "--timeout=2"});
  EXPECT_NE(waited.code, 0) << waited.out;
  EXPECT_NE(waited.err.find("DEADLINE_EXCEEDED"), std::string::npos) << waited.err;
  storage::TrainingJobStore jobs(&pool());
  auto open = jobs.ListJobs(project_id);
  ASSERT_THAT(open, IsOk());
  ASSERT_EQ(open->size(), 1u);
  EXPECT_EQ((*open)[0].state, "queued");

  const Exit worker = RunOnce("w");
  ASSERT_EQ(worker.code, 0) << worker.log;
  const CliResult trained = cli({"model", "train", "--project=birds", "--output=json"});
  ASSERT_EQ(trained.code, 0) << trained.err;
  EXPECT_NE(trained.out.find("\"version\":1,"), std::string::npos) << trained.out;
  EXPECT_NE(trained.out.find("\"method\":\"ds\""), std::string::npos) << trained.out;
  EXPECT_NE(trained.out.find("\"num_labels\":4212"), std::string::npos) << trained.out;
  auto all = jobs.ListJobs(project_id);
  ASSERT_THAT(all, IsOk());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].state, "done");
  EXPECT_EQ((*all)[0].version, 1);
  const CliResult status = cli({"model", "status", "--project=birds", "--output=json"});
  ASSERT_EQ(status.code, 0) << status.err;
  EXPECT_NE(status.out.find("\"labels_since_version\":0"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"version\":1,"), std::string::npos) << status.out;
  EXPECT_THAT(server.Stop(), IsOk());
}

// worker_main.cc: "SIGINT/SIGTERM: finish the job in progress, then exit." A worker sent SIGTERM
// while it fits a lia job (seconds on a CPU) stores that job's version, claims no further job
// (a Dawid-Skene job queued behind it stays queued), and exits 0.
TEST_F(TrainingWorkerProcessTest, SigtermFinishesTheJobInProgressThenExits) {
  storage::TrainingJobStore jobs(&pool());
  storage::ModelVersionStore versions(&pool());
  const int64_t slow = NewProject("slow", v1::TRUTH_METHOD_LIA);
  ASSERT_NO_FATAL_FAILURE(AddBluebirds(slow));
  const int64_t next = NewProject("next");
  ASSERT_NO_FATAL_FAILURE(AddBluebirds(next, 0, 100));
  auto slow_job = jobs.Enqueue(slow);
  ASSERT_THAT(slow_job, IsOk());
  auto next_job = jobs.Enqueue(next);
  ASSERT_THAT(next_job, IsOk());

  const std::string log = dir_ + "/polite.log";
  const pid_t pid = StartWorker({"--postgres_url=" + url(), "--name=polite", "--device=cpu",
                                 "--poll_ms=100", "--lease_seconds=30"},
                                log);
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (absl::Now() < give_up && jobs.GetJob(slow_job->job_id)->worker != "polite") {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(jobs.GetJob(slow_job->job_id)->state, "running");
  // Its version is not stored yet (lia fits for seconds), so the signal arrives mid-job.
  ASSERT_TRUE(versions.ListModelVersions(slow, 1)->empty());
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const Exit stopped = WaitForWorker(pid, log, absl::Seconds(120));
  ASSERT_TRUE(stopped.exited) << stopped.log;
  EXPECT_EQ(stopped.code, 0) << stopped.log;

  auto done = jobs.GetJob(slow_job->job_id);
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->state, "done") << stopped.log;
  EXPECT_EQ(done->worker, "polite");
  auto stored = versions.ListModelVersions(slow, 10);
  ASSERT_THAT(stored, IsOk());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ(stored->front().method, "lia");
  EXPECT_EQ(done->version, stored->front().version);
  EXPECT_EQ(jobs.GetJob(next_job->job_id)->state, "queued") << stopped.log;
  EXPECT_TRUE(versions.ListModelVersions(next, 1)->empty());
}

// README.md, --trainer=workers: "the server fits nothing itself. It enqueues training jobs in
// the database's job table and serves the model versions that verity_worker processes store".
// With background refits on and no TrainModel call: labels submitted through the CLI lead the
// server to enqueue one job by itself, fitting nothing; a worker stores its version; the server
// then serves it (model status: version 1 over every label, none since).
TEST_F(TrainingWorkerProcessTest, LabelsLeadToAJobAndTheServerServesTheWorkersVersion) {
  ASSERT_EQ(mkdir((dir_ + "/server").c_str(), 0755), 0);
  ServerProcess server(RunfilePath("server/verity_server"), dir_ + "/server",
                       {"--postgres_url=" + url(), "--metrics_port=0", "--trainer=workers",
                        "--background_refit=true"});
  ASSERT_THAT(server.Start(), IsOk());
  auto cli = [&](std::vector<std::string> args) { return RunCliOn(server, std::move(args)); };
  ASSERT_EQ(cli({"project", "create", "birds", "--classes=false,true"}).code, 0);
  ASSERT_EQ(cli({"project", "settings", "birds", "--method=ds"}).code, 0);
  auto datasets = models::testing::FindDatasetsDirectory();
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  ASSERT_EQ(cli({"submit", "--project=birds", "--csv=" + *datasets + "/bluebirds/labels.csv"}).code,
            0);
  storage::ProjectStore projects(&pool());
  auto record = projects.GetProjectByName("birds");
  ASSERT_THAT(record, IsOk());
  storage::TrainingJobStore jobs(&pool());
  storage::ModelVersionStore versions(&pool());
  absl::Time give_up = absl::Now() + absl::Seconds(90);
  while (absl::Now() < give_up && jobs.ListJobs(record->project_id)->empty()) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  auto enqueued = jobs.ListJobs(record->project_id);
  ASSERT_THAT(enqueued, IsOk());
  ASSERT_EQ(enqueued->size(), 1u) << "the server enqueued no job";
  EXPECT_EQ((*enqueued)[0].state, "queued");
  EXPECT_TRUE(versions.ListModelVersions(record->project_id, 1)->empty());  // fitted nothing

  const Exit worker = RunOnce("w");
  ASSERT_EQ(worker.code, 0) << worker.log;
  ASSERT_EQ(jobs.GetJob((*enqueued)[0].job_id)->state, "done") << worker.log;
  CliResult status;
  give_up = absl::Now() + absl::Seconds(90);
  while (absl::Now() < give_up) {
    status = cli({"model", "status", "--project=birds", "--output=json"});
    if (status.out.find("\"labels_since_version\":0") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_NE(status.out.find("\"labels_since_version\":0"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"num_labels\":4212"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"version\":1,"), std::string::npos) << status.out;
  EXPECT_EQ(jobs.ListJobs(record->project_id)->size(), 1u);  // nothing new: no second job
  EXPECT_THAT(server.Stop(), IsOk());
}

// A worker started with a --max_attempts it can never claim with (storage/training_job_store.h:
// Claim refuses max_attempts below 1 with INVALID_ARGUMENT) must stop at once with an
// event=fatal line naming the flag, as a bad --device or --postgres_url does, and certainly
// under --once ("Exit when the queue is empty"). Retrying a refusal that no retry can change
// leaves a worker that looks alive and never trains.
TEST_F(TrainingWorkerProcessTest, AMaxAttemptsBelowOneEndsTheWorkerWithTheReason) {
  const Exit run = RunWorker({"--postgres_url=" + url(), "--name=misconfigured", "--device=cpu",
                              "--once", "--max_attempts=0"},
                             dir_ + "/misconfigured.log", absl::Seconds(20));
  ASSERT_TRUE(run.exited) << "still running after 20 s:\n" << run.log;
  EXPECT_NE(run.code, 0) << run.log;
  EXPECT_NE(run.log.find("event=fatal"), std::string::npos) << run.log;
  EXPECT_NE(run.log.find("max_attempts"), std::string::npos) << run.log;
}

// README.md, training workers: --max_attempts, --lease_seconds, --poll_ms and
// --db_timeout_seconds below 1 are refused at start, naming the flag (the edges: 0, and -1).
TEST_F(TrainingWorkerProcessTest, CountAndTimeFlagsBelowOneAreRefusedNamingTheFlag) {
  for (const std::string flag : {"--lease_seconds=0", "--poll_ms=0", "--db_timeout_seconds=0",
                                 "--max_attempts=-1"}) {
    const Exit run = RunWorker({"--postgres_url=" + url(), "--device=cpu", "--once", flag},
                               dir_ + "/refused.log", absl::Seconds(20));
    ASSERT_TRUE(run.exited) << flag << " still running after 20 s:\n" << run.log;
    EXPECT_NE(run.code, 0) << run.log;
    const std::string name = flag.substr(0, flag.find('='));
    EXPECT_NE(run.log.find("event=fatal error=\"" + name + " must be at least 1"),
              std::string::npos)
        << run.log;
  }
}

}  // namespace
}  // namespace verity::tests
