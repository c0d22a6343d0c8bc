// Restarts (SIGKILL and SIGTERM of the verity_server binary on its embedded PostgreSQL), a
// frozen PostgreSQL, and what the metrics port and the web console show meanwhile, against the
// documented promises (each test quotes the sentence it checks). From a black-box probe: the
// tests of the defects it found (annotator accuracy after a restart, a project the memory
// budget unloaded, a scrape behind console views on a hung database) and a few of the promises
// it found kept that no other test covers end to end.
#include <arpa/inet.h>
#include <dirent.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "server/testing/http_get.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/health_check.h"
#include "tests/frozen_postgres.h"
#include "tests/server_process.h"
#include "tests/test_server.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::tests {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers.

// A TCP port of 127.0.0.1 free at the time of the call.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return 0;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

// One scrape of /metrics: series (`name{labels}` as written) -> value.
using Scrape = std::map<std::string, double>;

Scrape ParseMetrics(const std::string& text) {
  Scrape scrape;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    double value = 0;
    if (!absl::SimpleAtod(line.substr(space + 1), &value)) continue;
    scrape[std::string(line.substr(0, space))] = value;
  }
  return scrape;
}

absl::StatusOr<Scrape> ScrapeMetrics(int port) {
  absl::StatusOr<testing::HttpResponse> response = testing::HttpGet(port, "/metrics");
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::InternalError(absl::StrCat("/metrics answered ", response->status));
  }
  return ParseMetrics(response->body);
}

double ValueOr(const Scrape& scrape, const std::string& series, double missing = -1) {
  auto it = scrape.find(series);
  return it == scrape.end() ? missing : it->second;
}

