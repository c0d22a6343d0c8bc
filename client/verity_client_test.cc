#include "client/verity_client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/status.h>

#include <atomic>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/testing/fake_verity_server.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/models.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::client {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::verity::client::testing::FakeVerityServer;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

class VerityClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeVerityServer::Start();
    ClientOptions options;
    options.deadline = absl::Seconds(10);
    client_ = std::make_unique<VerityClient>(
        CreateInsecureChannel(server_->address()), options);
    v1::Project project;
    project.set_name("birds");
    project.add_classes("false");
    project.add_classes("true");
    ASSERT_THAT(client_->CreateProject(project), IsOk());
  }

  // `n` distinct labels: item i<j>, annotator w<j % 3>, label j % 2.
  static std::vector<v1::Annotation> Annotations(int n) {
    std::vector<v1::Annotation> annotations(n);
    for (int j = 0; j < n; ++j) {
      annotations[j].set_item(absl::StrCat("i", j));
      annotations[j].set_annotator(absl::StrCat("w", j % 3));
      annotations[j].set_label(j % 2);
    }
    return annotations;
  }

  // Options whose back-off sleeps are recorded instead of slept.
  SubmitOptions RecordingOptions(int batch_size) {
    SubmitOptions options;
    options.batch_size = batch_size;
    options.sleep = [this](absl::Duration d) { sleeps_.push_back(d); };
    return options;
  }

  std::unique_ptr<FakeVerityServer> server_;
  std::unique_ptr<VerityClient> client_;
  std::vector<absl::Duration> sleeps_;
};

TEST(FromGrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_THAT(FromGrpcStatus(grpc::Status::OK), IsOk());
  EXPECT_THAT(
      FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                  "project \"x\" does not exist")),
      StatusIs(absl::StatusCode::kNotFound, "project \"x\" does not exist"));
  EXPECT_THAT(FromGrpcStatus(
                  grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "slow")),
              StatusIs(absl::StatusCode::kResourceExhausted, "slow"));
}

TEST_F(VerityClientTest, AddAnnotatorsCountsAddedAndUpdated) {
  std::vector<v1::Annotator> annotators(3);
  for (int i = 0; i < 3; ++i) annotators[i].set_id(absl::StrCat("w", i));
  absl::StatusOr<AddItemsTotals> totals =
      client_->AddAnnotators("birds", annotators);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->added, 3);
  EXPECT_EQ(totals->updated, 0);
  totals = client_->AddAnnotators("birds", {annotators[0]});
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->updated, 1);
  EXPECT_THAT(client_->AddAnnotators("nope", annotators),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(VerityClientTest, TrainModelReturnsTheNewVersion) {
  EXPECT_THAT(client_->TrainModel("birds", absl::Seconds(10)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("has no labels")));
  ASSERT_THAT(
      client_->SubmitAnnotations("birds", Annotations(4), RecordingOptions(10)),
      IsOk());
  absl::StatusOr<v1::ModelVersion> version =
      client_->TrainModel("birds", absl::Seconds(10));
  ASSERT_THAT(version, IsOk());
  EXPECT_EQ(version->version(), 1);
  EXPECT_EQ(version->num_labels(), 4);
  absl::StatusOr<std::vector<v1::ModelVersion>> versions =
      client_->ListModelVersions("birds", 0);
  ASSERT_THAT(versions, IsOk());
  ASSERT_EQ(versions->size(), 1u);
  EXPECT_EQ((*versions)[0].version(), 1);
}

TEST_F(VerityClientTest, UnaryCallsReturnServerErrorsWithTheirCode) {
  EXPECT_THAT(
      client_->GetProject("nope"),
      StatusIs(absl::StatusCode::kNotFound, "project \"nope\" does not exist"));
  v1::Project duplicate;
  duplicate.set_name("birds");
  duplicate.add_classes("a");
  duplicate.add_classes("b");
  EXPECT_THAT(client_->CreateProject(duplicate),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(VerityClientUnreachableTest, FailsWithUnavailable) {
  // Port 1 on localhost is reserved (tcpmux) and not listening in tests.
  VerityClient client(CreateInsecureChannel("localhost:1"), ClientOptions());
  EXPECT_THAT(client.ListProjects(), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(ResolveServerTargetTest, OneAddressOrOwnSchemeIsKeptAsGiven) {
  for (const char* given : {"localhost:50051", "verity.example:443", "dns:///verity:1",
                            "ipv4:127.0.0.1:1,127.0.0.1:2", "unix:/tmp/verity.sock"}) {
    absl::StatusOr<ServerTarget> target = ResolveServerTarget(given);
    ASSERT_THAT(target, IsOk()) << given;
    EXPECT_EQ(target->target, given);
    EXPECT_EQ(target->authority, "");
    EXPECT_EQ(target->tls_name, "");
  }
}

// A single HOST:PORT is passed to gRPC as given, and gRPC reads a port past 65535 modulo
// 65536: "localhost:115697" connects to localhost:50161, another server than the one named (and
// is sent the API key). A list refuses the same address ("port must be 1 to 65535"); one
// address alone must be refused as well, not taken to another port.
TEST(ResolveServerTargetTest, OneAddressWithAPortPast65535IsRefusedAsInAList) {
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,localhost:115697"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port must be 1 to 65535")));
  EXPECT_THAT(ResolveServerTarget("localhost:115697"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port must be 1 to 65535")));
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:70000"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port must be 1 to 65535")));
}

// A port with trailing characters ("50051x") is refused in a list ("port must be 1 to
// 65535"); one address alone was passed to gRPC, which connected to port 50051 (found by a
// probe). Refused alike now; an address without a port, or a bracketed IPv6 one, is kept.
TEST(ResolveServerTargetTest, OneAddressWithAPortFollowedByOtherCharactersIsRefused) {
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,localhost:50051x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port must be 1 to 65535")));
  EXPECT_THAT(ResolveServerTarget("localhost:50051x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port must be 1 to 65535")));
  EXPECT_THAT(ResolveServerTarget("[::1]:7x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port must be 1 to 65535")));
  for (const char* kept :
       {"localhost", "[::1]", "[::1]:7001", "verity.example:443", "2001:4860:4860::8888"}) {
    absl::StatusOr<ServerTarget> target = ResolveServerTarget(kept);
    ASSERT_THAT(target, IsOk()) << kept;
    EXPECT_EQ(target->target, kept);
  }
}

