// TLS on the gRPC port through the real server and channel: a client trusting the CA talks to
// a TLS server, a plaintext client cannot, and with --tls_client_ca only clients presenting a
// certificate signed by that CA get in. Certificates are made with openssl at test time.
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/verity_client.h"
#include "server/auth/transport_security.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "verity/v1/projects.grpc.pb.h"

namespace verity::tests {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    postgres_ = TestPostgres::Start("verity-tls-test").release();
    ASSERT_NE(postgres_, nullptr);
    dir_ = new std::string(postgres_->dir());
    const std::string d = *dir_;
    const std::string script = absl::StrCat(
        "set -e; cd ", d, "; ",
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
        "  -subj /CN=verity-test-ca 2>/dev/null; ",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext; ",
        "for who in server client; do ",
        "  openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj /CN=localhost 2>/dev/null; ",
        "  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem "
        "    -days 2 -extfile san.ext 2>/dev/null; ",
        "done");
    ASSERT_EQ(std::system(("bash -c '" + script + "'").c_str()), 0) << "openssl failed";
  }
  static void TearDownTestSuite() {
    delete postgres_;  // also removes the certificates
    postgres_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  std::unique_ptr<server::VerityServer> Start(bool client_ca) {
    server::VerityServer::Options options;
    options.listen = "127.0.0.1:0";
    options.postgres_url = postgres_->url();
    options.training.run_in_background = false;
    options.transport.tls_cert_file = *dir_ + "/server.pem";
    options.transport.tls_key_file = *dir_ + "/server.key";
    if (client_ca) options.transport.tls_client_ca_file = *dir_ + "/ca.pem";
    auto server = server::VerityServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  static std::string Read(const std::string& name) {
    return *server::ReadPemFile(*dir_ + "/" + name);
  }

  // A GetProject of an unknown project: NOT_FOUND proves the call reached the server.
  static grpc::StatusCode Call(const std::shared_ptr<grpc::ChannelCredentials>& credentials, int port) {
    return Call(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), credentials));
  }
  static grpc::StatusCode Call(const std::shared_ptr<grpc::Channel>& channel) {
    auto stub = v1::ProjectService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetProjectRequest request;
    request.set_project("nope");
    v1::GetProjectResponse response;
    return stub->GetProject(&context, request, &response).error_code();
  }

  static std::string* dir_;
  static TestPostgres* postgres_;
};

std::string* TlsTest::dir_ = nullptr;
TestPostgres* TlsTest::postgres_ = nullptr;

TEST_F(TlsTest, TlsClientsGetInPlaintextClientsDoNot) {
  auto server = Start(/*client_ca=*/false);
  ASSERT_NE(server, nullptr);
  grpc::SslCredentialsOptions trusting;
  trusting.pem_root_certs = Read("ca.pem");
  EXPECT_EQ(Call(grpc::SslCredentials(trusting), server->port()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Call(grpc::InsecureChannelCredentials(), server->port()), grpc::StatusCode::UNAVAILABLE);
  // A client that does not trust the server's CA is refused by its own handshake.
  EXPECT_EQ(Call(grpc::SslCredentials(grpc::SslCredentialsOptions()), server->port()),
            grpc::StatusCode::UNAVAILABLE);
  server->Shutdown();
}

TEST_F(TlsTest, ClientCertificatesAreRequiredWithAClientCa) {
  auto server = Start(/*client_ca=*/true);
  ASSERT_NE(server, nullptr);
  grpc::SslCredentialsOptions anonymous;
  anonymous.pem_root_certs = Read("ca.pem");
  EXPECT_EQ(Call(grpc::SslCredentials(anonymous), server->port()), grpc::StatusCode::UNAVAILABLE);
  grpc::SslCredentialsOptions with_cert = anonymous;
  with_cert.pem_cert_chain = Read("client.pem");
  with_cert.pem_private_key = Read("client.key");
  EXPECT_EQ(Call(grpc::SslCredentials(with_cert), server->port()), grpc::StatusCode::NOT_FOUND);
  server->Shutdown();
}

// The client library (and so the `verity` CLI: --tls_ca, --tls_cert, --tls_key) connects the
// same way.
TEST_F(TlsTest, ClientLibraryChannelsUseTheGivenFiles) {
  auto server = Start(/*client_ca=*/true);
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", server->port());
  auto with_cert = client::CreateChannel(
      address, {*dir_ + "/ca.pem", *dir_ + "/client.pem", *dir_ + "/client.key"});
  ASSERT_TRUE(with_cert.ok()) << with_cert.status();
  EXPECT_EQ(Call(*with_cert), grpc::StatusCode::NOT_FOUND);
  auto without_cert = client::CreateChannel(address, {*dir_ + "/ca.pem", "", ""});
  ASSERT_TRUE(without_cert.ok());
  EXPECT_EQ(Call(*without_cert), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(client::CreateChannel(address, {"", *dir_ + "/client.pem", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client::CreateChannel(address, {*dir_ + "/missing.pem", "", ""}).status().code(),
            absl::StatusCode::kNotFound);
  server->Shutdown();
}

TEST_F(TlsTest, PlaintextOnANetworkAddressIsRefusedAtStart) {
  server::VerityServer::Options options;
  options.listen = "0.0.0.0:0";
  options.postgres_url = postgres_->url();
  options.training.run_in_background = false;
  auto server = server::VerityServer::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(server.status().message().find("--insecure"), absl::string_view::npos);
}

}  // namespace
}  // namespace verity::tests
