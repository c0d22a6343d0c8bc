// The start-up and memory flags of the verity_server binary (README.md's flag table), on its
// own embedded PostgreSQL:
//  - by default (no --load_threads) the server answers before its stored projects have loaded:
//    a project still loading is UNAVAILABLE naming it, the health name
//    verity.v1.ProjectsLoaded goes NOT_SERVING -> SERVING, and the project then serves what was
//    stored;
//  - --load_threads: the server listens at once, loads every stored project in the background,
//    and each answers once loaded;
//  - --memory_budget_mb with --evict_idle_seconds: a project larger than the budget is unloaded
//    when idle, listed without being loaded, and loads again, unchanged, on its next call;
//  - --trainer_busy_fraction outside (0, 1] is refused at start, naming the flag; 1 is allowed;
//  - --metrics_port on a port another socket holds: logged (event=metrics_unavailable, naming
//    the port) and the server runs without metrics;
//  - --auth=off on loopback: every call is admitted without a key, KeyService included
//    (proto/verity/v1/keys.proto), and the keys it makes hold once authentication is on;
//  - values outside a flag's documented range are refused at start naming the flag, and the
//    edges of the range are accepted (README's defaults against --helpfull: readme_flags_test);
//  - --log_every_rpc, --metrics_port=0, --console=false, --grpc_memory_mb=0 and --max_streams
//    reach the server; the first admin key goes to DATA_DIR/admin.key by default.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
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
#include "server/testing/http_get.h"
#include "tests/health_check.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.pb.h"
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

// Promise (README, --memory_budget_mb: projects idle for --evict_idle_seconds are unloaded;
// ListProjects lists an unloaded project without loading it): listing projects is not a use.
// A health check that lists every few seconds (deploy/compose.yaml: every 10 s) must not keep a
// loaded project from being unloaded.
TEST(StartOptionsTest, ListingProjectsDoesNotKeepALoadedProjectFromBeingUnloaded) {
  const std::string dir = MakeTempDir("verity-memory-budget-listing");
  ServerProcess server(RunfilePath("server/verity_server"), dir,
                       {"--metrics_port=0", "--memory_budget_mb=1", "--evict_idle_seconds=2"});
  ASSERT_TRUE(server.Start().ok());
  client::VerityClient client = ClientOf(server);
  CreateProjectWithItems(client, "big", 5000);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (CountLines(server, "event=project_evicted", "project=big") == 0 &&
         absl::Now() < give_up) {
    absl::StatusOr<std::vector<v1::Project>> listed = client.ListProjects();
    ASSERT_TRUE(listed.ok()) << listed.status();
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ((*listed)[0].num_items(), 5000);
    absl::SleepFor(absl::Milliseconds(500));
  }
  EXPECT_GE(CountLines(server, "event=project_evicted", "project=big"), 1)
      << "listings every 0.5 s kept the project loaded\n" << Log(server);
  ASSERT_TRUE(server.Stop().ok());
  RemoveTree(dir);
}

// What a verity_server run that was expected to refuse its flags did.
struct RefusedRun {
  bool exited = false;    // false: still running at the deadline (then killed)
  int exit_code = -1;     // when it exited normally
  bool signalled = false; // when it was ended by a signal
  std::string output;     // stdout and stderr together
};

// Runs verity_server with `flags` (after --listen=localhost:0 --data_dir=DIR/var) until it exits
// or `timeout` passes; a server still running then, or one that logged event=listening, is
// killed (SIGKILL) and reported as not exited.
RefusedRun RunUntilExit(const std::string& dir, const std::vector<std::string>& flags,
                        absl::Duration timeout = absl::Seconds(30)) {
  RefusedRun run;
  const std::string log = absl::StrCat(dir, "/refused-", absl::ToUnixNanos(absl::Now()), ".log");
  const std::string binary = RunfilePath("server/verity_server");
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDERR_FILENO);
      dup2(fd, STDOUT_FILENO);
    }
    std::vector<std::string> args = {binary, "--listen=localhost:0", "--data_dir=" + dir + "/var",
                                      "--background_refit=false"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  auto read_log = [&log] {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const absl::Time deadline = absl::Now() + timeout;
  while (pid > 0) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      run.exited = true;
      if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
      run.signalled = WIFSIGNALED(status);
      break;
    }
    if (absl::Now() > deadline || absl::StrContains(read_log(), "event=listening")) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  run.output = read_log();
  return run;
}

