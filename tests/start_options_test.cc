// The start-up and memory flags of the verity_server binary (README.md's flag table), on its
// own embedded PostgreSQL:
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

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "tests/server_process.h"
#include "verity/v1/projects.pb.h"

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
  ASSERT_TRUE(server.Start().ok());
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
