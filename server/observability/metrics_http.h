// MetricsHttpServer: serves a MetricsRegistry over HTTP for Prometheus — GET /metrics answers
// the registry's text exposition (Content-Type text/plain; version=0.0.4). Every other path
// goes to Options::page_handler when one is set (the web console, server/console/console.h), and
// answers 404 otherwise; methods other than GET answer 405. Built on Debian's libcivetweb (a
// small embedded HTTP server with its own worker threads).
//
// Thread-safety: port() may be called from any thread; the destructor stops the server and
// waits for requests in progress. page_handler is called from civetweb's worker threads,
// concurrently.
#ifndef VERITY_SERVER_OBSERVABILITY_METRICS_HTTP_H_
#define VERITY_SERVER_OBSERVABILITY_METRICS_HTTP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "server/observability/metrics.h"

struct mg_context;

namespace verity::server {

// A whole response to a GET request.
struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
};

// What a page handler sees of a GET request.
struct HttpPageRequest {
  std::string path;           // The URI without its query string, e.g. "/api/projects".
  std::string host;           // The Host header ("" when absent).
  std::string authorization;  // The Authorization header ("" when absent).
};

class MetricsHttpServer {
 public:
  using PageHandler = std::function<HttpResponse(const HttpPageRequest& request)>;

  struct Options {
    // host:port to listen on (an IPv4 address or "localhost"; 0.0.0.0 for every interface);
    // port 0 picks a free port (see port()).
    std::string listen = "127.0.0.1:9464";
    // Threads answering requests (a scrape is one short request every few seconds). Pages
    // take at most num_threads - 1 of them at once (at least 1), so that a scrape always finds
    // one while pages wait (console views that read PostgreSQL while it hangs); a page request
    // past that is answered 503 at once, with Retry-After.
    int num_threads = 4;
    // Answers GET requests for every path but /metrics; unset (the default): they answer 404.
    PageHandler page_handler;
  };

  // Starts serving `registry`, which must outlive the server. UNAVAILABLE if the address
  // cannot be bound, INVALID_ARGUMENT if it is malformed.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricsRegistry& registry,
                                                                  const Options& options);
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(const MetricsRegistry& registry, PageHandler page_handler,
                    int max_pages_in_flight)
      : registry_(registry),
        page_handler_(std::move(page_handler)),
        max_pages_in_flight_(max_pages_in_flight) {}

  const MetricsRegistry& registry_;
  const PageHandler page_handler_;
  const int max_pages_in_flight_;
  std::atomic<int> pages_in_flight_{0};
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_OBSERVABILITY_METRICS_HTTP_H_
