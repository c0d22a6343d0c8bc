// TrainingScheduler's background fitters against a real PostgreSQL (training_scheduler.h): the
// poll queues each due project for Options::max_concurrent_fits fitters and does not wait for
// their fits, so one project's long fit holds one fitter while the others keep refitting the
// projects that become due; and a project is refit again each time it becomes due.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/state/project_registry.h"
#include "server/state/storage_handles.h"
#include "server/training/scheduler_test_projects.h"
#include "server/training/training_scheduler.h"
#include "storage/fit_lock.h"
#include "storage/testing/postgres_fixture.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {
namespace {

// Lets a held fit go when a test ends early (a failed ASSERT), so that the scheduler's
// destructor, which waits for running fits, does not wait forever.
struct ReleaseOnExit {
  absl::Notification& release;
  ~ReleaseOnExit() {
    if (!release.HasBeenNotified()) release.Notify();
  }
};

// Holds the fits of project "slow", once armed, until `release`; `started` says one is held.
struct SlowFitHold {
  absl::Mutex mu;
  bool armed ABSL_GUARDED_BY(mu) = false;
  absl::Notification started;
  absl::Notification release;

  void Arm() {
    absl::MutexLock lock(&mu);
    armed = true;
  }
  std::function<void(const LiveProject&)> Hook() {
    return [this](const LiveProject& project) {
      if (project.identity().name != "slow") return;
      {
        absl::MutexLock lock(&mu);
        if (!armed) return;
      }
      if (!started.HasBeenNotified()) started.Notify();
      release.WaitForNotification();
    };
  }
};

class TrainingSchedulerBackgroundTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    storage::testing::PostgresTest::SetUp();
    NewProject("slow");
    NewProject("fast");
    auto storage = StorageHandles::Open(url(), 4);
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_ = std::move(*storage);
    registry_ = std::make_unique<ProjectRegistry>(*storage_);
    ASSERT_TRUE(registry_->LoadAll().ok());
  }

  // A Dawid-Skene project with 40 items x 3 labels.
  void NewProject(const std::string& name) {
    absl::StatusOr<int64_t> created = testing::StoreDsProjectWithLabels(pool(), name);
    ASSERT_TRUE(created.ok()) << created.status();
  }

  LiveProject& Project(const std::string& name) { return **registry_->Get(name); }

  // Makes `name`'s refit due: a method change (LiveProject::RefitDue), one_coin and back.
  void MakeDue(const std::string& name) {
    LiveProject& project = Project(name);
    v1::ProjectSettings settings = project.settings();
    settings.mutable_model()->set_method(settings.model().method() == v1::TRUTH_METHOD_ONE_COIN
                                             ? v1::TRUTH_METHOD_DAWID_SKENE
                                             : v1::TRUTH_METHOD_ONE_COIN);
    project.SetSettings(settings);
  }

  // Waits up to `limit` for `name` to serve at least `version`; true when it does.
  bool ServesVersion(const std::string& name, int32_t version,
                     absl::Duration limit = absl::Seconds(10)) {
    const absl::Time give_up = absl::Now() + limit;
    while (Project(name).model_version() < version) {
      if (absl::Now() >= give_up) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }

  static TrainingScheduler::Options Background() {
    TrainingScheduler::Options options;
    options.poll_interval = absl::Milliseconds(20);
    options.max_busy_fraction = 1.0;  // No rest: the tests time refits, not the duty cycle.
    options.max_concurrent_fits = 2;
    return options;
  }

  std::unique_ptr<StorageHandles> storage_;
  std::unique_ptr<ProjectRegistry> registry_;
};

TEST_F(TrainingSchedulerBackgroundTest, AProjectIsRefitAgainEachTimeItBecomesDue) {
  TrainingScheduler scheduler(*registry_, *storage_->versions, nullptr, Background());
  ASSERT_TRUE(ServesVersion("fast", 1));
  for (int32_t version = 2; version <= 4; ++version) {
    MakeDue("fast");
    EXPECT_TRUE(ServesVersion("fast", version)) << "version " << version << " never came";
  }
}

