// The `verity` command-line tool as a library: RunCli runs one command line
// against the server named by --server and writes its results to `out` and
// its errors and progress to `err`. verity_main.cc is a thin wrapper; tests
// call RunCli in-process against a server on a test port.
//
// Output: tables and "key: value" lines by default; with --output=json every
// command prints one JSON document on `out` (shapes in each command's help,
// built by message_format.h). Progress meters and errors go to `err` only.
//
// Exit codes: 0 success; 1 the command failed (an RPC error, a bad input
// file), with one line "verity: CODE: message" on `err`; 2 a usage error
// (unknown command or flag, missing argument), with "verity: message" and a
// hint to --help on `err`.
//
// Thread safety: RunCli keeps no state between calls; concurrent calls are
// safe if they use different streams.

#ifndef VERITY_CLIENT_CLI_H_
#define VERITY_CLIENT_CLI_H_

#include <ostream>
#include <string>
#include <vector>

namespace verity::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// The environment variable that holds the default of --api_key.
inline constexpr char kApiKeyVariable[] = "VERITY_API_KEY";

struct CliEnvironment {
  // Draw progress on `err` during long operations (submit, posteriors,
  // export, model train). main sets it when stderr is a terminal, so piped
  // output stays clean.
  bool show_progress = false;
  // `out` is a terminal: posteriors and export then draw no meter while
  // they print to it (the meter would interleave with the rows). main sets
  // it from stdout.
  bool stdout_is_terminal = false;
  // The value of kApiKeyVariable: the API key sent when --api_key is not
  // given. main sets it from the process environment (empty when unset).
  std::string api_key;
};

// Runs the command line `args` (without the program name, e.g.
// {"project", "list", "--server=localhost:50051"}) and returns its exit code.
int RunCli(const std::vector<std::string>& args, std::ostream& out,
           std::ostream& err, const CliEnvironment& environment = {});

}  // namespace verity::client

#endif  // VERITY_CLIENT_CLI_H_