// A flag the server refuses is refused before anything starts: with the embedded database
// (no --postgres_url) the server exits naming the flag without starting PostgreSQL. Before,
// it ran initdb and started the cluster first (and stopped it again, also one that an earlier,
// killed server had left running in the same data directory).
TEST(StartOptionsTest, ABadFlagIsRefusedBeforeTheEmbeddedDatabaseStarts) {
  const std::string dir = MakeTempDir("verity-bad-flag");
  RefusedRun run = RunUntilExit(dir, {"--metrics_port=0", "--auth=bogus"});
  ASSERT_TRUE(run.exited) << run.output;
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--auth must be auto, on or off")) << run.output;
  EXPECT_FALSE(absl::StrContains(run.output, "event=embedded_postgres")) << run.output;
  struct stat st;
  EXPECT_NE(stat((dir + "/var").c_str(), &st), 0)
      << "the data directory was created:\n" << run.output;
}

// README's flag table and the flag's help: --trainer_busy_fraction is "in (0, 1]". A value
// outside is refused at start: the process exits non-zero without serving, and its error
// output names the flag. 1 ("fits back to back") is inside and starts.
TEST(StartOptionsTest, ATrainerBusyFractionOutsideZeroToOneIsRefusedAtStart) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-busy-fraction");
  ASSERT_NE(postgres, nullptr);
  for (const std::string value : {"0", "-0.1", "1.5", "-1", "2", "nan", "inf"}) {
    SCOPED_TRACE(absl::StrCat("--trainer_busy_fraction=", value));
    RefusedRun run = RunUntilExit(postgres->dir(),
                                  {"--metrics_port=0", "--postgres_url=" + postgres->url(),
                                   "--trainer_busy_fraction=" + value});
    ASSERT_TRUE(run.exited) << "the server started (or hung) with an out-of-range fraction:\n"
                            << run.output;
    EXPECT_FALSE(run.signalled) << run.output;
    EXPECT_NE(run.exit_code, 0) << run.output;
    EXPECT_FALSE(absl::StrContains(run.output, "event=listening")) << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, "trainer_busy_fraction"))
        << "the error does not name the flag:\n" << run.output;
  }
  // The bounds of (0, 1]: 1 is in, and so is a small positive fraction.
  for (const std::string value : {"1", "0.05"}) {
    ServerProcess server(RunfilePath("server/verity_server"), postgres->dir(),
                         {"--metrics_port=0", "--postgres_url=" + postgres->url(),
                          "--trainer_busy_fraction=" + value});
    ASSERT_TRUE(server.Start().ok()) << "--trainer_busy_fraction=" << value << "\n" << Log(server);
    absl::StatusOr<std::vector<v1::Project>> listed = ClientOf(server).ListProjects();
    EXPECT_TRUE(listed.ok()) << listed.status();
    ASSERT_TRUE(server.Stop().ok());
  }
}

// verity_server --help lists the server's flags (those of README's flag table). absl's --help
// lists only the flags of a file named after the binary, and printed "No flags matched".
TEST(StartOptionsTest, HelpListsTheServersFlags) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-help");
  ASSERT_NE(postgres, nullptr);
  RefusedRun run = RunUntilExit(postgres->dir(), {"--help"}, absl::Seconds(10));
  ASSERT_TRUE(run.exited) << run.output;
  EXPECT_FALSE(absl::StrContains(run.output, "No flags matched")) << run.output;
  for (const char* flag : {"--listen", "--data_dir", "--postgres_url", "--max_items_per_project",
                           "--device"}) {
    EXPECT_TRUE(absl::StrContains(run.output, flag)) << flag << " missing from:\n" << run.output;
  }
}

// README's flag table: --listen is the "host:port to serve gRPC on (port 0 picks a free
// port)". A port past 65535 is no port: the server must refuse it naming the flag, not listen
// on another one. Probe: --listen=localhost:99999 logged "event=listening
// address=localhost:99999 port=34463" (99999 - 65536) and served there.
TEST(StartOptionsTest, AListenPortPast65535IsRefusedAtStart) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-listen-port");
  ASSERT_NE(postgres, nullptr);
  for (const std::string value : {"localhost:99999", "127.0.0.1:65536", "localhost:-1"}) {
    SCOPED_TRACE(absl::StrCat("--listen=", value));
    RefusedRun run = RunUntilExit(postgres->dir(),
                                  {"--metrics_port=0", "--postgres_url=" + postgres->url(),
                                   "--listen=" + value},
                                  absl::Seconds(10));
    ASSERT_TRUE(run.exited) << "the server started with an out-of-range port:\n" << run.output;
    EXPECT_NE(run.exit_code, 0) << run.output;
    EXPECT_FALSE(absl::StrContains(run.output, "event=listening")) << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, "listen")) << run.output;
  }
}

