// Black-box probe of the metrics HTTP port: /metrics (deploy/README.md "Monitoring",
// deploy/prometheus/verity-alerts.yaml), the web console's page and JSON
// (server/console/README.md, server/console/console.h) and docs/SECURITY.md "What the HTTP
// port exposes", against an in-process VerityServer on an embedded PostgreSQL. Each test checks
// one documented promise, quoted above it; expected values come from the documents.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "server/testing/http_get.h"
#include "server/verity_server.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/keys.grpc.pb.h"

namespace verity::tests {
namespace {

using ::verity::testing::HttpGet;
using ::verity::testing::HttpRequest;
using ::verity::testing::HttpResponse;

constexpr char kAllowedHost[] = "console.verity.example";

// Series `name{labels}` → value of one scrape, and the families typed in it.
struct Scrape {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  bool Has(const std::string& series) const { return samples.count(series) > 0; }
  double Value(const std::string& series) const {
    auto it = samples.find(series);
    return it == samples.end() ? -1 : it->second;
  }
};

Scrape Parse(const std::string& text) {
  Scrape scrape;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() == 4) scrape.types[parts[2]] = parts[3];
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    double value = 0;
    if (!absl::SimpleAtod(line.substr(space + 1), &value)) value = 0;
    scrape.samples[std::string(line.substr(0, space))] = value;
  }
  return scrape;
}

// The integer value of the first `"key":N` in `json` at or after `from`; -1 if none.
int64_t IntField(const std::string& json, const std::string& key, size_t from = 0) {
  std::smatch match;
  const std::string rest = json.substr(std::min(from, json.size()));
  if (!std::regex_search(rest, match, std::regex("\"" + key + "\"\\s*:\\s*(-?[0-9]+)"))) {
    return -1;
  }
  return std::stoll(match[1].str());
}

// The number of the first `"key":X` in `json` at or after `from`; NaN if none.
double DoubleField(const std::string& json, const std::string& key, size_t from = 0) {
  std::smatch match;
  const std::string rest = json.substr(std::min(from, json.size()));
  if (!std::regex_search(rest, match, std::regex("\"" + key + "\"\\s*:\\s*(-?[0-9.eE+-]+)"))) {
    return std::nan("");
  }
  return std::stod(match[1].str());
}

// The part of `/api/projects`' JSON from project `name`'s entry on (to the next "name").
std::string ProjectEntry(const std::string& json, const std::string& name) {
  const std::string anchor = absl::StrCat("\"name\":\"", name, "\"");
  const size_t start = json.find(anchor);
  if (start == std::string::npos) return "";
  const size_t next = json.find("\"name\":", start + anchor.size());
  return json.substr(start, next == std::string::npos ? std::string::npos : next - start);
}

class ConsoleProbeTest : public ::testing::Test {
 public:
  static client::VerityClient& Client() { return *client_; }
  static std::string Page(const std::string& path) { return Get(path).body; }

 protected:
  static void SetUpTestSuite() {
    pg_ = TestPostgres::Start("verity-console-probe").release();
    ASSERT_NE(pg_, nullptr);
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
    options.metrics_listen = "127.0.0.1:0";
    options.console_allowed_hosts = {kAllowedHost};
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    client_ = new client::VerityClient(
        client::CreateInsecureChannel(absl::StrCat("127.0.0.1:", server_->port())),
        client::ClientOptions{});
  }

  static void TearDownTestSuite() {
    delete client_;
    client_ = nullptr;
    if (server_ != nullptr) server_->Shutdown();
    delete server_;
    server_ = nullptr;
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->metrics_port(), 0);
  }

  static int Port() { return server_->metrics_port(); }

  static HttpResponse Get(const std::string& path,
                          const std::map<std::string, std::string>& headers = {}) {
    absl::StatusOr<HttpResponse> response = HttpGet(Port(), path, headers);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : HttpResponse{};
  }

  static Scrape ScrapeMetrics() {
    HttpResponse response = Get("/metrics");
    EXPECT_EQ(response.status, 200);
    return Parse(response.body);
  }

  static void Create(const std::string& name, const std::vector<std::string>& classes) {
    v1::Project project;
    project.set_name(name);
    for (const std::string& c : classes) project.add_classes(c);
    ASSERT_TRUE(client_->CreateProject(project).ok()) << name;
  }

  static void Train(const std::string& name) {
    absl::StatusOr<v1::ModelVersion> version = client_->TrainModel(name, absl::Seconds(60));
    ASSERT_TRUE(version.ok()) << version.status();
  }

  static TestPostgres* pg_;
  static server::VerityServer* server_;
  static client::VerityClient* client_;
};

TestPostgres* ConsoleProbeTest::pg_ = nullptr;
server::VerityServer* ConsoleProbeTest::server_ = nullptr;
client::VerityClient* ConsoleProbeTest::client_ = nullptr;