TEST(ResolveServerTargetTest, SeveralAddressesBecomeOneIpTargetNamedByTheFirst) {
  absl::StatusOr<ServerTarget> literals = ResolveServerTarget("127.0.0.1:7001, 127.0.0.2:7002");
  ASSERT_THAT(literals, IsOk());
  EXPECT_EQ(literals->target, "ipv4:127.0.0.1:7001,127.0.0.2:7002");
  EXPECT_EQ(literals->authority, "127.0.0.1:7001");
  EXPECT_EQ(literals->tls_name, "127.0.0.1");

  absl::StatusOr<ServerTarget> v6 = ResolveServerTarget("[::1]:7001,[::1]:7002");
  ASSERT_THAT(v6, IsOk());
  EXPECT_EQ(v6->target, "ipv6:[::1]:7001,[::1]:7002");
  EXPECT_EQ(v6->tls_name, "::1");

  // A host name is resolved here (localhost is 127.0.0.1 in /etc/hosts); IPv4 wins when every
  // host has an IPv4 address, and a repeated address is listed once.
  absl::StatusOr<ServerTarget> names =
      ResolveServerTarget("localhost:7001,127.0.0.1:7002,localhost:7001");
  ASSERT_THAT(names, IsOk());
  EXPECT_EQ(names->target, "ipv4:127.0.0.1:7001,127.0.0.1:7002");
  EXPECT_EQ(names->authority, "localhost:7001");
  EXPECT_EQ(names->tls_name, "localhost");
}

TEST(ResolveServerTargetTest, BadListsAreRejectedWithTheReason) {
  EXPECT_THAT(ResolveServerTarget("a:1,,b:2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("empty address in \"a:1,,b:2\"")));
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty address")));
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,127.0.0.1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"127.0.0.1\" in \"127.0.0.1:1,127.0.0.1\" has no port")));
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,127.0.0.1:70000"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port must be 1 to 65535")));
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,127.0.0.1:0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port must be 1 to 65535")));
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,127.0.0.1:65535"), IsOk());
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,::1:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[IPV6]:PORT")));
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,[::1]:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mixes hosts")));
  EXPECT_THAT(ResolveServerTarget("127.0.0.1:1,no-such-host.invalid:2"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("cannot resolve \"no-such-host.invalid\"")));
}

TEST(CreateChannelTest, ErrorsOfTheListNameTheFlag) {
  EXPECT_THAT(CreateChannel("a:1,,b:2", ChannelSecurity()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--server: empty address in \"a:1,,b:2\""));
}

