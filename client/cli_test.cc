#include "client/cli.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/testing/fake_verity_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity::client {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::verity::client::testing::FakeVerityServer;

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = FakeVerityServer::Start(); }

  // Runs the CLI against the fake server.
  CliResult Run(std::vector<std::string> args) {
    args.push_back(absl::StrCat("--server=", server_->address()));
    return RunWithoutServer(args);
  }

  static CliResult RunWithoutServer(const std::vector<std::string>& args) {
    std::ostringstream out, err;
    CliResult result;
    result.code = RunCli(args, out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
  }

  // Writes `content` to a file in the test's temporary directory.
  static std::string WriteFile(const std::string& name,
                               const std::string& content) {
    const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }

  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Creates project "birds" (classes false, true) and submits six labels:
  // a: true, true, false; b: false, false; c: true.
  void CreateBirdsWithLabels() {
    const std::string classes = WriteFile("classes.txt", "false\ntrue\n");
    ASSERT_EQ(Run({"project", "create", "birds",
                   absl::StrCat("--classes_file=", classes)})
                  .code,
              kExitOk);
    const std::string labels =
        WriteFile("labels.csv",
                  "item,annotator,label\na,w1,true\na,w2,true\na,w3,false\n"
                  "b,w1,false\nb,w2,0\nc,w1,true\n");
    const CliResult submit =
        Run({"submit", "--project=birds", absl::StrCat("--csv=", labels)});
    ASSERT_EQ(submit.code, kExitOk) << submit.err;
    ASSERT_EQ(submit.out, "accepted=6 duplicate=0 revised=0 rejected=0\n");
  }

  std::unique_ptr<FakeVerityServer> server_;
};

TEST_F(CliTest, HelpPrintsCompleteUsage) {
  CliResult help = RunWithoutServer({"--help"});
  EXPECT_EQ(help.code, kExitOk);
  for (const char* command :
       {"project create NAME", "project list", "project show NAME", "item add",
        "submit", "posteriors", "annotator [ID ...]", "status", "versions",
        "accuracy", "--server=HOST:PORT", "--timeout=DURATION"}) {
    EXPECT_THAT(help.out, HasSubstr(command));
  }
  help = RunWithoutServer({"submit", "--help"});
  EXPECT_EQ(help.code, kExitOk);
  EXPECT_THAT(help.out, StartsWith("Usage: verity submit --project=NAME "
                                   "--csv=FILE [flags]\n"));
  EXPECT_THAT(help.out, HasSubstr("--batch_size=N"));
  help = RunWithoutServer({"help", "project"});
  EXPECT_EQ(help.code, kExitOk);
  EXPECT_THAT(help.out, StartsWith("Usage: verity project <command>"));
}

TEST_F(CliTest, NoCommandPrintsUsageAndFails) {
  const CliResult result = RunWithoutServer({});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("Commands:"));
}