// README's flag table: --device is "auto, cpu, cuda, cuda:N". Any other value is a bad flag,
// refused at start naming it like --trainer and --auth; probe: --device=tpu and
// --device=cuda:x started and served.
TEST(StartOptionsTest, AnUnknownDeviceIsRefusedAtStart) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-bad-device");
  ASSERT_NE(postgres, nullptr);
  for (const std::string value : {"tpu", "cuda:x"}) {
    SCOPED_TRACE(absl::StrCat("--device=", value));
    RefusedRun run = RunUntilExit(postgres->dir(),
                                  {"--metrics_port=0", "--postgres_url=" + postgres->url(),
                                   "--device=" + value},
                                  absl::Seconds(10));
    ASSERT_TRUE(run.exited) << "the server started with a bad device:\n" << run.output;
    EXPECT_NE(run.exit_code, 0) << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, "device")) << run.output;
  }
}

// README's flag table: the per-project limits and --max_streams_per_key are counts. As
// --max_leases_per_project=-1 and --max_streams=0 are refused at start naming the flag, a
// negative --max_items_per_project (probe: started, then refused every AddItems with "project
// limit max_items (-5, ...)") and --max_streams_per_key=0 (started, then refused every ingest
// stream with "the limit is 0 per key ...; retry later") must be too.
TEST(StartOptionsTest, LimitsThatAdmitNothingAreRefusedAtStart) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-bad-limits");
  ASSERT_NE(postgres, nullptr);
  for (const std::string flag :
       {"--max_items_per_project=-5", "--max_labels_per_project=-1",
        "--max_streams_per_key=0"}) {
    SCOPED_TRACE(flag);
    RefusedRun run = RunUntilExit(
        postgres->dir(), {"--metrics_port=0", "--postgres_url=" + postgres->url(), flag},
        absl::Seconds(10));
    ASSERT_TRUE(run.exited) << "the server started:\n" << run.output;
    EXPECT_NE(run.exit_code, 0) << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, flag.substr(2, flag.find('=') - 2)))
        << run.output;
  }
}

// A bad flag value is refused naming the flag, as --trainer_busy_fraction's and --load_threads'
// are ("--load_threads must be 0 ... or more"). Probe: --pool_size=0 said only "ConnectionPool:
// size must be at least 1, got 0" and --db_timeout_seconds=0 "ConnectionPool: db_timeout must be
// at least 1s, got 0", names that appear nowhere in --help or README; --metrics_port=70000 was
// logged as "metrics address must be host:port" and the server started.
TEST(StartOptionsTest, ABadPoolSizeDbTimeoutOrMetricsPortIsRefusedNamingTheFlag) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-flag-names");
  ASSERT_NE(postgres, nullptr);
  for (const std::string flag :
       {"--pool_size=0", "--db_timeout_seconds=0", "--metrics_port=70000"}) {
    SCOPED_TRACE(flag);
    RefusedRun run = RunUntilExit(postgres->dir(), {"--postgres_url=" + postgres->url(), flag},
                                  absl::Seconds(10));
    EXPECT_TRUE(run.exited) << "the server started:\n" << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, flag.substr(0, flag.find('='))))
        << "the error does not name the flag:\n" << run.output;
  }
}