// deploy/README.md "Monitoring": "requires every verity_* name that a dashboard query or an
// alert expression uses to be an exported family"; the table names the dashboard's families,
// and deploy/prometheus/verity-alerts.yaml uses verity_rpc_total, verity_rpc_duration_seconds,
// verity_ingest_commit_duration_seconds, verity_ingest_commit_failures_total,
// verity_training_due_projects, verity_training_failures_total, verity_db_pool_connections and
// verity_ingest_queue_annotations.
TEST_F(ConsoleProbeTest, EveryFamilyTheDashboardAndTheAlertsUseIsExported) {
  Create("fam", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "fam", {{"i1", "a1", 1}, {"i1", "a2", 1}}));
  Train("fam");
  const Scrape scrape = ScrapeMetrics();
  for (const char* family :
       {"verity_ingest_annotations_total", "verity_ingest_batches_total",
        "verity_ingest_commit_duration_seconds", "verity_ingest_commit_failures_total",
        "verity_ingest_queue_annotations", "verity_posterior_freshness_seconds",
        "verity_project_labels", "verity_project_labels_since_model",
        "verity_training_due_projects", "verity_training_duration_seconds",
        "verity_model_versions_total", "verity_training_failures_total", "verity_model_version",
        "verity_rpc_duration_seconds", "verity_rpc_total", "verity_db_pool_connections"}) {
    EXPECT_EQ(scrape.types.count(family), 1u) << family;
  }
}

// deploy/README.md "Monitoring": the histograms the alerts take quantiles of
// (`histogram_quantile(0.99, ... verity_ingest_commit_duration_seconds_bucket`,
// `verity_rpc_duration_seconds_bucket`) are histograms, and the gauges they compare are gauges.
TEST_F(ConsoleProbeTest, TheAlertedFamiliesHaveTheKindsTheirExpressionsNeed) {
  Scrape scrape = ScrapeMetrics();
  EXPECT_EQ(scrape.types["verity_ingest_commit_duration_seconds"], "histogram");
  EXPECT_EQ(scrape.types["verity_rpc_duration_seconds"], "histogram");
  EXPECT_EQ(scrape.types["verity_training_due_projects"], "gauge");
  EXPECT_EQ(scrape.types["verity_ingest_queue_annotations"], "gauge");
  EXPECT_EQ(scrape.types["verity_db_pool_connections"], "gauge");
  EXPECT_EQ(scrape.types["verity_ingest_commit_failures_total"], "counter");
  EXPECT_EQ(scrape.types["verity_training_failures_total"], "counter");
}

// verity-alerts.yaml VerityQueryLatencyHigh: `verity_rpc_duration_seconds_bucket{method=~
// "/verity.v1.(TruthService|AssignmentService)/.*"}`: a TruthService call is in a bucket series
// labelled with its full method name.
TEST_F(ConsoleProbeTest, ATruthCallIsInTheLatencyHistogramUnderItsFullMethodName) {
  Create("lat", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "lat", {{"i1", "a1", 0}}));
  const std::vector<std::string> items = {"i1"};
  ASSERT_TRUE(client_->GetPosteriors("lat", items).ok());
  const Scrape scrape = ScrapeMetrics();
  const std::string series =
      "verity_rpc_duration_seconds_bucket{method=\"/verity.v1.TruthService/GetPosteriors\","
      "code=\"OK\",le=\"+Inf\"}";
  ASSERT_TRUE(scrape.Has(series)) << series;
  EXPECT_GE(scrape.Value(series), 1);
}

// deploy/README.md "Monitoring": "`verity_project_labels_since_model` must equal the labels
// submitted after the fit"; models.proto: labels_since_version is "Labels committed after the
// current version's watermark". 2 labels, a fit, 3 more labels: 3 on both.
TEST_F(ConsoleProbeTest, LabelsSinceModelIsTheLabelsSubmittedAfterTheFit) {
  Create("lag", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "lag", {{"i1", "a1", 1}, {"i2", "a1", 0}}));
  Train("lag");
  ASSERT_NO_FATAL_FAILURE(
      SubmitAllAccepted(*client_, "lag", {{"i1", "a2", 1}, {"i2", "a2", 0}, {"i3", "a2", 1}}));
  const Scrape scrape = ScrapeMetrics();
  EXPECT_EQ(scrape.Value("verity_project_labels_since_model{project=\"lag\"}"), 3);
  EXPECT_EQ(scrape.Value("verity_project_labels{project=\"lag\"}"), 5);
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("lag");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->labels_since_version(), 3);
  EXPECT_EQ(status->num_labels(), 5);
}

// deploy/README.md: "Model versions, failed fits, served version | ... `verity_model_version`":
// the served version is the one GetModelStatus reports (two fits: 2).
TEST_F(ConsoleProbeTest, TheServedVersionGaugeIsGetModelStatusCurrentVersion) {
  Create("ver", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "ver", {{"i1", "a1", 1}}));
  Train("ver");
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "ver", {{"i2", "a1", 0}}));
  Train("ver");
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("ver");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->current_version().version(), 2);
  EXPECT_EQ(ScrapeMetrics().Value("verity_model_version{project=\"ver\"}"), 2);
}

// docs/SECURITY.md: "`GET /metrics` ... It answers any `Host` header (the host check below is
// the console's): scrapers reach it by any name."
TEST_F(ConsoleProbeTest, MetricsAnswersAnyHostHeader) {
  for (const char* host : {"rebind.example", "verity-server:9464", "10.1.2.3:9464"}) {
    EXPECT_EQ(Get("/metrics", {{"Host", host}}).status, 200) << host;
  }
}

