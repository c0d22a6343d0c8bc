// Metrics end to end: an in-process VerityServer on a real (embedded) PostgreSQL with its
// Prometheus endpoint on a free port. The test scrapes GET /metrics over a plain socket,
// submits a batch over gRPC, scrapes again, and checks that the batch moved the counters and
// that every scrape is well-formed text exposition format; it also checks the request ids the
// RPC interceptor hands back.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/testing/http_get.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"

namespace verity::tests {
namespace {

using ::testing::ElementsAre;
using ::testing::MatchesRegex;

constexpr char kProject[] = "metrics-birds";
constexpr char kSubmitMethod[] = "/verity.v1.IngestService/SubmitAnnotations";

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

// One scrape: series (`name{labels}` exactly as written) → value, and TYPE by family name.
struct Scrape {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;

  // 0 for a series not (yet) exposed: a labelled child appears at its first event.
  double Value(const std::string& series) const {
    auto it = samples.find(series);
    return it == samples.end() ? 0 : it->second;
  }
};

// Parses the text exposition format 0.0.4 strictly enough to catch a malformed line: each
// line is a `# HELP name text`, a `# TYPE name kind`, or `name{label="value",...} number`
// whose family (name less _bucket/_sum/_count for histograms) was typed before it. Adds a
// gtest failure per bad line.
Scrape ParseExposition(const std::string& text) {
  Scrape scrape;
  EXPECT_TRUE(text.empty() || text.back() == '\n') << "the exposition must end with a newline";
  const std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  for (const std::string& line : lines) {
    if (absl::StartsWith(line, "# HELP ")) {
      EXPECT_THAT(line, MatchesRegex("# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*")) << line;
      continue;
    }
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      EXPECT_EQ(parts.size(), 4u) << line;
      if (parts.size() != 4) continue;
      EXPECT_THAT(parts[3], MatchesRegex("counter|gauge|histogram|summary|untyped")) << line;
      EXPECT_TRUE(scrape.types.emplace(parts[2], parts[3]).second) << "typed twice: " << line;
      continue;
    }
    EXPECT_FALSE(absl::StartsWith(line, "#")) << "unknown comment: " << line;
    // name, optional {label="value",...} (values with \\, \" and \n escapes), space, value.
    EXPECT_THAT(line, MatchesRegex("[a-zA-Z_:][a-zA-Z0-9_:]*"
                                   "(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\.)*\""
                                   "(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\.)*\")*\\})?"
                                   " [^ ]+"))
        << line;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;  // Already reported by the regex.
    const std::string series = line.substr(0, space);
    const std::string number = line.substr(space + 1);
    double value = 0;
    const bool special = number == "+Inf" || number == "-Inf" || number == "NaN";
    EXPECT_TRUE(special || absl::SimpleAtod(number, &value)) << "bad value: " << line;
    EXPECT_TRUE(scrape.samples.emplace(series, value).second) << "repeated series: " << line;

    const std::string name = series.substr(0, series.find('{'));
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (absl::EndsWith(name, suffix)) {
        const std::string base = name.substr(0, name.size() - std::strlen(suffix));
        if (scrape.types.count(base) > 0 && scrape.types[base] == "histogram") family = base;
      }
    }
    EXPECT_EQ(scrape.types.count(family), 1u) << "sample before its TYPE line: " << line;
  }
  return scrape;
}

class MetricsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pg_ = TestPostgres::Start("verity-metrics").release();
    ASSERT_NE(pg_, nullptr);

    server::VerityServer::Options options = TestServerOptions(pg_->url(), 2);
    options.metrics_listen = "127.0.0.1:0";
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    channel_ = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  }

  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Shutdown();
    delete channel_;
    channel_ = nullptr;
    delete server_;
    server_ = nullptr;
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the server did not start";
    ASSERT_GT(server_->metrics_port(), 0) << "metrics are not served";
  }

  static Scrape ScrapeMetrics() {
    absl::StatusOr<testing::HttpResponse> response =
        testing::HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return {};
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    return ParseExposition(response->body);
  }

  static void CreateProject(const std::string& name) {
    auto stub = v1::ProjectService::NewStub(*channel_);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(name);
    request.mutable_project()->add_classes("no");
    request.mutable_project()->add_classes("yes");
    v1::CreateProjectResponse response;
    grpc::Status status = stub->CreateProject(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  static TestPostgres* pg_;
  static server::VerityServer* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
};

TestPostgres* MetricsTest::pg_ = nullptr;
server::VerityServer* MetricsTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* MetricsTest::channel_ = nullptr;

std::string Series(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : absl::StrCat(name, "{", labels, "}");
}

TEST_F(MetricsTest, SubmittedBatchMovesTheCounters) {
  CreateProject(kProject);
  const std::string submit_ok = absl::StrCat("method=\"", kSubmitMethod, "\",code=\"OK\"");
  const Scrape before = ScrapeMetrics();

  // One stream, one batch of 3 annotations: 2 new labels and a resend of the first.
  v1::AnnotationBatch batch;
  batch.set_batch_id(7);
  batch.set_project(kProject);
  for (const auto& [item, annotator] :
       std::vector<std::pair<std::string, std::string>>{{"i1", "w1"}, {"i2", "w1"}}) {
    v1::Annotation* a = batch.add_annotations();
    a->set_item(item);
    a->set_annotator(annotator);
    a->set_label(1);
  }
  *batch.add_annotations() = batch.annotations(0);
  auto stub = v1::IngestService::NewStub(*channel_);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = stub->SubmitAnnotations(&context);
  ASSERT_TRUE(stream->Write(batch));
  stream->WritesDone();
  v1::BatchAck ack;
  std::vector<v1::BatchAck> acks;
  while (stream->Read(&ack)) acks.push_back(ack);
  grpc::Status status = stream->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(acks.size(), 1u);
  ASSERT_EQ(acks[0].error_code(), 0) << acks[0].error_message();
  // Within one batch the resend is a duplicate of the label written just before it.
  EXPECT_EQ(acks[0].accepted(), 2);
  EXPECT_EQ(acks[0].duplicate(), 1);

  const Scrape after = ScrapeMetrics();
  EXPECT_EQ(after.Value(Series("verity_rpc_total", submit_ok)) -
                before.Value(Series("verity_rpc_total", submit_ok)),
            1);
  EXPECT_EQ(after.Value(Series("verity_rpc_duration_seconds_count", submit_ok)) -
                before.Value(Series("verity_rpc_duration_seconds_count", submit_ok)),
            1);
  EXPECT_EQ(after.Value(Series("verity_rpc_duration_seconds_bucket",
                               absl::StrCat(submit_ok, ",le=\"+Inf\""))),
            after.Value(Series("verity_rpc_duration_seconds_count", submit_ok)));
  EXPECT_EQ(
      after.Value("verity_ingest_batches_total") - before.Value("verity_ingest_batches_total"), 1);
  const std::string accepted = "verity_ingest_annotations_total{outcome=\"accepted\"}";
  const std::string duplicate = "verity_ingest_annotations_total{outcome=\"duplicate\"}";
  EXPECT_EQ(after.Value(accepted) - before.Value(accepted), 2);
  EXPECT_EQ(after.Value(duplicate) - before.Value(duplicate), 1);
  EXPECT_EQ(after.Value("verity_ingest_commit_duration_seconds_count") -
                before.Value("verity_ingest_commit_duration_seconds_count"),
            1);
  EXPECT_EQ(after.Value("verity_posterior_freshness_seconds_count") -
                before.Value("verity_posterior_freshness_seconds_count"),
            1);
  EXPECT_EQ(after.Value("verity_ingest_queue_annotations"), 0);
  EXPECT_EQ(after.Value(absl::StrCat("verity_project_labels{project=\"", kProject, "\"}")), 2);
  EXPECT_EQ(after.Value(absl::StrCat("verity_model_version{project=\"", kProject, "\"}")), 0);
  EXPECT_EQ(after.Value("verity_db_pool_connections{state=\"max\"}"), 2);
  EXPECT_GE(after.Value("verity_db_pool_connections{state=\"open\"}"), 1);
  // Between calls no connection is handed out; the series is exposed.
  EXPECT_EQ(after.samples.count("verity_db_pool_connections{state=\"in_use\"}"), 1u);
  EXPECT_LE(after.Value("verity_db_pool_connections{state=\"in_use\"}"),
            after.Value("verity_db_pool_connections{state=\"open\"}"));
  // The project creation before the first scrape was counted too.
  EXPECT_GE(after.Value(Series("verity_rpc_total",
                               "method=\"/verity.v1.ProjectService/CreateProject\",code=\"OK\"")),
            1);
}

TEST_F(MetricsTest, FailedCallsAreCountedByCode) {
  const std::string not_found =
      "verity_rpc_total{method=\"/verity.v1.ProjectService/GetProject\",code=\"NOT_FOUND\"}";
  const Scrape before = ScrapeMetrics();
  auto stub = v1::ProjectService::NewStub(*channel_);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetProjectRequest request;
  request.set_project("no-such-project");
  v1::GetProjectResponse response;
  EXPECT_EQ(stub->GetProject(&context, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  const Scrape after = ScrapeMetrics();
  EXPECT_EQ(after.Value(not_found) - before.Value(not_found), 1);
}

TEST_F(MetricsTest, EveryFamilyOfTheServerIsExposed) {
  const Scrape scrape = ScrapeMetrics();
  std::set<std::string> families;
  for (const auto& [name, type] : scrape.types) families.insert(name);
  for (const char* expected :
       {"verity_rpc_total", "verity_rpc_duration_seconds", "verity_ingest_batches_total",
        "verity_ingest_annotations_total", "verity_ingest_queue_annotations",
        "verity_ingest_queue_batches", "verity_ingest_commit_duration_seconds",
        "verity_posterior_freshness_seconds", "verity_model_versions_total", "verity_model_version",
        "verity_training_duration_seconds", "verity_training_due_projects",
        "verity_db_pool_connections", "verity_projects_loading"}) {
    EXPECT_EQ(families.count(expected), 1u) << expected;
  }
  // Loaded before serving (Options::background_load_threads 0): nothing left to load.
  ASSERT_EQ(scrape.samples.count("verity_projects_loading"), 1u);
  EXPECT_EQ(scrape.Value("verity_projects_loading"), 0);
  EXPECT_EQ(scrape.types.at("verity_rpc_duration_seconds"), "histogram");
  EXPECT_EQ(scrape.types.at("verity_rpc_total"), "counter");
  EXPECT_EQ(scrape.types.at("verity_ingest_queue_annotations"), "gauge");
}

TEST_F(MetricsTest, RequestIdIsEchoedOrAssigned) {
  auto stub = v1::ProjectService::NewStub(*channel_);
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    context.AddMetadata("x-request-id", "client-chosen-42");
    v1::ListProjectsResponse response;
    ASSERT_TRUE(stub->ListProjects(&context, v1::ListProjectsRequest(), &response).ok());
    std::vector<std::string> ids;
    for (const auto& [key, value] : context.GetServerInitialMetadata()) {
      if (key == "x-request-id") ids.emplace_back(value.data(), value.size());
    }
    EXPECT_THAT(ids, ElementsAre("client-chosen-42"));
  }
  std::set<std::string> assigned;
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ListProjectsResponse response;
    ASSERT_TRUE(stub->ListProjects(&context, v1::ListProjectsRequest(), &response).ok());
    auto it = context.GetServerInitialMetadata().find("x-request-id");
    ASSERT_NE(it, context.GetServerInitialMetadata().end());
    const std::string id(it->second.data(), it->second.size());
    EXPECT_THAT(id, MatchesRegex("[0-9a-f]{16}"));
    assigned.insert(id);
  }
  EXPECT_EQ(assigned.size(), 2u) << "each call gets its own id";
}

// rpc_telemetry.h: the client's x-request-id is kept when it is 1 to 128 printable ASCII
// characters other than space; any other value gets a fresh 16-hex-digit id instead.
TEST_F(MetricsTest, AClientRequestIdIsKeptOnlyInItsDocumentedForm) {
  auto stub = v1::ProjectService::NewStub(*channel_);
  auto echoed = [&](const std::string& sent) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    context.AddMetadata("x-request-id", sent);
    v1::ListProjectsResponse response;
    EXPECT_TRUE(stub->ListProjects(&context, v1::ListProjectsRequest(), &response).ok());
    auto it = context.GetServerInitialMetadata().find("x-request-id");
    if (it == context.GetServerInitialMetadata().end()) return std::string("<none>");
    return std::string(it->second.data(), it->second.size());
  };
  const std::string longest(128, 'r');
  EXPECT_EQ(echoed(longest), longest);
  EXPECT_EQ(echoed("~!edge-chars!~"), "~!edge-chars!~");
  EXPECT_THAT(echoed(std::string(129, 'r')), MatchesRegex("[0-9a-f]{16}"));
  EXPECT_THAT(echoed("two words"), MatchesRegex("[0-9a-f]{16}"));
}