// README's flag table: --metrics_port "A port already taken is logged
// (event=metrics_unavailable) and the server runs without it". Another socket listens on the
// port first: the server still starts and serves gRPC, and says so in a line naming the port,
// never silently.
TEST(StartOptionsTest, AMetricsPortAlreadyTakenIsLoggedAndTheServerRunsWithoutIt) {
  const int taker = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taker, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(bind(taker, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(taker, 16), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(taker, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int taken = ntohs(address.sin_port);
  ASSERT_GT(taken, 0);

  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-metrics-taken");
  ASSERT_NE(postgres, nullptr);
  ServerProcess server(RunfilePath("server/verity_server"), postgres->dir(),
                       {"--postgres_url=" + postgres->url(), "--metrics_address=127.0.0.1",
                        absl::StrCat("--metrics_port=", taken)});
  ASSERT_TRUE(server.Start().ok()) << "the server did not run without its metrics port\n"
                                   << Log(server);
  EXPECT_EQ(CountLines(server, "event=metrics_unavailable", absl::StrCat(":", taken)), 1)
      << "no event=metrics_unavailable line naming port " << taken << "\n" << Log(server);
  // gRPC serves: a write and a read.
  client::VerityClient client = ClientOf(server);
  v1::Project project;
  project.set_name("still-serving");
  for (const char* c : {"a", "b"}) project.add_classes(c);
  absl::StatusOr<v1::Project> created = client.CreateProject(project);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::StatusOr<std::vector<v1::Project>> listed = client.ListProjects();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name(), "still-serving");
  // The port is still ours: a connection to it lands on the socket that took it.
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(probe, 0);
  ASSERT_EQ(connect(probe, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const int accepted = accept4(taker, nullptr, nullptr, SOCK_NONBLOCK);
  EXPECT_GE(accepted, 0) << "the connection to port " << taken << " did not reach its owner";
  if (accepted >= 0) close(accepted);
  close(probe);
  ASSERT_TRUE(server.Stop().ok()) << Log(server);
  close(taker);
}

client::VerityClient ClientWithKey(const ServerProcess& server, const std::string& key) {
  client::ClientOptions options;
  options.api_key = key;
  return client::VerityClient(client::CreateInsecureChannel(server.address()), options);
}

// proto/verity/v1/keys.proto: "When the server runs with authentication off (only allowed
// while it listens on loopback only: the development default) every call is admitted and this
// service still works." README: --auth=off on a loopback --listen. Without any key: ordinary
// calls answer, and KeyService creates, lists and revokes keys as documented (the key text
// "vk_<key_id>_<secret>", NOT_FOUND for an unknown key_id, revoking twice a no-op). The keys it
// made are real: once the server runs with authentication on, the writer key writes within its
// project only and the revoked key is UNAUTHENTICATED.
TEST(StartOptionsTest, WithAuthenticationOffEveryCallIsAdmittedKeyServiceIncluded) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-auth-off");
  ASSERT_NE(postgres, nullptr);
  const std::vector<std::string> common = {
      "--metrics_port=0", "--postgres_url=" + postgres->url(),
      "--admin_key_file=" + postgres->dir() + "/admin.key"};
  std::vector<std::string> off = common;
  off.push_back("--auth=off");
  std::string writer_key;
  std::string writer_id;
  std::string revoked_id;
  std::string revoked_key;
  {
    ServerProcess server(RunfilePath("server/verity_server"), postgres->dir(), off);
    ASSERT_TRUE(server.Start().ok()) << Log(server);
    client::VerityClient client = ClientOf(server);  // No key.

    // Ordinary calls without a key.
    v1::Project project;
    project.set_name("open");
    for (const char* c : {"no", "yes"}) project.add_classes(c);
    absl::StatusOr<v1::Project> created = client.CreateProject(project);
    ASSERT_TRUE(created.ok()) << created.status();
    std::vector<v1::Annotation> labels;
    for (const char* annotator : {"w1", "w2"}) {
      v1::Annotation& a = labels.emplace_back();
      a.set_item("item-1");
      a.set_annotator(annotator);
      a.set_label(1);
    }
    absl::StatusOr<client::SubmitTotals> submitted =
        client.SubmitAnnotations("open", labels, client::SubmitOptions());
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    EXPECT_EQ(submitted->accepted, 2);
    absl::StatusOr<std::vector<v1::Posterior>> posteriors =
        client.GetPosteriors("open", std::vector<std::string>{"item-1"});
    ASSERT_TRUE(posteriors.ok()) << posteriors.status();
    ASSERT_EQ(posteriors->size(), 1u);
    EXPECT_EQ((*posteriors)[0].num_labels(), 2);
    absl::StatusOr<std::vector<v1::Project>> listed = client.ListProjects();
    ASSERT_TRUE(listed.ok()) << listed.status();
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ((*listed)[0].name(), "open");

    // KeyService without a key: create.
    v1::CreateKeyRequest writer_request;
    writer_request.set_name("made-with-auth-off");
    writer_request.set_role(v1::ROLE_WRITER);
    writer_request.add_projects("open");
    absl::StatusOr<v1::CreateKeyResponse> writer = client.CreateKey(writer_request);
    ASSERT_TRUE(writer.ok()) << writer.status();
    writer_id = writer->key().key_id();
    writer_key = writer->secret_key();
    EXPECT_EQ(writer_id.size(), 16u) << writer_id;
    EXPECT_TRUE(std::all_of(writer_id.begin(), writer_id.end(),
                            [](unsigned char c) { return std::isxdigit(c); }))
        << writer_id;
    EXPECT_TRUE(absl::StartsWith(writer_key, absl::StrCat("vk_", writer_id, "_")))
        << writer_key;
    EXPECT_GT(writer_key.size(), writer_id.size() + 4) << "no secret in " << writer_key;
    EXPECT_EQ(writer->key().name(), "made-with-auth-off");
    EXPECT_EQ(writer->key().role(), v1::ROLE_WRITER);
    ASSERT_EQ(writer->key().projects_size(), 1);
    EXPECT_EQ(writer->key().projects(0), "open");
    EXPECT_TRUE(writer->key().has_created_at());
    EXPECT_FALSE(writer->key().has_revoked_at());
    v1::CreateKeyRequest reader_request;
    reader_request.set_name("to-revoke");
    reader_request.set_role(v1::ROLE_READER);
    absl::StatusOr<v1::CreateKeyResponse> reader = client.CreateKey(reader_request);
    ASSERT_TRUE(reader.ok()) << reader.status();
    revoked_id = reader->key().key_id();
    revoked_key = reader->secret_key();
    EXPECT_NE(revoked_id, writer_id);

    // List.
    auto ids = [](const std::vector<v1::ApiKey>& keys) {
      std::vector<std::string> out;
      for (const v1::ApiKey& key : keys) out.push_back(key.key_id());
      return out;
    };
    absl::StatusOr<std::vector<v1::ApiKey>> keys = client.ListKeys(/*include_revoked=*/false);
    ASSERT_TRUE(keys.ok()) << keys.status();
    EXPECT_THAT(ids(*keys), ::testing::IsSupersetOf({writer_id, revoked_id}));

    // Revoke: at once; again, a no-op returning it; an unknown key_id, NOT_FOUND.
    absl::StatusOr<v1::ApiKey> revoked = client.RevokeKey(revoked_id);
    ASSERT_TRUE(revoked.ok()) << revoked.status();
    EXPECT_EQ(revoked->key_id(), revoked_id);
    EXPECT_TRUE(revoked->has_revoked_at());
    absl::StatusOr<v1::ApiKey> again = client.RevokeKey(revoked_id);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->key_id(), revoked_id);
    EXPECT_TRUE(again->has_revoked_at());
    EXPECT_EQ(again->revoked_at().seconds(), revoked->revoked_at().seconds());
    EXPECT_EQ(again->revoked_at().nanos(), revoked->revoked_at().nanos());
    std::string unknown = "0123456789abcdef";
    if (unknown == writer_id || unknown == revoked_id) unknown = "fedcba9876543210";
    absl::StatusOr<v1::ApiKey> missing = client.RevokeKey(unknown);
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
    keys = client.ListKeys(/*include_revoked=*/false);
    ASSERT_TRUE(keys.ok()) << keys.status();
    EXPECT_THAT(ids(*keys), ::testing::Contains(writer_id));
    EXPECT_THAT(ids(*keys), ::testing::Not(::testing::Contains(revoked_id)));
    keys = client.ListKeys(/*include_revoked=*/true);
    ASSERT_TRUE(keys.ok()) << keys.status();
    EXPECT_THAT(ids(*keys), ::testing::IsSupersetOf({writer_id, revoked_id}));

    // "Every call is admitted": a call carrying a key that is no key is admitted too.
    absl::StatusOr<std::vector<v1::Project>> with_junk =
        ClientWithKey(server, "vk_0000000000000000_nonsense").ListProjects();
    EXPECT_TRUE(with_junk.ok()) << with_junk.status();
    ASSERT_TRUE(server.Stop().ok()) << Log(server);
  }

  // The same database with authentication on: the keys made with it off are the keys.
  std::vector<std::string> on = common;
  on.push_back("--auth=on");
  ServerProcess server(RunfilePath("server/verity_server"), postgres->dir(), on);
  ASSERT_TRUE(server.Start().ok()) << Log(server);
  absl::StatusOr<std::vector<v1::Project>> anonymous = ClientOf(server).ListProjects();
  EXPECT_EQ(anonymous.status().code(), absl::StatusCode::kUnauthenticated) << anonymous.status();
  client::VerityClient writer = ClientWithKey(server, writer_key);
  v1::Annotation label;
  label.set_item("item-2");
  label.set_annotator("w1");
  label.set_label(0);
  absl::StatusOr<client::SubmitTotals> written =
      writer.SubmitAnnotations("open", std::vector<v1::Annotation>{label}, client::SubmitOptions());
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->accepted, 1);
  v1::Project other;
  other.set_name("not-for-a-writer");
  for (const char* c : {"a", "b"}) other.add_classes(c);
  EXPECT_EQ(writer.CreateProject(other).status().code(), absl::StatusCode::kPermissionDenied);
  // The key revoked with authentication off stays revoked.
  absl::StatusOr<std::vector<v1::Project>> revoked =
      ClientWithKey(server, revoked_key).ListProjects();
  EXPECT_EQ(revoked.status().code(), absl::StatusCode::kUnauthenticated) << revoked.status();
  ASSERT_TRUE(server.Stop().ok()) << Log(server);
}

// A database URL whose unix socket directory does not exist: a server that gets past its flag
// checks fails at once on connecting, instead of starting anything.
constexpr char kNoDatabase[] = "--postgres_url=host=/nonexistent/verity-no-db dbname=none";

// main.cc refuses "a count or a time that would admit nothing (or mean nothing)" at start,
// naming the flag, before any database is touched. README's flag table: the per-project limits,
// --max_concurrent_fits ("in-process fits running at once"), --max_streams and
// --max_leases_per_project are counts of what is admitted (0 admits nothing); --metrics_port
// is 0 (off) or a port; --grpc_memory_mb, --memory_budget_mb and the durations in seconds are
// 0 or more; --load_threads is 0 ("loads every project before serving") or more; --trainer is
// inprocess or workers; --auth=off is "refused unless --listen is loopback-only".
TEST(StartOptionsTest, FlagValuesOutsideTheirDocumentedRangeAreRefusedNamingTheFlag) {
  const std::string dir = MakeTempDir("verity-flag-ranges");
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--max_concurrent_fits=0"},
                                             {"--max_annotators_per_project=0"},
                                             {"--max_confusion_cells_per_project=0"},
                                             {"--max_feature_values_per_project=0"},
                                             {"--max_revisions_per_project=0"},
                                             {"--max_streams=0"},
                                             {"--max_leases_per_project=0"},
                                             {"--metrics_port=-1"},
                                             {"--grpc_memory_mb=-1"},
                                             {"--memory_budget_mb=-1"},
                                             {"--evict_idle_seconds=-1"},
                                             {"--refit_staleness_seconds=-1"},
                                             {"--key_refresh_seconds=-1"},
                                             {"--load_threads=-1"},
                                             {"--trainer=gpu"},
                                             {"--auth=off", "--listen=0.0.0.0:0", "--insecure"}}) {
    const std::string flag = flags[0];
    SCOPED_TRACE(flag);
    std::vector<std::string> args = {kNoDatabase};
    if (flag != "--metrics_port=-1") args.push_back("--metrics_port=0");
    args.insert(args.end(), flags.begin(), flags.end());
    RefusedRun run = RunUntilExit(dir, args, absl::Seconds(10));
    ASSERT_TRUE(run.exited) << run.output;
    EXPECT_NE(run.exit_code, 0) << run.output;
    const std::string name = flag.substr(2, flag.find('=') - 2);
    const std::string named = name == "auth" ? "authentication can be off only" : name;
    EXPECT_TRUE(absl::StrContains(run.output, named)) << "the error does not name " << name << ":\n"
                                                      << run.output;
  }
}

