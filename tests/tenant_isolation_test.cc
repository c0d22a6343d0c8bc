// Tenant isolation, end to end: one API key cannot exhaust the server or read what it should
// not (docs/SECURITY.md). A real server (authentication on) over a real PostgreSQL and real
// gRPC channels, among them a bare HTTP/2 client that never opens its receive window; every
// expectation comes from the words of docs/SECURITY.md, README.md and the protos, quoted above
// each test. From a black-box probe (docs/SECURITY.md, "Open gaps": what it found and what
// changed).
#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/testing/http_get.h"
#include "server/verity_server.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "absl/synchronization/mutex.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {
namespace {

constexpr char kHogProject[] = "hog";        // The reader's project.
constexpr char kVictimProject[] = "victim";  // Another tenant's project.
constexpr int kMaxStreams = 1;               // gRPC's thread pool: kMaxStreams + 256 threads.
constexpr int kHogItems = 10000;

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

void Authorize(grpc::ClientContext& context, const std::string& key, int seconds = 60) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  context.AddMetadata("authorization", "Bearer " + key);
}

// A channel of its own connection (no shared subchannel), optionally with a small receive
// window: no BDP probing, so each stream may receive only gRPC's initial 64 KiB window until
// its call is read.
std::shared_ptr<grpc::Channel> OwnChannel(int port, bool small_window) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  arguments.SetMaxReceiveMessageSize(32 << 20);
  if (small_window) arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), arguments);
}

// Sends `n` labels (item i, annotator a-(i%3), label i%2) to `project` on one stream; returns
// the number accepted, or -1 when the stream fails.
int SubmitLabels(const std::shared_ptr<grpc::Channel>& channel, const std::string& key,
                 const std::string& project, int n, const std::string& prefix) {
  grpc::ClientContext context;
  Authorize(context, key);
  auto stream = v1::IngestService::NewStub(channel)->SubmitAnnotations(&context);
  v1::AnnotationBatch batch;
  batch.set_batch_id(1);
  batch.set_project(project);
  for (int i = 0; i < n; ++i) {
    v1::Annotation* a = batch.add_annotations();
    a->set_item(absl::StrCat(prefix, i / 3));
    a->set_annotator(absl::StrCat("a-", i % 3));
    a->set_label(i % 2);
  }
  if (!stream->Write(batch)) return -1;
  stream->WritesDone();
  v1::BatchAck ack;
  int accepted = -1;
  if (stream->Read(&ack) && ack.error_code() == 0) accepted = ack.accepted();
  if (!stream->Finish().ok()) return -1;
  return accepted;
}

// A bare HTTP/2 client over one TCP connection that tells the server, in its SETTINGS, that each
// stream's receive window is 0, and never opens it: the server can send headers but no answer
// message. It acknowledges the server's SETTINGS and PINGs (as every HTTP/2 client must) and
// reads and drops everything else.
class WindowlessHttp2Client {
 public:
  explicit WindowlessHttp2Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    if (!ok_) return;
    std::string hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    hello += Frame(4, 0, 0, std::string("\x00\x04\x00\x00\x00\x00", 6));  // INITIAL_WINDOW_SIZE 0
    Send(hello);
    reader_ = std::thread([this] { ReadLoop(); });
  }
  ~WindowlessHttp2Client() {
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }
  int headers_frames() const { return headers_frames_; }

  // Starts a unary call of `path` with `request` (a serialized message) and `key`.
  void Call(const std::string& authority, const std::string& path, const std::string& key,
            const std::string& request) {
    std::string block;
    auto literal = [&](const std::string& name, const std::string& value) {
      block.push_back('\0');
      block.push_back(static_cast<char>(name.size()));
      block += name;
      block.push_back(static_cast<char>(value.size()));
      block += value;
    };
    literal(":method", "POST");
    literal(":scheme", "http");
    literal(":path", path);
    literal(":authority", authority);
    literal("content-type", "application/grpc");
    literal("te", "trailers");
    if (!key.empty()) literal("authorization", "Bearer " + key);
    std::string message(5, '\0');
    const uint32_t n = static_cast<uint32_t>(request.size());
    message[1] = static_cast<char>(n >> 24);
    message[2] = static_cast<char>(n >> 16);
    message[3] = static_cast<char>(n >> 8);
    message[4] = static_cast<char>(n);
    message += request;
    Send(Frame(1, 0x4, next_stream_, block) + Frame(0, 0x1, next_stream_, message));
    next_stream_ += 2;
  }

 private:
  static std::string Frame(uint8_t type, uint8_t flags, uint32_t stream,
                           const std::string& payload) {
    std::string f(9, '\0');
    f[0] = static_cast<char>(payload.size() >> 16);
    f[1] = static_cast<char>(payload.size() >> 8);
    f[2] = static_cast<char>(payload.size());
    f[3] = static_cast<char>(type);
    f[4] = static_cast<char>(flags);
    f[5] = static_cast<char>(stream >> 24);
    f[6] = static_cast<char>(stream >> 16);
    f[7] = static_cast<char>(stream >> 8);
    f[8] = static_cast<char>(stream);
    return f + payload;
  }
  void Send(const std::string& bytes) {
    std::lock_guard<std::mutex> lock(write_mu_);
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }
  bool ReadExactly(char* out, size_t size) {
    size_t got = 0;
    while (got < size) {
      const ssize_t n = ::recv(fd_, out + got, size - got, 0);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }
  void ReadLoop() {
    while (true) {
      char header[9];
      if (!ReadExactly(header, 9)) return;
      const size_t length = (static_cast<uint8_t>(header[0]) << 16) |
                            (static_cast<uint8_t>(header[1]) << 8) | static_cast<uint8_t>(header[2]);
      const uint8_t type = static_cast<uint8_t>(header[3]);
      const uint8_t flags = static_cast<uint8_t>(header[4]);
      std::string payload(length, '\0');
      if (length > 0 && !ReadExactly(payload.data(), length)) return;
      if (type == 4 && (flags & 1) == 0) Send(Frame(4, 1, 0, ""));  // SETTINGS ACK
      if (type == 6 && (flags & 1) == 0) Send(Frame(6, 1, 0, payload));  // PING ACK
      if (type == 1) ++headers_frames_;
    }
  }

  int fd_ = -1;
  bool ok_ = false;
  uint32_t next_stream_ = 1;
  std::mutex write_mu_;
  std::thread reader_;
  std::atomic<int> headers_frames_{0};
};