// docs/SECURITY.md: "Requests whose `Host` header names neither a loopback name, nor the bound
// address, nor a name in `--console_allowed_hosts` are refused with 403."
TEST_F(ConsoleProbeTest, TheConsoleRefusesAForeignHostOnEveryPath) {
  for (const char* path : {"/", "/api/projects", "/api/projects/fam"}) {
    EXPECT_EQ(Get(path, {{"Host", "rebind.example:9464"}}).status, 403) << path;
  }
}

// console.h: "Further names the Host header may carry (--console_allowed_hosts),
// case-insensitive."
TEST_F(ConsoleProbeTest, AnAllowedHostIsAnsweredInAnyCaseAndWithAPort) {
  EXPECT_EQ(Get("/api/projects", {{"Host", "Console.Verity.EXAMPLE:9464"}}).status, 200);
  EXPECT_EQ(Get("/api/projects", {{"Host", kAllowedHost}}).status, 200);
  EXPECT_EQ(Get("/api/projects", {{"Host", "other.verity.example"}}).status, 403);
}

// docs/SECURITY.md: "'Loopback' means `localhost`, an IPv4 literal in 127.0.0.0/8 or `::1`
// ...; a name such as `127.evil.example` is not loopback." (the console's Host check uses
// loopback names: console.h "a loopback name (localhost, 127.0.0.0/8, ::1)").
TEST_F(ConsoleProbeTest, ALoopbackLookingNameIsNotALoopbackHost) {
  EXPECT_EQ(Get("/api/projects", {{"Host", "127.evil.example"}}).status, 403);
  EXPECT_EQ(Get("/api/projects", {{"Host", "127.8.9.10:1"}}).status, 200);
  EXPECT_EQ(Get("/api/projects", {{"Host", "LOCALHOST:9464"}}).status, 200);
}

// console.h: "Unknown paths and projects answer 404 with {"error": "..."}"; the Host refusal's
// message quotes the Host header, so what a client sent there must come back as JSON text.
TEST_F(ConsoleProbeTest, TheHostRefusalEscapesTheHostHeaderInItsJson) {
  HttpResponse response = Get("/api/projects", {{"Host", "evil\"},\"x\\y.example"}});
  EXPECT_EQ(response.status, 403);
  EXPECT_FALSE(absl::StrContains(response.body, "evil\"}")) << response.body;
  EXPECT_TRUE(absl::StrContains(response.body, "evil\\\"},\\\"x\\\\y.example")) << response.body;
}

// console.h: "Unknown paths and projects answer 404 with {"error": "..."}".
TEST_F(ConsoleProbeTest, UnknownPathsAnswer404WithAJsonError) {
  for (const char* path : {"/favicon.ico", "/api", "/api/", "/api/nothing",
                           "/api/projects/fam/versions", "/api/projects/fam/annotators/a1"}) {
    HttpResponse response = Get(path);
    EXPECT_EQ(response.status, 404) << path;
    EXPECT_TRUE(absl::StartsWith(response.body, "{\"error\":")) << path << ": " << response.body;
  }
}

// docs/SECURITY.md: "The console only reads; it has no write endpoint, and methods other than
// GET answer 405."
TEST_F(ConsoleProbeTest, MethodsOtherThanGetAnswer405AndChangeNothing) {
  Create("m405", {"no", "yes"});
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    for (const char* path : {"/", "/api/projects", "/api/projects/m405"}) {
      absl::StatusOr<HttpResponse> response = HttpRequest(Port(), method, path);
      ASSERT_TRUE(response.ok()) << response.status();
      EXPECT_EQ(response->status, 405) << method << " " << path;
    }
  }
  EXPECT_TRUE(client_->GetProject("m405").ok());
}

// docs/SECURITY.md: "methods other than GET answer 405" (HEAD is a method other than GET).
TEST_F(ConsoleProbeTest, HeadAnswers405) {
  absl::StatusOr<HttpResponse> response = HttpRequest(Port(), "HEAD", "/api/projects");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 405);
}

// console.h: "GET / answers one static HTML page"; "The page itself (GET /) carries no data".
TEST_F(ConsoleProbeTest, ThePageIsHtmlAndCarriesNoProjectData) {
  Create("secretive-project-name", {"zebra-class-xyz", "other"});
  HttpResponse response = Get("/");
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(absl::StartsWith(response.headers["content-type"], "text/html"));
  EXPECT_FALSE(absl::StrContains(response.body, "secretive-project-name"));
  EXPECT_FALSE(absl::StrContains(response.body, "zebra-class-xyz"));
}

// server/console/README.md: "nothing is fetched but the page itself and the JSON endpoints of
// the same server (no CDN, no external script, no font)".
TEST_F(ConsoleProbeTest, ThePageFetchesNothingFromElsewhere) {
  const std::string page = Get("/").body;
  ASSERT_FALSE(page.empty());
  EXPECT_FALSE(absl::StrContains(page, "<script src")) << "an external script";
  EXPECT_FALSE(absl::StrContains(page, "<link ")) << "an external stylesheet or font";
  EXPECT_FALSE(absl::StrContains(page, "@import"));
  EXPECT_FALSE(absl::StrContains(page, "https://"));
  EXPECT_FALSE(absl::StrContains(page, "//cdn"));
}