// The edges of the documented ranges are inside: a --listen or --metrics_port of 65535 is a
// port, and 0 is allowed where README gives it a meaning (--grpc_memory_mb "0 = unbounded",
// --memory_budget_mb 0 = none, --load_threads 0, durations of 0 seconds); the smallest counts
// (1) are allowed. None is refused as a bad flag: the server goes on to its database, which
// here does not exist.
TEST(StartOptionsTest, TheEdgesOfTheDocumentedRangesAreAccepted) {
  const std::string dir = MakeTempDir("verity-flag-edges");
  for (const std::string flag :
       {"--listen=localhost:65535", "--metrics_port=65535", "--grpc_memory_mb=0",
        "--memory_budget_mb=0", "--evict_idle_seconds=0", "--refit_staleness_seconds=0",
        "--key_refresh_seconds=0", "--load_threads=0", "--max_concurrent_fits=1",
        "--max_annotators_per_project=1", "--max_confusion_cells_per_project=1",
        "--max_feature_values_per_project=1", "--max_revisions_per_project=1", "--max_streams=1",
        "--max_leases_per_project=1", "--pool_size=1", "--trainer=workers"}) {
    SCOPED_TRACE(flag);
    const std::string name = flag.substr(2, flag.find('=') - 2);
    std::vector<std::string> args = {kNoDatabase, flag};
    if (name != "metrics_port") args.push_back("--metrics_port=0");
    RefusedRun run = RunUntilExit(dir, args, absl::Seconds(10));
    ASSERT_TRUE(run.exited) << run.output;
    EXPECT_NE(run.exit_code, 0) << "no database, yet it ran:\n" << run.output;
    EXPECT_FALSE(absl::StrContains(run.output, name)) << "refused:\n" << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, "verity-no-db")) << run.output;
  }
}

