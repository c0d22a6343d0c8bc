// RpcTelemetryFactory::Record and NewRequestId (rpc_telemetry.h): what a finished call counts
// in verity_rpc_total / verity_rpc_duration_seconds and when it is logged. The interceptor
// around them is exercised through a real server by //tests:metrics_test.
#include "server/observability/rpc_telemetry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/time/time.h"
#include "server/observability/metrics.h"

namespace verity::server {
namespace {

using Type = grpc::experimental::ServerRpcInfo::Type;

template <typename F>
std::string CaptureStderr(F run) {
  ::testing::internal::CaptureStderr();
  run();
  return ::testing::internal::GetCapturedStderr();
}

RpcTelemetryFactory::CallRecord Call(std::string method, Type type, int code,
                                     absl::Duration duration) {
  RpcTelemetryFactory::CallRecord call;
  call.method = std::move(method);
  call.type = type;
  call.code = code;
  call.duration = duration;
  call.request_id = "rid-1";
  call.peer = "ipv4:127.0.0.1:5555";
  return call;
}

class RpcTelemetryTest : public ::testing::Test {
 protected:
  RpcTelemetryTest() : factory_(registry_, Options()) {}
  static RpcTelemetryFactory::Options Options() {
    RpcTelemetryFactory::Options options;
    options.slow_call = absl::Milliseconds(500);
    return options;
  }
  double Calls(const std::string& method, const std::string& code) {
    return registry_.AddCounter("verity_rpc_total", "", {"method", "code"})
        .WithLabels({method, code})
        .value();
  }
  Histogram::Snapshot Durations(const std::string& method, const std::string& code) {
    return registry_
        .AddHistogram("verity_rpc_duration_seconds", "", {"method", "code"}, LatencyBuckets())
        .WithLabels({method, code})
        .snapshot();
  }

