#include "server/auth/transport_security.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/status_matchers.h"

namespace verity::server {
namespace {

using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

// Which addresses are loopback: //common:loopback_test. Here, that the credentials use it.
TEST(TransportSecurityTest, ANameStartingWith127IsNotLoopback) {
  TransportSecurityOptions options;
  auto refused = MakeServerCredentials("127.evil.example:50051", options);
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(TransportSecurityTest, PlaintextOnlyOnLoopbackUnlessInsecure) {
  TransportSecurityOptions options;
  EXPECT_THAT(MakeServerCredentials("localhost:0", options).status(), IsOk());
  auto refused = MakeServerCredentials("0.0.0.0:50051", options);
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(refused.status().message().find("--insecure"), absl::string_view::npos);
  EXPECT_NE(refused.status().message().find("--tls_cert"), absl::string_view::npos);
  options.insecure = true;
  EXPECT_THAT(MakeServerCredentials("0.0.0.0:50051", options).status(), IsOk());
}

TEST(TransportSecurityTest, TlsFlagsMustComeTogetherAndFilesMustExist) {
  TransportSecurityOptions options;
  options.tls_cert_file = "/nonexistent/cert.pem";
  EXPECT_THAT(MakeServerCredentials("0.0.0.0:1", options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.tls_key_file = "/nonexistent/key.pem";
  EXPECT_THAT(MakeServerCredentials("0.0.0.0:1", options).status(),
              StatusIs(absl::StatusCode::kNotFound));
  TransportSecurityOptions ca_only;
  ca_only.tls_client_ca_file = "/nonexistent/ca.pem";
  EXPECT_THAT(MakeServerCredentials("localhost:1", ca_only).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// transport_security.h: "NOT_FOUND naming an unreadable file" -- the client CA too: an
// unreadable --tls_client_ca never yields a server that skips client certificates.
TEST(TransportSecurityTest, AnUnreadableClientCaIsNotFound) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  TransportSecurityOptions options;
  options.tls_cert_file = dir + "/transport-cert.pem";
  options.tls_key_file = dir + "/transport-key.pem";
  std::ofstream(options.tls_cert_file) << "not checked here\n";
  std::ofstream(options.tls_key_file) << "not checked here\n";
  options.tls_client_ca_file = dir + "/nonexistent-ca.pem";
  auto refused = MakeServerCredentials("0.0.0.0:1", options);
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_NE(refused.status().message().find("nonexistent-ca.pem"), absl::string_view::npos)
      << refused.status();
}

// transport_security.h: INVALID_ARGUMENT when "a key is given without a certificate" -- also
// on loopback, where plaintext would otherwise be allowed: a half-given TLS set-up is a mistake
// to report, not a reason to fall back to plaintext.
TEST(TransportSecurityTest, AKeyWithoutACertificateIsInvalidEvenOnLoopback) {
  TransportSecurityOptions options;
  options.tls_key_file = "/nonexistent/key.pem";
  auto refused = MakeServerCredentials("localhost:0", options);
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(refused.status().message().find("--tls_cert"), absl::string_view::npos)
      << refused.status();
}

}  // namespace
}  // namespace verity::server
