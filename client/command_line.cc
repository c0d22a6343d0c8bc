#include "client/command_line.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace verity::client {
namespace {

// Help text starts in this column when the left column fits.
constexpr size_t kHelpColumn = 30;
// Usage text is wrapped to this many columns.
constexpr size_t kLineWidth = 80;

bool IsBool(const FlagSpec& spec) { return spec.value_name.empty(); }

bool IsBoolValue(absl::string_view value) {
  return value == "true" || value == "false" || value == "1" || value == "0";
}

std::vector<std::string> Words(absl::string_view name) {
  return absl::StrSplit(name, ' ', absl::SkipEmpty());
}

// The second words of the commands in `group`: "create, list, show".
std::string GroupMembers(absl::string_view group,
                         absl::Span<const CommandSpec> commands) {
  std::vector<std::string> members;
  for (const CommandSpec& command : commands) {
    std::vector<std::string> words = Words(command.name);
    if (words.size() > 1 && words[0] == group) members.push_back(words[1]);
  }
  return absl::StrJoin(members, ", ");
}

std::string FlagLeft(const FlagSpec& flag) {
  return IsBool(flag) ? absl::StrCat("--", flag.name)
                      : absl::StrCat("--", flag.name, "=", flag.value_name);
}

std::string FlagHelp(const FlagSpec& flag) {
  std::string help = flag.help;
  if (flag.required) absl::StrAppend(&help, " Required.");
  if (!flag.default_value.empty()) {
    absl::StrAppend(&help, " Default: ", flag.default_value, ".");
  }
  return help;
}

// Appends `text` wrapped at kLineWidth, continuation lines indented by
// `indent`; the first line goes on the current line, which is at `indent`.
void AppendWrapped(absl::string_view text, size_t indent, std::string& out) {
  const size_t room = kLineWidth > indent + 20 ? kLineWidth - indent : 20;
  size_t used = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (used > 0 && used + 1 + word.size() > room) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      used = 0;
    } else if (used > 0) {
      out.push_back(' ');
      ++used;
    }
    absl::StrAppend(&out, word);
    used += word.size();
  }
  out.push_back('\n');
}

// "  left      help" rows, the help aligned in one column and wrapped.
void AppendRows(const std::vector<std::pair<std::string, std::string>>& rows,
                std::string& out) {
  size_t width = 0;
  for (const auto& [left, help] : rows) {
    if (left.size() + 4 <= kHelpColumn) width = std::max(width, left.size());
  }
  const size_t indent = width + 4;
  for (const auto& [left, help] : rows) {
    if (left.size() > width) {
      absl::StrAppend(&out, "  ", left, "\n", std::string(indent, ' '));
    } else {
      absl::StrAppend(&out, "  ", left,
                      std::string(width - left.size() + 2, ' '));
    }
    AppendWrapped(help, indent, out);
  }
}

void AppendFlags(absl::Span<const FlagSpec> flags, std::string& out) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const FlagSpec& flag : flags) {
    rows.emplace_back(FlagLeft(flag), FlagHelp(flag));
  }
  AppendRows(rows, out);
}

std::string CommandLeft(const CommandSpec& command) {
  return command.args_usage.empty()
             ? command.name
             : absl::StrCat(command.name, " ", command.args_usage);
}

std::string UsageLine(absl::string_view program, const CommandSpec& command) {
  if (!command.usage.empty()) return absl::StrCat(program, " ", command.usage);
  std::string line = absl::StrCat(program, " ", command.name);
  bool optional_flags = false;
  for (const FlagSpec& flag : command.flags) {
    if (flag.required) {
      absl::StrAppend(&line, " ", FlagLeft(flag));
    } else {
      optional_flags = true;
    }
  }
  if (!command.args_usage.empty())
    absl::StrAppend(&line, " ", command.args_usage);
  if (optional_flags) absl::StrAppend(&line, " [flags]");
  return line;
}

}  // namespace

const FlagSpec* CommandLine::FindSpec(absl::string_view name) const {
  for (const FlagSpec* spec : specs_) {
    if (spec->name == name) return spec;
  }
  return nullptr;
}

bool CommandLine::Has(absl::string_view name) const {
  return values_.contains(name);
}

std::string CommandLine::GetString(absl::string_view name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  const FlagSpec* spec = FindSpec(name);
  return spec == nullptr ? std::string() : spec->default_value;
}

