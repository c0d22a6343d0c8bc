#include "server/testing/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace verity::testing {
namespace {

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  const int fd_;
};

}  // namespace

absl::StatusOr<HttpResponse> HttpRequest(int port, const std::string& method,
                                         const std::string& path,
                                         const std::map<std::string, std::string>& headers) {
  Socket socket(::socket(AF_INET, SOCK_STREAM, 0));
  if (socket.fd() < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  timeval timeout{30, 0};
  setsockopt(socket.fd(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(socket.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("connect to 127.0.0.1:", port, ": ", std::strerror(errno)));
  }
  std::string request = absl::StrCat(method, " ", path, " HTTP/1.0\r\n");
  if (headers.count("Host") == 0) absl::StrAppend(&request, "Host: 127.0.0.1\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&request, name, ": ", value, "\r\n");
  absl::StrAppend(&request, "\r\n");
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(socket.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buffer[8192];
  while (true) {
    ssize_t n = recv(socket.fd(), buffer, sizeof(buffer), 0);
    if (n < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    if (n == 0) break;
    raw.append(buffer, static_cast<size_t>(n));
  }

  const size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::InternalError(absl::StrCat("not an HTTP response: \"", raw, "\""));
  }
  HttpResponse response;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, header_end), "\r\n");
  // Status line: "HTTP/1.1 200 OK".
  std::vector<std::string> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/") ||
      !absl::SimpleAtoi(status_line[1], &response.status)) {
    return absl::InternalError(absl::StrCat("bad status line: \"", lines[0], "\""));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    response.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  response.body = raw.substr(header_end + 4);
  return response;
}

}  // namespace verity::testing