TEST_F(TrainingSchedulerBackgroundTest, ALongFitHoldsOneFitterWhileAnotherProjectIsRefit) {
  SlowFitHold hold;
  TrainingScheduler::Options options = Background();
  options.before_fit_for_testing = hold.Hook();
  TrainingScheduler scheduler(*registry_, *storage_->versions, nullptr, options);
  ReleaseOnExit release_on_exit{hold.release};  // Before the scheduler joins its fitters.
  ASSERT_TRUE(ServesVersion("slow", 1));
  ASSERT_TRUE(ServesVersion("fast", 1));
  hold.Arm();
  MakeDue("slow");
  ASSERT_TRUE(hold.started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // While slow's fit is held, fast becomes due twice; a fitter is free each time.
  MakeDue("fast");
  EXPECT_TRUE(ServesVersion("fast", 2)) << "not refit while another project's fit ran";
  MakeDue("fast");
  EXPECT_TRUE(ServesVersion("fast", 3)) << "not refit again while another project's fit ran";
  EXPECT_EQ(Project("slow").model_version(), 1);
  hold.release.Notify();
  EXPECT_TRUE(ServesVersion("slow", 2));
}

// With one fitter, a held fit holds the only slot: the other project waits for it
// (max_concurrent_fits bounds the fits running at once), then is refit.
TEST_F(TrainingSchedulerBackgroundTest, WithOneFitterTheOtherProjectWaitsForTheHeldFit) {
  SlowFitHold hold;
  TrainingScheduler::Options options = Background();
  options.max_concurrent_fits = 1;
  options.before_fit_for_testing = hold.Hook();
  TrainingScheduler scheduler(*registry_, *storage_->versions, nullptr, options);
  ReleaseOnExit release_on_exit{hold.release};  // Before the scheduler joins its fitters.
  ASSERT_TRUE(ServesVersion("slow", 1));
  ASSERT_TRUE(ServesVersion("fast", 1));
  hold.Arm();
  MakeDue("slow");
  ASSERT_TRUE(hold.started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  MakeDue("fast");
  EXPECT_FALSE(ServesVersion("fast", 2, absl::Milliseconds(500)));
  hold.release.Notify();
  EXPECT_TRUE(ServesVersion("fast", 2));
  EXPECT_TRUE(ServesVersion("slow", 2));
}

// training_scheduler.h: max_concurrent_fits bounds the in-process fits running at once, "and
// TrainModel calls take a slot too". With one slot, a TrainModel of "fast" waits while slow's
// TrainModel fit holds it, then fits.
TEST_F(TrainingSchedulerBackgroundTest, ATrainModelWaitsForTheSlotAnotherTrainModelHolds) {
  SlowFitHold hold;
  TrainingScheduler::Options options = Background();
  options.run_in_background = false;
  options.max_concurrent_fits = 1;
  options.before_fit_for_testing = hold.Hook();
  TrainingScheduler scheduler(*registry_, *storage_->versions, nullptr, options);
  absl::StatusOr<storage::ModelVersionRecord> slow_version, fast_version;
  std::thread slow, fast;
  struct JoinOnExit {
    std::thread& thread;
    ~JoinOnExit() {
      if (thread.joinable()) thread.join();
    }
  } join_slow{slow}, join_fast{fast};
  ReleaseOnExit release_on_exit{hold.release};  // Before the threads are joined.
  hold.Arm();
  slow = std::thread([&] { slow_version = scheduler.RefitProjectNow(Project("slow")); });
  ASSERT_TRUE(hold.started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  fast = std::thread([&] { fast_version = scheduler.RefitProjectNow(Project("fast")); });
  EXPECT_FALSE(ServesVersion("fast", 1, absl::Milliseconds(500)))
      << "fit while the only slot was held";
  hold.release.Notify();
  slow.join();
  fast.join();
  ASSERT_TRUE(slow_version.ok()) << slow_version.status();
  ASSERT_TRUE(fast_version.ok()) << fast_version.status();
  EXPECT_EQ(slow_version->version, 1);
  EXPECT_EQ(fast_version->version, 1);
  EXPECT_EQ(Project("fast").model_version(), 1);
}

// training_scheduler.h: a fitter that takes the fit lock "serves any version stored meanwhile
// and fits only if that did not make the fit unnecessary", and the background refits only what
// is due. This replica has never fit "fast" (every label new: due); another replica fits
// version 1 over every stored label, and this one holds one label more. Serving version 1
// leaves one new label (fewer than refit_min_new_labels, 50, and the staleness bound starts
// again): not due, though not current, so no version 2 is fit.
TEST_F(TrainingSchedulerBackgroundTest, AFitterDoesNotFitWhatAnotherReplicasVersionLeftNotDue) {
  ProjectRegistry other_replica(*storage_);
  ASSERT_TRUE(other_replica.LoadAll().ok());
  ASSERT_TRUE((*other_replica.Get("fast"))->Refit(*storage_->versions).ok());
  LiveProject& fast = Project("fast");
  const std::optional<int32_t> item = fast.FindItem("i0");
  const std::optional<int32_t> annotator = fast.FindAnnotator("w3");  // i0: w0, w1, w2.
  ASSERT_TRUE(item.has_value() && annotator.has_value());
  fast.ApplyCommitted({{*item, "i0", *annotator, "w3", 1, 1000, true}});
  storage::FitLocks locks(storage_->pool.get());
  TrainingScheduler::Options options = Background();
  options.fit_locks = &locks;
  TrainingScheduler scheduler(*registry_, *storage_->versions, nullptr, options);
  ASSERT_TRUE(ServesVersion("fast", 1));
  absl::SleepFor(absl::Milliseconds(500));  // 25 polls.
  EXPECT_EQ(fast.model_version(), 1);
  EXPECT_FALSE(fast.FitIsCurrent());
  auto stored = storage_->versions->ListModelVersions(fast.identity().project_id, 10);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->size(), 1u);
}

// training_scheduler.h: a background fitter "fits at most Options::max_busy_fraction of the
// time: after a fit that took d it rests d·(1 − f)/f, at most max_staleness". Both projects are
// due from the start (labels, no version) and one fitter takes one of them first. A fit writes
// to PostgreSQL, so d is above 0.1 ms; with f = 1e-5 the rest after it is above 10 s (capped at
// the minute of max_staleness): the other project is not fit within the next second.
TEST_F(TrainingSchedulerBackgroundTest, AFitterRestsAfterAFitBeforeTakingTheNextProject) {
  TrainingScheduler::Options options = Background();
  options.max_concurrent_fits = 1;
  options.max_busy_fraction = 1e-5;
  options.max_staleness = absl::Minutes(1);
  TrainingScheduler scheduler(*registry_, *storage_->versions, nullptr, options);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (Project("slow").model_version() == 0 && Project("fast").model_version() == 0 &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(Project("slow").model_version() + Project("fast").model_version(), 1)
      << "no first fit, or both fit at once";
  const std::string other = Project("slow").model_version() == 0 ? "slow" : "fast";
  EXPECT_FALSE(ServesVersion(other, 1, absl::Seconds(1))) << "fit without resting first";
}

// training_scheduler.h: the fitters "take the queue in order", the order in which the projects
// became due. With one fitter held by slow's fit, "third" becomes due, then (50 polls later)
// "fast": once slow's fit ends, third is fit before fast.
TEST_F(TrainingSchedulerBackgroundTest, TheFitterTakesTheProjectsInTheOrderTheyBecameDue) {
  NewProject("third");
  ASSERT_TRUE(registry_->LoadAll().ok());
  SlowFitHold hold;
  absl::Mutex fitted_mu;
  std::vector<std::string> fitted;
  TrainingScheduler::Options options = Background();
  options.max_concurrent_fits = 1;
  options.before_fit_for_testing = [&hold, &fitted_mu, &fitted,
                                    held = hold.Hook()](const LiveProject& project) {
    {
      absl::MutexLock lock(&fitted_mu);
      fitted.push_back(project.identity().name);
    }
    held(project);
  };
  TrainingScheduler scheduler(*registry_, *storage_->versions, nullptr, options);
  ReleaseOnExit release_on_exit{hold.release};  // Before the scheduler joins its fitters.
  ASSERT_TRUE(ServesVersion("slow", 1));
  ASSERT_TRUE(ServesVersion("fast", 1));
  ASSERT_TRUE(ServesVersion("third", 1));
  hold.Arm();
  MakeDue("slow");
  ASSERT_TRUE(hold.started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  MakeDue("third");
  absl::SleepFor(absl::Seconds(1));  // 50 polls: third is queued.
  MakeDue("fast");
  absl::SleepFor(absl::Milliseconds(300));  // fast is queued behind it.
  {
    absl::MutexLock lock(&fitted_mu);
    fitted.clear();
  }
  hold.release.Notify();
  ASSERT_TRUE(ServesVersion("third", 2));
  ASSERT_TRUE(ServesVersion("fast", 2));
  absl::MutexLock lock(&fitted_mu);
  EXPECT_EQ(fitted, (std::vector<std::string>{"third", "fast"}));
}

// training_scheduler.h: "A background pass fits its due projects on up to this many threads"
// (max_concurrent_fits). Both projects are due (labels, no version) and there are two slots:
// one RefitDueProjectsNow pass runs both fits at once, so each fit, held until the other has
// started, sees the other start.
TEST_F(TrainingSchedulerBackgroundTest, APassFitsItsDueProjectsAtOnceUpToTheSlots) {
  absl::Mutex mu;
  int started = 0;
  int saw_both = 0;
  TrainingScheduler::Options options = Background();
  options.run_in_background = false;
  options.max_concurrent_fits = 2;
  options.before_fit_for_testing = [&](const LiveProject&) {
    absl::MutexLock lock(&mu);
    ++started;
    auto both_started = [&started]() { return started >= 2; };
    if (mu.AwaitWithTimeout(absl::Condition(&both_started), absl::Seconds(5))) ++saw_both;
  };
  TrainingScheduler scheduler(*registry_, *storage_->versions, nullptr, options);
  ASSERT_TRUE(scheduler.RefitDueProjectsNow().ok());
  EXPECT_EQ(Project("slow").model_version(), 1);
  EXPECT_EQ(Project("fast").model_version(), 1);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(started, 2);
  EXPECT_EQ(saw_both, 2) << "the two fits did not run at once";
}

}  // namespace
}  // namespace verity::server