TEST(CheckKeyTransportTest, AListIsLoopbackOnlyWhenEveryAddressIs) {
  EXPECT_THAT(CheckKeyTransport("localhost:1,127.0.0.1:2", "key", ChannelSecurity(), false),
              IsOk());
  EXPECT_THAT(CheckKeyTransport("localhost:1,10.0.0.7:2", "key", ChannelSecurity(), false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plaintext")));
  EXPECT_THAT(CheckKeyTransport("10.0.0.7:2,localhost:1", "key", ChannelSecurity(), false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plaintext")));
  EXPECT_THAT(CheckKeyTransport("ipv4:127.0.0.1:1,127.0.0.2:2", "key", ChannelSecurity(), false),
              IsOk());
}

// CheckKeyTransport judges the --server value as ResolveServerTarget reads it: a list may have
// spaces after its commas, and a target may name its resolver (dns:///HOST:PORT). Loopback hosts
// so written are loopback still; others are not.
TEST(CheckKeyTransportTest, SpacesInAListAndTheDnsSchemeDoNotHideALoopbackHost) {
  EXPECT_THAT(CheckKeyTransport("localhost:1, 127.0.0.1:2", "key", ChannelSecurity(), false),
              IsOk());
  EXPECT_THAT(CheckKeyTransport("localhost:1, 10.0.0.7:2", "key", ChannelSecurity(), false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plaintext")));
  EXPECT_THAT(CheckKeyTransport("dns:///localhost:50051", "key", ChannelSecurity(), false), IsOk());
  EXPECT_THAT(CheckKeyTransport("dns:///10.0.0.7:50051", "key", ChannelSecurity(), false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plaintext")));
}

// A key may go to any address over TLS (a CA given), with --allow_plaintext_key, or when there
// is no key; only a key in plaintext to a non-loopback address is refused.
TEST(CheckKeyTransportTest, TlsTheFlagOrNoKeyLetAnyAddressThrough) {
  ChannelSecurity tls;
  tls.ca_file = "ca.pem";
  EXPECT_THAT(CheckKeyTransport("10.0.0.7:443", "key", tls, false), IsOk());
  EXPECT_THAT(CheckKeyTransport("10.0.0.7:443", "key", ChannelSecurity(), true), IsOk());
  EXPECT_THAT(CheckKeyTransport("10.0.0.7:443", "", ChannelSecurity(), false), IsOk());
  EXPECT_THAT(CheckKeyTransport("10.0.0.7:443", "key", ChannelSecurity(), false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plaintext")));
  EXPECT_THAT(CheckKeyTransport("unix:/run/verity.sock", "key", ChannelSecurity(), false),
              IsOk());
}

// Two fake servers, one address list: the client spreads unary calls over both (round robin)
// and keeps working, with no failed call, when one of them stops.
TEST(ReplicaChannelTest, SpreadsCallsAndFailsOverWhenOneServerStops) {
  std::unique_ptr<FakeVerityServer> first = FakeVerityServer::Start();
  std::unique_ptr<FakeVerityServer> second = FakeVerityServer::Start();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(
      absl::StrCat(first->address(), ",", second->address()), ChannelSecurity());
  ASSERT_THAT(channel, IsOk());
  ClientOptions options;
  options.deadline = absl::Seconds(10);
  VerityClient client(*channel, options);
  v1::Project project;
  project.set_name("birds");
  project.add_classes("false");
  project.add_classes("true");
  // Each fake keeps its own projects, so creating on both proves both got calls.
  int created = 0;
  for (int i = 0; i < 8 && created < 2; ++i) {
    if (client.CreateProject(project).ok()) ++created;
  }
  EXPECT_EQ(created, 2);
  first.reset();  // Stops it.
  for (int i = 0; i < 20; ++i) {
    EXPECT_THAT(client.GetProject("birds"), IsOk()) << "call " << i;
  }
}

// A gRPC server of one service on a free loopback port, and its "127.0.0.1:PORT".
struct LoopbackServer {
  std::unique_ptr<grpc::Server> server;  // Null if it could not start.
  std::string address;
};

LoopbackServer StartOnLoopback(grpc::Service& service, int max_receive_bytes = -1) {
  grpc::ServerBuilder builder;
  if (max_receive_bytes > 0) builder.SetMaxReceiveMessageSize(max_receive_bytes);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  LoopbackServer started;
  started.server = builder.BuildAndStart();
  started.address = absl::StrCat("127.0.0.1:", port);
  return started;
}

// A ProjectService whose ListProjects and CreateProject fail UNAVAILABLE the first time each:
// what a call sent to a replica that died at that moment sees.
class FailingOnceProjectService final : public v1::ProjectService::Service {
 public:
  grpc::Status ListProjects(grpc::ServerContext*, const v1::ListProjectsRequest*,
                            v1::ListProjectsResponse* response) override {
    if (list_calls_++ == 0) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "going away");
    response->add_projects()->set_name("birds");
    return grpc::Status::OK;
  }
  grpc::Status CreateProject(grpc::ServerContext*, const v1::CreateProjectRequest* request,
                             v1::CreateProjectResponse* response) override {
    if (create_calls_++ == 0) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "going away");
    *response->mutable_project() = request->project();
    return grpc::Status::OK;
  }
  std::atomic<int> list_calls_{0};
  std::atomic<int> create_calls_{0};
};

TEST(ReplicaChannelTest, UnaryCallsFailingUnavailableAreRetriedButCreateProjectIsNot) {
  FailingOnceProjectService service;
  LoopbackServer server = StartOnLoopback(service);
  ASSERT_NE(server.server, nullptr);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateChannel(server.address, ChannelSecurity());
  ASSERT_THAT(channel, IsOk());
  VerityClient client(*channel, ClientOptions());

  absl::StatusOr<std::vector<v1::Project>> projects = client.ListProjects();
  ASSERT_THAT(projects, IsOk());
  EXPECT_EQ(service.list_calls_.load(), 2);
  EXPECT_EQ((*channel)->GetLoadBalancingPolicyName(), "round_robin");

  v1::Project project;
  project.set_name("birds");
  EXPECT_THAT(client.CreateProject(project), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(service.create_calls_.load(), 1);
  server.server->Shutdown();
}

// A ProjectService whose GetProject fails UNAVAILABLE for its first `failures` calls, and whose
// ListProjects answers one project with a class name of `class_bytes` bytes.
class FailingThenLargeProjectService final : public v1::ProjectService::Service {
 public:
  FailingThenLargeProjectService(int failures, size_t class_bytes)
      : failures_(failures), class_bytes_(class_bytes) {}
  grpc::Status GetProject(grpc::ServerContext*, const v1::GetProjectRequest* request,
                          v1::GetProjectResponse* response) override {
    if (get_calls_++ < failures_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "going away");
    response->mutable_project()->set_name(request->project());
    return grpc::Status::OK;
  }
  grpc::Status ListProjects(grpc::ServerContext*, const v1::ListProjectsRequest*,
                            v1::ListProjectsResponse* response) override {
    v1::Project* project = response->add_projects();
    project->set_name("wide");
    project->add_classes(std::string(class_bytes_, 'c'));
    project->add_classes("d");
    return grpc::Status::OK;
  }
  const int failures_;
  const size_t class_bytes_;
  std::atomic<int> get_calls_{0};
};

// kReplicaServiceConfig: a unary call that fails UNAVAILABLE is retried, "up to 4 attempts".
TEST(ReplicaChannelTest, AUnaryCallIsAttemptedUpToFourTimes) {
  FailingThenLargeProjectService three_failures(3, 1);
  LoopbackServer server = StartOnLoopback(three_failures);
  ASSERT_NE(server.server, nullptr);
  VerityClient client(CreateInsecureChannel(server.address), ClientOptions());
  EXPECT_THAT(client.GetProject("birds"), IsOk());
  EXPECT_EQ(three_failures.get_calls_.load(), 4);
  server.server->Shutdown();

  FailingThenLargeProjectService four_failures(4, 1);
  server = StartOnLoopback(four_failures);
  ASSERT_NE(server.server, nullptr);
  VerityClient second(CreateInsecureChannel(server.address), ClientOptions());
  EXPECT_THAT(second.GetProject("birds"), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(four_failures.get_calls_.load(), 4);
  server.server->Shutdown();
}

// kMaxReceiveMessageBytes: answers past gRPC's 4 MiB default are accepted, on the channels of
// CreateInsecureChannel and CreateChannel alike.
TEST(ReplicaChannelTest, AnswersOverFourMebibytesAreReceived) {
  constexpr size_t kClassBytes = size_t{5} << 20;
  FailingThenLargeProjectService service(0, kClassBytes);
  LoopbackServer server = StartOnLoopback(service);
  ASSERT_NE(server.server, nullptr);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateChannel(server.address, ChannelSecurity());
  ASSERT_THAT(channel, IsOk());
  for (const VerityClient& client :
       {VerityClient(CreateInsecureChannel(server.address), ClientOptions()),
        VerityClient(*channel, ClientOptions())}) {
    absl::StatusOr<std::vector<v1::Project>> projects = client.ListProjects();
    ASSERT_THAT(projects, IsOk());
    ASSERT_EQ(projects->size(), 1u);
    EXPECT_EQ((*projects)[0].classes(0).size(), kClassBytes);
  }
  server.server->Shutdown();
}

// A TruthService whose GetPosteriors answers RESOURCE_EXHAUSTED, as a server over its response
// limit does, for more than `max_items` ids; it records the size of every call.
class SmallResponsesTruthService final : public v1::TruthService::Service {
 public:
  explicit SmallResponsesTruthService(int max_items) : max_items_(max_items) {}
  grpc::Status GetPosteriors(grpc::ServerContext*, const v1::GetPosteriorsRequest* request,
                             v1::GetPosteriorsResponse* response) override {
    call_sizes_.push_back(request->items_size());
    if (request->items_size() > max_items_) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "items: ask for fewer ids");
    }
    for (const std::string& item : request->items()) response->add_posteriors()->set_item(item);
    return grpc::Status::OK;
  }
  const int max_items_;
  std::vector<int> call_sizes_;  // Written by one call at a time: the client's calls are serial.
};

// verity_client.h: GetPosteriors splits its calls while the server answers RESOURCE_EXHAUSTED,
// down to one id per call; only a single id that does not fit is an error.
TEST(ChunkedCallsTest, GetPosteriorsHalvesItsCallsDownToOneIdAndKeepsTheOrder) {
  SmallResponsesTruthService service(/*max_items=*/1);
  LoopbackServer server = StartOnLoopback(service);
  ASSERT_NE(server.server, nullptr);
  VerityClient client(CreateInsecureChannel(server.address), ClientOptions());
  absl::StatusOr<std::vector<v1::Posterior>> posteriors =
      client.GetPosteriors("birds", {"a", "b", "c", "d", "e"});
  ASSERT_THAT(posteriors, IsOk());
  std::vector<std::string> items;
  for (const v1::Posterior& p : *posteriors) items.push_back(p.item());
  EXPECT_THAT(items, ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(service.call_sizes_, ElementsAre(5, 2, 1, 1, 1, 1, 1));

  SmallResponsesTruthService none_fit(/*max_items=*/0);
  LoopbackServer none_server = StartOnLoopback(none_fit);
  ASSERT_NE(none_server.server, nullptr);
  VerityClient none_client(CreateInsecureChannel(none_server.address), ClientOptions());
  EXPECT_THAT(none_client.GetPosteriors("birds", {"a", "b"}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("fewer ids")));
  EXPECT_THAT(none_fit.call_sizes_, ElementsAre(2, 1));
  none_server.server->Shutdown();
  server.server->Shutdown();
}

// A ProjectService that records the rows and the encoded size of each AddItems and
// AddAnnotators call.
class RecordingProjectService final : public v1::ProjectService::Service {
 public:
  grpc::Status AddItems(grpc::ServerContext*, const v1::AddItemsRequest* request,
                        v1::AddItemsResponse* response) override {
    call_rows_.push_back(request->items_size());
    call_bytes_.push_back(request->ByteSizeLong());
    response->set_added(request->items_size());
    return grpc::Status::OK;
  }
  grpc::Status AddAnnotators(grpc::ServerContext*, const v1::AddAnnotatorsRequest* request,
                             v1::AddAnnotatorsResponse* response) override {
    call_rows_.push_back(request->annotators_size());
    call_bytes_.push_back(request->ByteSizeLong());
    response->set_added(request->annotators_size());
    return grpc::Status::OK;
  }
  std::vector<int> call_rows_;      // Written by one call at a time: the client's calls are
  std::vector<size_t> call_bytes_;  // serial.
};

// verity_client.h: AddItems and AddAnnotators send at most kMaxItemsPerCall rows and
// kMaxRequestBytes of them per call, so that rows with many features stay under the server's
// 16 MiB message limit (10,000 items of 512 features, about 20 MB, were sent in one call).
TEST(ChunkedCallsTest, AddItemsAndAddAnnotatorsSplitCallsByEncodedSize) {
  RecordingProjectService service;
  LoopbackServer server = StartOnLoopback(service, /*max_receive_bytes=*/64 << 20);
  ASSERT_NE(server.server, nullptr);
  VerityClient client(CreateInsecureChannel(server.address), ClientOptions());
  // 3,000 rows of 512 features: about 6 MB, two calls.
  std::vector<v1::Item> items(3000);
  std::vector<v1::Annotator> annotators(3000);
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].set_id(absl::StrCat("i", i));
    annotators[i].set_id(absl::StrCat("a", i));
    for (int j = 0; j < 512; ++j) {
      items[i].add_features(0.5f);
      annotators[i].add_features(0.5f);
    }
  }
  absl::StatusOr<AddItemsTotals> added = client.AddItems("birds", items);
  ASSERT_THAT(added, IsOk());
  EXPECT_EQ(added->added, 3000);
  added = client.AddAnnotators("birds", annotators);
  ASSERT_THAT(added, IsOk());
  EXPECT_EQ(added->added, 3000);
  ASSERT_EQ(service.call_rows_.size(), 4u);
  EXPECT_EQ(service.call_rows_[0] + service.call_rows_[1], 3000);
  EXPECT_EQ(service.call_rows_[2] + service.call_rows_[3], 3000);
  for (size_t bytes : service.call_bytes_) {
    EXPECT_LE(bytes, VerityClient::kMaxRequestBytes + 64);  // The project name besides rows.
  }
  server.server->Shutdown();
}

// AddItems sends at most 10,000 items per call; the error of a call that needed one is the
// server's as it is, and that of a longer list names the items of the failed call and what came
// before.
TEST_F(VerityClientTest, AddItemsErrorsNameTheFailedChunkOnlyForLongLists) {
  std::vector<v1::Item> items(VerityClient::kMaxItemsPerCall + 1);
  for (size_t i = 0; i < items.size(); ++i) items[i].set_id(absl::StrCat("i", i));
  EXPECT_THAT(client_->AddItems("nope", absl::MakeConstSpan(items).subspan(0, 2)),
              StatusIs(absl::StatusCode::kNotFound, "project \"nope\" does not exist"));
  EXPECT_THAT(client_->AddItems("nope", items),
              StatusIs(absl::StatusCode::kNotFound,
                       "AddItems of items 0 to 9999 (the 0 items before were written): "
                       "project \"nope\" does not exist"));
}

// An IngestService that acks every batch under another batch_id.
class MisnumberingIngestService final : public v1::IngestService::Service {
 public:
  grpc::Status SubmitAnnotations(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream) override {
    v1::AnnotationBatch batch;
    while (stream->Read(&batch)) {
      v1::BatchAck ack;
      ack.set_batch_id(batch.batch_id() + 100);
      ack.set_accepted(batch.annotations_size());
      stream->Write(ack);
    }
    return grpc::Status::OK;
  }
};

// An IngestService that acks the first batch of a stream and then ends the stream with OK,
// leaving every later batch unacknowledged.
class EndsEarlyIngestService final : public v1::IngestService::Service {
 public:
  grpc::Status SubmitAnnotations(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream) override {
    v1::AnnotationBatch batch;
    if (stream->Read(&batch)) {
      v1::BatchAck ack;
      ack.set_batch_id(batch.batch_id());
      ack.set_accepted(batch.annotations_size());
      stream->Write(ack);
    }
    return grpc::Status::OK;
  }
};

// Acked means durable and nothing else does: a stream that the server ends with OK before it
// acknowledged every batch is an error naming the first batch not acknowledged.
TEST(AckOrderTest, AStreamEndedBeforeEveryAckIsAnError) {
  EndsEarlyIngestService service;
  LoopbackServer server = StartOnLoopback(service);
  ASSERT_NE(server.server, nullptr);
  VerityClient client(CreateInsecureChannel(server.address), ClientOptions());
  std::vector<v1::Annotation> annotations(4);
  for (int i = 0; i < 4; ++i) {
    annotations[i].set_item(absl::StrCat("i", i));
    annotations[i].set_annotator("w");
  }
  SubmitOptions options;
  options.batch_size = 2;
  EXPECT_THAT(client.SubmitAnnotations("birds", annotations, options),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("without acknowledging batch 2 of 2 (annotations 2 to 3)")));
  server.server->Shutdown();
}

// ingest.proto: acks come in the order the batches were sent. An ack for another batch than the
// one expected is a broken server: the client stops with INTERNAL and counts nothing, rather
// than counting a batch as durable on another batch's ack.
TEST(AckOrderTest, AnAckForAnotherBatchIsAnInternalError) {
  MisnumberingIngestService service;
  LoopbackServer server = StartOnLoopback(service);
  ASSERT_NE(server.server, nullptr);
  VerityClient client(CreateInsecureChannel(server.address), ClientOptions());
  std::vector<v1::Annotation> annotations(3);
  for (int i = 0; i < 3; ++i) {
    annotations[i].set_item(absl::StrCat("i", i));
    annotations[i].set_annotator("w");
  }
  EXPECT_THAT(client.SubmitAnnotations("birds", annotations, SubmitOptions()),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("got the ack of batch id 101 while expecting batch id 1")));
  server.server->Shutdown();
}

TEST_F(VerityClientTest, SubmitStreamsBatchesAndSumsTheAcks) {
  const std::vector<v1::Annotation> annotations = Annotations(2500);
  std::vector<int64_t> progress;
  SubmitOptions options = RecordingOptions(1000);
  options.on_progress = [&](const SubmitProgress& p) {
    EXPECT_EQ(p.total, 2500);
    progress.push_back(p.acked);
  };
  absl::StatusOr<SubmitTotals> totals =
      client_->SubmitAnnotations("birds", annotations, options);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 2500);
  EXPECT_EQ(totals->duplicate, 0);
  EXPECT_EQ(totals->rejected, 0);
  EXPECT_EQ(totals->retries, 0);
  EXPECT_THAT(progress, ElementsAre(1000, 2000, 2500));
  EXPECT_THAT(server_->received_batch_ids(), ElementsAre(1, 2, 3));
  EXPECT_EQ(server_->streams_opened(), 1);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(VerityClientTest, ResubmittingCountsDuplicatesAndRevisions) {
  std::vector<v1::Annotation> annotations = Annotations(10);
  ASSERT_THAT(
      client_->SubmitAnnotations("birds", annotations, RecordingOptions(4)),
      IsOk());
  annotations[3].set_label(1 - annotations[3].label());
  absl::StatusOr<SubmitTotals> totals =
      client_->SubmitAnnotations("birds", annotations, RecordingOptions(4));
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 0);
  EXPECT_EQ(totals->duplicate, 9);
  EXPECT_EQ(totals->revised, 1);
  EXPECT_EQ(server_->LiveLabel("birds", "i3", "w0"), annotations[3].label());
}

TEST_F(VerityClientTest, SubmitKeepsEightBatchesUnacked) {
  // The fake acks only once 8 batches of the stream are outstanding, so a
  // client that waited for acks with fewer in flight would time out.
  server_->HoldAcksUntil(8);
  absl::StatusOr<SubmitTotals> totals = client_->SubmitAnnotations(
      "birds", Annotations(2000), RecordingOptions(100));
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 2000);
  EXPECT_EQ(server_->max_outstanding_batches(), 8);
  EXPECT_EQ(server_->received_batch_ids().size(), 20u);
}

TEST_F(VerityClientTest, SubmitMapsRejectionsToInputPositions) {
  std::vector<v1::Annotation> annotations = Annotations(7);
  annotations[1].set_label(5);
  annotations[5].set_item("");
  SubmitOptions options = RecordingOptions(3);
  options.max_rejections = 1;
  absl::StatusOr<SubmitTotals> totals =
      client_->SubmitAnnotations("birds", annotations, options);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 5);
  EXPECT_EQ(totals->rejected, 2);
  ASSERT_EQ(totals->rejections.size(), 1u);  // Only the first is kept.
  EXPECT_EQ(totals->rejections[0].index, 1);
  EXPECT_EQ(totals->rejections[0].reason, "label 5 out of range [0, 2)");

  options.max_rejections = 10;
  totals = client_->SubmitAnnotations("birds", annotations, options);
  ASSERT_THAT(totals, IsOk());
  ASSERT_EQ(totals->rejections.size(), 2u);
  EXPECT_EQ(totals->rejections[1].index, 5);
  EXPECT_EQ(totals->rejections[1].reason, "item: empty id");
}

TEST_F(VerityClientTest, SubmitResendsFromTheFailedBatchInOrder) {
  server_->FailNextBatches(1, absl::StatusCode::kUnavailable, "db down");
  absl::StatusOr<SubmitTotals> totals = client_->SubmitAnnotations(
      "birds", Annotations(50), RecordingOptions(10));
  ASSERT_THAT(totals, IsOk());
  // Batches 2 to 5 were in flight behind batch 1 and got through on the first
  // stream; they are resent after batch 1 (so revisions keep their order) but
  // counted once.
  EXPECT_EQ(totals->accepted, 50);
  EXPECT_EQ(totals->duplicate, 0);
  EXPECT_EQ(totals->retries, 1);
  EXPECT_THAT(sleeps_, ElementsAre(absl::Milliseconds(200)));
  EXPECT_THAT(server_->received_batch_ids(),
              ElementsAre(1, 2, 3, 4, 5, 1, 2, 3, 4, 5));
  EXPECT_EQ(server_->streams_opened(), 2);
}

TEST_F(VerityClientTest, SubmitBacksOffExponentiallyBetweenRetries) {
  server_->FailNextBatches(3, absl::StatusCode::kResourceExhausted, "busy");
  absl::StatusOr<SubmitTotals> totals = client_->SubmitAnnotations(
      "birds", Annotations(10), RecordingOptions(10));
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 10);
  EXPECT_EQ(totals->retries, 3);
  EXPECT_THAT(sleeps_,
              ElementsAre(absl::Milliseconds(200), absl::Milliseconds(400),
                          absl::Milliseconds(800)));
  EXPECT_THAT(server_->received_batch_ids(), ElementsAre(1, 1, 1, 1));
}

TEST_F(VerityClientTest, SubmitResendsUnackedBatchesAfterABrokenStream) {
  server_->BreakNextStream(/*after_batches=*/2, absl::StatusCode::kUnavailable);
  absl::StatusOr<SubmitTotals> totals = client_->SubmitAnnotations(
      "birds", Annotations(40), RecordingOptions(10));
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 40);
  EXPECT_EQ(totals->duplicate, 0);
  EXPECT_EQ(totals->retries, 1);
  EXPECT_THAT(sleeps_, ElementsAre(absl::Milliseconds(200)));
  const std::vector<uint64_t> ids = server_->received_batch_ids();
  // Batch 3 broke the first stream; the second starts at batch 3.
  ASSERT_GE(ids.size(), 5u);
  EXPECT_THAT(std::vector<uint64_t>(ids.end() - 2, ids.end()),
              ElementsAre(3, 4));
  EXPECT_EQ(server_->streams_opened(), 2);
}