  MetricsRegistry registry_;
  RpcTelemetryFactory factory_;
};

constexpr char kSubmit[] = "/verity.v1.IngestService/SubmitAnnotations";
constexpr char kGet[] = "/verity.v1.ProjectService/GetProject";

TEST_F(RpcTelemetryTest, CountsAndTimesEachCallByMethodAndCode) {
  factory_.Record(Call(kGet, Type::UNARY, 0, absl::Milliseconds(20)));
  factory_.Record(Call(kGet, Type::UNARY, 0, absl::Milliseconds(30)));
  factory_.Record(Call(kGet, Type::UNARY, 5, absl::Milliseconds(3)));
  EXPECT_EQ(Calls(kGet, "OK"), 2);
  EXPECT_EQ(Calls(kGet, "NOT_FOUND"), 1);
  const Histogram::Snapshot ok = Durations(kGet, "OK");
  EXPECT_EQ(ok.count, 2u);
  EXPECT_NEAR(ok.sum, 0.05, 1e-9);  // seconds
  const Histogram::Snapshot not_found = Durations(kGet, "NOT_FOUND");
  EXPECT_EQ(not_found.count, 1u);
  EXPECT_NEAR(not_found.sum, 0.003, 1e-9);
  // 3 ms falls in le="0.005" and not in le="0.0025".
  EXPECT_EQ(not_found.cumulative[1], 0u);
  EXPECT_EQ(not_found.cumulative[2], 1u);
}

TEST_F(RpcTelemetryTest, UnimplementedAndNamelessCallsShareTheMethodUnknown) {
  factory_.Record(Call("/verity.v1.Nope/A", Type::UNARY, 12, absl::Milliseconds(1)));
  factory_.Record(Call("/verity.v1.Nope/B", Type::UNARY, 12, absl::Milliseconds(1)));
  factory_.Record(Call("", Type::UNARY, 1, absl::Milliseconds(1)));
  // The made-up names grow no label set (checked before Calls() below creates children).
  const std::string text = registry_.RenderText();
  EXPECT_EQ(text.find("Nope"), std::string::npos) << text;
  EXPECT_EQ(Calls("unknown", "UNIMPLEMENTED"), 2);
  EXPECT_EQ(Calls("unknown", "CANCELLED"), 1);
}

TEST_F(RpcTelemetryTest, OkUnaryCallsAreLoggedOnlyWhenSlow) {
  EXPECT_EQ(CaptureStderr([&] {
              factory_.Record(Call(kGet, Type::UNARY, 0, absl::Milliseconds(499)));
            }),
            "");
  // At slow_call exactly: slow ("at least Options::slow_call").
  const std::string slow =
      CaptureStderr([&] { factory_.Record(Call(kGet, Type::UNARY, 0, absl::Milliseconds(500))); });
  EXPECT_NE(slow.find(" event=rpc method=/verity.v1.ProjectService/GetProject code=OK "
                      "ms=500.000 request_id=rid-1 peer=ipv4:127.0.0.1:5555\n"),
            std::string::npos)
      << slow;
}

TEST_F(RpcTelemetryTest, FailedAndStreamingCallsAreAlwaysLogged) {
  const std::string failed =
      CaptureStderr([&] { factory_.Record(Call(kGet, Type::UNARY, 5, absl::Milliseconds(2))); });
  EXPECT_NE(failed.find("event=rpc method=/verity.v1.ProjectService/GetProject code=NOT_FOUND "
                        "ms=2.000 request_id=rid-1"),
            std::string::npos)
      << failed;
  for (Type type : {Type::CLIENT_STREAMING, Type::SERVER_STREAMING, Type::BIDI_STREAMING}) {
    const std::string stream = CaptureStderr(
        [&] { factory_.Record(Call(kSubmit, type, 0, absl::Milliseconds(1))); });
    EXPECT_NE(stream.find("event=rpc method=/verity.v1.IngestService/SubmitAnnotations code=OK"),
              std::string::npos)
        << static_cast<int>(type) << ": " << stream;
  }
}

TEST(RpcTelemetryLogEveryCallTest, LogsFastOkUnaryCalls) {
  MetricsRegistry registry;
  RpcTelemetryFactory::Options options;
  options.log_every_call = true;
  RpcTelemetryFactory factory(registry, options);
  const std::string line =
      CaptureStderr([&] { factory.Record(Call(kGet, Type::UNARY, 0, absl::Microseconds(10))); });
  EXPECT_NE(line.find("event=rpc method=/verity.v1.ProjectService/GetProject code=OK"),
            std::string::npos)
      << line;
}

TEST(RpcTelemetryRequestIdTest, SixteenHexDigitsUniqueWithinTheProcess) {
  MetricsRegistry registry;
  RpcTelemetryFactory factory(registry, RpcTelemetryFactory::Options());
  std::set<std::string> ids;
  const std::regex hex("[0-9a-f]{16}");
  for (int i = 0; i < 1000; ++i) {
    const std::string id = factory.NewRequestId();
    EXPECT_TRUE(std::regex_match(id, hex)) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
}

// rpc_telemetry.h: a call that ends UNIMPLEMENTED is *counted* as method "unknown"; its log line
// (a failed call is always logged) still names the full gRPC method the client called.
TEST_F(RpcTelemetryTest, AnUnimplementedCallIsLoggedUnderTheMethodItCalled) {
  const std::string line = CaptureStderr(
      [&] { factory_.Record(Call("/verity.v1.Nope/A", Type::UNARY, 12, absl::Milliseconds(4))); });
  EXPECT_NE(line.find(" event=rpc method=/verity.v1.Nope/A code=UNIMPLEMENTED ms=4.000 "
                      "request_id=rid-1 peer=ipv4:127.0.0.1:5555\n"),
            std::string::npos)
      << line;
  EXPECT_EQ(Calls("unknown", "UNIMPLEMENTED"), 1);
}

}  // namespace
}  // namespace verity::server
