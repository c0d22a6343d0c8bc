// MetricsHttpServer: serves a MetricsRegistry over HTTP for Prometheus — GET /metrics answers
// the registry's text exposition (Content-Type text/plain; version=0.0.4). Other paths answer
// 404, other methods on /metrics 405. Built on Debian's libcivetweb (a small embedded HTTP
// server with its own worker threads).
//
// Thread-safety: port() may be called from any thread; the destructor stops the server and
// waits for requests in progress.
#ifndef VERITY_SERVER_METRICS_HTTP_H_
#define VERITY_SERVER_METRICS_HTTP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/metrics.h"

struct mg_context;

namespace verity::server {

class MetricsHttpServer {
 public:
  struct Options {
    // host:port to listen on (an IPv4 address or "localhost"; 0.0.0.0 for every interface);
    // port 0 picks a free port (see port()).
    std::string listen = "127.0.0.1:9464";
    // Threads answering requests (a scrape is one short request every few seconds).
    int num_threads = 2;
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
  explicit MetricsHttpServer(const MetricsRegistry& registry) : registry_(registry) {}

  const MetricsRegistry& registry_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_METRICS_HTTP_H_
