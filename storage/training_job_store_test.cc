#include "storage/training_job_store.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_matchers.h"
#include "storage/model_version_store.h"
#include "storage/project_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::storage {
namespace {

using ::testing::IsEmpty;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

class TrainingJobStoreTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    jobs_ = std::make_unique<TrainingJobStore>(&pool());
    versions_ = std::make_unique<ModelVersionStore>(&pool());
  }

  int64_t NewProject(const std::string& name) {
    ProjectStore projects(&pool());
    ProjectRecord p;
    p.name = name;
    p.classes = {"a", "b"};
    auto created = projects.CreateProject(p);
    EXPECT_THAT(created, IsOk());
    return created->project_id;
  }

  // Moves job `job_id`'s lease expiry 30 minutes earlier (as if that much time had passed), then
  // expects the job still running and `worker`'s: another worker's Claim gets nothing.
  void ExpectStillHeldHalfAnHourLater(int64_t project_id, int64_t job_id,
                                      const std::string& worker) {
    ASSERT_THAT(pool().RunInTransaction("ageing a lease",
                                        [&](pqxx::work& txn) {
                                          txn.exec_params(
                                              "UPDATE training_jobs SET lease_expires_at = "
                                              "lease_expires_at - interval '30 minutes' "
                                              "WHERE job_id = $1",
                                              job_id);
                                          return absl::OkStatus();
                                        }),
                IsOk());
    EXPECT_THAT(jobs_->HasRunningJob(project_id), ::verity::testing::IsOkAndHolds(true));
    auto none = jobs_->Claim("another worker", absl::Minutes(1));
    ASSERT_THAT(none, IsOk());
    EXPECT_FALSE(none->has_value());
    EXPECT_EQ(jobs_->GetJob(job_id)->worker, worker);
  }

  ModelVersionRecord Version(int64_t project_id, int64_t job_id, const std::string& worker) {
    ModelVersionRecord v;
    v.project_id = project_id;
    v.method = "ds";
    v.completes_job = ModelVersionRecord::JobOwnership{job_id, worker};
    return v;
  }

  // Moves job `job_id`'s lease expiry `by` earlier, as if that much time had passed.
  void AgeLease(int64_t job_id, absl::Duration by) {
    ASSERT_THAT(pool().RunInTransaction("ageing a lease",
                                        [&](pqxx::work& txn) {
                                          txn.exec_params(
                                              "UPDATE training_jobs SET lease_expires_at = "
                                              "lease_expires_at - make_interval(secs => $2) "
                                              "WHERE job_id = $1",
                                              job_id, absl::ToDoubleSeconds(by));
                                          return absl::OkStatus();
                                        }),
                IsOk());
  }

  // Ends `job_id`'s lease an hour ago, as if its worker had died: deterministic, where a
  // short lease and a sleep would race the clock.
  void ExpireLease(int64_t job_id) {
    ASSERT_THAT(pool().RunInTransaction("expiring a lease",
                                        [&](pqxx::work& txn) {
                                          txn.exec_params(
                                              "UPDATE training_jobs SET lease_expires_at = "
                                              "now() - interval '1 hour' WHERE job_id = $1",
                                              job_id);
                                          return absl::OkStatus();
                                        }),
                IsOk());
  }

  std::unique_ptr<TrainingJobStore> jobs_;
  std::unique_ptr<ModelVersionStore> versions_;
};

