// The `verity` command-line tool; see cli.h and `verity --help`.

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  verity::client::CliEnvironment environment;
  environment.show_progress = isatty(STDERR_FILENO) == 1;
  environment.stdout_is_terminal = isatty(STDOUT_FILENO) == 1;
  if (const char* api_key = std::getenv(verity::client::kApiKeyVariable)) {
    environment.api_key = api_key;
  }
  return verity::client::RunCli(args, std::cout, std::cerr, environment);
}