// rpc_telemetry.h: every call is counted once in verity_rpc_total, under the code of its status.
// A SubmitAnnotations stream that the client cancels ends CANCELLED: three such streams count 3
// as CANCELLED; an OK ListProjects counts once as OK and never also as CANCELLED.
TEST_F(MetricsTest, CancelledStreamsAreCountedOnceAsCancelled) {
  const std::string cancelled =
      Series("verity_rpc_total", absl::StrCat("method=\"", kSubmitMethod, "\",code=\"CANCELLED\""));
  const std::string list_ok =
      Series("verity_rpc_total", "method=\"/verity.v1.ProjectService/ListProjects\",code=\"OK\"");
  const std::string list_cancelled = Series(
      "verity_rpc_total", "method=\"/verity.v1.ProjectService/ListProjects\",code=\"CANCELLED\"");
  const Scrape before = ScrapeMetrics();
  auto ingest = v1::IngestService::NewStub(*channel_);
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto stream = ingest->SubmitAnnotations(&context);
    context.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ListProjectsResponse response;
    ASSERT_TRUE(v1::ProjectService::NewStub(*channel_)
                    ->ListProjects(&context, v1::ListProjectsRequest(), &response)
                    .ok());
  }
  // The client sees a cancelled stream end at once; the server counts it when its handler has
  // returned: wait (at most 10 s) for the three.
  Scrape after = ScrapeMetrics();
  for (int i = 0; i < 100 && after.Value(cancelled) - before.Value(cancelled) < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = ScrapeMetrics();
  }
  EXPECT_EQ(after.Value(cancelled) - before.Value(cancelled), 3);
  EXPECT_EQ(after.Value(list_ok) - before.Value(list_ok), 1);
  EXPECT_EQ(after.Value(list_cancelled) - before.Value(list_cancelled), 0);
}

