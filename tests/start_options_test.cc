// The start-up and memory flags of the verity_server binary (README.md's flag table), on its
// own embedded PostgreSQL:
//  - by default (no --load_threads) the server answers before its stored projects have loaded:
//    a project still loading is UNAVAILABLE naming it, the health name
//    verity.v1.ProjectsLoaded goes NOT_SERVING -> SERVING, and the project then serves what was
//    stored;
//  - --load_threads: the server listens at once, loads every stored project in the background,
//    and each answers once loaded;
//  - --memory_budget_mb with --evict_idle_seconds: a project larger than the budget is unloaded
//    when idle, listed without being loaded, and loads again, unchanged, on its next call.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <grpcpp/grpcpp.h>
#include <pqxx/pqxx>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "tests/health_check.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::tests {
namespace {

client::VerityClient ClientOf(const ServerProcess& server) {
  return client::VerityClient(client::CreateInsecureChannel(server.address()), {});
}

std::string Log(const ServerProcess& server) {
  std::ifstream in(server.log_path());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Lines of the server's log with `event` and `detail`.
int CountLines(const ServerProcess& server, const std::string& event, const std::string& detail) {
  std::istringstream lines(Log(server));
  int n = 0;
  for (std::string line; std::getline(lines, line);) {
    n += absl::StrContains(line, event) && absl::StrContains(line, detail);
  }
  return n;
}

void CreateProjectWithItems(client::VerityClient& client, const std::string& name, int items) {
  v1::Project project;
  project.set_name(name);
  for (const char* c : {"a", "b"}) project.add_classes(c);
  ASSERT_TRUE(client.CreateProject(project).ok());
  std::vector<v1::Item> batch;
  for (int i = 0; i < items; ++i) {
    batch.emplace_back().set_id(absl::StrCat("item-", i));
    if (batch.size() == 1000 || i + 1 == items) {
      absl::StatusOr<client::AddItemsTotals> added = client.AddItems(name, batch);
      ASSERT_TRUE(added.ok()) << added.status();
      batch.clear();
    }
  }
}

// GetProject, retried while the project is still loading.
absl::StatusOr<v1::Project> GetWhenLoaded(client::VerityClient& client, const std::string& name) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  absl::StatusOr<v1::Project> project = client.GetProject(name);
  while (!project.ok() && absl::IsUnavailable(project.status()) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    project = client.GetProject(name);
  }
  return project;
}

// grpc.health.v1.HealthCheckResponse.ServingStatus.
using ::verity::testing::Health;

// grpc.health.v1.Health/Check of `service` on `server` (tests/health_check.h).
absl::StatusOr<Health> CheckHealth(const ServerProcess& server, const std::string& service) {
  return ::verity::testing::CheckHealth(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()), service);
}

constexpr char kProjectsLoaded[] = "verity.v1.ProjectsLoaded";

// README: --auth=auto (the default) turns authentication on when the server listens beyond
// loopback, and leaves it off on localhost. The same calls without a key: refused on
// 0.0.0.0 (plaintext allowed there by --insecure), answered on localhost.
TEST(StartOptionsTest, ByDefaultAuthenticationIsOnExactlyWhenListeningBeyondLoopback) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-auth-auto");
  ASSERT_NE(postgres, nullptr);
  {
    ServerProcess open_to_all(RunfilePath("server/verity_server"), postgres->dir(),
                              {"--metrics_port=0", "--postgres_url=" + postgres->url(),
                               "--listen=0.0.0.0:0", "--insecure",
                               "--admin_key_file=" + postgres->dir() + "/admin.key"});
    ASSERT_TRUE(open_to_all.Start().ok()) << Log(open_to_all);
    absl::StatusOr<std::vector<v1::Project>> listed = ClientOf(open_to_all).ListProjects();
    EXPECT_TRUE(absl::IsUnauthenticated(listed.status())) << listed.status();
    ASSERT_TRUE(open_to_all.Stop().ok());
  }
  ServerProcess local(RunfilePath("server/verity_server"), postgres->dir(),
                      {"--metrics_port=0", "--postgres_url=" + postgres->url()});
  ASSERT_TRUE(local.Start().ok()) << Log(local);
  absl::StatusOr<std::vector<v1::Project>> listed = ClientOf(local).ListProjects();
  EXPECT_TRUE(listed.ok()) << listed.status();
  ASSERT_TRUE(local.Stop().ok());
}