// Resident memory of this process in bytes (VmRSS), or -1.
int64_t OwnResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

class TenantIsolationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    postgres_ = TestPostgres::Start("verity-probe-isolation").release();
    ASSERT_NE(postgres_, nullptr);
    admin_key_file_ = new std::string(postgres_->dir() + "/admin.key");
    server::VerityServer::Options options = TestServerOptions(postgres_->url(), 4);
    options.auth.enabled = true;
    options.auth.admin_key_file = *admin_key_file_;
    options.max_streams = kMaxStreams;
    options.metrics_listen = "127.0.0.1:0";
    auto started = server::VerityServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
    channel_ = new std::shared_ptr<grpc::Channel>(OwnChannel(server_->port(), false));
    admin_ = new std::string(ReadFirstLine(*admin_key_file_));
    ASSERT_TRUE(absl::StartsWith(*admin_, "vk_"));
    for (const char* name : {kHogProject, kVictimProject}) {
      ASSERT_NO_FATAL_FAILURE(CreateTwoClassProject(*channel_, name));
    }
    v1::AddItemsRequest add;
    add.set_project(kHogProject);
    for (int i = 0; i < kHogItems; ++i) add.add_items()->set_id(absl::StrCat("item-", i));
    v1::AddItemsResponse added;
    grpc::ClientContext context;
    Authorize(context, *admin_);
    ASSERT_TRUE(v1::ProjectService::NewStub(*channel_)->AddItems(&context, add, &added).ok());
    reader_ = new std::string(CreateKey(v1::ROLE_READER, {kHogProject}));
    victim_reader_ = new std::string(CreateKey(v1::ROLE_READER, {kVictimProject}));
  }

  static void TearDownTestSuite() {
    delete channel_;
    if (server_ != nullptr) server_->Shutdown();
    delete server_;
    delete postgres_;
  }

  static std::string CreateKey(v1::Role role, std::vector<std::string> projects,
                               std::shared_ptr<grpc::Channel> channel = nullptr) {
    v1::CreateKeyRequest request;
    request.set_role(role);
    request.set_name("probe_isolation_test");
    for (const std::string& p : projects) request.add_projects(p);
    v1::CreateKeyResponse response;
    grpc::ClientContext context;
    Authorize(context, *admin_);
    grpc::Status status =
        v1::KeyService::NewStub(channel != nullptr ? channel : *channel_)
            ->CreateKey(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.secret_key();
  }

  static grpc::Status GetProject(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& key, const std::string& project,
                                 int seconds) {
    v1::GetProjectRequest request;
    request.set_project(project);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, key, seconds);
    return v1::ProjectService::NewStub(channel)->GetProject(&context, request, &response);
  }

  // A project with classes no, yes and `method` (unset: the server's default), by the admin.
  static void CreateTwoClassProject(const std::shared_ptr<grpc::Channel>& channel,
                                    const std::string& name,
                                    v1::TruthMethod method = v1::TRUTH_METHOD_UNSPECIFIED) {
    v1::CreateProjectRequest create;
    create.mutable_project()->set_name(name);
    create.mutable_project()->add_classes("no");
    create.mutable_project()->add_classes("yes");
    if (method != v1::TRUTH_METHOD_UNSPECIFIED) {
      create.mutable_project()->mutable_settings()->mutable_model()->set_method(method);
    }
    v1::CreateProjectResponse created;
    grpc::ClientContext context;
    Authorize(context, *admin_);
    ASSERT_TRUE(v1::ProjectService::NewStub(channel)->CreateProject(&context, create, &created).ok())
        << name;
  }

  // A server of its own (authentication on, background refits at least every 2 s) whose
  // background fits of project `held` wait in the fit, at most 30 s, until Release().
  struct HeldBackgroundFit {
    absl::Mutex mu;
    bool started ABSL_GUARDED_BY(mu) = false;
    bool released ABSL_GUARDED_BY(mu) = false;
    std::unique_ptr<server::VerityServer> server;
    std::shared_ptr<grpc::Channel> channel;
    void Release() {
      absl::MutexLock lock(&mu);
      released = true;
    }
  };
  // Starts `fit`'s server with the majority-vote projects `held` and `other`, gives `held` 60
  // labels and returns once its background fit has started (and waits). `fit` must outlive
  // its server.
  static void StartWithAHeldBackgroundFit(const std::string& held, const std::string& other,
                                          HeldBackgroundFit& fit) {
    server::VerityServer::Options options = TestServerOptions(postgres_->url(), 4);
    options.auth.enabled = true;
    options.auth.admin_key_file = *admin_key_file_;
    options.training.run_in_background = true;
    options.training.max_staleness = absl::Seconds(2);
    options.training.before_fit_for_testing = [&fit, held](const server::LiveProject& project) {
      if (project.identity().name != held) return;
      absl::MutexLock lock(&fit.mu);
      fit.started = true;
      fit.mu.AwaitWithTimeout(absl::Condition(&fit.released), absl::Seconds(30));
    };
    auto started = server::VerityServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    fit.server = *std::move(started);
    fit.channel = OwnChannel(fit.server->port(), false);
    for (const std::string& name : {held, other}) {
      ASSERT_NO_FATAL_FAILURE(
          CreateTwoClassProject(fit.channel, name, v1::TRUTH_METHOD_MAJORITY_VOTE));
    }
    ASSERT_EQ(SubmitLabels(fit.channel, *admin_, held, 60, "s-"), 60);
    absl::MutexLock lock(&fit.mu);
    ASSERT_TRUE(fit.mu.AwaitWithTimeout(absl::Condition(&fit.started), absl::Seconds(10)))
        << "the background fit of " << held << " never started";
  }

  // `rpc` of `stub` on `project` with the reader key of kHogProject; its status.
  template <typename Stub, typename Request, typename Response>
  static grpc::Status ReaderCall(Stub& stub,
                                 grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                           Response*),
                                 const std::string& project) {
    Request request;
    request.set_project(project);
    Response response;
    grpc::ClientContext context;
    Authorize(context, *reader_);
    return (stub.*rpc)(&context, request, &response);
  }

  static TestPostgres* postgres_;
  static std::string* admin_key_file_;
  static server::VerityServer* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  static std::string* admin_;
  static std::string* reader_;         // Reader of kHogProject only.
  static std::string* victim_reader_;  // Reader of kVictimProject only.
};