// README's flag table: --log_every_rpc (default false) logs "an event=rpc line for every call;
// by default only failed calls, unary calls of 1 s or more and finished streams";
// --metrics_port=0 "turns both off" (metrics and console): the listening line reports
// metrics_port=0. A quick ListProjects that succeeds is logged only with the flag.
TEST(StartOptionsTest, LogEveryRpcIsOffByDefaultAndMetricsPortZeroServesNoMetrics) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-log-every-rpc");
  ASSERT_NE(postgres, nullptr);
  for (const bool every : {false, true}) {
    SCOPED_TRACE(every ? "--log_every_rpc" : "default");
    std::vector<std::string> flags = {"--metrics_port=0", "--postgres_url=" + postgres->url()};
    if (every) flags.push_back("--log_every_rpc");
    ServerProcess server(RunfilePath("server/verity_server"), postgres->dir(), flags);
    ASSERT_TRUE(server.Start().ok()) << Log(server);
    EXPECT_EQ(CountLines(server, "event=listening", "metrics_port=0"), 1) << Log(server);
    absl::StatusOr<std::vector<v1::Project>> listed = ClientOf(server).ListProjects();
    ASSERT_TRUE(listed.ok()) << listed.status();
    ASSERT_TRUE(server.Stop().ok()) << Log(server);
    EXPECT_EQ(CountLines(server, "event=rpc", "ListProjects"), every ? 1 : 0) << Log(server);
  }
}

