#include "client/command_line.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

const std::vector<FlagSpec> kGlobals = {
    {"server", "HOST:PORT", "Server address.", "localhost:50051"},
    {"timeout", "DURATION", "Per-call deadline.", "30s"},
};

const std::vector<CommandSpec> kCommands = {
    {"project create",
     "NAME",
     1,
     1,
     "Create a project.",
     "",
     {{"classes", "A,B", "Class names."},
      {"item_feature_dim", "N", "Feature length.", "0"}}},
    {"project list", "", 0, 0, "List projects.", "", {}},
    {"submit",
     "",
     0,
     0,
     "Submit labels.",
     "Streams labels.\n",
     {{"project", "NAME", "Project.", "", /*required=*/true},
      {"csv", "FILE", "Labels.", "", /*required=*/true},
      {"batch_size", "N", "Batch size.", "1000"}}},
    {"annotator",
     "[ID ...]",
     0,
     -1,
     "Profiles.",
     "",
     {{"project", "NAME", "Project.", "", /*required=*/true},
      {"confusion", "", "Matrices."}}},
};

absl::StatusOr<CommandLine> Parse(std::vector<std::string> args) {
  return ParseCommandLine(args, kGlobals, kCommands);
}

TEST(ParseCommandLineTest, ResolvesTwoWordCommandsWithArgsAndFlags) {
  absl::StatusOr<CommandLine> line =
      Parse({"project", "create", "birds", "--classes=a,b"});
  ASSERT_THAT(line, IsOk());
  ASSERT_NE(line->command(), nullptr);
  EXPECT_EQ(line->command()->name, "project create");
  EXPECT_THAT(line->args(), ElementsAre("birds"));
  EXPECT_THAT(line->GetList("classes"), ElementsAre("a", "b"));
  EXPECT_EQ(*line->GetInt("item_feature_dim", 0, 10), 0);  // The default.
  EXPECT_FALSE(line->help());
}

TEST(ParseCommandLineTest, AcceptsFlagsAnywhereInBothSyntaxes) {
  absl::StatusOr<CommandLine> line =
      Parse({"--server", "h:1", "submit", "-project=p", "--csv", "l.csv",
             "--batch_size=10", "--timeout=2m"});
  ASSERT_THAT(line, IsOk());
  EXPECT_EQ(line->command()->name, "submit");
  EXPECT_EQ(line->GetString("server"), "h:1");
  EXPECT_EQ(line->GetString("project"), "p");
  EXPECT_EQ(line->GetString("csv"), "l.csv");
  EXPECT_EQ(*line->GetInt("batch_size", 1, 10000), 10);
  EXPECT_EQ(*line->GetDuration("timeout"), absl::Minutes(2));
  EXPECT_THAT(line->args(), IsEmpty());
}

TEST(ParseCommandLineTest, UsesDefaultsOfAbsentFlags) {
  absl::StatusOr<CommandLine> line = Parse({"project", "list"});
  ASSERT_THAT(line, IsOk());
  EXPECT_FALSE(line->Has("server"));
  EXPECT_EQ(line->GetString("server"), "localhost:50051");
  EXPECT_EQ(*line->GetDuration("timeout"), absl::Seconds(30));
}