client::VerityClient ClientOf(const ServerProcess& server, const std::string& key = "") {
  client::ClientOptions options;
  options.api_key = key;
  return client::VerityClient(client::CreateInsecureChannel(server.address()), options);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

v1::Project TwoClassProject(const std::string& name, v1::TruthMethod method) {
  v1::Project project;
  project.set_name(name);
  project.add_classes("no");
  project.add_classes("yes");
  project.mutable_settings()->mutable_model()->set_method(method);
  return project;
}

// 30 items x 5 annotators, with annotator w4 mostly wrong (so that ds learns something).
std::vector<LabelTriple> FirstLabels() {
  std::vector<LabelTriple> labels;
  for (int i = 0; i < 30; ++i) {
    const int truth = i % 2;
    for (int w = 0; w < 5; ++w) {
      int label = truth;
      if (w == 4 && i % 3 != 0) label = 1 - truth;
      if (w == 3 && i % 7 == 0) label = 1 - truth;
      labels.emplace_back(absl::StrCat("item-", i), absl::StrCat("w", w), label);
    }
  }
  return labels;
}

// After the fit: new items, new labels on old items by a new annotator, and revisions.
std::vector<LabelTriple> LaterLabels() {
  std::vector<LabelTriple> labels;
  for (int i = 30; i < 36; ++i) {
    for (int w = 0; w < 3; ++w) labels.emplace_back(absl::StrCat("item-", i), absl::StrCat("w", w), 1);
  }
  for (int i = 0; i < 8; ++i) labels.emplace_back(absl::StrCat("item-", i), "w5", i % 2);
  return labels;
}
std::vector<LabelTriple> Revisions() {
  // w2 changes its mind on three items (revised, not new).
  return {{"item-0", "w2", 1}, {"item-1", "w2", 0}, {"item-2", "w2", 1}};
}

absl::StatusOr<client::SubmitTotals> Submit(client::VerityClient& client,
                                            const std::string& project,
                                            const std::vector<LabelTriple>& labels) {
  return client.SubmitAnnotations(project, Annotations(labels), client::SubmitOptions{});
}

std::vector<v1::Posterior> AllPosteriors(client::VerityClient& client, const std::string& project) {
  std::vector<v1::Posterior> all;
  std::string token;
  do {
    absl::StatusOr<v1::ListPosteriorsResponse> page = client.ListPosteriors(project, 1000, token);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    for (const v1::Posterior& p : page->posteriors()) all.push_back(p);
    token = page->next_page_token();
  } while (!token.empty());
  return all;
}

// Everything a client can read about one project, to compare before and after a restart.
struct ServedState {
  v1::Project project;
  v1::GetModelStatusResponse status;
  std::vector<v1::ModelVersion> versions;
  std::vector<v1::Posterior> posteriors;
  std::vector<v1::AnnotatorProfile> profiles;
};

ServedState ReadServedState(client::VerityClient& client, const std::string& name) {
  ServedState state;
  absl::StatusOr<v1::Project> project = client.GetProject(name);
  EXPECT_TRUE(project.ok()) << project.status();
  if (project.ok()) state.project = *project;
  absl::StatusOr<v1::GetModelStatusResponse> status = client.GetModelStatus(name);
  EXPECT_TRUE(status.ok()) << status.status();
  if (status.ok()) state.status = *status;
  absl::StatusOr<std::vector<v1::ModelVersion>> versions = client.ListModelVersions(name, 0);
  EXPECT_TRUE(versions.ok()) << versions.status();
  if (versions.ok()) state.versions = *versions;
  state.posteriors = AllPosteriors(client, name);
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> profiles =
      client.GetAnnotatorProfiles(name, {});
  EXPECT_TRUE(profiles.ok()) << profiles.status();
  if (profiles.ok()) state.profiles = *profiles;
  return state;
}

// A project of method ds with a first fit and later labels (new and revised) after it, and
// changed settings.
void LoadProjectWithAFitAndLaterLabels(client::VerityClient& client, const std::string& name) {
  absl::StatusOr<v1::Project> created =
      client.CreateProject(TwoClassProject(name, v1::TRUTH_METHOD_DAWID_SKENE));
  ASSERT_TRUE(created.ok()) << created.status();
  absl::StatusOr<client::SubmitTotals> first = Submit(client, name, FirstLabels());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->accepted, 150);
  absl::StatusOr<v1::ModelVersion> fit = client.TrainModel(name, absl::Seconds(60));
  ASSERT_TRUE(fit.ok()) << fit.status();
  ASSERT_EQ(fit->version(), 1);
  absl::StatusOr<client::SubmitTotals> later = Submit(client, name, LaterLabels());
  ASSERT_TRUE(later.ok()) << later.status();
  ASSERT_EQ(later->accepted, 26);
  absl::StatusOr<client::SubmitTotals> revised = Submit(client, name, Revisions());
  ASSERT_TRUE(revised.ok()) << revised.status();
  ASSERT_EQ(revised->revised, 3);
  // Settings changed last, just before the kill.
  v1::ProjectSettings settings = created->settings();
  settings.mutable_model()->set_confusion_smoothing(0.25);
  settings.mutable_assignment()->set_max_labels_per_item(7);
  settings.mutable_assignment()->set_lease_seconds(1234);
  absl::StatusOr<v1::Project> updated = client.UpdateProjectSettings(name, settings);
  ASSERT_TRUE(updated.ok()) << updated.status();
}

// ---------------------------------------------------------------------------------------------
// Restarts of the server binary.

class RestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("verity-probe-restart");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (server_ != nullptr && server_->pid() > 0) {
      EXPECT_TRUE(server_->Stop().ok()) << "see " << server_->log_path();
    }
    server_.reset();
    RemoveTree(dir_);
  }
  void StartServer(std::vector<std::string> flags) {
    metrics_port_ = FreePort();
    flags.push_back(absl::StrCat("--metrics_port=", metrics_port_));
    server_ = std::make_unique<ServerProcess>(RunfilePath("server/verity_server"), dir_, flags);
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started << "\n" << ReadFile(server_->log_path());
  }
  void Restart() {
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started << "\n" << ReadFile(server_->log_path());
  }

  std::string dir_;
  int metrics_port_ = 0;
  std::unique_ptr<ServerProcess> server_;
};