// server/console/README.md: "It reads `/api/projects`, `/api/projects/NAME` and
// `/api/projects/NAME/annotators`": all three answer 200 with JSON for a project.
TEST_F(ConsoleProbeTest, TheThreeEndpointsThePageReadsAnswerJson) {
  Create("three", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "three", {{"i1", "a1", 1}}));
  for (const char* path :
       {"/api/projects", "/api/projects/three", "/api/projects/three/annotators"}) {
    HttpResponse response = Get(path);
    EXPECT_EQ(response.status, 200) << path;
    EXPECT_TRUE(absl::StartsWith(response.headers["content-type"], "application/json")) << path;
    EXPECT_TRUE(absl::StartsWith(response.body, "{")) << path;
  }
}

// console.h: "/api/projects  every project: classes, counts"; the counts are the project's, as
// GetProject serves them (num_items, num_annotators, num_labels).
TEST_F(ConsoleProbeTest, ProjectListCountsAreThoseOfGetProject) {
  Create("counts", {"no", "yes"});
  // 3 items, 2 annotators, 4 labels; a revision of (i1, a1) adds no live label.
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(
      *client_, "counts", {{"i1", "a1", 1}, {"i2", "a1", 0}, {"i3", "a2", 1}, {"i1", "a2", 1}}));
  ASSERT_TRUE(client_->SubmitAnnotations("counts", Annotations({{"i1", "a1", 0}}), {}).ok());
  absl::StatusOr<v1::Project> project = client_->GetProject("counts");
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ(project->num_items(), 3);
  EXPECT_EQ(project->num_annotators(), 2);
  EXPECT_EQ(project->num_labels(), 4);
  const std::string entry = ProjectEntry(Get("/api/projects").body, "counts");
  ASSERT_FALSE(entry.empty());
  EXPECT_EQ(IntField(entry, "items"), 3);
  EXPECT_EQ(IntField(entry, "annotators"), 2);
  EXPECT_EQ(IntField(entry, "labels"), 4);
}

// console.h: "/api/projects/{name}  one project: ... model versions"; its model_version and
// labels_since_version are GetModelStatus's current_version.version and labels_since_version.
TEST_F(ConsoleProbeTest, ProjectViewModelNumbersAreThoseOfGetModelStatus) {
  Create("view", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "view", {{"i1", "a1", 1}, {"i2", "a1", 1}}));
  Train("view");
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "view", {{"i3", "a1", 0}}));
  const std::string body = Get("/api/projects/view").body;
  EXPECT_EQ(IntField(body, "model_version"), 1);
  EXPECT_EQ(IntField(body, "labels_since_version"), 1);
  EXPECT_EQ(IntField(body, "labels"), 3);
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("view");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->current_version().version(), 1);
  EXPECT_EQ(status->labels_since_version(), 1);
  // The version the fit saw: 2 labels.
  const size_t versions = body.find("\"versions\"");
  ASSERT_NE(versions, std::string::npos);
  EXPECT_EQ(IntField(body, "version", versions), 1);
  EXPECT_EQ(IntField(body, "num_labels", versions), 2);
}

// console.h: "Model versions listed per project, newest first." kMaxVersions = 20: after 21
// fits the view lists 20, from 21 down to 2.
TEST_F(ConsoleProbeTest, TheProjectViewListsTheNewestTwentyVersionsNewestFirst) {
  Create("many-versions", {"no", "yes"});
  for (int fit = 1; fit <= 21; ++fit) {
    ASSERT_NO_FATAL_FAILURE(
        SubmitAllAccepted(*client_, "many-versions", {{absl::StrCat("i", fit), "a1", fit % 2}}));
    ASSERT_NO_FATAL_FAILURE(Train("many-versions"));
  }
  const std::string body = Get("/api/projects/many-versions").body;
  const size_t start = body.find("\"versions\"");
  ASSERT_NE(start, std::string::npos);
  const size_t end = body.find(']', start);
  const std::string list = body.substr(start, end - start);
  std::vector<int> listed;
  std::regex version("\"version\":([0-9]+)");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), version);
       it != std::sregex_iterator(); ++it) {
    listed.push_back(std::stoi((*it)[1].str()));
  }
  std::vector<int> expected;
  for (int v = 21; v >= 2; --v) expected.push_back(v);
  EXPECT_EQ(listed, expected);
}

// console_json.h / JsonWriter writes JSON: a class name (any printable text, projects.proto)
// with a quote and a backslash comes back as a JSON string with both escaped, in the list and
// in the project view.
TEST_F(ConsoleProbeTest, ClassNamesAreEscapedInTheJson) {
  Create("esc-classes", {"say \"hi\"\\now", "<b>&amp;</b>"});
  for (const char* path :
       {"/api/projects", "/api/projects/esc-classes", "/api/projects/esc-classes/annotators"}) {
    const std::string body = Get(path).body;
    EXPECT_TRUE(absl::StrContains(body, "\"say \\\"hi\\\"\\\\now\"")) << path << ": " << body;
    EXPECT_FALSE(absl::StrContains(body, "say \"hi")) << path;
  }
}