TEST_F(TrainingJobStoreTest, OneOpenJobPerProjectAndClaimsInOrder) {
  const int64_t p1 = NewProject("p1"), p2 = NewProject("p2");
  auto first = jobs_->Enqueue(p1);
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->state, "queued");
  EXPECT_TRUE(first->created);
  auto again = jobs_->Enqueue(p1);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->job_id, first->job_id);  // still open: the same job
  EXPECT_FALSE(again->created);
  ASSERT_THAT(jobs_->Enqueue(p2), IsOk());
  EXPECT_THAT(jobs_->Enqueue(999999).status(), StatusIs(absl::StatusCode::kNotFound));

  auto claimed = jobs_->Claim("w1", absl::Minutes(1));
  ASSERT_THAT(claimed, IsOk());
  ASSERT_TRUE(claimed->has_value());
  EXPECT_EQ((*claimed)->job_id, first->job_id);
  EXPECT_EQ((*claimed)->state, "running");
  EXPECT_EQ((*claimed)->attempts, 1);
  // While running, enqueueing the project returns the running job.
  auto running = jobs_->Enqueue(p1);
  ASSERT_THAT(running, IsOk());
  EXPECT_EQ(running->job_id, first->job_id);
  EXPECT_FALSE(running->created);
  auto second = jobs_->Claim("w2", absl::Minutes(1));
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->project_id, p2);
  auto none = jobs_->Claim("w3", absl::Minutes(1));
  ASSERT_THAT(none, IsOk());
  EXPECT_FALSE(none->has_value());
  EXPECT_THAT(jobs_->Claim("", absl::Minutes(1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(TrainingJobStoreTest, AVersionEndsTheJobOnlyWhileItsWorkerOwnsIt) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  // w1 claims, then its lease runs out (it "died"); w2 takes the job over.
  ASSERT_THAT(jobs_->Claim("w1", absl::Minutes(1)), IsOk());
  ExpireLease(job->job_id);
  auto taken = jobs_->Claim("w2", absl::Minutes(1));
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_EQ((*taken)->job_id, job->job_id);
  EXPECT_EQ((*taken)->attempts, 2);
  // The late w1 can neither renew nor store a version; nothing is stored.
  EXPECT_THAT(jobs_->Renew(job->job_id, "w1", absl::Minutes(1)),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(versions_->SaveModelVersion(Version(p, job->job_id, "w1")).status(),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(versions_->ListModelVersions(p, 10).value(), IsEmpty());
  // w2 renews and stores: the job is done with that version, exactly once.
  EXPECT_THAT(jobs_->Renew(job->job_id, "w2", absl::Minutes(1)), IsOk());
  auto saved = versions_->SaveModelVersion(Version(p, job->job_id, "w2"));
  ASSERT_THAT(saved, IsOk());
  auto done = jobs_->GetJob(job->job_id);
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->state, "done");
  EXPECT_EQ(done->version, saved->version);
  EXPECT_THAT(versions_->SaveModelVersion(Version(p, job->job_id, "w2")).status(),
              StatusIs(absl::StatusCode::kAborted));
  // A done job frees the project for a new one.
  auto next = jobs_->Enqueue(p);
  ASSERT_THAT(next, IsOk());
  EXPECT_NE(next->job_id, job->job_id);
}

TEST_F(TrainingJobStoreTest, FailedAttemptsRequeueUntilTheLimit) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  ASSERT_THAT(jobs_->Claim("w", absl::Minutes(1)), IsOk());
  ASSERT_THAT(jobs_->Fail(job->job_id, "w", "out of memory", 2), IsOk());
  EXPECT_EQ(jobs_->GetJob(job->job_id)->state, "queued");
  ASSERT_THAT(jobs_->Claim("w", absl::Minutes(1)), IsOk());
  EXPECT_THAT(jobs_->Fail(job->job_id, "other", "x", 2), StatusIs(absl::StatusCode::kAborted));
  ASSERT_THAT(jobs_->Fail(job->job_id, "w", "out of memory again", 2), IsOk());
  auto failed = jobs_->GetJob(job->job_id);
  EXPECT_EQ(failed->state, "failed");
  EXPECT_EQ(failed->error, "out of memory again");
  EXPECT_EQ(failed->attempts, 2);
}

TEST_F(TrainingJobStoreTest, AJobWhoseWorkersDieEndsFailedAfterMaxAttemptsAndFreesTheProject) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  constexpr int32_t kMaxAttempts = 2;
  // Each claimant dies at once: it never renews, so its lease runs out.
  const absl::Duration lease = absl::Minutes(1);
  for (int attempt = 1; attempt <= kMaxAttempts; ++attempt) {
    auto claimed = jobs_->Claim(absl::StrCat("w", attempt), lease, kMaxAttempts);
    ASSERT_THAT(claimed, IsOk());
    ASSERT_TRUE(claimed->has_value()) << "attempt " << attempt;
    EXPECT_EQ((*claimed)->job_id, job->job_id);
    EXPECT_EQ((*claimed)->attempts, attempt);
    ExpireLease(job->job_id);
  }
  // The last attempt's lease has expired too: the job has had its max_attempts.
  auto none = jobs_->Claim("w-next", lease, kMaxAttempts);
  ASSERT_THAT(none, IsOk());
  EXPECT_FALSE(none->has_value()) << "claimed again on attempt " << (*none)->attempts;
  auto failed = jobs_->GetJob(job->job_id);
  ASSERT_THAT(failed, IsOk());
  EXPECT_EQ(failed->state, "failed");
  EXPECT_EQ(failed->attempts, kMaxAttempts);
  EXPECT_THAT(failed->error, ::testing::HasSubstr("lease"));

  // The project trains again: its next job is a new one, and it runs.
  auto next = jobs_->Enqueue(p);
  ASSERT_THAT(next, IsOk());
  EXPECT_NE(next->job_id, job->job_id);
  auto claimed = jobs_->Claim("w-next", absl::Minutes(1), kMaxAttempts);
  ASSERT_THAT(claimed, IsOk());
  ASSERT_TRUE(claimed->has_value());
  EXPECT_EQ((*claimed)->job_id, next->job_id);
}

TEST_F(TrainingJobStoreTest, ConcurrentClaimersNeverShareAJob) {
  std::vector<int64_t> projects;
  for (int i = 0; i < 12; ++i) {
    projects.push_back(NewProject("p" + std::to_string(i)));
    ASSERT_THAT(jobs_->Enqueue(projects.back()), IsOk());
  }
  absl::Mutex mu;
  std::vector<int64_t> claimed;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      while (true) {
        auto job = jobs_->Claim("w" + std::to_string(t), absl::Minutes(1));
        if (!job.ok() || !job->has_value()) return;
        absl::MutexLock lock(&mu);
        claimed.push_back((*job)->job_id);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::sort(claimed.begin(), claimed.end());
  EXPECT_EQ(claimed.size(), 12u);
  EXPECT_EQ(std::unique(claimed.begin(), claimed.end()), claimed.end());
}

// model_version_store.h: a version that completes a job is stored only if
// `worker` "still owns the running job" — a job of project p1 is p1's, so a
// version saved for p2 naming it is refused ABORTED, p2 gets no version, and
// the job stays running under its worker (who can still complete it for p1).
TEST_F(TrainingJobStoreTest, AVersionOfAnotherProjectDoesNotCompleteTheJob) {
  const int64_t p1 = NewProject("p1"), p2 = NewProject("p2");
  auto job = jobs_->Enqueue(p1);
  ASSERT_THAT(job, IsOk());
  auto claimed = jobs_->Claim("w", absl::Minutes(1));
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_EQ((*claimed)->job_id, job->job_id);

  EXPECT_THAT(versions_->SaveModelVersion(Version(p2, job->job_id, "w")).status(),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(versions_->ListModelVersions(p2, 10).value(), IsEmpty());
  auto still = jobs_->GetJob(job->job_id);
  ASSERT_THAT(still, IsOk());
  EXPECT_EQ(still->state, "running");
  EXPECT_EQ(still->worker, "w");
  EXPECT_FALSE(still->version.has_value());

  auto saved = versions_->SaveModelVersion(Version(p1, job->job_id, "w"));
  ASSERT_THAT(saved, IsOk());
  EXPECT_EQ(saved->version, 1);
  EXPECT_EQ(jobs_->GetJob(job->job_id)->state, "done");
}

// training_job_store.h: Renew and Fail act on a job `worker` owns and answer
// ABORTED once "the job ended". After the worker stored its version the job
// is done: a late Renew or Fail by the same worker is refused and the job
// stays done with that version (not queued again, not failed).
TEST_F(TrainingJobStoreTest, RenewAndFailAfterTheJobIsDoneAreRefused) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  ASSERT_THAT(jobs_->Claim("w", absl::Minutes(1)), IsOk());
  auto saved = versions_->SaveModelVersion(Version(p, job->job_id, "w"));
  ASSERT_THAT(saved, IsOk());

  EXPECT_THAT(jobs_->Renew(job->job_id, "w", absl::Minutes(1)),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(jobs_->Fail(job->job_id, "w", "late error", 3),
              StatusIs(absl::StatusCode::kAborted));
  auto done = jobs_->GetJob(job->job_id);
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->state, "done");
  EXPECT_EQ(done->version, saved->version);
  EXPECT_EQ(done->error, "");
  // Nothing to claim: the done job was not queued again.
  auto none = jobs_->Claim("other", absl::Minutes(1));
  ASSERT_THAT(none, IsOk());
  EXPECT_FALSE(none->has_value());
}

// training_job_store.h: HasRunningJob is true while "its job is 'running' and
// the lease has not expired" — not for a queued job, another project's
// running job, a dead worker's expired lease (until a Renew extends it), a
// job failed back to the queue or a done job.
TEST_F(TrainingJobStoreTest, HasRunningJobOnlyWhileTheProjectsJobRunsUnderALiveLease) {
  const int64_t p = NewProject("p"), other = NewProject("other");
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(false));
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(false));

  auto claimed = jobs_->Claim("w", absl::Minutes(10));
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(true));
  EXPECT_THAT(jobs_->HasRunningJob(other), ::verity::testing::IsOkAndHolds(false));

  ExpireLease(job->job_id);
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(false));
  ASSERT_THAT(jobs_->Renew(job->job_id, "w", absl::Minutes(10)), IsOk());
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(true));

  ASSERT_THAT(jobs_->Fail(job->job_id, "w", "transient", 3), IsOk());
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(false));

  claimed = jobs_->Claim("w", absl::Minutes(10));
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_THAT(versions_->SaveModelVersion(Version(p, job->job_id, "w")), IsOk());
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(false));
}