// deploy/README.md, "Monitoring": "Live labels per project | verity_project_labels", "Refit lag
// ... the label changes committed since the fit of the served model version
// (verity_project_labels_since_model)", "served version | verity_model_version"; README.md
// flag table: "--pool_size | 8"; "--load_threads ... the gauge verity_projects_loading counts
// down to 0". After a SIGKILL and restart the gauges say what the API says.
TEST_F(RestartTest, AfterASigkillTheDashboardGaugesMatchTheServedState) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}));
  client::VerityClient client = ClientOf(*server_);
  ASSERT_NO_FATAL_FAILURE(LoadProjectWithAFitAndLaterLabels(client, "gauged"));
  absl::StatusOr<Scrape> before = ScrapeMetrics(metrics_port_);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(ValueOr(*before, "verity_model_version{project=\"gauged\"}"), 1);
  EXPECT_EQ(ValueOr(*before, "verity_project_labels{project=\"gauged\"}"), 176);
  EXPECT_EQ(ValueOr(*before, "verity_project_labels_since_model{project=\"gauged\"}"), 29);
  server_->Kill();
  ASSERT_NO_FATAL_FAILURE(Restart());
  absl::StatusOr<Scrape> after = ScrapeMetrics(metrics_port_);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(ValueOr(*after, "verity_model_version{project=\"gauged\"}"), 1);
  EXPECT_EQ(ValueOr(*after, "verity_project_labels{project=\"gauged\"}"), 176);
  EXPECT_EQ(ValueOr(*after, "verity_project_labels_since_model{project=\"gauged\"}"), 29);
  EXPECT_EQ(ValueOr(*after, "verity_projects_loading"), 0);
  EXPECT_EQ(ValueOr(*after, "verity_db_pool_connections{state=\"max\"}"), 8);
  // README.md, "Web console": per project "the model versions with training time and
  // log-likelihood".
  absl::StatusOr<testing::HttpResponse> console = testing::HttpGet(metrics_port_, "/api/projects/gauged");
  ASSERT_TRUE(console.ok()) << console.status();
  EXPECT_THAT(console->body, ::testing::HasSubstr("\"model_version\":1")) << console->body;
  EXPECT_THAT(console->body, ::testing::HasSubstr("\"labels_since_version\":29")) << console->body;
  absl::StatusOr<testing::Health> loaded = testing::CheckHealth(
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()),
      "verity.v1.ProjectsLoaded");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, testing::Health::kServing);
}

// README.md, "API keys" and flag table: "--admin_key_file ... the first start writes a new admin
// key here"; docs/RELIABILITY.md, Security: "A revoked key is refused at once ... The bootstrap
// admin key file is mode 0600, and a second server on the same database writes no new key".
// After a SIGKILL and restart: a key created before the kill authenticates, a key revoked before
// it stays refused, and the bootstrap key is the same.
TEST_F(RestartTest, KeysCreatedAndRevokedJustBeforeASigkillStaySoAfterTheRestart) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--auth=on"}));
  const std::string key_file = dir_ + "/var/admin.key";
  std::string admin = ReadFile(key_file);
  while (!admin.empty() && (admin.back() == '\n' || admin.back() == ' ')) admin.pop_back();
  ASSERT_FALSE(admin.empty()) << "no bootstrap key at " << key_file;
  std::string writer, revoked;
  {
    client::VerityClient client = ClientOf(*server_, admin);
    ASSERT_TRUE(client.CreateProject(TwoClassProject("keyed", v1::TRUTH_METHOD_DAWID_SKENE)).ok());
    v1::CreateKeyRequest request;
    request.set_role(v1::ROLE_WRITER);
    request.add_projects("keyed");
    request.set_name("kept");
    absl::StatusOr<v1::CreateKeyResponse> kept = client.CreateKey(request);
    ASSERT_TRUE(kept.ok()) << kept.status();
    writer = kept->secret_key();
    request.set_name("revoked");
    absl::StatusOr<v1::CreateKeyResponse> gone = client.CreateKey(request);
    ASSERT_TRUE(gone.ok()) << gone.status();
    revoked = gone->secret_key();
    ASSERT_TRUE(client.RevokeKey(gone->key().key_id()).ok());
  }
  server_->Kill();
  ASSERT_NO_FATAL_FAILURE(Restart());
  std::string admin_after = ReadFile(key_file);
  while (!admin_after.empty() && (admin_after.back() == '\n' || admin_after.back() == ' ')) {
    admin_after.pop_back();
  }
  EXPECT_EQ(admin_after, admin) << "the restart wrote a new bootstrap key";
  EXPECT_TRUE(ClientOf(*server_, admin).GetProject("keyed").ok());
  client::VerityClient writer_client = ClientOf(*server_, writer);
  absl::StatusOr<client::SubmitTotals> wrote = Submit(writer_client, "keyed", {{"i", "w", 1}});
  EXPECT_TRUE(wrote.ok()) << wrote.status();
  absl::StatusOr<v1::Project> refused = ClientOf(*server_, revoked).GetProject("keyed");
  EXPECT_TRUE(absl::IsUnauthenticated(refused.status())) << refused.status();
}

