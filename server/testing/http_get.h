// HttpGet: one HTTP/1.0 GET over a plain TCP socket to 127.0.0.1, for tests that scrape the
// metrics endpoint without an HTTP client library. Reads until the server closes.
//
// Thread-safety: thread-safe (no shared state).
#ifndef VERITY_SERVER_TESTING_HTTP_GET_H_
#define VERITY_SERVER_TESTING_HTTP_GET_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace verity::testing {

struct HttpResponse {
  int status = 0;
  // Header names lower-cased.
  std::map<std::string, std::string> headers;
  std::string body;
};

// UNAVAILABLE if nothing answers on `port`, INTERNAL if the answer is not HTTP. `headers`
// are sent as given; without a "Host" among them, "Host: 127.0.0.1" is sent.
absl::StatusOr<HttpResponse> HttpRequest(int port, const std::string& method,
                                         const std::string& path,
                                         const std::map<std::string, std::string>& headers = {});
inline absl::StatusOr<HttpResponse> HttpGet(
    int port, const std::string& path, const std::map<std::string, std::string>& headers = {}) {
  return HttpRequest(port, "GET", path, headers);
}

}  // namespace verity::testing

#endif  // VERITY_SERVER_TESTING_HTTP_GET_H_