absl::StatusOr<int64_t> CommandLine::GetInt(absl::string_view name, int64_t min,
                                            int64_t max) const {
  const std::string value = GetString(name);
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < min || n > max) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value,
                                                   ": expected an integer in [",
                                                   min, ", ", max, "]"));
  }
  return n;
}

absl::StatusOr<double> CommandLine::GetDouble(absl::string_view name,
                                              double min, double max) const {
  const std::string value = GetString(name);
  double x = 0;
  if (!absl::SimpleAtod(value, &x) || !std::isfinite(x) || x < min || x > max) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value,
                                                   ": expected a number in [",
                                                   min, ", ", max, "]"));
  }
  return x;
}

absl::StatusOr<absl::Duration> CommandLine::GetDuration(
    absl::string_view name) const {
  const std::string value = GetString(name);
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(value, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(value, &d)) {
    d = absl::ZeroDuration();
  }
  if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, "=", value,
        ": expected a positive duration such as 30s, 2m or 500ms"));
  }
  return d;
}

bool CommandLine::GetBool(absl::string_view name) const {
  const std::string value = GetString(name);
  return value == "true" || value == "1";
}

std::vector<std::string> CommandLine::GetList(absl::string_view name) const {
  const std::string value = GetString(name);
  if (value.empty()) return {};
  return absl::StrSplit(value, ',');
}

absl::StatusOr<CommandLine> ParseCommandLine(
    absl::Span<const std::string> args, absl::Span<const FlagSpec> global_flags,
    absl::Span<const CommandSpec> commands) {
  CommandLine line;
  // Every flag any command knows, to tell whether `--name value` takes the
  // next word before the command is known.
  absl::flat_hash_map<absl::string_view, const FlagSpec*> any_flag;
  for (const FlagSpec& flag : global_flags) any_flag.emplace(flag.name, &flag);
  for (const CommandSpec& command : commands) {
    for (const FlagSpec& flag : command.flags) {
      any_flag.emplace(flag.name, &flag);
    }
  }

  std::vector<std::string> words;
  std::vector<std::string> flag_order;
  bool flags_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_ended || arg.size() < 2 || arg[0] != '-') {
      words.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    absl::string_view body = arg;
    if (!absl::ConsumePrefix(&body, "--")) absl::ConsumePrefix(&body, "-");
    absl::string_view name = body;
    std::optional<std::string> value;
    if (size_t eq = body.find('='); eq != body.npos) {
      name = body.substr(0, eq);
      value = std::string(body.substr(eq + 1));
    }
    if (name == "help" || name == "h") {
      if (value.has_value() && !IsBoolValue(*value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--help takes no value, got \"", *value, "\""));
      }
      line.help_ = !value.has_value() || *value == "true" || *value == "1";
      continue;
    }
    auto spec = any_flag.find(name);
    if (spec == any_flag.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (IsBool(*spec->second)) {
      if (!value.has_value()) value = "true";
      if (!IsBoolValue(*value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " is a boolean flag; got \"", *value,
                         "\" (use --", name, " or --", name, "=false)"));
      }
    } else if (!value.has_value()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value (--", name, "=",
                         spec->second->value_name, ")"));
      }
      value = args[++i];
    }
    if (!line.values_.emplace(std::string(name), *std::move(value)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " is given twice"));
    }
    flag_order.emplace_back(name);
  }

  if (!words.empty() && words[0] == "help") {
    line.help_ = true;
    words.erase(words.begin());
  }

  // The longest command whose words start `words`.
  size_t matched_words = 0;
  for (const CommandSpec& command : commands) {
    std::vector<std::string> name = Words(command.name);
    if (name.size() <= matched_words || name.size() > words.size()) continue;
    if (std::equal(name.begin(), name.end(), words.begin())) {
      line.command_ = &command;
      matched_words = name.size();
    }
  }
  for (const FlagSpec& flag : global_flags) line.specs_.push_back(&flag);
  if (line.command_ != nullptr) {
    for (const FlagSpec& flag : line.command_->flags) {
      line.specs_.push_back(&flag);
    }
  } else if (!words.empty()) {
    const std::string members = GroupMembers(words[0], commands);
    if (members.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown command \"", words[0], "\""));
    }
    line.group_ = words[0];
    if (!line.help_) {
      if (words.size() == 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", words[0], "\" needs a subcommand: ", members));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unknown command \"", words[0], " ", words[1], "\" (\"",
                       words[0], "\" takes: ", members, ")"));
    }
  }
  line.args_.assign(words.begin() + matched_words, words.end());

  for (const std::string& name : flag_order) {
    if (line.FindSpec(name) == nullptr) {
      const std::string where =
          line.command_ != nullptr
              ? absl::StrCat("\"", line.command_->name, "\"")
              : std::string("this command");
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " does not apply to ", where));
    }
  }
  if (line.help_ || line.command_ == nullptr) return line;

  const CommandSpec& command = *line.command_;
  const int num_args = static_cast<int>(line.args_.size());
  if (num_args < command.min_args ||
      (command.max_args >= 0 && num_args > command.max_args)) {
    std::string expected;
    if (command.max_args == 0) {
      expected = "no arguments";
    } else if (command.min_args == command.max_args) {
      expected = absl::StrCat(command.min_args, " argument",
                              command.min_args == 1 ? "" : "s", " (",
                              command.args_usage, ")");
    } else {
      expected = absl::StrCat("arguments ", command.args_usage);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", command.name, "\" takes ", expected, ", got ",
        num_args == 0
            ? std::string("none")
            : absl::StrCat("\"", absl::StrJoin(line.args_, " "), "\"")));
  }
  for (const FlagSpec* spec : line.specs_) {
    if (spec->required && !line.Has(spec->name)) {
      return absl::InvalidArgumentError(absl::StrCat("\"", command.name,
                                                     "\" needs --", spec->name,
                                                     "=", spec->value_name));
    }
  }
  return line;
}