// deploy/README.md, "Monitoring": "Live labels per project | verity_project_labels"; README.md,
// "Web console": "open http://127.0.0.1:9464/ for the projects (classes, items, annotators,
// labels, ...)", and the flag table: --memory_budget_mb unloads idle projects, and "ListProjects
// ... shows an unloaded project from its stored record". A project unloaded by the memory
// budget is still a project: the console lists it and the labels gauge keeps its series.
TEST_F(RestartTest, AProjectUnloadedByTheMemoryBudgetStaysInTheConsoleAndTheLabelsGauge) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"--memory_budget_mb=1", "--evict_idle_seconds=0"}));
  client::VerityClient client = ClientOf(*server_);
  ASSERT_TRUE(client.CreateProject(TwoClassProject("big", v1::TRUTH_METHOD_DAWID_SKENE)).ok());
  std::vector<v1::Item> items(5000);
  for (int i = 0; i < 5000; ++i) items[i].set_id(absl::StrCat("item-", i));
  ASSERT_TRUE(client.AddItems("big", items).ok());
  ASSERT_TRUE(Submit(client, "big", {{"item-0", "w", 1}, {"item-1", "w", 0}}).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!absl::StrContains(ReadFile(server_->log_path()), "event=project_evicted") &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(absl::StrContains(ReadFile(server_->log_path()), "event=project_evicted"))
      << ReadFile(server_->log_path());
  absl::StatusOr<std::vector<v1::Project>> listed = client.ListProjects();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u) << "ListProjects shows the unloaded project";
  absl::StatusOr<testing::HttpResponse> console = testing::HttpGet(metrics_port_, "/api/projects");
  ASSERT_TRUE(console.ok()) << console.status();
  EXPECT_THAT(console->body, ::testing::HasSubstr("\"name\":\"big\""))
      << "the console's project list lost the unloaded project: " << console->body;
  absl::StatusOr<Scrape> scrape = ScrapeMetrics(metrics_port_);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(ValueOr(*scrape, "verity_project_labels{project=\"big\"}"), 2)
      << "verity_project_labels has no series for the unloaded project";
  EXPECT_EQ(ValueOr(*scrape, "verity_model_version{project=\"big\"}"), 0)
      << "verity_model_version has no series for the unloaded project";
}

// proto/verity/v1/truth.proto, AnnotatorProfile.accuracy: "Probability of a correct label under
// the current class prior: sum_k prior_k * confusion[k][k]"; docs/RELIABILITY.md: "A clean
// restart then serves bit-identical posteriors". A clean restart changes neither the labels,
// the served version, its confusion matrices nor the posteriors, so the accuracy served for the
// same state is the same before and after it. Three projects with the same fit: one left alone,
// one with labels and revisions after the fit, one with only a settings change after it.
TEST_F(RestartTest, ACleanRestartServesTheSameAnnotatorProfilesOfTheSameVersion) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}));
  client::VerityClient client = ClientOf(*server_);
  for (const char* name : {"fit-only", "later-labels", "later-settings"}) {
    ASSERT_TRUE(client.CreateProject(TwoClassProject(name, v1::TRUTH_METHOD_DAWID_SKENE)).ok());
    ASSERT_TRUE(Submit(client, name, FirstLabels()).ok());
    ASSERT_TRUE(client.TrainModel(name, absl::Seconds(60)).ok());
  }
  ASSERT_TRUE(Submit(client, "later-labels", LaterLabels()).ok());
  ASSERT_TRUE(Submit(client, "later-labels", Revisions()).ok());
  {
    absl::StatusOr<v1::Project> project = client.GetProject("later-settings");
    ASSERT_TRUE(project.ok());
    v1::ProjectSettings settings = project->settings();
    settings.mutable_model()->set_confusion_smoothing(0.25);
    ASSERT_TRUE(client.UpdateProjectSettings("later-settings", settings).ok());
  }
  std::map<std::string, ServedState> before;
  for (const char* name : {"fit-only", "later-labels", "later-settings"}) {
    before[name] = ReadServedState(client, name);
  }
  ASSERT_TRUE(server_->Stop().ok());
  ASSERT_NO_FATAL_FAILURE(Restart());
  client::VerityClient again = ClientOf(*server_);
  for (const char* name : {"fit-only", "later-labels", "later-settings"}) {
    SCOPED_TRACE(name);
    const ServedState after = ReadServedState(again, name);
    ASSERT_EQ(after.status.current_version().version(), 1);
    ASSERT_EQ(after.profiles.size(), before[name].profiles.size());
    for (size_t a = 0; a < after.profiles.size(); ++a) {
      const v1::AnnotatorProfile& x = before[name].profiles[a];
      const v1::AnnotatorProfile& y = after.profiles[a];
      ASSERT_EQ(x.annotator(), y.annotator());
      EXPECT_EQ(y.accuracy(), x.accuracy()) << x.annotator();
      EXPECT_EQ(y.confusion().SerializeAsString(), x.confusion().SerializeAsString())
          << x.annotator() << " before: " << x.confusion().ShortDebugString()
          << " after: " << y.confusion().ShortDebugString();
    }
  }
}