TEST(ParseCommandLineTest, BooleanFlagsTakeNoSeparateValue) {
  absl::StatusOr<CommandLine> line =
      Parse({"annotator", "--confusion", "w1", "--project=p", "w2"});
  ASSERT_THAT(line, IsOk());
  EXPECT_TRUE(line->GetBool("confusion"));
  EXPECT_THAT(line->args(), ElementsAre("w1", "w2"));

  line = Parse({"annotator", "--project=p", "--confusion=false"});
  ASSERT_THAT(line, IsOk());
  EXPECT_FALSE(line->GetBool("confusion"));

  EXPECT_THAT(Parse({"annotator", "--project=p", "--confusion=yes"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--confusion is a boolean flag")));
}

TEST(ParseCommandLineTest, DoubleDashEndsTheFlags) {
  absl::StatusOr<CommandLine> line =
      Parse({"annotator", "--project=p", "--", "--odd-id", "-x"});
  ASSERT_THAT(line, IsOk());
  EXPECT_THAT(line->args(), ElementsAre("--odd-id", "-x"));
}

TEST(ParseCommandLineTest, HelpSkipsArgumentAndRequiredFlagChecks) {
  absl::StatusOr<CommandLine> line = Parse({"submit", "--help"});
  ASSERT_THAT(line, IsOk());
  EXPECT_TRUE(line->help());
  EXPECT_EQ(line->command()->name, "submit");

  line = Parse({"help", "project", "create"});
  ASSERT_THAT(line, IsOk());
  EXPECT_TRUE(line->help());
  EXPECT_EQ(line->command()->name, "project create");

  line = Parse({"project", "-h"});
  ASSERT_THAT(line, IsOk());
  EXPECT_TRUE(line->help());
  EXPECT_EQ(line->command(), nullptr);
  EXPECT_EQ(line->group(), "project");

  line = Parse({"--help"});
  ASSERT_THAT(line, IsOk());
  EXPECT_TRUE(line->help());
  EXPECT_EQ(line->command(), nullptr);
  EXPECT_EQ(line->group(), "");
}

TEST(ParseCommandLineTest, NoWordsGiveNoCommand) {
  absl::StatusOr<CommandLine> line = Parse({"--server=x:1"});
  ASSERT_THAT(line, IsOk());
  EXPECT_EQ(line->command(), nullptr);
  EXPECT_FALSE(line->help());
}

TEST(ParseCommandLineTest, RefusesUnknownCommandsAndIncompleteGroups) {
  EXPECT_THAT(Parse({"frobnicate"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown command \"frobnicate\""));
  EXPECT_THAT(Parse({"project"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "\"project\" needs a subcommand: create, list"));
  EXPECT_THAT(Parse({"project", "delete", "x"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown command \"project delete\" (\"project\" "
                       "takes: create, list)"));
}

TEST(ParseCommandLineTest, RefusesUnknownAndMisplacedFlags) {
  EXPECT_THAT(
      Parse({"project", "list", "--verbose"}),
      StatusIs(absl::StatusCode::kInvalidArgument, "unknown flag --verbose"));
  EXPECT_THAT(Parse({"project", "list", "--csv=x"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "flag --csv does not apply to \"project list\""));
  EXPECT_THAT(
      Parse({"submit", "--project=a", "--project=b", "--csv=x"}),
      StatusIs(absl::StatusCode::kInvalidArgument, "--project is given twice"));
  EXPECT_THAT(Parse({"submit", "--csv=x", "--project"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--project needs a value (--project=NAME)"));
}

TEST(ParseCommandLineTest, ChecksArgumentCountsAndRequiredFlags) {
  EXPECT_THAT(Parse({"project", "create", "--classes=a,b"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "\"project create\" takes 1 argument (NAME), got none"));
  EXPECT_THAT(Parse({"project", "create", "a", "b"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "\"project create\" takes 1 argument (NAME), got "
                       "\"a b\""));
  EXPECT_THAT(Parse({"project", "list", "extra"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "\"project list\" takes no arguments, got \"extra\""));
  EXPECT_THAT(Parse({"submit", "--project=p"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "\"submit\" needs --csv=FILE"));
}

TEST(CommandLineTest, TypedGettersNameTheFlagOnBadValues) {
  absl::StatusOr<CommandLine> line = Parse(
      {"submit", "--project=p", "--csv=x", "--batch_size=0", "--timeout=soon"});
  ASSERT_THAT(line, IsOk());
  EXPECT_THAT(line->GetInt("batch_size", 1, 10000),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--batch_size=0: expected an integer in [1, 10000]"));
  EXPECT_THAT(line->GetDuration("timeout"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--timeout=soon: expected a positive")));
}

TEST(CommandLineTest, DoublesAreFiniteAndInRange) {
  absl::StatusOr<CommandLine> line =
      Parse({"submit", "--project=p", "--csv=x", "--batch_size=0.25"});
  ASSERT_THAT(line, IsOk());
  EXPECT_EQ(*line->GetDouble("batch_size", 0, 1), 0.25);
  EXPECT_THAT(line->GetDouble("batch_size", 0.5, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--batch_size=0.25: expected a number in [0.5, 1]"));
  line = Parse({"submit", "--project=p", "--csv=x", "--batch_size=nan"});
  EXPECT_THAT(line->GetDouble("batch_size", 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  line = Parse({"submit", "--project=p", "--csv=x", "--batch_size=inf"});
  EXPECT_THAT(line->GetDouble("batch_size", 0, 1e300),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CommandLineTest, DurationsAcceptUnitsOrPlainSeconds) {
  absl::StatusOr<CommandLine> line =
      Parse({"project", "list", "--timeout=1.5"});
  ASSERT_THAT(line, IsOk());
  EXPECT_EQ(*line->GetDuration("timeout"), absl::Milliseconds(1500));
  line = Parse({"project", "list", "--timeout=250ms"});
  EXPECT_EQ(*line->GetDuration("timeout"), absl::Milliseconds(250));
  line = Parse({"project", "list", "--timeout=0"});
  EXPECT_THAT(line->GetDuration("timeout"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  line = Parse({"project", "list", "--timeout=-3s"});
  EXPECT_THAT(line->GetDuration("timeout"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A deadline must be finite.
  line = Parse({"project", "list", "--timeout=inf"});
  EXPECT_THAT(line->GetDuration("timeout"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A lone "-" (standard input, say) is an argument, not a flag.
TEST(ParseCommandLineTest, ALoneDashIsAnArgument) {
  absl::StatusOr<CommandLine> line = Parse({"annotator", "--project=p", "-"});
  ASSERT_THAT(line, IsOk());
  EXPECT_THAT(line->args(), ElementsAre("-"));
}

// --help is a boolean flag like the others: --help=false asks for no help, and a value that
// is not a boolean is refused.
TEST(ParseCommandLineTest, HelpTakesOnlyABooleanValue) {
  absl::StatusOr<CommandLine> line = Parse({"project", "list", "--help=false"});
  ASSERT_THAT(line, IsOk());
  EXPECT_FALSE(line->help());
  line = Parse({"project", "list", "--help=0"});
  ASSERT_THAT(line, IsOk());
  EXPECT_FALSE(line->help());
  line = Parse({"project", "list", "--help=1"});
  ASSERT_THAT(line, IsOk());
  EXPECT_TRUE(line->help());
  EXPECT_THAT(Parse({"project", "list", "--help=maybe"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--help takes no value")));
}

// Help text starts in one column when the flags fit before it; a flag too long for that
// goes on its own line, its help on the next, and does not push the column out.
TEST(FormatUsageTest, AFlagTooLongForTheHelpColumnHasItsHelpOnTheNextLine) {
  const CommandSpec command{"tune",
                            "",
                            0,
                            0,
                            "Tune.",
                            "",
                            {{"a_very_long_flag_name_indeed", "VALUE", "Long help."},
                             {"n", "N", "Short help."}}};
  const std::string usage = FormatCommandUsage("verity", command, {});
  EXPECT_THAT(usage, HasSubstr("Flags:\n"
                               "  --a_very_long_flag_name_indeed=VALUE\n"
                               "         Long help.\n"
                               "  --n=N  Short help.\n"));
}

TEST(FormatUsageTest, ProgramUsageListsEveryCommandAndGlobalFlag) {
  const std::string usage =
      FormatProgramUsage("verity", "verity: a tool.", kGlobals, kCommands);
  EXPECT_THAT(usage, HasSubstr("Usage: verity [global flags] <command>"));
  EXPECT_THAT(usage, HasSubstr("  project create NAME  Create a project.\n"));
  EXPECT_THAT(usage, HasSubstr("  annotator [ID ...]   Profiles.\n"));
  EXPECT_THAT(usage, HasSubstr("--server=HOST:PORT"));
  EXPECT_THAT(usage, HasSubstr("Default: localhost:50051."));
}

TEST(FormatUsageTest, CommandUsageShowsRequiredFlagsInTheUsageLine) {
  const std::string usage =
      FormatCommandUsage("verity", kCommands[2], kGlobals);
  EXPECT_EQ(usage,
            "Usage: verity submit --project=NAME --csv=FILE [flags]\n"
            "\n"
            "Submit labels.\n"
            "\n"
            "Streams labels.\n"
            "\n"
            "Flags:\n"
            "  --project=NAME  Project. Required.\n"
            "  --csv=FILE      Labels. Required.\n"
            "  --batch_size=N  Batch size. Default: 1000.\n"
            "\n"
            "Global flags:\n"
            "  --server=HOST:PORT  Server address. Default: localhost:50051.\n"
            "  --timeout=DURATION  Per-call deadline. Default: 30s.\n");
}

// CommandSpec::usage, when set, is the usage line after the program name, in place of the one
// built from the name, the required flags and args_usage.
TEST(FormatUsageTest, AGivenUsageLineReplacesTheBuiltOne) {
  CommandSpec command = kCommands[2];
  command.usage = "submit (--csv=FILE | --stdin) --project=NAME";
  EXPECT_THAT(
      FormatCommandUsage("verity", command, kGlobals),
      ::testing::StartsWith(
          "Usage: verity submit (--csv=FILE | --stdin) --project=NAME\n\nSubmit labels.\n"));
}

TEST(FormatUsageTest, GroupUsageListsOnlyTheGroupsCommands) {
  const std::string usage =
      FormatGroupUsage("verity", "project", kGlobals, kCommands);
  EXPECT_THAT(usage, HasSubstr("project create NAME"));
  EXPECT_THAT(usage, HasSubstr("project list"));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("submit")));
}

// GetInt and GetDouble take values in the CLOSED range [min, max].
TEST(CommandLineTest, IntAndDoubleRangesIncludeTheirBounds) {
  absl::StatusOr<CommandLine> line =
      Parse({"submit", "--project=p", "--csv=x", "--batch_size=10000"});
  ASSERT_THAT(line, IsOk());
  absl::StatusOr<int64_t> n = line->GetInt("batch_size", 1, 10000);
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(*n, 10000);
  n = line->GetInt("batch_size", 10000, 20000);
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(*n, 10000);
  absl::StatusOr<double> x = line->GetDouble("batch_size", 0, 10000);
  ASSERT_THAT(x, IsOk());
  EXPECT_EQ(*x, 10000);
  x = line->GetDouble("batch_size", 10000, 1e9);
  ASSERT_THAT(x, IsOk());
  EXPECT_EQ(*x, 10000);
  EXPECT_THAT(line->GetInt("batch_size", 1, 9999),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A boolean flag is true for --name, --name=true or --name=1 (command_line.h).
TEST(CommandLineTest, BooleanFlagsAcceptOneAndZero) {
  absl::StatusOr<CommandLine> line =
      Parse({"annotator", "--project=p", "--confusion=1"});
  ASSERT_THAT(line, IsOk());
  EXPECT_TRUE(line->GetBool("confusion"));
  line = Parse({"annotator", "--project=p", "--confusion=0"});
  ASSERT_THAT(line, IsOk());
  EXPECT_FALSE(line->GetBool("confusion"));
  line = Parse({"annotator", "--project=p"});
  ASSERT_THAT(line, IsOk());
  EXPECT_FALSE(line->GetBool("confusion"));
}

}  // namespace
}  // namespace verity::client