TEST_F(MetricsTest, UnknownMethodsShareOneLabel) {
  grpc::GenericStub generic(*channel_);
  const Scrape before = ScrapeMetrics();
  for (const char* method : {"/verity.v1.Nope/A", "/verity.v1.Nope/B"}) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    grpc::Slice empty_message("");
    grpc::ByteBuffer request(&empty_message, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    bool done = false;
    std::mutex mu;
    std::condition_variable cv;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = s;
                        done = true;
                        cv.notify_one();
                      });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  const Scrape after = ScrapeMetrics();
  for (const auto& [series, value] : after.samples) {
    EXPECT_FALSE(absl::StrContains(series, "verity.v1.Nope")) << series;
  }
  const std::string unknown = "verity_rpc_total{method=\"unknown\",code=\"UNIMPLEMENTED\"}";
  // gRPC runs interceptors for methods no service registered too: both calls land under the
  // one label.
  EXPECT_EQ(after.Value(unknown) - before.Value(unknown), 2);
}

// The console and /metrics have no login (README.md): serving them on every interface must not
// pass without a word in the log. A second server of the same database, started for this test.
std::string StartupLogWithMetricsOn(const std::string& pg_url, const std::string& metrics_listen) {
  server::VerityServer::Options options = TestServerOptions(pg_url, 1);
  options.metrics_listen = metrics_listen;
  ::testing::internal::CaptureStderr();
  auto server = server::VerityServer::Start(options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(server.ok()) << server.status();
  if (server.ok()) {
    EXPECT_GT((*server)->metrics_port(), 0) << metrics_listen;
    (*server)->Shutdown();
  }
  return log;
}

TEST_F(MetricsTest, AConsoleOnANonLoopbackAddressIsWarnedAboutAtStart) {
  const std::string exposed = StartupLogWithMetricsOn(pg_->url(), "0.0.0.0:0");
  EXPECT_THAT(exposed, ::testing::HasSubstr("event=console_exposed"));
  EXPECT_THAT(exposed, ::testing::HasSubstr("0.0.0.0"));
  EXPECT_THAT(exposed, ::testing::HasSubstr("no login"));

  const std::string loopback = StartupLogWithMetricsOn(pg_->url(), "127.0.0.1:0");
  EXPECT_THAT(loopback, ::testing::Not(::testing::HasSubstr("console_exposed")));
}

}  // namespace
}  // namespace verity::tests