// README.md: the server "keeps every label durably in PostgreSQL"; proto/verity/v1/ingest.proto:
// "acked means durable"; README.md: "A server killed with SIGKILL does no shutdown work, so its
// PostgreSQL keeps running; the next start ... reuses it". Here the embedded PostgreSQL dies
// too (SIGKILL of the postmaster and its children, as in a crash of the machine's processes):
// the next start recovers the cluster and serves every acked label.
TEST_F(RestartTest, AfterTheServerAndItsPostgresAreBothKilledTheNextStartServesEveryAckedLabel) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}));
  client::VerityClient client = ClientOf(*server_);
  ASSERT_TRUE(client.CreateProject(TwoClassProject("crash", v1::TRUTH_METHOD_DAWID_SKENE)).ok());
  absl::StatusOr<client::SubmitTotals> acked = Submit(client, "crash", FirstLabels());
  ASSERT_TRUE(acked.ok()) << acked.status();
  server_->Kill();
  const std::string pgdata = dir_ + "/var/pgdata";
  pid_t postmaster = 0;
  {
    std::ifstream pid_file(pgdata + "/postmaster.pid");
    pid_file >> postmaster;
  }
  ASSERT_GT(postmaster, 0) << "no postmaster.pid in " << pgdata;
  // The children first (they would exit on the postmaster's death anyway), then the postmaster.
  std::vector<pid_t> children;
  {
    std::ifstream list(absl::StrCat("/proc/", postmaster, "/task/", postmaster, "/children"));
    for (pid_t pid; list >> pid;) children.push_back(pid);
  }
  kill(postmaster, SIGKILL);
  for (pid_t pid : children) kill(pid, SIGKILL);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (kill(postmaster, 0) == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(50));
  for (pid_t pid : children) {
    while (kill(pid, 0) == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(50));
  }
  absl::SleepFor(absl::Milliseconds(500));
  ASSERT_NO_FATAL_FAILURE(Restart());
  client::VerityClient again = ClientOf(*server_);
  absl::StatusOr<v1::Project> project = again.GetProject("crash");
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ(project->num_labels(), 150);
}

