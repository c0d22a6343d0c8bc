#include "server/observability/metrics_http.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "server/observability/metrics.h"
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

TEST(MetricsHttpServerTest, PageHandlerAnswersEveryOtherPathButMetrics) {
  MetricsRegistry registry;
  registry.AddCounter("test_events_total", "Events.").Get().Increment(1);
  MetricsHttpServer::Options options = AnyFreePort();
  options.page_handler = [](const ::verity::server::HttpPageRequest& request) {
    return ::verity::server::HttpResponse{request.path == "/missing" ? 404 : 200, "text/plain",
                                          "page " + request.path + " " + request.host + " " +
                                              request.authorization};
  };
  auto server = MetricsHttpServer::Start(registry, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  absl::StatusOr<HttpResponse> metrics = HttpGet(port, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->body, registry.RenderText());
  absl::StatusOr<HttpResponse> root = HttpGet(port, "/");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->status, 200);
  EXPECT_EQ(root->body, "page / 127.0.0.1 ");
  // The handler sees the path without its query, the Host and the Authorization headers.
  absl::StatusOr<HttpResponse> api =
      HttpGet(port, "/api/projects/p1?x=1",
              {{"Host", "console.example:9464"}, {"Authorization", "Bearer vk_x"}});
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_EQ(api->body, "page /api/projects/p1 console.example:9464 Bearer vk_x");
  EXPECT_EQ(api->headers["content-type"], "text/plain");
  absl::StatusOr<HttpResponse> missing = HttpGet(port, "/missing");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->status, 404);
  absl::StatusOr<HttpResponse> post = HttpRequest(port, "POST", "/api/projects");
  ASSERT_TRUE(post.ok()) << post.status();
  EXPECT_EQ(post->status, 405);
}

// metrics_http.h, Options::num_threads: pages never take the last thread, so a scrape is
// answered while every page request waits (console views waiting on a hung database); a page
// request past the bound is answered 503 at once.
TEST(MetricsHttpServerTest, PagesThatWaitLeaveAThreadForTheScrape) {
  MetricsRegistry registry;
  registry.AddCounter("test_events_total", "Events.").Get().Increment(1);
  absl::Notification release;
  MetricsHttpServer::Options options = AnyFreePort();
  options.page_handler = [&release](const ::verity::server::HttpPageRequest&) {
    release.WaitForNotification();
    return ::verity::server::HttpResponse{200, "text/plain", "waited"};
  };
  auto server = MetricsHttpServer::Start(registry, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  constexpr int kPages = 8;  // More than any thread count of the options.
  std::vector<int> page_status(kPages, 0);
  // The Retry-After of each 503 (metrics_http.h: "answered 503 at once, with Retry-After").
  std::vector<std::string> retry_after(kPages);
  std::vector<std::thread> pages;
  for (int i = 0; i < kPages; ++i) {
    pages.emplace_back([&, i] {
      absl::StatusOr<HttpResponse> response = HttpGet(port, "/api/projects/p");
      page_status[i] = response.ok() ? response->status : -1;
      if (response.ok() && response->status == 503) {
        auto it = response->headers.find("retry-after");
        retry_after[i] = it != response->headers.end() ? it->second : "(none)";
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(300));  // The pages' requests arrive first.
  absl::Notification scraped;
  std::string scrape_body;
  std::thread scrape([&] {
    absl::StatusOr<HttpResponse> response = HttpGet(port, "/metrics");
    if (response.ok()) scrape_body = response->body;
    scraped.Notify();
  });
  const bool in_time = scraped.WaitForNotificationWithTimeout(absl::Seconds(5));
  release.Notify();  // Lets the waiting pages finish either way.
  scrape.join();
  for (std::thread& t : pages) t.join();
  EXPECT_TRUE(in_time) << "the scrape waited for the pages";
  EXPECT_THAT(scrape_body, HasSubstr("test_events_total 1"));
  int waited = 0, busy = 0;
  for (int status : page_status) {
    waited += status == 200 ? 1 : 0;
    busy += status == 503 ? 1 : 0;
  }
  for (int i = 0; i < kPages; ++i) {
    if (page_status[i] == 503) EXPECT_EQ(retry_after[i], "1") << "page request " << i;
  }
  EXPECT_GE(waited, 1);
  EXPECT_EQ(waited + busy, kPages) << "every page request is answered 200 or 503";
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
  // Ports are 0 to 65535: anything else is no port of the address.
  for (const char* listen : {"127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:99999"}) {
    options.listen = listen;
    EXPECT_THAT(MetricsHttpServer::Start(registry, options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << listen;
  }
}

TEST(MetricsHttpServerTest, StoppingClosesThePort) {
  MetricsRegistry registry;
  auto server = MetricsHttpServer::Start(registry, AnyFreePort());
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  server->reset();
  EXPECT_THAT(HttpGet(port, "/metrics").status(), StatusIs(absl::StatusCode::kUnavailable));
}

// metrics_http.h HttpPageRequest::path is the URI without its query string, as the client sent
// it: projects may be named "." or ".." (projects.proto's [A-Za-z0-9._-]), so the console must
// see /api/projects/.. and /api/projects/. with their dot segments, not collapsed to a parent.
TEST(MetricsHttpServerTest, ThePageHandlerSeesDotSegmentsAsSent) {
  MetricsRegistry registry;
  MetricsHttpServer::Options options = AnyFreePort();
  options.page_handler = [](const ::verity::server::HttpPageRequest& request) {
    return ::verity::server::HttpResponse{200, "text/plain", request.path};
  };
  auto server = MetricsHttpServer::Start(registry, options);
  ASSERT_TRUE(server.ok()) << server.status();
  for (const std::string path :
       {"/api/projects/..", "/api/projects/.", "/api/projects/../annotators"}) {
    absl::StatusOr<HttpResponse> response = HttpGet((*server)->port(), path + "?x=1");
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->status, 200) << path;
    EXPECT_EQ(response->body, path);
  }
}

// metrics_http.h Options::listen is "host:port" with the host an IPv4 address or "localhost":
// an address without its host is malformed, INVALID_ARGUMENT (fix the flag), not UNAVAILABLE
// (which says that retrying could help).
TEST(MetricsHttpServerTest, AnAddressWithoutItsHostIsInvalidArgument) {
  MetricsRegistry registry;
  MetricsHttpServer::Options options;
  options.listen = ":0";
  EXPECT_THAT(MetricsHttpServer::Start(registry, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// metrics_http.h Options::num_threads: the threads answering requests; a server without any
// could answer nothing, so it is refused as INVALID_ARGUMENT like a malformed address.
TEST(MetricsHttpServerTest, NoThreadIsInvalidArgument) {
  MetricsRegistry registry;
  MetricsHttpServer::Options options = AnyFreePort();
  options.num_threads = 0;
  EXPECT_THAT(MetricsHttpServer::Start(registry, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace verity::server