// Annotator ids are printable ASCII (quotes and backslashes included); the annotator list
// (console.h "every annotator: labels, ...") writes them as JSON strings.
TEST_F(ConsoleProbeTest, AnnotatorIdsAreEscapedInTheJson) {
  Create("esc-ids", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(
      SubmitAllAccepted(*client_, "esc-ids", {{"i1", "w\"1\\</script>", 1}, {"i1", "w2", 0}}));
  const std::string body = Get("/api/projects/esc-ids/annotators").body;
  EXPECT_TRUE(absl::StrContains(body, "w\\\"1\\\\")) << body;
  EXPECT_FALSE(absl::StrContains(body, "\"w\"1")) << body;
}

// server/console/README.md: "it lists the annotators with the most labels ... `annotators_total`
// is the project's count"; console.h "those with the most labels first". a3 has 3 labels, a1
// and a2 one each: a3 is listed first with 3, and the total is 3.
TEST_F(ConsoleProbeTest, TheAnnotatorListPutsTheMostLabelsFirstAndCountsEveryAnnotator) {
  Create("ann", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(
      *client_, "ann",
      {{"i1", "a1", 1}, {"i1", "a2", 1}, {"i1", "a3", 1}, {"i2", "a3", 0}, {"i3", "a3", 1}}));
  const std::string body = Get("/api/projects/ann/annotators").body;
  EXPECT_EQ(IntField(body, "annotators_total"), 3);
  const size_t list = body.find("\"annotators\":[");
  ASSERT_NE(list, std::string::npos) << body;
  const size_t first_id = body.find("\"id\":", list);
  ASSERT_NE(first_id, std::string::npos);
  EXPECT_EQ(body.substr(first_id, 9), "\"id\":\"a3\"");
  EXPECT_EQ(IntField(body, "labels", first_id), 3);
}

// console.h: "Confusion matrices are listed for projects with at most this many classes (a K×K
// matrix per annotator grows quickly); above it "confusion" is null." kMaxConfusionClasses = 32:
// a 32-class project lists a 32-row matrix, a 33-class one null.
TEST_F(ConsoleProbeTest, ConfusionMatricesAreListedUpToThirtyTwoClasses) {
  for (int k : {32, 33}) {
    const std::string name = absl::StrCat("classes-", k);
    std::vector<std::string> classes;
    for (int c = 0; c < k; ++c) classes.push_back(absl::StrCat("c", c));
    Create(name, classes);
    ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, name, {{"i1", "a1", k - 1}}));
    const std::string body = Get(absl::StrCat("/api/projects/", name, "/annotators")).body;
    const size_t confusion = body.find("\"confusion\":");
    ASSERT_NE(confusion, std::string::npos) << body;
    if (k == 33) {
      EXPECT_EQ(body.substr(confusion, 16), "\"confusion\":null") << k;
    } else {
      EXPECT_EQ(body.substr(confusion, 14), "\"confusion\":[[") << k;
      // 32 rows: "[" opens the matrix, then one "[" per row, until the annotator's end.
      const size_t end = body.find("]]", confusion);
      ASSERT_NE(end, std::string::npos);
      const std::string matrix = body.substr(confusion, end - confusion);
      EXPECT_EQ(std::count(matrix.begin(), matrix.end(), '['), 1 + 32) << matrix;
    }
  }
}

// server/console/README.md: "`annotators_total` is the project's count" — the count GetProject
// serves (num_annotators), which includes annotators registered with AddAnnotators that have no
// label yet: 2 registered without labels and 1 with a label make 3.
TEST_F(ConsoleProbeTest, AnnotatorsTotalCountsRegisteredAnnotatorsWithoutLabels) {
  Create("registered", {"no", "yes"});
  std::vector<v1::Annotator> annotators(2);
  annotators[0].set_id("quiet-1");
  annotators[1].set_id("quiet-2");
  ASSERT_TRUE(client_->AddAnnotators("registered", annotators).ok());
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "registered", {{"i1", "busy", 1}}));
  absl::StatusOr<v1::Project> project = client_->GetProject("registered");
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ(project->num_annotators(), 3);
  const std::string body = Get("/api/projects/registered/annotators").body;
  EXPECT_EQ(IntField(body, "annotators_total"), 3) << body;
  EXPECT_EQ(IntField(ProjectEntry(Get("/api/projects").body, "registered"), "annotators"), 3);
}

// console.h: "/api/projects  every project: classes, counts"; projects.proto num_items: "items
// known (labelled or added)": 2 items added without labels and 1 labelled make 3.
TEST_F(ConsoleProbeTest, ItemCountsIncludeAddedItemsWithoutLabels) {
  Create("added-items", {"no", "yes"});
  std::vector<v1::Item> items(2);
  items[0].set_id("unlabelled-1");
  items[1].set_id("unlabelled-2");
  ASSERT_TRUE(client_->AddItems("added-items", items).ok());
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "added-items", {{"i1", "a1", 1}}));
  EXPECT_EQ(IntField(ProjectEntry(Get("/api/projects").body, "added-items"), "items"), 3);
  EXPECT_EQ(IntField(Get("/api/projects/added-items").body, "items"), 3);
}

