#include "common/loopback.h"

#include <arpa/inet.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace verity {

bool IsLoopbackAddress(absl::string_view address) {
  absl::string_view host = address;
  if (absl::StartsWith(host, "[")) {
    const size_t end = host.find(']');
    if (end == absl::string_view::npos) return false;
    host = host.substr(1, end - 1);
  } else if (const size_t colon = host.rfind(':');
             colon != absl::string_view::npos && host.find(':') == colon) {
    host = host.substr(0, colon);  // One colon: host:port. More: a bare IPv6 literal.
  }
  const std::string text(host);
  if (absl::AsciiStrToLower(text) == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

}  // namespace verity