TEST(StartOptionsTest, ByDefaultTheServerAnswersBeforeItsStoredProjectsHaveLoaded) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-load-default");
  ASSERT_NE(postgres, nullptr);
  const std::vector<std::string> flags = {"--metrics_port=0", "--postgres_url=" + postgres->url()};
  std::vector<std::string> items;
  std::vector<v1::Posterior> stored;
  {
    ServerProcess first(RunfilePath("server/verity_server"), postgres->dir(), flags);
    ASSERT_TRUE(first.Start().ok());
    client::VerityClient client = ClientOf(first);
    v1::Project project;
    project.set_name("big");
    for (const char* c : {"a", "b", "c"}) project.add_classes(c);
    project.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
    ASSERT_TRUE(client.CreateProject(project).ok());
    std::vector<v1::Annotation> labels;
    for (int i = 0; i < 300; ++i) {
      items.push_back(absl::StrCat("item-", i));
      for (int j = 0; j < 3; ++j) {
        v1::Annotation& a = labels.emplace_back();
        a.set_item(items.back());
        a.set_annotator(absl::StrCat("worker-", (i * 7 + j * 13) % 11));
        a.set_label((i + j * (i % 5 == 0)) % 3);
      }
    }
    absl::StatusOr<client::SubmitTotals> submitted =
        client.SubmitAnnotations("big", labels, client::SubmitOptions());
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    ASSERT_EQ(submitted->accepted, 900);
    absl::StatusOr<v1::ModelVersion> fitted = client.TrainModel("big", absl::Minutes(1));
    ASSERT_TRUE(fitted.ok()) << fitted.status();
    absl::StatusOr<std::vector<v1::Posterior>> posteriors = client.GetPosteriors("big", items);
    ASSERT_TRUE(posteriors.ok()) << posteriors.status();
    stored = *std::move(posteriors);
    ASSERT_GT(stored[0].model_version(), 0) << "served from the stored version";
    ASSERT_TRUE(first.Stop().ok());
  }

  // The load's first read (the project's items) waits behind this lock until it is released:
  // however fast the machine, the project is still loading while the test looks.
  pqxx::connection holder(postgres->url());
  auto lock = std::make_unique<pqxx::work>(holder);
  lock->exec0("LOCK TABLE items IN ACCESS EXCLUSIVE MODE");

  // No --load_threads: the default. Loading every project before serving, it would never
  // listen while the lock is held.
  ServerProcess server(RunfilePath("server/verity_server"), postgres->dir(), flags);
  ASSERT_TRUE(server.StartListening(absl::Seconds(15)).ok())
      << "the server did not listen while a stored project could not load\n" << Log(server);
  EXPECT_EQ(CountLines(server, "event=projects_loading", "projects=1 threads=4"), 1)
      << Log(server);
  EXPECT_EQ(CountLines(server, "event=projects_loaded", ""), 0) << Log(server);
  // Live and ready ("") at once; the stored projects not yet loaded.
  absl::StatusOr<Health> overall = CheckHealth(server, "");
  ASSERT_TRUE(overall.ok()) << overall.status();
  EXPECT_EQ(*overall, Health::kServing);
  absl::StatusOr<Health> loaded = CheckHealth(server, kProjectsLoaded);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, Health::kNotServing);
  // A call to a project no loader has taken yet would load it itself (and wait here too): wait
  // until the loader's read is the one queued behind the lock.
  const absl::Time loader_deadline = absl::Now() + absl::Seconds(10);
  auto loader_waits = [&] {
    return lock->exec1("SELECT count(*) FROM pg_locks WHERE NOT granted AND "
                       "relation = 'items'::regclass")[0]
               .as<int>() > 0;
  };
  while (!loader_waits() && absl::Now() < loader_deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(loader_waits()) << "no loader reads the project's items";
  client::VerityClient client = ClientOf(server);
  // A listing answers, leaving out the project still loading; the project names why it waits.
  absl::StatusOr<std::vector<v1::Project>> listed = client.ListProjects();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty());
  absl::StatusOr<v1::Project> loading = client.GetProject("big");
  ASSERT_FALSE(loading.ok());
  EXPECT_EQ(loading.status().code(), absl::StatusCode::kUnavailable) << loading.status();
  EXPECT_TRUE(absl::StrContains(loading.status().message(), "\"big\" is loading"))
      << loading.status();

  lock->commit();
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  while (loaded.ok() && *loaded == Health::kNotServing && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    loaded = CheckHealth(server, kProjectsLoaded);
  }
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, Health::kServing);
  EXPECT_EQ(CountLines(server, "event=projects_loaded", "projects=1 loaded=1 failed=0"), 1)
      << Log(server);
  // Serves what was stored, as it was before the restart.
  absl::StatusOr<std::vector<v1::Posterior>> after = client.GetPosteriors("big", items);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ((*after)[i].model_version(), stored[i].model_version()) << items[i];
    ASSERT_EQ((*after)[i].probabilities_size(), 3) << items[i];
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR((*after)[i].probabilities(k), stored[i].probabilities(k), 1e-12) << items[i];
    }
  }
  ASSERT_TRUE(server.Stop().ok());
}

