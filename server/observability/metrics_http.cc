#include "server/observability/metrics_http.h"

#include <civetweb.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/observability/log.h"

namespace verity::server {
namespace {

int SendResponse(mg_connection* connection, int status, const char* content_type,
                 const std::string& body) {
  mg_response_header_start(connection, status);
  mg_response_header_add(connection, "Content-Type", content_type, -1);
  const std::string length = std::to_string(body.size());
  mg_response_header_add(connection, "Content-Length", length.c_str(), -1);
  mg_response_header_send(connection);
  if (!body.empty()) mg_write(connection, body.data(), body.size());
  return status;
}

int SendMethodNotAllowed(mg_connection* connection) {
  mg_response_header_start(connection, 405);
  mg_response_header_add(connection, "Allow", "GET", -1);
  mg_response_header_add(connection, "Content-Length", "0", -1);
  mg_response_header_send(connection);
  return 405;
}

int SendBusy(mg_connection* connection, int max_pages_in_flight) {
  const std::string body =
      absl::StrCat(max_pages_in_flight,
                   " page requests are in flight, the most at once (one thread stays for "
                   "/metrics): retry\n");
  mg_response_header_start(connection, 503);
  mg_response_header_add(connection, "Content-Type", "text/plain; charset=utf-8", -1);
  mg_response_header_add(connection, "Retry-After", "1", -1);
  const std::string length = std::to_string(body.size());
  mg_response_header_add(connection, "Content-Length", length.c_str(), -1);
  mg_response_header_send(connection);
  mg_write(connection, body.data(), body.size());
  return 503;
}

// civetweb's own messages (a client that hung up mid-response, ...) as structured log lines.
int LogCivetwebMessage(const mg_connection* /*connection*/, const char* message) {
  LogEvent("metrics_http", {{"message", message}});
  return 1;  // Handled: civetweb writes nothing itself.
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsRegistry& registry, const Options& options) {
  const size_t colon = options.listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address must be host:port, got \"", options.listen, "\""));
  }
  if (options.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics server threads must be at least 1, got ", options.num_threads));
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(
      registry, options.page_handler, std::max(1, options.num_threads - 1)));
  const std::string threads = std::to_string(options.num_threads);
  const char* config[] = {"listening_ports",
                          options.listen.c_str(),
                          "num_threads",
                          threads.c_str(),
                          "request_timeout_ms",
                          "10000",
                          "enable_keep_alive",
                          "no",
                          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = &LogCivetwebMessage;
  mg_init_data init;
  init.callbacks = &callbacks;
  init.user_data = nullptr;
  init.configuration_options = config;
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error;
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->context_ = mg_start2(&init, &error);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", options.listen, ": ",
                     error_text[0] != '\0' ? error_text : "unknown error"));
  }
  mg_server_port ports[1];
  if (mg_get_server_ports(server->context_, 1, ports) < 1) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", options.listen, ": no listening port"));
  }
  server->port_ = ports[0].port;
  mg_set_request_handler(
      server->context_, "/metrics$",
      +[](mg_connection* connection, void* data) -> int {
        const auto* self = static_cast<const MetricsHttpServer*>(data);
        const mg_request_info* request = mg_get_request_info(connection);
        if (std::strcmp(request->request_method, "GET") != 0) {
          return SendMethodNotAllowed(connection);
        }
        return SendResponse(connection, 200, MetricsRegistry::kContentType,
                            self->registry_.RenderText());
      },
      server.get());
  if (server->page_handler_) {
    // Registered after /metrics$: civetweb takes the first handler whose pattern matches, and
    // "/" matches every path.
    mg_set_request_handler(
        server->context_, "/",
        +[](mg_connection* connection, void* data) -> int {
          auto* self = static_cast<MetricsHttpServer*>(data);
          const mg_request_info* request = mg_get_request_info(connection);
          if (std::strcmp(request->request_method, "GET") != 0) {
            return SendMethodNotAllowed(connection);
          }
          // The last thread stays free for /metrics (see Options::num_threads).
          if (self->pages_in_flight_.fetch_add(1) >= self->max_pages_in_flight_) {
            self->pages_in_flight_.fetch_sub(1);
            return SendBusy(connection, self->max_pages_in_flight_);
          }
          struct PageSlot {
            std::atomic<int>& in_flight;
            ~PageSlot() { in_flight.fetch_sub(1); }
          } slot{self->pages_in_flight_};
          // local_uri_raw: decoded, without the query string, and with its dot segments as
          // sent (local_uri collapses them, which made the projects named "." and ".." of
          // /api/projects/NAME unreachable). No page reads files: pages match exact paths.
          HttpPageRequest page;
          const char* path =
              request->local_uri_raw != nullptr ? request->local_uri_raw : request->local_uri;
          page.path = path != nullptr ? path : "/";
          if (const char* host = mg_get_header(connection, "Host")) page.host = host;
          if (const char* authorization = mg_get_header(connection, "Authorization")) {
            page.authorization = authorization;
          }
          HttpResponse response = self->page_handler_(page);
          return SendResponse(connection, response.status, response.content_type.c_str(),
                              response.body);
        },
        server.get());
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (context_ != nullptr) mg_stop(context_);
}

}  // namespace verity::server