// A TCP port on 127.0.0.1 that nothing listened on a moment ago.
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

// README's flag table: --console (default true) serves "the web console beside /metrics;
// false serves /metrics only". The binary's flag reaches the server: GET / is the console page
// by default and 404 with --console=false, while /metrics answers in both.
TEST(StartOptionsTest, ConsoleFlagTurnsTheConsoleOffButKeepsMetrics) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-console-flag");
  ASSERT_NE(postgres, nullptr);
  for (const bool console : {true, false}) {
    SCOPED_TRACE(console ? "default" : "--console=false");
    const int port = UnusedPort();
    ASSERT_GT(port, 0);
    std::vector<std::string> flags = {"--postgres_url=" + postgres->url(),
                                      absl::StrCat("--metrics_port=", port)};
    if (!console) flags.push_back("--console=false");
    ServerProcess server(RunfilePath("server/verity_server"), postgres->dir(), flags);
    ASSERT_TRUE(server.Start().ok()) << Log(server);
    if (CountLines(server, "event=metrics_unavailable", "") > 0) {
      GTEST_SKIP() << "port " << port << " was taken meanwhile";
    }
    absl::StatusOr<::verity::testing::HttpResponse> metrics =
        ::verity::testing::HttpGet(port, "/metrics");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_EQ(metrics->status, 200);
    absl::StatusOr<::verity::testing::HttpResponse> page = ::verity::testing::HttpGet(port, "/");
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->status, console ? 200 : 404) << page->body.substr(0, 200);
    ASSERT_TRUE(server.Stop().ok()) << Log(server);
  }
}