TEST_F(VerityClientTest, SubmitGivesUpAfterMaxRetries) {
  server_->FailNextBatches(100, absl::StatusCode::kResourceExhausted,
                           "queue full");
  SubmitOptions options = RecordingOptions(10);
  options.max_retries = 2;
  options.max_backoff = absl::Milliseconds(300);
  EXPECT_THAT(client_->SubmitAnnotations("birds", Annotations(20), options),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "gave up after 3 attempts: batch 1 of 2 (annotations "
                       "0 to 9): queue full"));
  EXPECT_THAT(sleeps_,
              ElementsAre(absl::Milliseconds(200), absl::Milliseconds(300)));
}

// max_retries bounds the failures in a row: a stream that gets a batch acknowledged before it
// fails starts the count, and the back-off, again. With max_retries 1 and one batch in flight:
// batch 1 fails (retry 1); the next stream acks batch 1 and breaks at batch 2 (retry 1 again,
// after the same initial back-off); the third stream finishes.
TEST_F(VerityClientTest, SubmitCountsRetriesInARowAndStartsAgainAfterProgress) {
  server_->FailNextBatches(1, absl::StatusCode::kUnavailable, "db down");
  SubmitOptions options = RecordingOptions(10);
  options.max_retries = 1;
  options.max_unacked_batches = 1;
  options.sleep = [this](absl::Duration d) {
    sleeps_.push_back(d);
    if (sleeps_.size() == 1) server_->BreakNextStream(/*after_batches=*/1,
                                                      absl::StatusCode::kUnavailable);
  };
  absl::StatusOr<SubmitTotals> totals =
      client_->SubmitAnnotations("birds", Annotations(30), options);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 30);
  EXPECT_EQ(totals->retries, 2);
  EXPECT_THAT(sleeps_, ElementsAre(absl::Milliseconds(200), absl::Milliseconds(200)));
  EXPECT_EQ(server_->streams_opened(), 3);
}