// deploy/README.md: "Live labels per project | `verity_project_labels`"; SECURITY.md: "Live
// labels per project (one per item and annotator; a revision adds none)": 2 labels and a
// revision of one of them leave the gauge at 2.
TEST_F(ConsoleProbeTest, TheLabelsGaugeCountsLiveLabelsNotRevisions) {
  Create("revised", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(
      SubmitAllAccepted(*client_, "revised", {{"i1", "a1", 1}, {"i2", "a1", 1}}));
  ASSERT_TRUE(client_->SubmitAnnotations("revised", Annotations({{"i1", "a1", 0}}), {}).ok());
  EXPECT_EQ(ScrapeMetrics().Value("verity_project_labels{project=\"revised\"}"), 2);
}

// console.h: "/api/projects/{name}  one project: ... open items and leases"; SuggestItems
// "leases up to k ... items per call" (SECURITY.md): after one annotator is suggested 3 of 5
// items, the view shows 3 outstanding leases on 3 items.
TEST_F(ConsoleProbeTest, TheProjectViewShowsTheLeasesSuggestItemsTook) {
  Create("leases", {"no", "yes"});
  std::vector<v1::Item> items(5);
  for (int i = 0; i < 5; ++i) items[i].set_id(absl::StrCat("item-", i));
  ASSERT_TRUE(client_->AddItems("leases", items).ok());
  absl::StatusOr<std::vector<v1::ItemSuggestion>> suggested =
      client_->SuggestItems("leases", "worker-1", 3, {});
  ASSERT_TRUE(suggested.ok()) << suggested.status();
  ASSERT_EQ(suggested->size(), 3u);
  const std::string body = Get("/api/projects/leases").body;
  EXPECT_EQ(IntField(body, "outstanding_leases"), 3) << body;
  EXPECT_EQ(IntField(body, "items_with_leases"), 3) << body;
}

// The console's annotator table ("labels, estimated accuracy", server/console/README.md) and
// GetAnnotatorProfiles (truth.proto: accuracy "sum_k prior_k * confusion[k][k], prior_k the
// mean served posterior of class k over the project's items that have labels", num_labels)
// describe one served state, right after a fit and after more labels before the next fit.
void ExpectConsoleAnnotatorsMatchProfiles(const std::string& project) {
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> profiles =
      ConsoleProbeTest::Client().GetAnnotatorProfiles(project, {});
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  ASSERT_EQ(profiles->size(), 3u);
  const std::string body =
      ConsoleProbeTest::Page(absl::StrCat("/api/projects/", project, "/annotators"));
  for (const v1::AnnotatorProfile& profile : *profiles) {
    const size_t at = body.find(absl::StrCat("\"id\":\"", profile.annotator(), "\""));
    ASSERT_NE(at, std::string::npos) << profile.annotator() << ": " << body;
    EXPECT_EQ(IntField(body, "labels", at), profile.num_labels()) << profile.annotator();
    EXPECT_NEAR(DoubleField(body, "accuracy", at), profile.accuracy(), 1e-6) << profile.annotator();
  }
}

const std::vector<LabelTriple> kThreeAnnotators = {
    {"i1", "a", 1}, {"i2", "a", 1}, {"i3", "a", 0}, {"i4", "a", 1}, {"i1", "b", 1}, {"i2", "b", 1},
    {"i3", "b", 0}, {"i4", "b", 1}, {"i1", "c", 0}, {"i2", "c", 1}, {"i3", "c", 1}, {"i4", "c", 1}};

TEST_F(ConsoleProbeTest, AnnotatorLabelsAndAccuracyAreThoseOfGetAnnotatorProfilesAfterAFit) {
  Create("acc-fit", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "acc-fit", kThreeAnnotators));
  Train("acc-fit");
  ExpectConsoleAnnotatorsMatchProfiles("acc-fit");
}

TEST_F(ConsoleProbeTest, AnnotatorLabelsAndAccuracyAreThoseOfGetAnnotatorProfilesBetweenFits) {
  Create("acc-between", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "acc-between", kThreeAnnotators));
  Train("acc-between");
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(
      *client_, "acc-between", {{"i5", "a", 0}, {"i5", "b", 0}, {"i5", "c", 1}, {"i6", "c", 0}}));
  ExpectConsoleAnnotatorsMatchProfiles("acc-between");
}

// server/console/README.md: "The per-project gauges (`verity_project_labels`,
// `verity_model_version`, `verity_project_labels_since_model`) report the same projects" as
// `/api/projects`, with the same live labels.
TEST_F(ConsoleProbeTest, ThePerProjectGaugesReportEveryListedProject) {
  Create("gauge-a", {"no", "yes"});
  ASSERT_NO_FATAL_FAILURE(SubmitAllAccepted(*client_, "gauge-a", {{"i1", "a1", 1}}));
  const std::string list = Get("/api/projects").body;
  const Scrape scrape = ScrapeMetrics();
  std::regex name("\"name\":\"([A-Za-z0-9._-]+)\"");
  int projects = 0;
  for (auto it = std::sregex_iterator(list.begin(), list.end(), name); it != std::sregex_iterator();
       ++it) {
    const std::string project = (*it)[1].str();
    ++projects;
    for (const char* family :
         {"verity_project_labels", "verity_model_version", "verity_project_labels_since_model"}) {
      EXPECT_TRUE(scrape.Has(absl::StrCat(family, "{project=\"", project, "\"}")))
          << family << " " << project;
    }
    EXPECT_EQ(scrape.Value(absl::StrCat("verity_project_labels{project=\"", project, "\"}")),
              IntField(ProjectEntry(list, project), "labels"))
        << project;
  }
  EXPECT_GE(projects, 1);
}

