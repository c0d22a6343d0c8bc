// README.md's server flag table ("## The server") against the flags the verity_server binary
// defines: every flag of server/main.cc is in the table, every flag of the table exists, and
// the table's default is the binary's (`--helpfull`). Also the training worker's defaults that
// README.md and deploy/README.md quote. No database: only the binaries' help text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/server_process.h"

namespace verity::tests {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// stdout and stderr of `binary --helpfull`.
std::string Helpfull(const std::string& binary) {
  const std::string command = RunfilePath(binary) + " --helpfull 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) text.append(buffer, n);
  pclose(pipe);
  return text;
}

// One flag of `--helpfull`: its whole entry and its default as printed (quotes removed).
struct HelpFlag {
  std::string text;
  std::string default_value;
};

// The flags `--helpfull` lists under "Flags from SOURCE:".
std::map<std::string, HelpFlag> FlagsFrom(const std::string& help, const std::string& source) {
  std::map<std::string, HelpFlag> flags;
  const std::string header = "Flags from " + source + ":";
  size_t start = help.find(header);
  if (start == std::string::npos) return flags;
  start += header.size();
  size_t end = help.find("Flags from ", start);
  if (end == std::string::npos) end = help.size();
  const std::string section = help.substr(start, end - start);
  for (absl::string_view entry : absl::StrSplit(section, "\n    --")) {
    const size_t space = entry.find(" (");
    if (space == absl::string_view::npos) continue;
    HelpFlag flag;
    // The help wraps at 80 columns: one space for each line break and its indentation.
    flag.text = std::regex_replace(std::string(entry), std::regex("\\s*\n\\s*"), " ");
    const size_t at = flag.text.rfind("; default: ");
    if (at != std::string::npos) {
      absl::string_view value = absl::string_view(flag.text).substr(at + 11);
      value = value.substr(0, value.rfind(';'));
      absl::ConsumePrefix(&value, "\"");
      absl::ConsumeSuffix(&value, "\"");
      flag.default_value = std::string(value);
    }
    flags[std::string(entry.substr(0, space))] = flag;
  }
  return flags;
}

// A default as README.md writes it, in the binary's spelling: backticks and a trailing
// parenthetical note dropped, thousands separators removed, "empty"/"(none)" as "".
std::string NormalizeDocDefault(std::string value) {
  value = std::regex_replace(value, std::regex("`"), "");
  if (value == "empty" || value == "(none)") return "";
  value = std::regex_replace(value, std::regex(" \\(.*\\)$"), "");
  return std::regex_replace(value, std::regex("(\\d),(?=\\d{3})"), "$1");
}

// The rows of README.md's server flag table: flag name -> the default it documents. A row of
// several flags lists their defaults in order ("10,000,000, 1,000,000, ..."); a row of several
// flags with one default gives it to each.
std::map<std::string, std::string> ReadmeServerFlagTable(const std::string& readme) {
  std::map<std::string, std::string> table;
  size_t start = readme.find("| flag | default | meaning |");
  if (start == std::string::npos) return table;
  const size_t end = readme.find("\n\n", start);
  const std::string text = readme.substr(start, end - start);
  std::vector<std::string> rows = absl::StrSplit(text, '\n');
  const std::regex name_re("`--(\\w+)`");
  const std::regex separator_re("([\\d)]), (?=\\d)");
  for (size_t i = 2; i < rows.size(); ++i) {
    std::vector<std::string> cells = absl::StrSplit(rows[i], '|');
    if (cells.size() < 4) continue;
    std::vector<std::string> names;
    for (std::sregex_iterator it(cells[1].begin(), cells[1].end(), name_re), last; it != last;
         ++it) {
      names.push_back((*it)[1]);
    }
    const std::string cell(absl::StripAsciiWhitespace(cells[2]));
    std::vector<std::string> defaults =
        absl::StrSplit(std::regex_replace(cell, separator_re, "$1\t"), '\t');
    if (defaults.size() == 1) defaults.assign(names.size(), defaults[0]);
    EXPECT_EQ(defaults.size(), names.size()) << rows[i];
    for (size_t k = 0; k < names.size() && k < defaults.size(); ++k) {
      table[names[k]] = defaults[k];
    }
  }
  return table;
}

template <typename Map>
std::set<std::string> Keys(const Map& map) {
  std::set<std::string> keys;
  for (const auto& [key, value] : map) keys.insert(key);
  return keys;
}

TEST(ReadmeFlagsTest, TheServerTableListsExactlyTheServerFlags) {
  const auto table = ReadmeServerFlagTable(ReadFile(RunfilePath("README.md")));
  const auto flags = FlagsFrom(Helpfull("server/verity_server"), "server/main.cc");
  ASSERT_GE(table.size(), 30u);
  ASSERT_GE(flags.size(), 30u);
  EXPECT_EQ(Keys(table), Keys(flags));
}

// A documented default equals the binary's; a flag whose binary default is empty but whose
// table entry names a value (admin_key_file: `DATA_DIR/admin.key`) must say so in its help
// ("empty = DATA_DIR/admin.key").
TEST(ReadmeFlagsTest, TheServerTableDefaultsAreTheBinarysDefaults) {
  const auto table = ReadmeServerFlagTable(ReadFile(RunfilePath("README.md")));
  const auto flags = FlagsFrom(Helpfull("server/verity_server"), "server/main.cc");
  ASSERT_FALSE(table.empty());
  for (const auto& [name, documented] : table) {
    const auto flag = flags.find(name);
    if (flag == flags.end()) continue;  // Reported by TheServerTableListsExactlyTheServerFlags.
    const std::string expected = NormalizeDocDefault(documented);
    if (flag->second.default_value.empty() && !expected.empty()) {
      EXPECT_TRUE(absl::StrContains(flag->second.text, "empty = " + expected))
          << "--" << name << ": README " << documented << ", help:" << flag->second.text;
    } else {
      EXPECT_EQ(expected, flag->second.default_value)
          << "--" << name << ": README " << documented << ", help:" << flag->second.text;
    }
  }
}

// The table's examples of the normalisation, checked by hand against the README text.
TEST(ReadmeFlagsTest, TableDefaultsAreReadAsWritten) {
  auto table = ReadmeServerFlagTable(ReadFile(RunfilePath("README.md")));
  EXPECT_EQ(NormalizeDocDefault(table["listen"]), "localhost:50051");
  EXPECT_EQ(NormalizeDocDefault(table["max_annotators_per_project"]), "1000000");
  EXPECT_EQ(NormalizeDocDefault(table["max_feature_values_per_project"]), "268435456");
  EXPECT_EQ(NormalizeDocDefault(table["memory_budget_mb"]), "0");
  EXPECT_EQ(NormalizeDocDefault(table["evict_idle_seconds"]), "60");
  EXPECT_EQ(NormalizeDocDefault(table["tls_key"]), "");
}

// README.md: "`--db_timeout_seconds` (default 30, as the server's) bounds the worker's database
// waits", and a job failing on each of its `--max_attempts` claims. deploy/README.md:
// verity-worker.flags.example sets "`--lease_seconds`, `--poll_ms` and `--max_attempts` at
// their defaults".
TEST(ReadmeFlagsTest, TheWorkerDefaultsAreThoseTheDocsQuote) {
  const auto flags =
      FlagsFrom(Helpfull("server/training/verity_worker"), "server/training/worker_main.cc");
  ASSERT_FALSE(flags.empty());
  ASSERT_TRUE(flags.count("db_timeout_seconds"));
  EXPECT_EQ(flags.at("db_timeout_seconds").default_value, "30");
  ASSERT_TRUE(flags.count("postgres_url"));
  ASSERT_TRUE(flags.count("device"));
  EXPECT_EQ(flags.at("device").default_value, "auto");
  const std::string example = ReadFile(RunfilePath("deploy/systemd/verity-worker.flags.example"));
  ASSERT_FALSE(example.empty());
  for (const std::string name : {"lease_seconds", "poll_ms", "max_attempts"}) {
    ASSERT_TRUE(flags.count(name)) << name;
    EXPECT_TRUE(
        absl::StrContains(example, "\n--" + name + "=" + flags.at(name).default_value + "\n"))
        << name << " default " << flags.at(name).default_value;
  }
}

}  // namespace
}  // namespace verity::tests
