// Probe tests of the `verity` CLI: documented promises (the CLI's --help text, README.md,
// proto/verity/v1/*.proto) that the CLI does not keep, run in-process against a real
// VerityServer over a real gRPC channel and a real (embedded) PostgreSQL, as
// cli_end_to_end_test does. Each expectation is quoted above its test; every test here failed
// when it was written.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"

namespace verity::tests {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

class CliProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("verity-cli-probe");
    storage::EmbeddedPostgres::Options pg_options;
    pg_options.data_dir = dir_ + "/pg";
    auto pg = storage::EmbeddedPostgres::Start(pg_options);
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
    server::VerityServer::Options options;
    options.listen = "localhost:0";
    options.postgres_url = pg_->connection_url();
    options.training.run_in_background = false;
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    if (pg_ != nullptr) EXPECT_TRUE(pg_->Stop().ok());
    RemoveTree(dir_);
  }

  CliResult Run(std::vector<std::string> args) {
    args.push_back(absl::StrCat("--server=localhost:", server_->port()));
    std::ostringstream out, err;
    int code = client::RunCli(args, out, err);
    return {code, out.str(), err.str()};
  }

  // Runs the `verity` binary itself (what a user runs: gRPC's own logging goes to the
  // process's stderr, which RunCli's streams do not see) with `args` as given, stdin from
  // /dev/null, and waits for it.
  CliResult RunVerityBinary(const std::vector<std::string>& args) {
    const std::string binary = RunfilePath("client/verity");
    std::vector<std::string> argv_text = {binary};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_text) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const std::string out_path = dir_ + "/verity.out", err_path = dir_ + "/verity.err";
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, out_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = -1;
    const int spawned = posix_spawn(&pid, binary.c_str(), &files, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    if (spawned != 0) {
      return {-1, "", absl::StrCat("cannot run ", binary, ": ", std::strerror(spawned))};
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
      return {-1, "", absl::StrCat(binary, " did not exit normally (status ", status, ")")};
    }
    return {WEXITSTATUS(status), ReadText(out_path), ReadText(err_path)};
  }

  static std::string ReadText(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // README.md: "errors stay one line on stderr (a usage error adds one pointing to `--help`)";
  // `verity --help`: "Exit status: 0 success; 1 the command failed (one line "verity: CODE:
  // message" on stderr); 2 a usage error."
  static void ExpectOneErrorLine(const CliResult& result) {
    EXPECT_NE(result.code, 0);
    EXPECT_EQ(result.out, "");
    std::vector<std::string> lines = absl::StrSplit(result.err, '\n', absl::SkipEmpty());
    ASSERT_THAT(lines, SizeIs(result.code == 2 ? 2 : 1)) << result.err;
    EXPECT_THAT(lines[0], StartsWith("verity: ")) << result.err;
  }

  std::string dir_;
  std::unique_ptr<storage::EmbeddedPostgres> pg_;
  std::unique_ptr<server::VerityServer> server_;
};

// --tls_ca (`verity --help`): "PEM CA bundle that signed the server's certificate: connect with
// TLS". A file that is not a PEM certificate (a wrong path given by mistake) must fail the
// command with the one error line of README.md / `verity --help` (see ExpectOneErrorLine).
// Observed: exit 1 and 9 lines on stderr: eight of gRPC's own log lines ("E1129 ...
// ssl_transport_security.cc:807] Could not load any root certificate.", "Cannot load server
// root certificates.", "Handshaker factory creation failed with TSI_INVALID_ARGUMENT.",
// "Failed to create channel args during subchannel creation: ...", each twice), then
// "verity: UNAVAILABLE: empty address list: (server localhost:PORT)", which names neither the
// flag nor the file.
TEST_F(CliProbeTest, ATlsCaFileThatIsNotPemFailsWithOneErrorLine) {
  const std::string bad = dir_ + "/not-a-ca.pem";
  std::ofstream(bad) << "not a certificate\n";
  CliResult result = RunVerityBinary({"project", "list", "--tls_ca=" + bad, "--timeout=5s",
                                      absl::StrCat("--server=localhost:", server_->port())});
  ExpectOneErrorLine(result);
}

// The same promise, for the plainest TLS mistake: --tls_ca given (a real CA) for a server that
// speaks plaintext. Observed: exit 1 and 2 lines on stderr: gRPC's "E1129 ...
// ssl_transport_security.cc:1501] Handshake failed with fatal error SSL_ERROR_SSL:
// error:0A00010B:SSL routines::wrong version number.", then "verity: UNAVAILABLE: connections
// to all backends failing; ... Ssl handshake failed ...".
TEST_F(CliProbeTest, TlsAgainstAPlaintextServerFailsWithOneErrorLine) {
  const std::string ca = dir_ + "/ca.pem";
  const std::string command = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ", dir_, "/ca.key -out ", ca,
      " -days 2 -subj /CN=probe-ca 2>/dev/null");
  ASSERT_EQ(std::system(command.c_str()), 0) << "openssl failed";
  CliResult result = RunVerityBinary({"project", "list", "--tls_ca=" + ca, "--timeout=5s",
                                      absl::StrCat("--server=localhost:", server_->port())});
  ExpectOneErrorLine(result);
}

// The same promise, for a typo in --server=HOST:PORT (an IPv6 literal missing its closing
// bracket). The CLI refuses other malformed addresses with a usage error naming --server
// ("--server: address \"[::1]\" ...: expected [IPV6]:PORT").
// Observed: exit 1 and 2 lines on stderr: gRPC's "E1129 ... grpc_ares_wrapper.cc:899] Failed
// to parse [::1:PORT to host:port while attempting to resolve as ip literal.", then "verity:
// UNAVAILABLE: DNS resolution failed for [::1:PORT: unparseable host:port ...".
TEST_F(CliProbeTest, AMalformedServerAddressFailsWithOneErrorLine) {
  CliResult result = RunVerityBinary({"project", "list", "--timeout=5s",
                                      absl::StrCat("--server=[::1:", server_->port())});
  ExpectOneErrorLine(result);
}

}  // namespace
}  // namespace verity::tests