TestPostgres* TenantIsolationTest::postgres_ = nullptr;
std::string* TenantIsolationTest::admin_key_file_ = nullptr;
server::VerityServer* TenantIsolationTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* TenantIsolationTest::channel_ = nullptr;
std::string* TenantIsolationTest::admin_ = nullptr;
std::string* TenantIsolationTest::reader_ = nullptr;
std::string* TenantIsolationTest::victim_reader_ = nullptr;

// docs/SECURITY.md, "Limits and quotas": "Unary calls in flight per API key ... (gRPC's thread
// pool is `--max_streams` + 256, shared by streams and unary calls, so one key cannot hold it
// with slow calls; four keys at the cap still can)".
// One reader key sends ListPosteriors calls (each answer ~450 KB, past gRPC's 64 KiB stream
// window) in waves below --max_calls_per_key, and never asks for the answers. Another tenant's
// reader must still be served on its own project. (gRPC's client transport still receives the
// answers, about 128 MB in all, so the server's threads are not held by unsent answers here; a
// client that stops reading its socket altogether was not tried.)
TEST_F(TenantIsolationTest, OneReaderKeyWithUnreadAnswersCannotHoldEveryServerThread) {
  constexpr int kWaves = 8;
  constexpr int kPerWave = 48;  // Below --max_calls_per_key (64).
  const int kThreads = kMaxStreams + 256;
  // The victim is served before.
  ASSERT_TRUE(GetProject(OwnChannel(server_->port(), false), *victim_reader_, kVictimProject, 10)
                  .ok());

  std::vector<std::shared_ptr<grpc::Channel>> hog_channels;
  for (int i = 0; i < 4; ++i) hog_channels.push_back(OwnChannel(server_->port(), true));
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ListPosteriorsResponse>>> calls;
  v1::ListPosteriorsRequest request;
  request.set_project(kHogProject);
  request.set_page_size(kHogItems);
  for (int wave = 0; wave < kWaves; ++wave) {
    for (int i = 0; i < kPerWave; ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      Authorize(*contexts.back(), *reader_, 120);
      auto stub = v1::TruthService::NewStub(hog_channels[calls.size() % hog_channels.size()]);
      calls.push_back(stub->PrepareAsyncListPosteriors(contexts.back().get(), request, &queue));
      calls.back()->StartCall();  // Never read until the end.
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::cout << calls.size() << " unread ListPosteriors calls of one reader key; thread pool "
            << kThreads << "\n";
  std::this_thread::sleep_for(std::chrono::seconds(1));

  // Another tenant's reader, on a connection of its own.
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status victim =
      GetProject(OwnChannel(server_->port(), false), *victim_reader_, kVictimProject, 5);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "victim GetProject: code " << victim.error_code() << " \""
            << victim.error_message() << "\" after " << seconds << " s\n";

  // Release the hog's calls.
  std::vector<v1::ListPosteriorsResponse> responses(calls.size());
  std::vector<grpc::Status> statuses(calls.size());
  if (getenv("PROBE_NO_CANCEL") == nullptr) {
    for (auto& c : contexts) c->TryCancel();
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    calls[i]->Finish(&responses[i], &statuses[i], reinterpret_cast<void*>(i + 1));
  }
  void* tag = nullptr;
  bool ok = false;
  for (size_t done = 0; done < calls.size() && queue.Next(&tag, &ok); ++done) {
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  std::map<int, int> codes;
  size_t bytes = 0;
  for (const auto& r : responses) bytes += r.ByteSizeLong();
  std::cout << "hog bytes received " << bytes << "\n";
  for (const grpc::Status& s : statuses) ++codes[s.error_code()];
  std::cout << "hog calls by code:";
  for (const auto& [code, n] : codes) std::cout << " " << code << "x" << n;
  std::cout << "\n";

  EXPECT_TRUE(victim.ok()) << "another key's call failed while one reader key held unread "
                              "answers: "
                           << victim.error_code() << " " << victim.error_message();
  // And the server recovers once the hog's calls are gone.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(GetProject(OwnChannel(server_->port(), false), *victim_reader_, kVictimProject, 10)
                  .ok());
}

// docs/SECURITY.md, "Who is trusted": a reader "Cannot: ... see another project's name or data,
// over gRPC or the console"; "What the HTTP port exposes": "403 for another project". A key
// scoped to one project must get the same answer for another tenant's project and for a
// project that does not exist, on every console endpoint, so it cannot tell which exist.
TEST_F(TenantIsolationTest, TheConsoleAnswersAnotherProjectAsANonexistentOne) {
  const int port = server_->metrics_port();
  ASSERT_NE(port, 0);
  auto get = [&](const std::string& path, const std::string& key) {
    std::map<std::string, std::string> headers = {{"Host", "127.0.0.1"},
                                                  {"Authorization", "Bearer " + key}};
    absl::StatusOr<testing::HttpResponse> response = testing::HttpGet(port, path, headers);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : testing::HttpResponse();
  };
  for (const std::string suffix : {"", "/annotators"}) {
    const testing::HttpResponse existing =
        get(absl::StrCat("/api/projects/", kVictimProject, suffix), *reader_);
    const testing::HttpResponse missing =
        get(absl::StrCat("/api/projects/no-such-project", suffix), *reader_);
    EXPECT_EQ(existing.status, 403) << suffix << ": " << existing.body;
    EXPECT_EQ(missing.status, existing.status) << suffix << ": " << missing.body;
    EXPECT_FALSE(absl::StrContains(existing.body, "\"items\"")) << existing.body;
  }
  const testing::HttpResponse list = get("/api/projects", *reader_);
  EXPECT_EQ(list.status, 200);
  EXPECT_TRUE(absl::StrContains(list.body, absl::StrCat("\"name\":\"", kHogProject, "\"")))
      << list.body;
  EXPECT_FALSE(absl::StrContains(list.body, kVictimProject)) << list.body;
}

// docs/SECURITY.md, "Who is trusted": a reader "Cannot: ... see another project's name or
// data, over gRPC". Every reader RPC naming another tenant's project and a project that does
// not exist must answer alike (PERMISSION_DENIED), with nothing of the project in the message.
TEST_F(TenantIsolationTest, ReaderRpcsAnswerAnotherProjectAsANonexistentOne) {
  auto statuses = [&](const std::string& project) {
    auto models = v1::ModelService::NewStub(*channel_);
    auto truth = v1::TruthService::NewStub(*channel_);
    return std::vector<grpc::Status>{
        ReaderCall(*models, &v1::ModelService::Stub::GetModelStatus, project),
        ReaderCall(*models, &v1::ModelService::Stub::ListModelVersions, project),
        ReaderCall(*truth, &v1::TruthService::Stub::ListPosteriors, project),
        ReaderCall(*truth, &v1::TruthService::Stub::GetAnnotatorProfiles, project)};
  };
  const std::vector<grpc::Status> existing = statuses(kVictimProject);
  const std::vector<grpc::Status> missing = statuses("no-such-project");
  ASSERT_EQ(existing.size(), missing.size());
  for (size_t i = 0; i < existing.size(); ++i) {
    EXPECT_EQ(existing[i].error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << i << ": " << existing[i].error_message();
    EXPECT_EQ(missing[i].error_code(), existing[i].error_code())
        << i << ": " << missing[i].error_message();
  }
}

// The version `project` serves, asked through GetModelStatus every `poll_ms` for up to 10 s
// until it is past 0 (0 if it never is).
int32_t ServedVersionWithin(const std::shared_ptr<grpc::Channel>& channel,
                            const std::string& project, int poll_ms, const std::string& key) {
  const auto start = std::chrono::steady_clock::now();
  int32_t version = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    v1::GetModelStatusRequest request;
    request.set_project(project);
    v1::GetModelStatusResponse response;
    grpc::ClientContext context;
    Authorize(context, key);
    const grpc::Status status =
        v1::ModelService::NewStub(channel)->GetModelStatus(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) return 0;
    version = response.current_version().version();
    if (version > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return version;
}

// docs/SECURITY.md, "One project's flood delays everyone": "Fits run per project in a bounded
// pool (--max_concurrent_fits), so one project's long fit no longer blocks the others'"; and
// "A project is refit at least every `--refit_staleness_seconds` (30) while labels arrive".
// One tenant's project has a long background fit (held here by the test hook, as a fit made
// long by its settings, e.g. max_iterations up to 100,000, or by its size would be); another
// tenant's project gets 60 new labels (past refit_min_new_labels' default 50) while it runs.
// With a free fit slot and a staleness of 2 s, the other project must be refit within a few
// seconds, not only once the long fit ends.
// Failed before the background fitters took a queue (the pass waited for all its fits).
TEST_F(TenantIsolationTest, OneTenantsLongBackgroundFitDoesNotHoldUpAnothersRefit) {
  HeldBackgroundFit fit;
  ASSERT_NO_FATAL_FAILURE(StartWithAHeldBackgroundFit("bg-slow", "bg-fast", fit));
  const std::shared_ptr<grpc::Channel>& channel = fit.channel;
  ASSERT_EQ(SubmitLabels(channel, *admin_, "bg-fast", 60, "f-"), 60);
  const auto start = std::chrono::steady_clock::now();
  const int32_t fast_version = ServedVersionWithin(channel, "bg-fast", 200, *admin_);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fit.Release();
  // Once the long fit is let go, the other project is refit at once (it was due all along).
  const auto released = std::chrono::steady_clock::now();
  const int32_t after_release = ServedVersionWithin(channel, "bg-fast", 100, *admin_);
  std::cout << "bg-fast version " << fast_version << " after " << waited
            << " s while bg-slow's fit was held; version " << after_release << " "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - released).count()
            << " s after it was released\n";
  EXPECT_GT(fast_version, 0) << "another project with 60 new labels was not refit within "
                             << waited << " s (staleness 2 s, a free fit slot) while one "
                                          "project's background fit ran";
  fit.server->Shutdown();
}

// docs/SECURITY.md, "One project's flood delays everyone": "Fits run per project in a bounded
// pool (--max_concurrent_fits), so one project's long fit no longer blocks the others'"; the
// limits table: "In-process fits at once ... 2 ... the fit waits for a slot". While one
// tenant's project has a long background fit (held by the test hook) and a slot is free,
// another tenant's writer gets its TrainModel answered.
TEST_F(TenantIsolationTest, AnotherTenantsTrainModelIsServedWhileOneProjectsBackgroundFitRuns) {
  HeldBackgroundFit fit;
  ASSERT_NO_FATAL_FAILURE(StartWithAHeldBackgroundFit("tm-slow", "tm-fast", fit));
  const std::shared_ptr<grpc::Channel>& channel = fit.channel;
  const std::string writer = CreateKey(v1::ROLE_WRITER, {"tm-fast"}, channel);
  ASSERT_EQ(SubmitLabels(channel, writer, "tm-fast", 6, "f-"), 6);
  v1::TrainModelRequest request;
  request.set_project("tm-fast");
  v1::TrainModelResponse response;
  grpc::ClientContext context;
  Authorize(context, writer, 10);
  const grpc::Status trained =
      v1::ModelService::NewStub(channel)->TrainModel(&context, request, &response);
  fit.Release();
  EXPECT_TRUE(trained.ok()) << trained.error_code() << " " << trained.error_message();
  EXPECT_GT(response.version().version(), 0);
  fit.server->Shutdown();
}

// docs/SECURITY.md, "Limits and quotas": "Unary calls in flight per API key ... (gRPC's thread
// pool is `--max_streams` + 256, shared by streams and unary calls, so one key cannot hold it
// with slow calls; four keys at the cap still can)", and README.md --max_calls_per_key. A
// reader key's client that never opens its receive window (HTTP/2 SETTINGS
// INITIAL_WINDOW_SIZE 0) sends GetProject calls in waves below --max_calls_per_key (64),
// 320 in all, past the pool of 257 threads. Another tenant's reader must still be served.
TEST_F(TenantIsolationTest, OneReaderKeyThatNeverOpensItsWindowCannotHoldEveryServerThread) {
  constexpr int kConnections = 4;
  constexpr int kWaves = 8;
  constexpr int kPerConnectionPerWave = 10;  // 40 a wave, below --max_calls_per_key.
  ASSERT_TRUE(GetProject(OwnChannel(server_->port(), false), *victim_reader_, kVictimProject, 10)
                  .ok());
  v1::GetProjectRequest request;
  request.set_project(kHogProject);
  const std::string authority = absl::StrCat("127.0.0.1:", server_->port());
  grpc::Status victim;
  double seconds = 0;
  {
    std::vector<std::unique_ptr<WindowlessHttp2Client>> hogs;
    for (int i = 0; i < kConnections; ++i) {
      hogs.push_back(std::make_unique<WindowlessHttp2Client>(server_->port()));
      ASSERT_TRUE(hogs.back()->ok());
    }
    for (int wave = 0; wave < kWaves; ++wave) {
      for (auto& hog : hogs) {
        for (int i = 0; i < kPerConnectionPerWave; ++i) {
          hog->Call(authority, "/verity.v1.ProjectService/GetProject", *reader_,
                    request.SerializeAsString());
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
    int headers = 0;
    for (auto& hog : hogs) headers += hog->headers_frames();
    const auto start = std::chrono::steady_clock::now();
    victim = GetProject(OwnChannel(server_->port(), false), *victim_reader_, kVictimProject, 5);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << kConnections * kWaves * kPerConnectionPerWave
              << " windowless GetProject calls of one reader key (" << headers
              << " HEADERS frames back); victim: code " << victim.error_code() << " \""
              << victim.error_message() << "\" after " << seconds << " s\n";
  }  // The hog's connections close here.
  EXPECT_TRUE(victim.ok()) << "another key's call failed while one reader key's calls waited "
                              "for a window: "
                           << victim.error_code() << " " << victim.error_message();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const grpc::Status after =
      GetProject(OwnChannel(server_->port(), false), *victim_reader_, kVictimProject, 10);
  EXPECT_TRUE(after.ok()) << "after the hog's connections closed: " << after.error_message();
}

// The same as above at the server's default --max_streams (1000: a pool of 1256 threads) and
// --max_calls_per_key (64): 1,400 windowless calls of one reader key, 40 every 100 ms.
TEST_F(TenantIsolationTest, AtTheDefaultsOneReaderKeyThatNeverOpensItsWindowHoldsEveryThread) {
  server::VerityServer::Options options = TestServerOptions(postgres_->url(), 4);
  options.auth.enabled = true;
  options.auth.admin_key_file = *admin_key_file_;
  auto started = server::VerityServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<server::VerityServer> server = *std::move(started);
  auto channel = OwnChannel(server->port(), false);
  // Keys made through this server, so that its key ring has them at once.
  const std::string hog_key = CreateKey(v1::ROLE_READER, {kHogProject}, channel);
  const std::string victim_key = CreateKey(v1::ROLE_READER, {kVictimProject}, channel);
  ASSERT_TRUE(GetProject(channel, victim_key, kVictimProject, 10).ok());
  v1::GetProjectRequest request;
  request.set_project(kHogProject);
  const std::string authority = absl::StrCat("127.0.0.1:", server->port());
  grpc::Status victim;
  {
    std::vector<std::unique_ptr<WindowlessHttp2Client>> hogs;
    for (int i = 0; i < 8; ++i) {
      hogs.push_back(std::make_unique<WindowlessHttp2Client>(server->port()));
      ASSERT_TRUE(hogs.back()->ok());
    }
    for (int wave = 0; wave < 35; ++wave) {
      for (int i = 0; i < 40; ++i) {
        hogs[i % hogs.size()]->Call(authority, "/verity.v1.ProjectService/GetProject", hog_key,
                                    request.SerializeAsString());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
    victim = GetProject(OwnChannel(server->port(), false), victim_key, kVictimProject, 5);
    std::cout << "1400 windowless GetProject calls of one reader key at the defaults; victim: "
              << "code " << victim.error_code() << " \"" << victim.error_message() << "\"\n";
  }
  EXPECT_TRUE(victim.ok()) << "another key's call failed while one reader key's calls waited "
                              "for a window: "
                           << victim.error_code() << " " << victim.error_message();
  server->Shutdown();
}

// docs/SECURITY.md, "Who is trusted": the network is trusted with nothing; "Limits and quotas":
// "Calls of the open methods (health, reflection), which pass without a key, in flight at once
// | 64 (each holds a thread ...)". Keyless health Check calls from a client that never opens
// its HTTP/2 receive window, 40 every 100 ms (below the 64), 1,400 in all at the server's
// defaults: a caller with a key must still be served.
TEST_F(TenantIsolationTest, KeylessWindowlessHealthChecksDoNotHoldEveryThread) {
  server::VerityServer::Options options = TestServerOptions(postgres_->url(), 4);
  options.auth.enabled = true;
  options.auth.admin_key_file = *admin_key_file_;
  auto started = server::VerityServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<server::VerityServer> server = *std::move(started);
  auto channel = OwnChannel(server->port(), false);
  const std::string victim_key = CreateKey(v1::ROLE_READER, {kVictimProject}, channel);
  ASSERT_TRUE(GetProject(channel, victim_key, kVictimProject, 10).ok());
  const std::string authority = absl::StrCat("127.0.0.1:", server->port());
  grpc::Status victim;
  int headers = 0;
  {
    std::vector<std::unique_ptr<WindowlessHttp2Client>> hogs;
    for (int i = 0; i < 8; ++i) {
      hogs.push_back(std::make_unique<WindowlessHttp2Client>(server->port()));
      ASSERT_TRUE(hogs.back()->ok());
    }
    for (int wave = 0; wave < 35; ++wave) {
      for (int i = 0; i < 40; ++i) {
        hogs[i % hogs.size()]->Call(authority, "/grpc.health.v1.Health/Check", "", "");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
    for (auto& hog : hogs) headers += hog->headers_frames();
    victim = GetProject(OwnChannel(server->port(), false), victim_key, kVictimProject, 5);
    std::cout << "1400 keyless windowless health checks (" << headers
              << " HEADERS frames back); victim: code " << victim.error_code() << " \""
              << victim.error_message() << "\"\n";
  }
  EXPECT_TRUE(victim.ok()) << victim.error_code() << " " << victim.error_message();
  server->Shutdown();
}

// README.md: "--grpc_memory_mb | 512 | gRPC resource quota for calls in flight; a quarter of
// it (at least 32 MiB) bounds one API key's answers not yet sent"; docs/SECURITY.md: "gRPC
// memory for calls in flight | 512 MiB | --grpc_memory_mb", kept "as a guard against running
// out of memory", and the row on one key's unsent answers ("GetPosteriors, ListPosteriors and
// GetAnnotatorProfiles reserve their answer's bound before building it"). With
// --grpc_memory_mb=64, one reader key sends 48 calls (below --max_calls_per_key) of ~16 MiB
// answers (256 classes: 7,900 posteriors, or 31 full confusions) from a client that never
// opens its HTTP/2 receive window, for each of the three reads. The server's memory for these
// calls must stay near the quota, not grow by their answers' 750 MiB. (The server runs in this
// process; the client reads nothing.) ListPosteriors failed before a key's unsent answer bytes
// were capped (RSS +1,508 MiB; after, +42 MiB).
TEST_F(TenantIsolationTest, UnsentAnswersOfOneReaderKeyStayWithinTheGrpcMemoryQuota) {
  constexpr int kCalls = 48;
  constexpr int64_t kQuotaMb = 64;
  constexpr int kItems = 7900;
  constexpr int kAnnotators = 40;
  server::VerityServer::Options options = TestServerOptions(postgres_->url(), 4);
  options.auth.enabled = true;
  options.auth.admin_key_file = *admin_key_file_;
  options.grpc_memory_bytes = kQuotaMb << 20;
  auto started = server::VerityServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<server::VerityServer> server = *std::move(started);
  auto channel = OwnChannel(server->port(), false);
  {
    v1::CreateProjectRequest create;
    create.mutable_project()->set_name("wide");
    for (int k = 0; k < 256; ++k) create.mutable_project()->add_classes(absl::StrCat("c", k));
    v1::CreateProjectResponse created;
    grpc::ClientContext context;
    Authorize(context, *admin_);
    ASSERT_TRUE(v1::ProjectService::NewStub(channel)->CreateProject(&context, create, &created).ok());
    v1::AddItemsRequest add;
    add.set_project("wide");
    for (int i = 0; i < kItems; ++i) add.add_items()->set_id(absl::StrCat("w-", i));
    v1::AddItemsResponse added;
    grpc::ClientContext add_context;
    Authorize(add_context, *admin_);
    ASSERT_TRUE(v1::ProjectService::NewStub(channel)->AddItems(&add_context, add, &added).ok());
    v1::AddAnnotatorsRequest annotators;
    annotators.set_project("wide");
    for (int a = 0; a < kAnnotators; ++a) annotators.add_annotators()->set_id(absl::StrCat("a-", a));
    v1::AddAnnotatorsResponse annotators_added;
    grpc::ClientContext annotators_context;
    Authorize(annotators_context, *admin_);
    ASSERT_TRUE(v1::ProjectService::NewStub(channel)
                    ->AddAnnotators(&annotators_context, annotators, &annotators_added)
                    .ok());
  }
  const std::string hog_key = CreateKey(v1::ROLE_READER, {"wide"}, channel);
  v1::ListPosteriorsRequest list;
  list.set_project("wide");
  list.set_page_size(10000);
  v1::GetPosteriorsRequest get;
  get.set_project("wide");
  for (int i = 0; i < kItems; ++i) get.add_items(absl::StrCat("w-", i));
  v1::GetAnnotatorProfilesRequest profiles;
  profiles.set_project("wide");
  profiles.set_page_size(kAnnotators);
  {
    // One answer of each, read normally: its size.
    v1::ListPosteriorsResponse listed;
    grpc::ClientContext list_context;
    Authorize(list_context, hog_key);
    ASSERT_TRUE(
        v1::TruthService::NewStub(channel)->ListPosteriors(&list_context, list, &listed).ok());
    v1::GetPosteriorsResponse got;
    grpc::ClientContext get_context;
    Authorize(get_context, hog_key);
    const grpc::Status get_status =
        v1::TruthService::NewStub(channel)->GetPosteriors(&get_context, get, &got);
    ASSERT_TRUE(get_status.ok()) << get_status.error_message();
    v1::GetAnnotatorProfilesResponse served;
    grpc::ClientContext profiles_context;
    Authorize(profiles_context, hog_key);
    ASSERT_TRUE(v1::TruthService::NewStub(channel)
                    ->GetAnnotatorProfiles(&profiles_context, profiles, &served)
                    .ok());
    std::cout << "one answer each: " << listed.ByteSizeLong() << ", " << got.ByteSizeLong()
              << " and " << served.ByteSizeLong() << " bytes (" << served.profiles_size()
              << " profiles)\n";
  }
  const std::string authority = absl::StrCat("127.0.0.1:", server->port());
  const std::vector<std::pair<std::string, std::string>> reads = {
      {"/verity.v1.TruthService/ListPosteriors", list.SerializeAsString()},
      {"/verity.v1.TruthService/GetPosteriors", get.SerializeAsString()},
      {"/verity.v1.TruthService/GetAnnotatorProfiles", profiles.SerializeAsString()}};
  for (const auto& [method, body] : reads) {
    const int64_t baseline = OwnResidentBytes();
    int64_t peak = baseline;
    {
      std::vector<std::unique_ptr<WindowlessHttp2Client>> hogs;
      for (int i = 0; i < 4; ++i) {
        hogs.push_back(std::make_unique<WindowlessHttp2Client>(server->port()));
        ASSERT_TRUE(hogs.back()->ok());
      }
      for (int i = 0; i < kCalls; ++i) hogs[i % hogs.size()]->Call(authority, method, hog_key, body);
      for (int i = 0; i < 40; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        peak = std::max(peak, OwnResidentBytes());
      }
    }
    // The hogs' connections are closed: their calls end and free what they held.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const int64_t growth = peak - baseline;
    std::cout << kCalls << " unsent " << method << " answers of one reader key: RSS +"
              << (growth >> 20) << " MiB over " << (baseline >> 20) << " MiB (quota " << kQuotaMb
              << " MiB)\n";
    EXPECT_LE(growth, (kQuotaMb + 128) << 20) << method;
  }
  server->Shutdown();
}

// auth_interceptor.h, max_unsent_answer_bytes_per_key: "the encoded bytes of one key's unary
// answers being built (ReserveAnswerBytes) or waiting to be sent, at most; past it the key's
// new calls are refused RESOURCE_EXHAUSTED"; README.md: a quarter of --grpc_memory_mb (at least
// 32 MiB). That holds for every unary answer, not only the three reads that reserve theirs: a
// reader key of every project whose ListProjects answers (~1 MiB pages) wait unsent on a client
// that never opens its window, 40 of them (below --max_calls_per_key), passes 32 MiB, so its
// next call is refused naming the unsent bytes while another key is served; once the client
// is gone the key is served again.
TEST_F(TenantIsolationTest, UnsentListProjectsAnswersCountAgainstTheKeysUnsentBytes) {
  constexpr int kProjects = 40;
  constexpr int kCalls = 40;
  server::VerityServer::Options options = TestServerOptions(postgres_->url(), 4);
  options.auth.enabled = true;
  options.auth.admin_key_file = *admin_key_file_;
  options.grpc_memory_bytes = int64_t{128} << 20;  // A key's unsent answers: at most 32 MiB.
  auto started = server::VerityServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<server::VerityServer> server = *std::move(started);
  auto channel = OwnChannel(server->port(), false);
  for (int p = 0; p < kProjects; ++p) {
    v1::CreateProjectRequest create;
    create.mutable_project()->set_name(absl::StrCat("listed-", p));
    for (int k = 0; k < 256; ++k) {
      create.mutable_project()->add_classes(absl::StrCat(std::string(116, 'c'), k));
    }
    v1::CreateProjectResponse created;
    grpc::ClientContext context;
    Authorize(context, *admin_);
    ASSERT_TRUE(
        v1::ProjectService::NewStub(channel)->CreateProject(&context, create, &created).ok());
  }
  const std::string hog_key = CreateKey(v1::ROLE_READER, {}, channel);
  auto list_projects = [&](const std::string& key, v1::ListProjectsResponse* response) {
    grpc::ClientContext context;
    Authorize(context, key, 10);
    return v1::ProjectService::NewStub(channel)->ListProjects(&context, v1::ListProjectsRequest(),
                                                              response);
  };
  {
    v1::ListProjectsResponse page;
    ASSERT_TRUE(list_projects(hog_key, &page).ok());
    ASSERT_GE(page.ByteSizeLong(), size_t{1} << 20);  // One answer, read: about 1 MiB.
  }
  // Polls `key`'s ListProjects for up to 10 s until its code is `code`; the last status.
  auto until = [&](const std::string& key, grpc::StatusCode code) {
    grpc::Status status;
    for (int i = 0; i < 100; ++i) {
      v1::ListProjectsResponse page;
      status = list_projects(key, &page);
      if (status.error_code() == code) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return status;
  };
  {
    WindowlessHttp2Client hog(server->port());
    ASSERT_TRUE(hog.ok());
    const std::string authority = absl::StrCat("127.0.0.1:", server->port());
    for (int i = 0; i < kCalls; ++i) {
      hog.Call(authority, "/verity.v1.ProjectService/ListProjects", hog_key,
               v1::ListProjectsRequest().SerializeAsString());
    }
    const grpc::Status refused = until(hog_key, grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << refused.error_message();
    EXPECT_TRUE(absl::StrContains(refused.error_message(), "bytes of answers not yet sent"))
        << refused.error_message();
    v1::ListProjectsResponse other;
    const grpc::Status served = list_projects(*admin_, &other);
    EXPECT_TRUE(served.ok()) << served.error_message();
  }
  const grpc::Status again = until(hog_key, grpc::StatusCode::OK);
  EXPECT_TRUE(again.ok()) << again.error_message();
  server->Shutdown();
}

}  // namespace
}  // namespace verity::tests