TEST_F(VerityClientTest, SubmitFailsAtOnceOnOtherBatchErrors) {
  EXPECT_THAT(
      client_->SubmitAnnotations("nope", Annotations(20), RecordingOptions(10)),
      StatusIs(absl::StatusCode::kNotFound,
               "batch 1 of 2 (annotations 0 to 9): project \"nope\" "
               "does not exist"));
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(VerityClientTest, SubmitRefusesBadOptionsAndSkipsEmptyInput) {
  EXPECT_THAT(
      client_->SubmitAnnotations("birds", Annotations(1), RecordingOptions(0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size 0")));
  EXPECT_THAT(client_->SubmitAnnotations("birds", Annotations(1),
                                         RecordingOptions(10001)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<SubmitTotals> totals =
      client_->SubmitAnnotations("birds", {}, RecordingOptions(10));
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 0);
  EXPECT_EQ(server_->streams_opened(), 0);
}

TEST_F(VerityClientTest, AddItemsSendsChunksOfAtMostTenThousand) {
  std::vector<v1::Item> items(25000);
  for (int i = 0; i < 25000; ++i) items[i].set_id(absl::StrCat("i", i));
  items[7].set_gold_label(1);
  absl::StatusOr<AddItemsTotals> totals = client_->AddItems("birds", items);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->added, 25000);
  EXPECT_EQ(totals->updated, 0);
  totals = client_->AddItems("birds", absl::MakeConstSpan(items).subspan(0, 3));
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->updated, 3);
}

TEST_F(VerityClientTest, GetPosteriorsKeepsRequestOrder) {
  ASSERT_THAT(
      client_->SubmitAnnotations("birds", Annotations(6), RecordingOptions(10)),
      IsOk());
  absl::StatusOr<std::vector<v1::Posterior>> posteriors =
      client_->GetPosteriors("birds", {"i5", "i0"});
  ASSERT_THAT(posteriors, IsOk());
  ASSERT_EQ(posteriors->size(), 2u);
  EXPECT_EQ((*posteriors)[0].item(), "i5");
  EXPECT_EQ((*posteriors)[0].map_label(), 1);
  EXPECT_EQ((*posteriors)[1].item(), "i0");
  EXPECT_THAT(client_->GetPosteriors("birds", {"missing"}),
              StatusIs(absl::StatusCode::kNotFound));
}

// ListPosteriors reads one page of at most page_size posteriors; following next_page_token
// until it is empty (the last page) yields every item once.
TEST_F(VerityClientTest, ListPosteriorsPagesOfPageSizeCoverEveryItemOnce) {
  ASSERT_THAT(client_->SubmitAnnotations("birds", Annotations(5), RecordingOptions(10)), IsOk());
  std::vector<std::string> items;
  std::vector<int> page_sizes;
  std::string token;
  do {
    absl::StatusOr<v1::ListPosteriorsResponse> page = client_->ListPosteriors("birds", 2, token);
    ASSERT_THAT(page, IsOk());
    page_sizes.push_back(page->posteriors_size());
    for (const v1::Posterior& posterior : page->posteriors()) items.push_back(posterior.item());
    token = page->next_page_token();
  } while (!token.empty() && page_sizes.size() < 10);
  EXPECT_THAT(page_sizes, ElementsAre(2, 2, 1));
  EXPECT_THAT(items, ::testing::UnorderedElementsAre("i0", "i1", "i2", "i3", "i4"));
}

// batch_size is "1 to 10,000" (verity_client.h): both bounds are accepted.
TEST_F(VerityClientTest, SubmitAcceptsBatchSizesAtBothBounds) {
  absl::StatusOr<SubmitTotals> totals = client_->SubmitAnnotations(
      "birds", Annotations(3), RecordingOptions(VerityClient::kMaxItemsPerCall));
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 3);
  EXPECT_THAT(server_->received_batch_ids(), ElementsAre(1));
  totals = client_->SubmitAnnotations("birds", Annotations(2),
                                      RecordingOptions(1));
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->duplicate, 2);
  EXPECT_THAT(server_->received_batch_ids(), ElementsAre(1, 1, 2));
}

// AddAnnotators is "chunked and annotated like AddItems" (verity_client.h): the error of a
// single call is the server's as it is; that of a longer list names the annotators of the failed
// call and what came before.
TEST_F(VerityClientTest, AddAnnotatorsErrorsNameTheFailedChunkOnlyForLongLists) {
  std::vector<v1::Annotator> annotators(VerityClient::kMaxItemsPerCall + 1);
  for (size_t i = 0; i < annotators.size(); ++i) annotators[i].set_id(absl::StrCat("w", i));
  EXPECT_THAT(client_->AddAnnotators("nope", absl::MakeConstSpan(annotators).subspan(0, 2)),
              StatusIs(absl::StatusCode::kNotFound, "project \"nope\" does not exist"));
  EXPECT_THAT(client_->AddAnnotators("nope", annotators),
              StatusIs(absl::StatusCode::kNotFound,
                       "AddAnnotators of annotators 0 to 9999 (the 0 annotators before were "
                       "written): project \"nope\" does not exist"));
}

// Services that record the deadline of every call they serve (as the server sees it, from the
// call's grpc-timeout). GetProject and TrainModel answer at once; SubmitAnnotations acks every
// batch, except that the first stream ends UNAVAILABLE right after acking its first batch.
class DeadlineRecorder {
 public:
  void Record(const grpc::ServerContext& context) {
    absl::MutexLock lock(&mutex_);
    deadlines_.push_back(absl::FromChrono(context.deadline()));
  }
  std::vector<absl::Time> deadlines() const {
    absl::MutexLock lock(&mutex_);
    return deadlines_;
  }

 private:
  mutable absl::Mutex mutex_;
  std::vector<absl::Time> deadlines_ ABSL_GUARDED_BY(mutex_);
};

class DeadlineProjectService final : public v1::ProjectService::Service {
 public:
  explicit DeadlineProjectService(DeadlineRecorder& recorder) : recorder_(recorder) {}
  grpc::Status GetProject(grpc::ServerContext* context, const v1::GetProjectRequest* request,
                          v1::GetProjectResponse* response) override {
    recorder_.Record(*context);
    response->mutable_project()->set_name(request->project());
    return grpc::Status::OK;
  }

 private:
  DeadlineRecorder& recorder_;
};

class DeadlineModelService final : public v1::ModelService::Service {
 public:
  explicit DeadlineModelService(DeadlineRecorder& recorder) : recorder_(recorder) {}
  grpc::Status TrainModel(grpc::ServerContext* context, const v1::TrainModelRequest*,
                          v1::TrainModelResponse* response) override {
    recorder_.Record(*context);
    response->mutable_version()->set_version(1);
    return grpc::Status::OK;
  }

 private:
  DeadlineRecorder& recorder_;
};

class DeadlineIngestService final : public v1::IngestService::Service {
 public:
  explicit DeadlineIngestService(DeadlineRecorder& recorder) : recorder_(recorder) {}
  grpc::Status SubmitAnnotations(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream) override {
    recorder_.Record(*context);
    const bool first_stream = streams_.fetch_add(1) == 0;
    v1::AnnotationBatch batch;
    while (stream->Read(&batch)) {
      v1::BatchAck ack;
      ack.set_batch_id(batch.batch_id());
      ack.set_accepted(batch.annotations_size());
      stream->Write(ack);
      if (first_stream) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "replica down");
    }
    return grpc::Status::OK;
  }

 private:
  DeadlineRecorder& recorder_;
  std::atomic<int> streams_{0};
};