TEST_F(CliTest, UsageErrorsExitWithTwoAndPointToHelp) {
  CliResult result = Run({"submit", "--project=birds", "--csv=x", "--bogus"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_EQ(result.err,
            "verity: unknown flag --bogus\nRun 'verity submit --help' for "
            "usage.\n");
  result = Run({"project", "create", "x"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_EQ(result.err,
            "verity: \"project create\" needs exactly one of --classes and "
            "--classes_file\nRun 'verity project create --help' for usage.\n");
  result = Run({"submit", "--project=p", "--csv=x", "--batch_size=20000"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("verity: --batch_size=20000: expected an "
                                     "integer in [1, 10000]\n"));
  result = Run({"status", "--project=p", "--timeout=never"});
  EXPECT_EQ(result.code, kExitUsage);
}

TEST_F(CliTest, ServerErrorsPrintOneLineWithTheCode) {
  const CliResult result = Run({"project", "show", "nope"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "verity: NOT_FOUND: project \"nope\" does not exist\n");
}

TEST_F(CliTest, UnreachableServerNamesTheAddress) {
  const CliResult result =
      RunWithoutServer({"project", "list", "--server=localhost:1"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.err, StartsWith("verity: UNAVAILABLE: "));
  EXPECT_THAT(result.err, HasSubstr("(server localhost:1)\n"));
}

TEST_F(CliTest, ProjectCreateShowAndList) {
  CliResult result = Run(
      {"project", "create", "birds", "--classes=false,true", "--method=mv"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "name: birds\n"
            "classes: false, true\n"
            "item_feature_dim: 0\n"
            "annotator_feature_dim: 0\n"
            "method: mv\n"
            "created_at: 2023-11-14T22:13:20.000Z\n"
            "items: 0\n"
            "annotators: 0\n"
            "labels: 0\n");
  result = Run({"project", "create", "birds", "--classes=a,b"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err,
            "verity: ALREADY_EXISTS: project \"birds\" already exists\n");
  result = Run({"project", "create", "x", "--classes=a,b", "--method=best"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("verity: --method=best: expected one of "
                                     "mv, ds, one_coin"));

  result = Run({"project", "show", "birds"});
  ASSERT_EQ(result.code, kExitOk);
  EXPECT_THAT(result.out, HasSubstr("classes: false, true\n"));
  result = Run({"project", "list"});
  ASSERT_EQ(result.code, kExitOk);
  EXPECT_EQ(result.out,
            "NAME   CLASSES  ITEMS  ANNOTATORS  LABELS  METHOD\n"
            "birds  2        0      0           0       mv\n");
}

TEST_F(CliTest, SubmitCountsRevisionsOnResubmission) {
  CreateBirdsWithLabels();
  const std::string labels = WriteFile(
      "labels2.csv", "item,annotator,label\na,w1,false\na,w2,true\nd,w4,1\n");
  const CliResult result =
      Run({"submit", "--project=birds", absl::StrCat("--csv=", labels),
           "--batch_size=2"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "accepted=1 duplicate=1 revised=1 rejected=0\n");
  EXPECT_EQ(server_->LiveLabel("birds", "a", "w1"), 0);
}

TEST_F(CliTest, SubmitReportsCsvErrorsWithFileAndLine) {
  CreateBirdsWithLabels();
  const std::string labels =
      WriteFile("bad.csv", "item,annotator,label\na,w1,true\nb,w1,maybe\n");
  const CliResult result =
      Run({"submit", "--project=birds", absl::StrCat("--csv=", labels)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err,
            absl::StrCat("verity: INVALID_ARGUMENT: ", labels,
                         ": line 3: label \"maybe\" is neither a class name "
                         "(false, true) nor a class index in [0, 2)\n"));
}

TEST_F(CliTest, SubmitReportsAMissingFile) {
  CreateBirdsWithLabels();
  const CliResult result =
      Run({"submit", "--project=birds", "--csv=/nonexistent/labels.csv"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.err, StartsWith("verity: NOT_FOUND: cannot open "
                                     "/nonexistent/labels.csv"));
}

TEST_F(CliTest, SubmitToUnknownProjectFails) {
  const std::string labels =
      WriteFile("l.csv", "item,annotator,label\na,w1,true\n");
  const CliResult result =
      Run({"submit", "--project=nope", absl::StrCat("--csv=", labels)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err, "verity: NOT_FOUND: project \"nope\" does not exist\n");
}

TEST_F(CliTest, PosteriorsWriteCsvWithClassNames) {
  CreateBirdsWithLabels();
  const std::string expected =
      "item,label,confidence,p_false,p_true,num_labels\n"
      "a,true,0.666667,0.333333,0.666667,3\n"
      "b,false,1,1,0,2\n"
      "c,true,1,0,1,1\n";
  // A page size of 2 makes the CLI follow a page token.
  CliResult result = Run({"posteriors", "--project=birds", "--page_size=2"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, expected);

  const std::string out = absl::StrCat(::testing::TempDir(), "/post.csv");
  result = Run({"posteriors", "--project=birds", absl::StrCat("--out=", out)});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, absl::StrCat("wrote 3 posteriors to ", out, "\n"));
  EXPECT_EQ(ReadFile(out), expected);

  // A failed call prints nothing and leaves an existing --out file alone.
  result = Run({"posteriors", "--project=birds", "--items=c,zz",
                absl::StrCat("--out=", out)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "verity: NOT_FOUND: item \"zz\" does not exist\n");
  EXPECT_EQ(ReadFile(out), expected);
  result = Run({"posteriors", "--project=birds", "--items=zz"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.out, "");

  result = Run({"posteriors", "--project=birds", "--items=c,a"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "item,label,confidence,p_false,p_true,num_labels\n"
            "c,true,1,0,1,1\n"
            "a,true,0.666667,0.333333,0.666667,3\n");
}

TEST_F(CliTest, AccuracyScoresLabelledGoldItems) {
  CreateBirdsWithLabels();
  const std::string gold =
      WriteFile("gold.csv", "item,label\na,true\nb,true\nz,false\n");
  const CliResult result =
      Run({"accuracy", "--project=birds", absl::StrCat("--gold_csv=", gold)});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "accuracy=0.5000 (2 gold items)\n"
            "skipped gold items: 1 not in the project\n");
}

TEST_F(CliTest, ItemAddSendsFeaturesAndGoldAndAccuracySkipsClampedItems) {
  ASSERT_EQ(Run({"project", "create", "feat", "--classes=no,yes",
                 "--item_feature_dim=2"})
                .code,
            kExitOk);
  const std::string items =
      WriteFile("items.csv", "item,f0,f1\np,0.5,1\nq,2,3\n");
  const std::string gold = WriteFile("gold2.csv", "item,label\nq,yes\nr,no\n");
  CliResult result =
      Run({"item", "add", "--project=feat", absl::StrCat("--csv=", items),
           absl::StrCat("--gold_csv=", gold)});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "added=3 updated=0\n");

  const std::string labels =
      WriteFile("l3.csv", "item,annotator,label\np,w,yes\nq,w,no\n");
  ASSERT_EQ(
      Run({"submit", "--project=feat", absl::StrCat("--csv=", labels)}).code,
      kExitOk);
  const std::string all_gold =
      WriteFile("gold3.csv", "item,label\np,yes\nq,yes\nr,no\n");
  result = Run(
      {"accuracy", "--project=feat", absl::StrCat("--gold_csv=", all_gold)});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "accuracy=1.0000 (1 gold items)\n"
            "skipped gold items: 2 clamped to gold by item add\n");
}

TEST_F(CliTest, ItemAddRefusesFeatureColumnsTheProjectDoesNotHave) {
  CreateBirdsWithLabels();
  const std::string items = WriteFile("items2.csv", "item,f0\np,0.5\n");
  const CliResult result =
      Run({"item", "add", "--project=birds", absl::StrCat("--csv=", items)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err,
            absl::StrCat("verity: INVALID_ARGUMENT: ", items,
                         ": 1 feature columns, but project \"birds\" has "
                         "item_feature_dim 0\n"));
}

TEST_F(CliTest, AnnotatorPrintsATableOrProfilesWithConfusion) {
  CreateBirdsWithLabels();
  CliResult result = Run({"annotator", "--project=birds"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "ANNOTATOR  LABELS  ACCURACY\n"
            "w1         3       1.0000\n"
            "w2         2       1.0000\n"
            "w3         1       0.0000\n");
  result = Run({"annotator", "--project=birds", "w3"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "annotator: w3\n"
            "num_labels: 1\n"
            "accuracy: 0.0000\n"
            "confusion (rows: true class, columns: answered class):\n"
            "         false   true\n"
            "  false  1.0000  0.0000\n"
            "  true   1.0000  0.0000\n");
}

TEST_F(CliTest, StatusShowsLabelsSinceVersionAndTheCurrentVersion) {
  CreateBirdsWithLabels();
  CliResult result = Run({"status", "--project=birds"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "project: birds\n"
            "method: ds\n"
            "num_labels: 6\n"
            "labels_since_version: 6\n"
            "training: false\n"
            "current_version: none (no fit yet)\n");
  server_->Fit("birds");
  result = Run({"status", "--project=birds"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "project: birds\n"
            "method: ds\n"
            "num_labels: 6\n"
            "labels_since_version: 0\n"
            "training: false\n"
            "current_version:\n"
            "  version: 1\n"
            "  method: ds\n"
            "  watermark: 6\n"
            "  num_labels: 6\n"
            "  log_likelihood: -12.5\n"
            "  iterations: 7\n"
            "  duration_ms: 1.25\n"
            "  created_at: 2023-11-14T22:15:00.000Z\n");
  result = Run({"versions", "--project=birds"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "VERSION  METHOD  LABELS  WATERMARK  ITERATIONS  LOG_LIKELIHOOD  "
            "DURATION_MS  CREATED_AT\n"
            "1        ds      6       6          7           -12.5           "
            "1.25         2023-11-14T22:15:00.000Z\n");
}

}  // namespace
}  // namespace verity::client
