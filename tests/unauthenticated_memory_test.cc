// Memory taken before authentication: gRPC reads a whole message before the interceptor checks
// the key, so callers without a key could make the server allocate 16 MiB per call. With TLS
// the server refuses a keyless call when its metadata arrives, before the message is read
// (server/auth/key_metadata_processor.h). The real verity_server binary runs as a child
// process, so that its resident memory can be read from /proc.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tests/server_process.h"
#include "verity/v1/projects.grpc.pb.h"

namespace verity::tests {
namespace {

constexpr int kQuotaMb = 64;
constexpr int kCalls = 100;
constexpr size_t kMessageBytes = 15 << 20;

// Resident memory of `pid` in bytes (VmRSS), or -1.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "VmRSS:")) {
      rest = absl::StripAsciiWhitespace(rest);
      absl::ConsumeSuffix(&rest, " kB");
      int64_t kb = 0;
      return absl::SimpleAtoi(rest, &kb) ? kb * 1024 : -1;
    }
  }
  return -1;
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// What FloodWithKeylessCalls saw.
struct Flood {
  int64_t baseline = 0;  // the server's resident memory before the flood
  int64_t growth = 0;    // its peak during the flood, above the baseline
  grpc::Status served;   // an authenticated ListProjects sent during the flood
  std::vector<grpc::Status> statuses;  // of the keyless calls
};