// README.md: "A server killed with SIGKILL ... nothing acked is lost"; projects.proto, Item:
// gold_label; truth.proto, Posterior.is_gold: "The item has a gold label; the posterior is
// clamped to it". Gold items added (and a gold label changed) just before a SIGKILL are gold
// after the restart.
TEST_F(RestartTest, GoldLabelsWrittenJustBeforeASigkillAreServedAfterTheRestart) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}));
  client::VerityClient client = ClientOf(*server_);
  ASSERT_TRUE(client.CreateProject(TwoClassProject("golden", v1::TRUTH_METHOD_DAWID_SKENE)).ok());
  ASSERT_TRUE(Submit(client, "golden", FirstLabels()).ok());
  std::vector<v1::Item> gold(3);
  for (int i = 0; i < 3; ++i) {
    gold[i].set_id(absl::StrCat("item-", i));
    gold[i].set_gold_label(1 - i % 2);  // Against the crowd's majority.
  }
  ASSERT_TRUE(client.AddItems("golden", gold).ok());
  server_->Kill();
  ASSERT_NO_FATAL_FAILURE(Restart());
  absl::StatusOr<std::vector<v1::Posterior>> served =
      ClientOf(*server_).GetPosteriors("golden", {"item-0", "item-1", "item-2", "item-3"});
  ASSERT_TRUE(served.ok()) << served.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE((*served)[i].is_gold()) << i;
    EXPECT_EQ((*served)[i].map_label(), 1 - i % 2) << i;
    EXPECT_EQ((*served)[i].confidence(), 1.0) << i;
  }
  EXPECT_FALSE((*served)[3].is_gold());
}

// server/observability/README.md: "`rpc_telemetry.h`: `RpcTelemetryFactory`, the gRPC
// interceptor that counts, times and logs every call"; deploy/README.md, "Monitoring": "Errors
// by code | verity_rpc_total (`code != "OK"`)". With authentication on, a call without a key
// and a call outside the key's projects are counted under their codes.
TEST_F(RestartTest, CallsRefusedByAuthenticationAreCountedByCode) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--auth=on"}));
  std::string admin = ReadFile(dir_ + "/var/admin.key");
  while (!admin.empty() && (admin.back() == '\n' || admin.back() == ' ')) admin.pop_back();
  client::VerityClient client = ClientOf(*server_, admin);
  ASSERT_TRUE(client.CreateProject(TwoClassProject("mine", v1::TRUTH_METHOD_DAWID_SKENE)).ok());
  ASSERT_TRUE(client.CreateProject(TwoClassProject("theirs", v1::TRUTH_METHOD_DAWID_SKENE)).ok());
  v1::CreateKeyRequest request;
  request.set_role(v1::ROLE_READER);
  request.add_projects("mine");
  absl::StatusOr<v1::CreateKeyResponse> reader = client.CreateKey(request);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<Scrape> before = ScrapeMetrics(metrics_port_);
  ASSERT_TRUE(before.ok()) << before.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(absl::IsUnauthenticated(ClientOf(*server_).GetProject("mine").status()));
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(absl::IsPermissionDenied(
        ClientOf(*server_, reader->secret_key()).GetProject("theirs").status()));
  }
  absl::SleepFor(absl::Milliseconds(200));
  absl::StatusOr<Scrape> after = ScrapeMetrics(metrics_port_);
  ASSERT_TRUE(after.ok()) << after.status();
  const std::string unauthenticated =
      "verity_rpc_total{method=\"/verity.v1.ProjectService/GetProject\",code=\"UNAUTHENTICATED\"}";
  const std::string denied =
      "verity_rpc_total{method=\"/verity.v1.ProjectService/GetProject\",code=\"PERMISSION_DENIED\"}";
  EXPECT_EQ(ValueOr(*after, unauthenticated, 0) - ValueOr(*before, unauthenticated, 0), 3);
  EXPECT_EQ(ValueOr(*after, denied, 0) - ValueOr(*before, denied, 0), 2);
}

// GetModelStatus's current_version is the served version as ListModelVersions lists it, every
// field (models.proto: the served version's record; kept in memory, docs/RELIABILITY.md).
void ExpectStatusShowsTheNewestListedVersion(client::VerityClient& client,
                                             const std::string& project) {
  absl::StatusOr<v1::GetModelStatusResponse> status = client.GetModelStatus(project);
  ASSERT_TRUE(status.ok()) << status.status();
  absl::StatusOr<std::vector<v1::ModelVersion>> versions = client.ListModelVersions(project, 0);
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_FALSE(versions->empty());
  EXPECT_GT(status->current_version().iterations(), 0);
  EXPECT_GT(status->current_version().created_at().seconds(), 0);
  EXPECT_EQ(status->current_version().SerializeAsString(), (*versions)[0].SerializeAsString())
      << "status: " << status->current_version().ShortDebugString()
      << "\nlisted: " << (*versions)[0].ShortDebugString();
}