TEST(StartOptionsTest, WithoutBackgroundLoadingProjectsLoadedIsServingAtOnce) {
  const std::string dir = MakeTempDir("verity-load-before");
  ServerProcess server(RunfilePath("server/verity_server"), dir,
                       {"--metrics_port=0", "--load_threads=0"});
  ASSERT_TRUE(server.StartListening().ok());
  absl::StatusOr<Health> loaded = CheckHealth(server, kProjectsLoaded);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, Health::kServing);
  absl::StatusOr<Health> unknown = CheckHealth(server, "verity.v1.NoSuchThing");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  EXPECT_EQ(CountLines(server, "event=projects_loaded", "projects=0 loaded=0 failed=0"), 1)
      << Log(server);
  ASSERT_TRUE(server.Stop().ok());
  RemoveTree(dir);
}

TEST(StartOptionsTest, LoadThreadsServeAtOnceAndLoadEveryStoredProject) {
  const std::string dir = MakeTempDir("verity-start-options");
  {
    ServerProcess first(RunfilePath("server/verity_server"), dir, {"--metrics_port=0"});
    ASSERT_TRUE(first.Start().ok());
    client::VerityClient client = ClientOf(first);
    for (const char* name : {"p0", "p1", "p2"}) CreateProjectWithItems(client, name, 10);
    ASSERT_TRUE(first.Stop().ok());
  }
  ServerProcess server(RunfilePath("server/verity_server"), dir,
                       {"--metrics_port=0", "--load_threads=2"});
  ASSERT_TRUE(server.StartListening().ok());
  EXPECT_EQ(CountLines(server, "event=projects_loading", "projects=3 threads=2"), 1)
      << Log(server);
  client::VerityClient client = ClientOf(server);
  for (const char* name : {"p0", "p1", "p2"}) {
    absl::StatusOr<v1::Project> project = GetWhenLoaded(client, name);
    ASSERT_TRUE(project.ok()) << project.status();
    EXPECT_EQ(project->num_items(), 10);
  }
  EXPECT_EQ(CountLines(server, "event=project_loaded", "items=10"), 3);
  ASSERT_TRUE(server.Stop().ok());
  RemoveTree(dir);
}

TEST(StartOptionsTest, AMemoryBudgetUnloadsAnIdleProjectAndReloadsIt) {
  const std::string dir = MakeTempDir("verity-memory-budget");
  // 5,000 items of K = 2 are about 1.3 MB (LiveProject::EstimatedBytes): over a 1 MiB budget.
  ServerProcess server(RunfilePath("server/verity_server"), dir,
                       {"--metrics_port=0", "--memory_budget_mb=1", "--evict_idle_seconds=0"});
  ASSERT_TRUE(server.Start().ok());
  client::VerityClient client = ClientOf(server);
  CreateProjectWithItems(client, "big", 5000);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (CountLines(server, "event=project_evicted", "project=big") == 0 &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_GE(CountLines(server, "event=project_evicted", "project=big"), 1) << Log(server);
  // A listing (a health check) shows it from its stored record without loading it.
  absl::StatusOr<std::vector<v1::Project>> listed = client.ListProjects();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name(), "big");
  EXPECT_EQ((*listed)[0].num_items(), 5000);
  EXPECT_EQ(CountLines(server, "event=project_loaded", "project=big"), 0)
      << "listing loaded the unloaded project";
  absl::StatusOr<v1::Project> big = client.GetProject("big");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->num_items(), 5000);
  EXPECT_GE(CountLines(server, "event=project_loaded", "project=big"), 1)
      << "the call after the eviction loaded it from PostgreSQL";
  ASSERT_TRUE(server.Stop().ok());
  RemoveTree(dir);
}

}  // namespace
}  // namespace verity::tests
