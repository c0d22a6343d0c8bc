#include "server/metrics_http.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/status_matchers.h"
#include "server/metrics.h"
#include "server/testing/http_get.h"

namespace verity::server {
namespace {

using ::testing::HasSubstr;
using ::verity::testing::HttpGet;
using ::verity::testing::HttpRequest;
using ::verity::testing::HttpResponse;
using ::verity::testing::StatusIs;

MetricsHttpServer::Options AnyFreePort() {
  MetricsHttpServer::Options options;
  options.listen = "127.0.0.1:0";
  return options;
}

TEST(MetricsHttpServerTest, ServesTheRegistryAtMetrics) {
  MetricsRegistry registry;
  Counter& scrapes_seen = registry.AddCounter("test_events_total", "Events.").Get();
  auto server = MetricsHttpServer::Start(registry, AnyFreePort());
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  scrapes_seen.Increment(5);
  absl::StatusOr<HttpResponse> response = HttpGet((*server)->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(response->body, registry.RenderText());
  EXPECT_THAT(response->body, HasSubstr("\ntest_events_total 5\n"));
}

TEST(MetricsHttpServerTest, OtherPathsAreNotFoundOtherMethodsNotAllowed) {
  MetricsRegistry registry;
  auto server = MetricsHttpServer::Start(registry, AnyFreePort());
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<HttpResponse> other = HttpGet((*server)->port(), "/metricsfoo");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->status, 404);
  absl::StatusOr<HttpResponse> root = HttpGet((*server)->port(), "/");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->status, 404);
  absl::StatusOr<HttpResponse> post = HttpRequest((*server)->port(), "POST", "/metrics");
  ASSERT_TRUE(post.ok()) << post.status();
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->headers["allow"], "GET");
}

TEST(MetricsHttpServerTest, PortInUseIsUnavailable) {
  MetricsRegistry registry;
  auto first = MetricsHttpServer::Start(registry, AnyFreePort());
  ASSERT_TRUE(first.ok()) << first.status();
  MetricsHttpServer::Options same;
  same.listen = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = MetricsHttpServer::Start(registry, same);
  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(MetricsHttpServerTest, MalformedAddressIsInvalidArgument) {
  MetricsRegistry registry;
  MetricsHttpServer::Options options;
  options.listen = "127.0.0.1";
  EXPECT_THAT(MetricsHttpServer::Start(registry, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.listen = "127.0.0.1:http";
  EXPECT_THAT(MetricsHttpServer::Start(registry, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MetricsHttpServerTest, StoppingClosesThePort) {
  MetricsRegistry registry;
  auto server = MetricsHttpServer::Start(registry, AnyFreePort());
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  server->reset();
  EXPECT_THAT(HttpGet(port, "/metrics").status(), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace verity::server