// The three deadline-recording services on one loopback server.
struct DeadlineServer {
  DeadlineServer() : projects(recorder), models(recorder), ingest(recorder) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&projects);
    builder.RegisterService(&models);
    builder.RegisterService(&ingest);
    server = builder.BuildAndStart();
    address = absl::StrCat("127.0.0.1:", port);
  }
  ~DeadlineServer() {
    if (server != nullptr) server->Shutdown();
  }

  DeadlineRecorder recorder;
  DeadlineProjectService projects;
  DeadlineModelService models;
  DeadlineIngestService ingest;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

// Whether `deadline` is `after` past some moment in [from, to], within what the grpc-timeout
// header loses: it rounds a timeout up, to whole 10 s for one of an hour, so up to 1 % more.
::testing::AssertionResult DeadlineIsAfter(absl::Time deadline, absl::Duration after,
                                           absl::Time from, absl::Time to) {
  if (deadline >= from + after - absl::Seconds(1) &&
      deadline <= to + after + after / 100 + absl::Seconds(1)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "deadline " << (deadline - from) << " after the call, expected " << after;
}

// verity_client.h: each unary RPC has the deadline ClientOptions::deadline, except TrainModel,
// whose deadline is its own argument.
TEST(CallDeadlineTest, UnaryCallsHaveTheClientDeadlineAndTrainModelItsOwn) {
  DeadlineServer server;
  ASSERT_NE(server.server, nullptr);
  ClientOptions options;
  options.deadline = absl::Hours(1);
  const VerityClient client(CreateInsecureChannel(server.address), options);
  const absl::Time before = absl::Now();
  ASSERT_THAT(client.GetProject("birds"), IsOk());
  ASSERT_THAT(client.TrainModel("birds", absl::Hours(2)), IsOk());
  const absl::Time after = absl::Now();
  const std::vector<absl::Time> deadlines = server.recorder.deadlines();
  ASSERT_EQ(deadlines.size(), 2u);
  EXPECT_TRUE(DeadlineIsAfter(deadlines[0], absl::Hours(1), before, after));
  EXPECT_TRUE(DeadlineIsAfter(deadlines[1], absl::Hours(2), before, after));
}

// SubmitOptions::min_throughput: a stream's deadline is ClientOptions::deadline plus the time
// to send the annotations still unacknowledged at min_throughput annotations/s. 20 annotations
// at 0.01/s: 2,000 s for the first stream; 1,000 s for the second, which resends only the 10
// after the batch the first stream got acked.
TEST(CallDeadlineTest, AStreamHasTheCallDeadlinePlusTheTimeToSendWhatIsUnacknowledged) {
  DeadlineServer server;
  ASSERT_NE(server.server, nullptr);
  ClientOptions options;
  options.deadline = absl::Hours(1);
  const VerityClient client(CreateInsecureChannel(server.address), options);
  std::vector<v1::Annotation> annotations(20);
  for (int i = 0; i < 20; ++i) {
    annotations[i].set_item(absl::StrCat("i", i));
    annotations[i].set_annotator("w");
  }
  SubmitOptions submit;
  submit.batch_size = 10;
  submit.max_unacked_batches = 1;
  submit.min_throughput = 0.01;
  std::vector<absl::Duration> sleeps;
  submit.sleep = [&sleeps](absl::Duration d) { sleeps.push_back(d); };
  const absl::Time before = absl::Now();
  absl::StatusOr<SubmitTotals> totals = client.SubmitAnnotations("birds", annotations, submit);
  const absl::Time after = absl::Now();
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->accepted, 20);
  EXPECT_EQ(totals->retries, 1);
  const std::vector<absl::Time> deadlines = server.recorder.deadlines();
  ASSERT_EQ(deadlines.size(), 2u);
  EXPECT_TRUE(DeadlineIsAfter(deadlines[0], absl::Hours(1) + absl::Seconds(2000), before, after));
  EXPECT_TRUE(DeadlineIsAfter(deadlines[1], absl::Hours(1) + absl::Seconds(1000), before, after));
}