// training_job_store.h: ListJobs is "every job of the project, oldest first";
// GetJob of an unknown id is NOT_FOUND.
TEST_F(TrainingJobStoreTest, ListJobsListsTheProjectsJobsOldestFirst) {
  const int64_t p = NewProject("p"), other = NewProject("other");
  auto first = jobs_->Enqueue(p);
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(jobs_->Enqueue(other), IsOk());
  auto claimed = jobs_->Claim("w", absl::Minutes(1), 1);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_EQ((*claimed)->job_id, first->job_id);
  ASSERT_THAT(jobs_->Fail(first->job_id, "w", "broken", 1), IsOk());
  auto second = jobs_->Enqueue(p);
  ASSERT_THAT(second, IsOk());
  ASSERT_TRUE(second->created);

  auto listed = jobs_->ListJobs(p);
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].job_id, first->job_id);
  EXPECT_EQ((*listed)[0].state, "failed");
  EXPECT_EQ((*listed)[0].error, "broken");
  EXPECT_EQ((*listed)[0].worker, "w");
  EXPECT_EQ((*listed)[1].job_id, second->job_id);
  EXPECT_EQ((*listed)[1].state, "queued");
  EXPECT_EQ((*listed)[1].worker, "");
  EXPECT_EQ((*listed)[1].attempts, 0);
  for (const TrainingJob& job : *listed) EXPECT_EQ(job.project_id, p);

  EXPECT_THAT(jobs_->GetJob(second->job_id + 1000).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

// training_job_store.h: Claim is INVALID_ARGUMENT for max_attempts < 1, and
// claims nothing then.
TEST_F(TrainingJobStoreTest, ClaimRefusesMaxAttemptsBelowOne) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  EXPECT_THAT(jobs_->Claim("w", absl::Minutes(1), 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(jobs_->GetJob(job->job_id)->state, "queued");
  // One attempt is allowed.
  auto claimed = jobs_->Claim("w", absl::Minutes(1), 1);
  ASSERT_THAT(claimed, IsOk());
  EXPECT_TRUE(claimed->has_value());
}

// As above with the projects the other way round: the job belongs to the
// project created later (higher id) and the version is saved for the earlier
// one. The version is refused ABORTED and the later project's job stays
// running.
TEST_F(TrainingJobStoreTest, AVersionOfAnEarlierProjectDoesNotCompleteALaterProjectsJob) {
  const int64_t p1 = NewProject("p1"), p2 = NewProject("p2");
  ASSERT_LT(p1, p2);
  auto job = jobs_->Enqueue(p2);
  ASSERT_THAT(job, IsOk());
  auto claimed = jobs_->Claim("w", absl::Minutes(1));
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_EQ((*claimed)->job_id, job->job_id);

  EXPECT_THAT(versions_->SaveModelVersion(Version(p1, job->job_id, "w")).status(),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(versions_->ListModelVersions(p1, 10).value(), IsEmpty());
  auto still = jobs_->GetJob(job->job_id);
  ASSERT_THAT(still, IsOk());
  EXPECT_EQ(still->state, "running");
  EXPECT_FALSE(still->version.has_value());
}

// training_job_store.h: Enqueue returns "the project's open job" (queued or
// running). A project whose earlier jobs ended (failed, done) and that has a
// new open job gets that open job back, not one of its ended ones.
TEST_F(TrainingJobStoreTest, EnqueueAgainReturnsTheOpenJobNotAnEndedOne) {
  const int64_t p = NewProject("p");
  auto failed = jobs_->Enqueue(p);
  ASSERT_THAT(failed, IsOk());
  ASSERT_THAT(jobs_->Claim("w", absl::Minutes(1), 1), IsOk());
  ASSERT_THAT(jobs_->Fail(failed->job_id, "w", "broken", 1), IsOk());
  auto done = jobs_->Enqueue(p);
  ASSERT_THAT(done, IsOk());
  ASSERT_TRUE(done->created);
  ASSERT_THAT(jobs_->Claim("w", absl::Minutes(1)), IsOk());
  ASSERT_THAT(versions_->SaveModelVersion(Version(p, done->job_id, "w")), IsOk());
  auto open = jobs_->Enqueue(p);
  ASSERT_THAT(open, IsOk());
  ASSERT_TRUE(open->created);

  auto again = jobs_->Enqueue(p);
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->job_id, open->job_id);
  EXPECT_EQ(again->state, "queued");
}

// training_job_store.h: Claim marks 'failed' only an *expired* job that has
// had its max_attempts claims. A job on its last attempt whose worker holds a
// live lease is not touched by another worker's Claim: it stays running under
// its worker, who can still renew it and store its version.
TEST_F(TrainingJobStoreTest, ClaimDoesNotFailALiveJobOnItsLastAttempt) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  auto claimed = jobs_->Claim("w1", absl::Minutes(10), 1);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_EQ((*claimed)->attempts, 1);

  auto none = jobs_->Claim("w2", absl::Minutes(10), 1);
  ASSERT_THAT(none, IsOk());
  EXPECT_FALSE(none->has_value());
  auto still = jobs_->GetJob(job->job_id);
  ASSERT_THAT(still, IsOk());
  EXPECT_EQ(still->state, "running");
  EXPECT_EQ(still->worker, "w1");
  EXPECT_EQ(still->error, "");
  EXPECT_THAT(jobs_->Renew(job->job_id, "w1", absl::Minutes(10)), IsOk());
  ASSERT_THAT(versions_->SaveModelVersion(Version(p, job->job_id, "w1")), IsOk());
  EXPECT_EQ(jobs_->GetJob(job->job_id)->state, "done");
}

// training_job_store.h: HasRunningJob(project) is about that project's job
// only. Another project's job running under a live lease — one created later
// (higher id) or earlier — does not make it true.
TEST_F(TrainingJobStoreTest, HasRunningJobIgnoresOtherProjectsJobs) {
  const int64_t earlier = NewProject("earlier"), later = NewProject("later");
  ASSERT_LT(earlier, later);
  auto job = jobs_->Enqueue(later);
  ASSERT_THAT(job, IsOk());
  auto claimed = jobs_->Claim("w", absl::Minutes(10));
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_EQ((*claimed)->job_id, job->job_id);

  EXPECT_THAT(jobs_->HasRunningJob(later), ::verity::testing::IsOkAndHolds(true));
  EXPECT_THAT(jobs_->HasRunningJob(earlier), ::verity::testing::IsOkAndHolds(false));
}

// training_job_store.h: Renew "extends the lease" by `lease`. A worker that
// renews for an hour keeps its job for that hour: half an hour later (the
// lease moved back here, as ExpireLease does, instead of sleeping) the job
// still runs under it, and another worker's Claim finds nothing to take.
TEST_F(TrainingJobStoreTest, ARenewedLeaseHoldsForTheWholeRenewedDuration) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  ASSERT_THAT(jobs_->Claim("w1", absl::Minutes(1)), IsOk());
  ASSERT_THAT(jobs_->Renew(job->job_id, "w1", absl::Hours(1)), IsOk());
  ExpectStillHeldHalfAnHourLater(p, job->job_id, "w1");
}