std::string FormatProgramUsage(absl::string_view program,
                               absl::string_view description,
                               absl::Span<const FlagSpec> global_flags,
                               absl::Span<const CommandSpec> commands,
                               absl::string_view epilogue) {
  std::string out = absl::StrCat(
      description, "\n\nUsage: ", program,
      " [global flags] <command> [flags] [arguments]\n\nCommands:\n");
  std::vector<std::pair<std::string, std::string>> rows;
  for (const CommandSpec& command : commands) {
    rows.emplace_back(CommandLeft(command), command.summary);
  }
  AppendRows(rows, out);
  absl::StrAppend(&out, "\nGlobal flags (before or after the command):\n");
  AppendFlags(global_flags, out);
  absl::StrAppend(&out, "\nRun '", program,
                  " <command> --help' for the flags of a command.\n");
  if (!epilogue.empty()) absl::StrAppend(&out, "\n", epilogue);
  return out;
}

std::string FormatGroupUsage(absl::string_view program, absl::string_view group,
                             absl::Span<const FlagSpec> global_flags,
                             absl::Span<const CommandSpec> commands) {
  std::string out = absl::StrCat("Usage: ", program, " ", group,
                                 " <command> ...\n\nCommands:\n");
  std::vector<std::pair<std::string, std::string>> rows;
  for (const CommandSpec& command : commands) {
    std::vector<std::string> words = Words(command.name);
    if (!words.empty() && words[0] == group) {
      rows.emplace_back(CommandLeft(command), command.summary);
    }
  }
  AppendRows(rows, out);
  absl::StrAppend(&out, "\nGlobal flags:\n");
  AppendFlags(global_flags, out);
  absl::StrAppend(&out, "\nRun '", program, " ", group,
                  " <command> --help' for the flags of a command.\n");
  return out;
}

std::string FormatCommandUsage(absl::string_view program,
                               const CommandSpec& command,
                               absl::Span<const FlagSpec> global_flags) {
  std::string out = absl::StrCat("Usage: ", UsageLine(program, command), "\n\n",
                                 command.summary, "\n");
  // Paragraphs of the details, wrapped.
  for (absl::string_view paragraph :
       absl::StrSplit(command.details, "\n\n", absl::SkipWhitespace())) {
    out.push_back('\n');
    AppendWrapped(absl::StrReplaceAll(paragraph, {{"\n", " "}}), 0, out);
  }
  if (!command.flags.empty()) {
    absl::StrAppend(&out, "\nFlags:\n");
    AppendFlags(command.flags, out);
  }
  absl::StrAppend(&out, "\nGlobal flags:\n");
  AppendFlags(global_flags, out);
  return out;
}

}  // namespace verity::client
