// A small subcommand command-line parser: `program [flags] <command words>
// [flags] [args]`, with per-command flags, required flags, and generated
// usage text.
//
// Why not absl flags: they are process-wide globals, one set per binary, and
// the CLI must run many times in one process (tests call RunCli directly) with
// different flags per subcommand. Flags follow absl/gflags syntax anyway:
// `--name=value` or `--name value`, one or two leading dashes, a boolean flag
// as `--name` or `--name=true|false`, and `--` ending the flags.
//
// Thread safety: specs and CommandLine are plain values; the functions are
// pure.

#ifndef VERITY_CLIENT_COMMAND_LINE_H_
#define VERITY_CLIENT_COMMAND_LINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace verity::client {

struct FlagSpec {
  std::string name;        // Without dashes: "project".
  std::string value_name;  // "NAME", "FILE"; empty for a boolean flag.
  std::string help;        // One sentence.
  // The value when the flag is absent; shown in the usage when non-empty.
  std::string default_value;
  bool required = false;
};

struct CommandSpec {
  std::string name;        // The command words: "project create".
  std::string args_usage;  // Positional arguments: "NAME", "[ID ...]".
  int min_args = 0;
  int max_args = 0;     // -1: no limit.
  std::string summary;  // One line, for the command list.
  std::string details;  // Paragraphs printed below the usage line.
  std::vector<FlagSpec> flags;
  // Usage line after the program name; empty = built from the name, the
  // required flags and args_usage.
  std::string usage;
};

// The result of parsing: a command (or only a group of commands, or none),
// its flags and its positional arguments.
class CommandLine {
 public:
  // The resolved command; null when none was named (or only a group).
  const CommandSpec* command() const { return command_; }
  // The command words given when they name a group but no command
  // ("project"); empty otherwise.
  const std::string& group() const { return group_; }
  // --help (or -h) was given, or the first word was "help".
  bool help() const { return help_; }
  const std::vector<std::string>& args() const { return args_; }

  // Whether the flag was given on the command line.
  bool Has(absl::string_view name) const;
  // The given value, else the spec's default ("" if none).
  std::string GetString(absl::string_view name) const;
  // INVALID_ARGUMENT "--name: ..." when the value is not a decimal integer
  // in [min, max].
  absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t min,
                                 int64_t max) const;
  // INVALID_ARGUMENT "--name: ..." when the value is not a finite decimal
  // number in [min, max].
  absl::StatusOr<double> GetDouble(absl::string_view name, double min,
                                   double max) const;
  // A duration such as "30s", "1m30s", "500ms"; a plain number is seconds.
  // INVALID_ARGUMENT unless the value is a positive duration.
  absl::StatusOr<absl::Duration> GetDuration(absl::string_view name) const;
  // A boolean flag: true when given as --name, --name=true or --name=1.
  bool GetBool(absl::string_view name) const;
  // Comma-separated values; an empty value gives an empty list.
  std::vector<std::string> GetList(absl::string_view name) const;

 private:
  friend absl::StatusOr<CommandLine> ParseCommandLine(
      absl::Span<const std::string> args,
      absl::Span<const FlagSpec> global_flags,
      absl::Span<const CommandSpec> commands);

  const FlagSpec* FindSpec(absl::string_view name) const;

  const CommandSpec* command_ = nullptr;
  std::string group_;
  bool help_ = false;
  std::vector<std::string> args_;
  absl::flat_hash_map<std::string, std::string> values_;
  // The flags known to the resolved command (globals first).
  std::vector<const FlagSpec*> specs_;
};

// Parses `args` (without the program name). Flags may come before, between or
// after the command words. The command is the longest command name that the
// leading positional words spell; the remaining words are its arguments.
// Errors are INVALID_ARGUMENT with a one-line message: an unknown command, an
// unknown flag for the command, a flag without its value or given twice, a
// boolean flag with a value other than true/false, the wrong number of
// arguments, a missing required flag. With help() nothing but unknown flags
// and commands is checked.
absl::StatusOr<CommandLine> ParseCommandLine(
    absl::Span<const std::string> args, absl::Span<const FlagSpec> global_flags,
    absl::Span<const CommandSpec> commands);

// Usage of the whole program: `description`, the command list, the global
// flags, then `epilogue` (examples, exit codes; may be empty).
std::string FormatProgramUsage(absl::string_view program,
                               absl::string_view description,
                               absl::Span<const FlagSpec> global_flags,
                               absl::Span<const CommandSpec> commands,
                               absl::string_view epilogue = "");

// Usage of the commands under `group` ("project").
std::string FormatGroupUsage(absl::string_view program, absl::string_view group,
                             absl::Span<const FlagSpec> global_flags,
                             absl::Span<const CommandSpec> commands);

// Usage of one command: usage line, summary, details, its flags and the
// global flags. Help texts are wrapped at 80 columns.
std::string FormatCommandUsage(absl::string_view program,
                               const CommandSpec& command,
                               absl::Span<const FlagSpec> global_flags);

}  // namespace verity::client

#endif  // VERITY_CLIENT_COMMAND_LINE_H_