// training_job_store.h: Claim gives the job to the worker "with a lease of `lease`": half an hour
// into a one-hour lease the job is still the worker's, not claimable by another.
TEST_F(TrainingJobStoreTest, AClaimedLeaseHoldsForTheWholeDuration) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  ASSERT_THAT(jobs_->Claim("w1", absl::Hours(1)), IsOk());
  ExpectStillHeldHalfAnHourLater(p, job->job_id, "w1");
}

// training_job_store.h: Claim gives the job "with a lease of `lease`", and a 'running' job
// "with an expired lease" is claimable again. Eleven minutes after a ten-minute claim (the lease
// moved back, as ExpireLease does, instead of sleeping) the lease has run out: the project has no
// running job and another worker takes the job over on its second attempt.
TEST_F(TrainingJobStoreTest, AClaimedLeaseEndsWhenItsDurationHasPassed) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  ASSERT_THAT(jobs_->Claim("w1", absl::Minutes(10)), IsOk());
  AgeLease(job->job_id, absl::Minutes(11));
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(false));
  auto taken = jobs_->Claim("w2", absl::Minutes(10));
  ASSERT_THAT(taken, IsOk());
  ASSERT_TRUE(taken->has_value());
  EXPECT_EQ((*taken)->job_id, job->job_id);
  EXPECT_EQ((*taken)->worker, "w2");
  EXPECT_EQ((*taken)->attempts, 2);
}

// training_job_store.h: Renew "extends the lease" by `lease`, no more: eleven minutes after a
// ten-minute renewal the job is another worker's to take.
TEST_F(TrainingJobStoreTest, ARenewedLeaseEndsWhenItsDurationHasPassed) {
  const int64_t p = NewProject("p");
  auto job = jobs_->Enqueue(p);
  ASSERT_THAT(job, IsOk());
  ASSERT_THAT(jobs_->Claim("w1", absl::Seconds(30)), IsOk());
  ASSERT_THAT(jobs_->Renew(job->job_id, "w1", absl::Minutes(10)), IsOk());
  AgeLease(job->job_id, absl::Minutes(11));
  EXPECT_THAT(jobs_->HasRunningJob(p), ::verity::testing::IsOkAndHolds(false));
  auto taken = jobs_->Claim("w2", absl::Minutes(10));
  ASSERT_THAT(taken, IsOk());
  ASSERT_TRUE(taken->has_value());
  EXPECT_EQ((*taken)->job_id, job->job_id);
  EXPECT_EQ((*taken)->worker, "w2");
}

}  // namespace
}  // namespace verity::storage