// console.h: "a name that no project can have (projects.proto's rule) 400" with a JSON error;
// server/console/README.md deep links name a project by its URI-encoded name. A name outside
// [A-Za-z0-9._-] is never a project: never 200.
TEST_F(ConsoleProbeTest, AnInvalidProjectNameIsAJsonErrorNotAPage) {
  for (const char* path : {"/api/projects/%3Cscript%3E", "/api/projects/a%22b"}) {
    EXPECT_EQ(Get(path).status, 400) << path;
  }
  for (const char* path : {"/api/projects/%3Cscript%3E", "/api/projects/a%22b", "/api/projects/..",
                           "/api/projects/a%2Fb/annotators"}) {
    HttpResponse response = Get(path);
    EXPECT_TRUE(response.status == 400 || response.status == 404) << path << response.status;
    EXPECT_TRUE(absl::StartsWith(response.body, "{\"error\":")) << path << response.body;
  }
}

// docs/SECURITY.md: "`GET /metrics`: Prometheus text. No login: counts and latencies per
// method and project name" and the Security table: "only a salted SHA-256 of each secret is
// stored" — the scrape carries no label data: no item id, annotator id or class name.
TEST_F(ConsoleProbeTest, MetricsCarryNoLabelData) {
  Create("privacy", {"classified-class-name", "other-class"});
  ASSERT_NO_FATAL_FAILURE(
      SubmitAllAccepted(*client_, "privacy", {{"private-item-77", "private-annotator-99", 0}}));
  const std::string text = Get("/metrics").body;
  EXPECT_FALSE(absl::StrContains(text, "private-item-77"));
  EXPECT_FALSE(absl::StrContains(text, "private-annotator-99"));
  EXPECT_FALSE(absl::StrContains(text, "classified-class-name"));
  EXPECT_TRUE(absl::StrContains(text, "project=\"privacy\""));
}

// server/console/README.md "History": "The JSON's `history` has them as parallel arrays
// (`time_ms`, `labels`, `labels_per_second` ..., `resolved_share`)".
TEST_F(ConsoleProbeTest, TheHistoryHasItsFourParallelArrays) {
  Create("hist", {"no", "yes"});
  const std::string body = Get("/api/projects/hist").body;
  const size_t history = body.find("\"history\":");
  ASSERT_NE(history, std::string::npos) << body;
  for (const char* key : {"time_ms", "labels", "labels_per_second", "resolved_share"}) {
    EXPECT_NE(body.find(absl::StrCat("\"", key, "\":["), history), std::string::npos) << key;
  }
}

// The same port with authentication on (docs/SECURITY.md "What the HTTP port exposes").
class ConsoleAuthProbeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pg_ = TestPostgres::Start("verity-console-auth-probe").release();
    ASSERT_NE(pg_, nullptr);
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
    options.metrics_listen = "127.0.0.1:0";
    options.auth.enabled = true;
    options.auth.admin_key_file = pg_->dir() + "/admin.key";
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    std::ifstream in(pg_->dir() + "/admin.key");
    admin_ = new std::string;
    std::getline(in, *admin_);
    ASSERT_FALSE(admin_->empty());
    channel_ = new std::shared_ptr<grpc::Channel>(
        client::CreateInsecureChannel(absl::StrCat("127.0.0.1:", server_->port())));
    client::ClientOptions admin_options;
    admin_options.api_key = *admin_;
    client::VerityClient admin(*channel_, admin_options);
    for (const char* name : {"auth-a", "auth-b"}) {
      v1::Project project;
      project.set_name(name);
      project.add_classes("no");
      project.add_classes("yes");
      ASSERT_TRUE(admin.CreateProject(project).ok()) << name;
    }
  }

  static void TearDownTestSuite() {
    delete channel_;
    channel_ = nullptr;
    if (server_ != nullptr) server_->Shutdown();
    delete server_;
    server_ = nullptr;
    delete admin_;
    admin_ = nullptr;
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->metrics_port(), 0);
  }

  // A new key's secret and id.
  static std::pair<std::string, std::string> CreateKey(v1::Role role,
                                                       const std::vector<std::string>& projects) {
    v1::CreateKeyRequest request;
    request.set_role(role);
    request.set_name("console_probe_test");
    for (const std::string& p : projects) request.add_projects(p);
    v1::CreateKeyResponse response;
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + *admin_);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status status =
        v1::KeyService::NewStub(*channel_)->CreateKey(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.secret_key(), response.key().key_id()};
  }

  static HttpResponse Get(const std::string& path, const std::string& authorization = "") {
    std::map<std::string, std::string> headers;
    if (!authorization.empty()) headers["Authorization"] = authorization;
    absl::StatusOr<HttpResponse> response = HttpGet(server_->metrics_port(), path, headers);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : HttpResponse{};
  }

  static TestPostgres* pg_;
  static server::VerityServer* server_;
  static std::string* admin_;
  static std::shared_ptr<grpc::Channel>* channel_;
};

TestPostgres* ConsoleAuthProbeTest::pg_ = nullptr;
server::VerityServer* ConsoleAuthProbeTest::server_ = nullptr;
std::string* ConsoleAuthProbeTest::admin_ = nullptr;
std::shared_ptr<grpc::Channel>* ConsoleAuthProbeTest::channel_ = nullptr;