// models.proto, ModelVersion.version: "1, 2, ... per project". A SIGKILL right after a
// TrainModel answered version 2 keeps versions 1 and 2, and the next fit after the restart is
// version 3. GetModelStatus shows the newest version, as listed, before and after.
TEST_F(RestartTest, VersionNumbersContinueAfterASigkill) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}));
  client::VerityClient client = ClientOf(*server_);
  ASSERT_TRUE(client.CreateProject(TwoClassProject("numbered", v1::TRUTH_METHOD_DAWID_SKENE)).ok());
  ASSERT_TRUE(Submit(client, "numbered", FirstLabels()).ok());
  ASSERT_TRUE(client.TrainModel("numbered", absl::Seconds(60)).ok());
  ASSERT_TRUE(Submit(client, "numbered", LaterLabels()).ok());
  absl::StatusOr<v1::ModelVersion> second = client.TrainModel("numbered", absl::Seconds(60));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->version(), 2);
  ASSERT_NO_FATAL_FAILURE(ExpectStatusShowsTheNewestListedVersion(client, "numbered"));
  server_->Kill();
  ASSERT_NO_FATAL_FAILURE(Restart());
  client::VerityClient again = ClientOf(*server_);
  ASSERT_NO_FATAL_FAILURE(ExpectStatusShowsTheNewestListedVersion(again, "numbered"));
  absl::StatusOr<std::vector<v1::ModelVersion>> versions = again.ListModelVersions("numbered", 0);
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_EQ(versions->size(), 2u);
  EXPECT_EQ((*versions)[0].version(), 2);
  EXPECT_EQ((*versions)[1].version(), 1);
  ASSERT_TRUE(Submit(again, "numbered", Revisions()).ok());
  absl::StatusOr<v1::ModelVersion> third = again.TrainModel("numbered", absl::Seconds(60));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->version(), 3);
}

// ---------------------------------------------------------------------------------------------
// A PostgreSQL that hangs (tests/frozen_postgres.h).

// docs/RELIABILITY.md, "Stopped PostgreSQL": "Queries of in-memory state keep answering";
// README.md: "Prometheus metrics at `GET http://ADDRESS:PORT/metrics`" beside the console, whose
// page "Every 5 s ... re-reads the project list and the open view" (server/console/README.md).
// With PostgreSQL frozen, two console views of a project with gold items (whose labels the
// console reads from PostgreSQL) are open at once; a Prometheus scrape of /metrics still answers
// within 3 s.
TEST(HungDatabaseTest, ConsoleViewsWaitingOnAHungDatabaseDoNotBlockTheMetricsScrape) {
  const std::string dir = MakeTempDir("verity-probe-hung2");
  storage::EmbeddedPostgres::Options pg;
  pg.data_dir = dir + "/pg";
  auto postgres = storage::EmbeddedPostgres::Start(pg);
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  server::VerityServer::Options options = TestServerOptions((*postgres)->connection_url(), 4);
  options.metrics_listen = "127.0.0.1:0";
  options.db_timeout = absl::Seconds(20);
  auto started = server::VerityServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<server::VerityServer> server = *std::move(started);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  client::VerityClient client(channel, {});
  for (const char* name : {"gold-a", "gold-b"}) {
    ASSERT_TRUE(client.CreateProject(TwoClassProject(name, v1::TRUTH_METHOD_DAWID_SKENE)).ok());
    std::vector<v1::Item> gold(4);
    for (int i = 0; i < 4; ++i) {
      gold[i].set_id(absl::StrCat("item-", i));
      gold[i].set_gold_label(i % 2);
    }
    ASSERT_TRUE(client.AddItems(name, gold).ok());
    ASSERT_TRUE(Submit(client, name, FirstLabels()).ok());
  }
  const int port = server->metrics_port();
  {
    FrozenPostgres frozen(pg.data_dir + "/pgdata");
    ASSERT_GT(frozen.processes(), 1);
    std::vector<std::thread> views;
    std::vector<int> codes(2, 0);
    for (int v = 0; v < 2; ++v) {
      views.emplace_back([&, v] {
        absl::StatusOr<testing::HttpResponse> r =
            testing::HttpGet(port, v == 0 ? "/api/projects/gold-a" : "/api/projects/gold-b");
        codes[v] = r.ok() ? r->status : -1;
      });
    }
    absl::SleepFor(absl::Milliseconds(500));
    const absl::Time t = absl::Now();
    absl::StatusOr<testing::HttpResponse> metrics = testing::HttpGet(port, "/metrics");
    const absl::Duration took = absl::Now() - t;
    EXPECT_TRUE(metrics.ok() && metrics->status == 200);
    EXPECT_LT(took, absl::Seconds(3))
        << "GET /metrics waited " << took << " behind console views stuck on the database";
    frozen.Thaw();
    for (auto& view : views) view.join();
  }
  server->Shutdown();
  server.reset();
  EXPECT_TRUE((*postgres)->Stop().ok());
  RemoveTree(dir);
}

