// The commands of the `verity` CLI as data: names, arguments, flags and help
// text, from which command_line.h parses command lines and writes usage.
// What each command does is in cli.cc; this file holds no behaviour, so the
// help can be read (and tested for completeness) in one place.
//
// Thread safety: the returned vectors are built once and never change.

#ifndef VERITY_CLIENT_CLI_COMMANDS_H_
#define VERITY_CLIENT_CLI_COMMANDS_H_

#include <vector>

#include "client/command_line.h"

namespace verity::client {

inline constexpr char kCliProgram[] = "verity";

// --server, the TLS files, --timeout, --output, --api_key, --help.
const std::vector<FlagSpec>& CliGlobalFlags();

// Every command, in the order `verity --help` lists them.
const std::vector<CommandSpec>& CliCommands();

// The paragraph above the command list of `verity --help`.
const char* CliDescription();
// Examples and exit codes, below the global flags of `verity --help`.
const char* CliEpilogue();

// The flags shared by `project create` and `project settings`: --method and
// every field of ProjectSettings (0 = the server default).
const std::vector<FlagSpec>& ProjectSettingsFlags();

}  // namespace verity::client

#endif  // VERITY_CLIENT_CLI_COMMANDS_H_