// README's flag table: --grpc_memory_mb is gRPC's quota for calls in flight, "0 = unbounded"
// (--helpfull). A server started with 0 serves calls as one with the default does.
TEST(StartOptionsTest, AGrpcMemoryOfZeroIsUnbounded) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-grpc-memory-0");
  ASSERT_NE(postgres, nullptr);
  ServerProcess server(
      RunfilePath("server/verity_server"), postgres->dir(),
      {"--metrics_port=0", "--postgres_url=" + postgres->url(), "--grpc_memory_mb=0"});
  ASSERT_TRUE(server.Start().ok()) << Log(server);
  client::VerityClient client = ClientOf(server);
  CreateProjectWithItems(client, "unbounded", 2500);
  absl::StatusOr<v1::Project> project = client.GetProject("unbounded");
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ(project->num_items(), 2500);
  ASSERT_TRUE(server.Stop().ok()) << Log(server);
}

// README's flag table: --admin_key_file defaults to DATA_DIR/admin.key: "with authentication
// on and no admin key in the database, the first start writes a new admin key here (mode
// 0600)". Authentication on (0.0.0.0, --auth=auto), no --admin_key_file: the key is in
// --data_dir's admin.key, readable by its owner only, and it is an admin key of the server.
TEST(StartOptionsTest, TheFirstAdminKeyIsWrittenToTheDataDirectoryByDefault) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-admin-key-default");
  ASSERT_NE(postgres, nullptr);
  const std::string data_dir = postgres->dir() + "/var";  // ServerProcess's --data_dir.
  ASSERT_EQ(mkdir(data_dir.c_str(), 0700), 0);
  ServerProcess server(RunfilePath("server/verity_server"), postgres->dir(),
                       {"--metrics_port=0", "--postgres_url=" + postgres->url(),
                        "--listen=0.0.0.0:0", "--insecure"});
  ASSERT_TRUE(server.Start().ok()) << Log(server);
  const std::string path = data_dir + "/admin.key";
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0) << "no " << path << "\n" << Log(server);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  std::ifstream in(path);
  std::string key;
  std::getline(in, key);
  EXPECT_TRUE(absl::IsUnauthenticated(ClientOf(server).ListProjects().status()));
  absl::StatusOr<std::vector<v1::Project>> listed = ClientWithKey(server, key).ListProjects();
  EXPECT_TRUE(listed.ok()) << listed.status();
  ASSERT_TRUE(server.Stop().ok()) << Log(server);
}

// README's flag table: --max_streams is the most "open SubmitAnnotations streams; past it a new
// stream is refused with RESOURCE_EXHAUSTED". The binary's flag reaches the server: with
// --max_streams=1 a second stream is refused while the first stays open.
TEST(StartOptionsTest, MaxStreamsFlagBoundsTheOpenStreams) {
  std::unique_ptr<TestPostgres> postgres = TestPostgres::Start("verity-max-streams-flag");
  ASSERT_NE(postgres, nullptr);
  ServerProcess server(
      RunfilePath("server/verity_server"), postgres->dir(),
      {"--metrics_port=0", "--postgres_url=" + postgres->url(), "--max_streams=1"});
  ASSERT_TRUE(server.Start().ok()) << Log(server);
  client::VerityClient client = ClientOf(server);
  CreateProjectWithItems(client, "streams", 1);
  std::unique_ptr<v1::IngestService::Stub> ingest = v1::IngestService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  uint64_t batch_id = 0;
  // Sends one batch on `stream` and reads its ack; false if the stream ended instead.
  auto round_trip = [&](grpc::ClientReaderWriter<v1::AnnotationBatch, v1::BatchAck>& stream) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(++batch_id);
    batch.set_project("streams");
    v1::Annotation* annotation = batch.add_annotations();
    annotation->set_item("item-0");
    annotation->set_annotator(absl::StrCat("a", batch_id));
    annotation->set_label(1);
    v1::BatchAck ack;
    return stream.Write(batch) && stream.Read(&ack) && ack.error_code() == 0;
  };
  grpc::ClientContext first_context;
  first_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto first = ingest->SubmitAnnotations(&first_context);
  ASSERT_TRUE(round_trip(*first));
  grpc::ClientContext second_context;
  second_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto second = ingest->SubmitAnnotations(&second_context);
  EXPECT_FALSE(round_trip(*second)) << "a second stream was admitted with --max_streams=1";
  const grpc::Status refused = second->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_TRUE(round_trip(*first)) << "the open stream stopped working";
  first->WritesDone();
  v1::BatchAck ack;
  while (first->Read(&ack)) {
  }
  EXPECT_TRUE(first->Finish().ok());
  ASSERT_TRUE(server.Stop().ok()) << Log(server);
}

}  // namespace
}  // namespace verity::tests