// A batch error that is not retryable fails the call with its code (verity_client.h), every
// google.rpc.Code up to UNAUTHENTICATED (16) included.
TEST_F(VerityClientTest, ABatchAckedUnauthenticatedFailsWithThatCode) {
  server_->FailNextBatches(1, absl::StatusCode::kUnauthenticated, "no key");
  EXPECT_THAT(
      client_->SubmitAnnotations("birds", Annotations(5), RecordingOptions(10)),
      StatusIs(absl::StatusCode::kUnauthenticated, "batch 1 of 1 (annotations 0 to 4): no key"));
  EXPECT_TRUE(sleeps_.empty());
}

// SubmitAnnotations: "INVALID_ARGUMENT for bad options" (verity_client.h), each one on its own;
// nothing is sent.
TEST_F(VerityClientTest, SubmitRefusesEachBadOption) {
  auto refused = [this](const SubmitOptions& options) {
    return client_->SubmitAnnotations("birds", Annotations(3), options);
  };
  SubmitOptions options = RecordingOptions(10);
  options.max_unacked_batches = 0;
  EXPECT_THAT(refused(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = RecordingOptions(10);
  options.max_retries = -1;
  EXPECT_THAT(refused(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = RecordingOptions(10);
  options.max_rejections = -1;
  EXPECT_THAT(refused(options), StatusIs(absl::StatusCode::kInvalidArgument));
  for (double rate : {0.0, -5.0, std::nan("")}) {
    options = RecordingOptions(10);
    options.min_throughput = rate;
    EXPECT_THAT(refused(options), StatusIs(absl::StatusCode::kInvalidArgument)) << rate;
  }
  EXPECT_EQ(server_->streams_opened(), 0);
  // The smallest good values are taken.
  options = RecordingOptions(10);
  options.max_unacked_batches = 1;
  options.max_retries = 0;
  options.max_rejections = 0;
  EXPECT_THAT(refused(options), IsOk());
}

// CreateChannel (verity_client.h): INVALID_ARGUMENT for a client certificate or key without
// the CA or without the other, or a CA file without a PEM certificate (naming --tls_ca and the
// file); NOT_FOUND naming a file that cannot be read.
TEST(CreateChannelTest, RefusesIncompleteOrUnreadableTlsFiles) {
  const std::string dir = ::testing::TempDir();
  const std::string not_pem = absl::StrCat(dir, "/not_a_ca.pem");
  std::ofstream(not_pem) << "just some text\n";
  // Passes the PEM check; the pair checks come before any TLS set-up.
  const std::string pem = absl::StrCat(dir, "/looks_like_a_ca.pem");
  std::ofstream(pem) << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  const std::string missing = absl::StrCat(dir, "/no_such_ca.pem");

  ChannelSecurity security;
  security.cert_file = not_pem;
  security.key_file = not_pem;
  EXPECT_THAT(CreateChannel("localhost:1", security),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls_ca")));
  security = ChannelSecurity();
  security.key_file = not_pem;
  EXPECT_THAT(CreateChannel("localhost:1", security), StatusIs(absl::StatusCode::kInvalidArgument));
  security = ChannelSecurity();
  security.ca_file = pem;
  security.cert_file = pem;
  EXPECT_THAT(CreateChannel("localhost:1", security), StatusIs(absl::StatusCode::kInvalidArgument));
  security.cert_file.clear();
  security.key_file = pem;
  EXPECT_THAT(CreateChannel("localhost:1", security), StatusIs(absl::StatusCode::kInvalidArgument));
  security.key_file.clear();
  security.ca_file = not_pem;
  EXPECT_THAT(CreateChannel("localhost:1", security),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("--tls_ca"), HasSubstr(not_pem))));
  security.ca_file = missing;
  EXPECT_THAT(CreateChannel("localhost:1", security),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(missing)));
}

}  // namespace
}  // namespace verity::client