// Starts a TLS server with --auth=on and --grpc_memory_mb=kQuotaMb (as a server off loopback
// must run, and as the early key check needs), sends kCalls concurrent keyless calls of
// `method` with the body `request_bytes`, and an authenticated call while they are in flight.
void FloodWithKeylessCalls(const std::string& method, const std::string& request_bytes,
                           Flood* flood) {
  const std::string dir = MakeTempDir("verity-unauth-memory");
  const std::string script = absl::StrCat(
      "set -e; cd ", dir, "; ",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
      "  -subj /CN=verity-test-ca 2>/dev/null; ",
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext; ",
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
      "  -subj /CN=localhost 2>/dev/null; ",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "  -out server.pem -days 2 -extfile san.ext 2>/dev/null");
  ASSERT_EQ(std::system(("bash -c '" + script + "'").c_str()), 0) << "openssl failed";
  ServerProcess server(RunfilePath("server/verity_server"), dir,
                       {"--auth=on", "--metrics_port=0",
                        absl::StrCat("--grpc_memory_mb=", kQuotaMb),
                        "--tls_cert=" + dir + "/server.pem", "--tls_key=" + dir + "/server.key"});
  ASSERT_TRUE(server.Start().ok());
  const std::string admin_key = ReadFirstLine(dir + "/var/admin.key");
  ASSERT_FALSE(admin_key.empty());
  grpc::ChannelArguments arguments;
  arguments.SetMaxSendMessageSize(16 << 20);
  grpc::SslCredentialsOptions ssl;
  {
    std::ifstream in(dir + "/ca.pem");
    ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto channel =
      grpc::CreateCustomChannel(server.address(), grpc::SslCredentials(ssl), arguments);
  auto list_projects = [&](std::chrono::seconds timeout) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    context.AddMetadata("authorization", "Bearer " + admin_key);
    v1::ListProjectsResponse response;
    return v1::ProjectService::NewStub(channel)->ListProjects(&context, v1::ListProjectsRequest(),
                                                               &response);
  };
  ASSERT_TRUE(list_projects(std::chrono::seconds(30)).ok());
  flood->baseline = ResidentBytes(server.pid());
  ASSERT_GT(flood->baseline, 0);

  // One request body shared by every call: the client holds one copy.
  grpc::Slice slice(request_bytes);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncResponseReader>> calls;
  std::vector<grpc::ByteBuffer> responses(kCalls);
  flood->statuses.assign(kCalls, grpc::Status());
  for (int i = 0; i < kCalls; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    calls.push_back(generic.PrepareUnaryCall(contexts.back().get(), method, request, &queue));
    calls.back()->StartCall();
    calls.back()->Finish(&responses[i], &flood->statuses[i], reinterpret_cast<void*>(i + 1));
  }
  // While they are in flight: the server's peak resident memory, and an authorized caller.
  std::atomic<bool> done{false};
  std::atomic<int64_t> peak{flood->baseline};
  std::thread sampler([&] {
    while (!done) {
      const int64_t now = ResidentBytes(server.pid());
      if (now > peak) peak = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  flood->served = list_projects(std::chrono::seconds(20));
  int finished = 0;
  void* tag = nullptr;
  bool ok = false;
  while (finished < kCalls && queue.Next(&tag, &ok)) ++finished;
  done = true;
  sampler.join();
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  flood->growth = peak - flood->baseline;
  EXPECT_TRUE(server.Stop().ok());
  RemoveTree(dir);
}

TEST(UnauthenticatedMemoryTest, ManyLargeRequestsWithoutAKeyStayWithinTheQuota) {
  // A GetProjectRequest with a 15 MiB project name.
  v1::GetProjectRequest big;
  big.set_project(std::string(kMessageBytes, 'x'));
  Flood flood;
  FloodWithKeylessCalls("/verity.v1.ProjectService/GetProject", big.SerializeAsString(), &flood);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_TRUE(flood.served.ok()) << "an authenticated caller was not served during the flood: "
                                 << flood.served.error_message();
  int unauthenticated = 0;
  for (const grpc::Status& s : flood.statuses) {
    EXPECT_FALSE(s.ok());
    unauthenticated += s.error_code() == grpc::StatusCode::UNAUTHENTICATED;
  }
  std::cout << kCalls << " unauthenticated 15 MiB calls: server RSS peak +"
            << (flood.growth >> 20) << " MiB over a " << (flood.baseline >> 20)
            << " MiB baseline (quota " << kQuotaMb << " MiB); " << unauthenticated
            << " answered UNAUTHENTICATED\n";
  EXPECT_LE(flood.growth, (int64_t{kQuotaMb} + 64) << 20);
}

// docs/SECURITY.md, "Memory before authentication": "Fixed for TLS servers ... on TLS connections
// ApiKeyMetadataProcessor refuses a call without a valid key when its metadata arrives, before
// the message is read. Health and reflection pass without a key." The fix's measured row: an
// early check keeps the flood to +1 MiB and the authenticated caller is served. The same
// flood of keyless 15 MiB calls sent to the health service's own method (which passes without a
// key) must not bring back what the fix removed: the server stays within the quota's bound of
// the test above, and an authenticated caller is served during it.
// Disabled: it fails (+181 MiB, the caller refused), a gap docs/SECURITY.md lists as still
// open; run it with --test_arg=--gtest_also_run_disabled_tests.
TEST(UnauthenticatedMemoryTest, DISABLED_LargeKeylessCallsToTheHealthServiceStayWithinTheQuota) {
  // A grpc.health.v1.HealthCheckRequest whose service (field 1) is 15 MiB long, by hand.
  std::string bytes = "\x0a";
  for (uint64_t n = kMessageBytes; ; n >>= 7) {
    if (n < 0x80) {
      bytes.push_back(static_cast<char>(n));
      break;
    }
    bytes.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  bytes.append(kMessageBytes, 'x');
  Flood flood;
  FloodWithKeylessCalls("/grpc.health.v1.Health/Check", bytes, &flood);
  if (::testing::Test::HasFatalFailure()) return;
  std::map<int, int> codes;
  for (const grpc::Status& s : flood.statuses) ++codes[s.error_code()];
  std::cout << kCalls << " keyless 15 MiB health calls: server RSS peak +" << (flood.growth >> 20)
            << " MiB over a " << (flood.baseline >> 20) << " MiB baseline (quota " << kQuotaMb
            << " MiB); codes:";
  for (const auto& [code, n] : codes) std::cout << " " << code << "x" << n;
  std::cout << "\n";
  EXPECT_TRUE(flood.served.ok()) << "an authenticated caller was not served during the flood: "
                                 << flood.served.error_code() << " "
                                 << flood.served.error_message();
  EXPECT_LE(flood.growth, (int64_t{kQuotaMb} + 64) << 20);
}

}  // namespace
}  // namespace verity::tests