// docs/SECURITY.md: "`GET /metrics`: Prometheus text. No login"; console.h: "The page itself
// (GET /) carries no data; it asks for the key": both answer without a key with auth on.
TEST_F(ConsoleAuthProbeTest, MetricsAndThePageNeedNoKey) {
  EXPECT_EQ(Get("/metrics").status, 200);
  EXPECT_EQ(Get("/").status, 200);
}

// docs/SECURITY.md: "With authentication on, every `/api/` request needs `Authorization: Bearer
// KEY` ...: 401 without a valid key".
TEST_F(ConsoleAuthProbeTest, EveryApiPathIsRefusedWithoutAValidKey) {
  const std::string basic = "Basic " + *admin_;
  for (const char* path : {"/api/projects", "/api/projects/auth-a",
                           "/api/projects/auth-a/annotators", "/api/nothing"}) {
    EXPECT_EQ(Get(path).status, 401) << path;
    EXPECT_EQ(Get(path, basic).status, 401) << path;
    EXPECT_EQ(Get(path, "Bearer vk_0000000000000000_not-a-key").status, 401) << path;
  }
}

// docs/SECURITY.md: "every `/api/` request needs `Authorization: Bearer KEY`, any role, and
// sees only the key's projects: ... 403 for another project." A writer key of auth-a.
TEST_F(ConsoleAuthProbeTest, AWriterKeyReadsItsProjectAndOnlyIt) {
  const std::string bearer = "Bearer " + CreateKey(v1::ROLE_WRITER, {"auth-a"}).first;
  EXPECT_EQ(Get("/api/projects/auth-a", bearer).status, 200);
  EXPECT_EQ(Get("/api/projects/auth-a/annotators", bearer).status, 200);
  EXPECT_EQ(Get("/api/projects/auth-b", bearer).status, 403);
  EXPECT_EQ(Get("/api/projects/auth-b/annotators", bearer).status, 403);
  const std::string list = Get("/api/projects", bearer).body;
  EXPECT_TRUE(absl::StrContains(list, "\"name\":\"auth-a\"")) << list;
  EXPECT_FALSE(absl::StrContains(list, "auth-b")) << list;
}

// docs/SECURITY.md: an admin key valid for every project is trusted with "Every RPC on every
// project"; the console with it lists both projects.
TEST_F(ConsoleAuthProbeTest, TheBootstrapAdminKeySeesEveryProject) {
  const std::string list = Get("/api/projects", "Bearer " + *admin_).body;
  EXPECT_TRUE(absl::StrContains(list, "\"name\":\"auth-a\"")) << list;
  EXPECT_TRUE(absl::StrContains(list, "\"name\":\"auth-b\"")) << list;
}

// keys.proto RevokeKey: "Takes effect on this server at once"; docs/SECURITY.md: "401 without a
// valid key". A reader key that read the console before its revocation is refused right after.
TEST_F(ConsoleAuthProbeTest, ARevokedKeyIsRefusedByTheConsoleAtOnce) {
  const auto [secret, id] = CreateKey(v1::ROLE_READER, {"auth-a"});
  const std::string bearer = "Bearer " + secret;
  ASSERT_EQ(Get("/api/projects/auth-a", bearer).status, 200);
  v1::RevokeKeyRequest request;
  request.set_key_id(id);
  v1::RevokeKeyResponse response;
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer " + *admin_);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(v1::KeyService::NewStub(*channel_)->RevokeKey(&context, request, &response).ok());
  EXPECT_EQ(Get("/api/projects/auth-a", bearer).status, 401);
  EXPECT_EQ(Get("/api/projects", bearer).status, 401);
}

// The flag text of the server binary (`--helpfull`), for the defaults the docs promise.
std::string ServerHelp() {
  const std::string command = RunfilePath("server/verity_server") + " --helpfull 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) text.append(buffer, n);
  pclose(pipe);
  return text;
}

// The text of one flag's entry in `--helpfull`, from "--NAME (" to the next flag.
std::string FlagHelp(const std::string& help, const std::string& name) {
  const size_t start = help.find("\n    --" + name + " (");
  if (start == std::string::npos) return "";
  const size_t end = help.find("\n    --", start + 1);
  return help.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// docs/SECURITY.md: "`--metrics_port` (default 9464) on `--metrics_address` (default
// 127.0.0.1) serves" ... and the console is on unless `--console=false`: the loopback default.
TEST(ConsoleFlagsProbeTest, TheHttpPortDefaultsToLoopback9464WithTheConsoleOn) {
  const std::string help = ServerHelp();
  ASSERT_FALSE(help.empty());
  EXPECT_TRUE(absl::StrContains(FlagHelp(help, "metrics_port"), "default: 9464;"))
      << FlagHelp(help, "metrics_port");
  EXPECT_TRUE(absl::StrContains(FlagHelp(help, "metrics_address"), "default: \"127.0.0.1\";"))
      << FlagHelp(help, "metrics_address");
  EXPECT_TRUE(absl::StrContains(FlagHelp(help, "console"), "default: true;"))
      << FlagHelp(help, "console");
}

}  // namespace
}  // namespace verity::tests
