// Transport security of the gRPC port: TLS from PEM files, optional client-certificate
// verification, and the rule that plaintext is allowed only on loopback or when asked for
// explicitly (--insecure).
#ifndef VERITY_SERVER_AUTH_TRANSPORT_SECURITY_H_
#define VERITY_SERVER_AUTH_TRANSPORT_SECURITY_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/loopback.h"

namespace verity::server {

struct TransportSecurityOptions {
  std::string tls_cert_file;       // PEM certificate chain of the server; empty: no TLS
  std::string tls_key_file;        // PEM private key; required with tls_cert_file
  std::string tls_client_ca_file;  // PEM CA bundle: when set, clients must present a
                                   // certificate it signed (mutual TLS)
  bool insecure = false;           // allow plaintext on a non-loopback address
};

// Whether `listen` binds only the loopback interface: common/loopback.h.
using ::verity::IsLoopbackAddress;

// The credentials for `listen`. INVALID_ARGUMENT when a key is given without a certificate (or
// the reverse), or a client CA without TLS; FAILED_PRECONDITION, with what to do, for plaintext
// on a non-loopback address without `insecure`; NOT_FOUND naming an unreadable file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    absl::string_view listen, const TransportSecurityOptions& options);

// Reads a whole file (certificates, keys). NOT_FOUND naming it when unreadable.
absl::StatusOr<std::string> ReadPemFile(const std::string& path);

}  // namespace verity::server

#endif  // VERITY_SERVER_AUTH_TRANSPORT_SECURITY_H_