// docs/RELIABILITY.md, "Stopped PostgreSQL": "Queries of in-memory state keep answering";
// deploy/README.md, "Sizing": "queries answer from memory". A single replica
// (--follow_replicas=false: with replicas SuggestAnnotators reads the other replicas' lease
// claims first, deploy/README.md "Several replicas"). With PostgreSQL frozen (no call stuck in
// it), ListPosteriors, GetAnnotatorProfiles, SuggestAnnotators and GetModelStatus answer within
// 3 s.
TEST(HungDatabaseTest, ReadQueriesAnswerWhilePostgresIsFrozen) {
  const std::string dir = MakeTempDir("verity-probe-hung3");
  storage::EmbeddedPostgres::Options pg;
  pg.data_dir = dir + "/pg";
  auto postgres = storage::EmbeddedPostgres::Start(pg);
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  server::VerityServer::Options options = TestServerOptions((*postgres)->connection_url(), 2);
  options.db_timeout = absl::Seconds(8);
  options.follow_replicas = false;
  auto started = server::VerityServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<server::VerityServer> server = *std::move(started);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  client::ClientOptions client_options;
  client_options.deadline = absl::Seconds(15);
  client::VerityClient client(channel, client_options);
  ASSERT_TRUE(client.CreateProject(TwoClassProject("frozen", v1::TRUTH_METHOD_DAWID_SKENE)).ok());
  ASSERT_TRUE(Submit(client, "frozen", FirstLabels()).ok());
  ASSERT_TRUE(client.TrainModel("frozen", absl::Seconds(60)).ok());
  {
    FrozenPostgres frozen(pg.data_dir + "/pgdata");
    ASSERT_GT(frozen.processes(), 1);
    auto timed = [](const char* what, auto call) {
      const absl::Time t = absl::Now();
      const absl::Status status = call();
      const absl::Duration took = absl::Now() - t;
      std::cerr << what << ": " << status << " in " << took << "\n";
      return std::make_pair(status, took);
    };
    auto list = timed("ListPosteriors", [&] { return client.ListPosteriors("frozen", 100, "").status(); });
    EXPECT_TRUE(list.first.ok()) << list.first;
    EXPECT_LT(list.second, absl::Seconds(3));
    auto profiles = timed("GetAnnotatorProfiles", [&] {
      return client.GetAnnotatorProfiles("frozen", {"w0", "w1"}).status();
    });
    EXPECT_TRUE(profiles.first.ok()) << profiles.first;
    EXPECT_LT(profiles.second, absl::Seconds(3));
    auto suggest = timed("SuggestAnnotators", [&] {
      return client.SuggestAnnotators("frozen", "item-0", 2, {"w0", "w1", "w9"}).status();
    });
    EXPECT_TRUE(suggest.first.ok()) << suggest.first;
    EXPECT_LT(suggest.second, absl::Seconds(3));
    // The served version's status is in memory too (ListModelVersions and ListProjects read
    // the stored records, and wait for the database).
    auto status = timed("GetModelStatus", [&] { return client.GetModelStatus("frozen").status(); });
    EXPECT_TRUE(status.first.ok()) << status.first;
    EXPECT_LT(status.second, absl::Seconds(3));
    frozen.Thaw();
  }
  server->Shutdown();
  server.reset();
  EXPECT_TRUE((*postgres)->Stop().ok());
  RemoveTree(dir);
}

}  // namespace
}  // namespace verity::tests
