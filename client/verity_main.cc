// The `verity` command-line tool; see cli.h and `verity --help`.

#include <grpc/support/log.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"

namespace {

// gRPC's own log lines ("E1129 ... ssl_transport_security.cc:807] Could not load any root
// certificate.", "Handshake failed ...") are dropped: the CLI's errors are one line on stderr
// (`verity --help`), and that line carries the call's status.
void DropGrpcLog(gpr_log_func_args*) {}

}  // namespace

int main(int argc, char** argv) {
  gpr_set_log_function(DropGrpcLog);
  std::vector<std::string> args(argv + 1, argv + argc);
  verity::client::CliEnvironment environment;
  environment.show_progress = isatty(STDERR_FILENO) == 1;
  environment.stdout_is_terminal = isatty(STDOUT_FILENO) == 1;
  if (const char* api_key = std::getenv(verity::client::kApiKeyVariable)) {
    environment.api_key = api_key;
  }
  return verity::client::RunCli(args, std::cout, std::cerr, environment);
}
