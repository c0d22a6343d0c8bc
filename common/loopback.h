// Whether a network address names only this machine's loopback interface. Used by the server
// (may it listen without TLS, or with authentication off?) and by the clients (may a key
// travel in plaintext?), so both sides agree on one definition.
#ifndef VERITY_COMMON_LOOPBACK_H_
#define VERITY_COMMON_LOOPBACK_H_

#include "absl/strings/string_view.h"

namespace verity {

// `address` is host:port, [host]:port or a bare host. True only for "localhost", an IPv4
// literal in 127.0.0.0/8 (four dotted decimal parts) and the IPv6 literal ::1. Names that
// merely start with "127." (127.evil.example), an empty host, 0.0.0.0 and [::] are not
// loopback.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace verity

#endif  // VERITY_COMMON_LOOPBACK_H_
