#include "client/cli.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli_commands.h"
#include "client/command_line.h"
#include "client/testing/fake_verity_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::client {
namespace {

using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
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
  CliResult Run(std::vector<std::string> args,
                const CliEnvironment& environment = {}) {
    args.push_back(absl::StrCat("--server=", server_->address()));
    return RunWithoutServer(args, environment);
  }

  static CliResult RunWithoutServer(const std::vector<std::string>& args,
                                    const CliEnvironment& environment = {}) {
    std::ostringstream out, err;
    CliResult result;
    result.code = RunCli(args, out, err, environment);
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
    ASSERT_EQ(submit.out, "accepted=6 duplicate=0 revised=0 stale=0 rejected=0\n");
  }

  std::unique_ptr<FakeVerityServer> server_;
};

TEST_F(CliTest, HelpPrintsCompleteUsage) {
  CliResult help = RunWithoutServer({"--help"});
  EXPECT_EQ(help.code, kExitOk);
  for (const char* command :
       {"project create NAME", "project list", "project show NAME", "item add",
        "submit", "posteriors", "annotator [ID ...]", "status", "versions",
        "accuracy", "key create", "key list", "key revoke KEY_ID",
        "--server=HOST:PORT", "--timeout=DURATION", "--api_key=KEY",
        "VERITY_API_KEY"}) {
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

TEST_F(CliTest, BadServerListsAreUsageErrorsNamingTheFlag) {
  CliResult result = RunWithoutServer({"project", "list", "--server=localhost:1,,localhost:2"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_EQ(result.err,
            "verity: --server: empty address in \"localhost:1,,localhost:2\"\n"
            "Run 'verity project list --help' for usage.\n");
  result = RunWithoutServer({"project", "list", "--server=localhost:1,localhost"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("verity: --server: address \"localhost\" in "
                                     "\"localhost:1,localhost\" has no port"));
}

// An empty --server is a bad flag value like the others: a usage error (exit 2) naming the
// flag, before anything is dialled.
TEST_F(CliTest, AnEmptyServerIsAUsageErrorNamingTheFlag) {
  const CliResult result = RunWithoutServer({"project", "list", "--server="});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_EQ(result.out, "");
  EXPECT_THAT(result.err, StartsWith("verity: --server"));
  EXPECT_THAT(result.err, EndsWith("Run 'verity project list --help' for usage.\n"));
}

// --server=a,b against two servers, the first of which is gone: every command still works.
TEST_F(CliTest, ServerListSkipsAServerThatIsDown) {
  std::unique_ptr<FakeVerityServer> gone = FakeVerityServer::Start();
  const std::string gone_address = gone->address();
  gone.reset();
  const std::string classes = WriteFile("classes.txt", "false\ntrue\n");
  const std::string servers = absl::StrCat("--server=", gone_address, ",", server_->address());
  CliResult created = RunWithoutServer(
      {"project", "create", "birds", absl::StrCat("--classes_file=", classes), servers});
  ASSERT_EQ(created.code, kExitOk) << created.err;
  for (int i = 0; i < 4; ++i) {
    CliResult listed = RunWithoutServer({"project", "list", servers});
    ASSERT_EQ(listed.code, kExitOk) << listed.err;
    EXPECT_THAT(listed.out, HasSubstr("birds"));
  }
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

// The hint after a usage error names the help of the command the words name, as far as they
// name one: words that name only a group ("project") point to that group's help.
TEST_F(CliTest, AnUnknownCommandOfAGroupPointsToTheGroupsHelp) {
  CliResult result = Run({"project", "delete", "birds"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("verity: unknown command \"project delete\""));
  EXPECT_THAT(result.err, EndsWith("\nRun 'verity project --help' for usage.\n"));
  result = Run({"frobnicate"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, EndsWith("\nRun 'verity --help' for usage.\n"));
}

TEST_F(CliTest, ServerErrorsPrintOneLineWithTheCode) {
  const CliResult result = Run({"project", "show", "nope"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "verity: NOT_FOUND: project \"nope\" does not exist\n");
}

// A ProjectService whose ListProjects fails with a message of several lines, as the server
// passes on PostgreSQL's connection errors.
class MultiLineErrorProjectService final : public v1::ProjectService::Service {
 public:
  grpc::Status ListProjects(grpc::ServerContext*, const v1::ListProjectsRequest*,
                            v1::ListProjectsResponse*) override {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "connection to server failed: No such file or directory\n\tIs the "
                        "server running locally and accepting connections?\n");
  }
};

// README: "errors stay one line on stderr", whatever the server's message holds.
TEST_F(CliTest, AServerMessageOfSeveralLinesIsPrintedOnOne) {
  MultiLineErrorProjectService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const CliResult result = RunWithoutServer({"project", "list", "--server=" + address});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err, absl::StrCat("verity: UNAVAILABLE: connection to server failed: No such "
                                     "file or directory Is the server running locally and "
                                     "accepting connections? (server ",
                                     address, ")\n"));
  server->Shutdown();
}

TEST_F(CliTest, UnreachableServerNamesTheAddress) {
  const CliResult result =
      RunWithoutServer({"project", "list", "--server=localhost:1"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.err, StartsWith("verity: UNAVAILABLE: "));
  EXPECT_THAT(result.err, HasSubstr("(server localhost:1)\n"));
}

TEST_F(CliTest, AKeyIsNotSentInPlaintextOffLoopback) {
  // 192.0.2.1 (TEST-NET-1) is not loopback: without TLS the key must not leave, and the
  // refusal says how to set up TLS. Nothing is connected, so it fails at once.
  CliEnvironment environment;
  environment.api_key = "vk_0123456789abcdef_secret";
  CliResult result = RunWithoutServer(
      {"project", "list", "--server=192.0.2.1:50051", "--timeout=2s"}, environment);
  EXPECT_EQ(result.code, kExitUsage) << result.err;
  EXPECT_THAT(result.err, HasSubstr("refusing to send the API key in plaintext to 192.0.2.1"));
  EXPECT_THAT(result.err, HasSubstr("--tls_ca"));
  result = RunWithoutServer({"project", "list", "--server=127.evil.example:50051",
                             "--api_key=vk_0123456789abcdef_secret", "--timeout=2s"});
  EXPECT_EQ(result.code, kExitUsage) << result.err;
  // With no key, or with the opt-in, the call is attempted (and fails: nothing listens).
  result = RunWithoutServer({"project", "list", "--server=192.0.2.1:50051", "--timeout=200ms"});
  EXPECT_EQ(result.code, kExitFailure) << result.err;
  result = RunWithoutServer({"project", "list", "--server=192.0.2.1:50051", "--timeout=200ms",
                             "--allow_plaintext_key"},
                            environment);
  EXPECT_EQ(result.code, kExitFailure) << result.err;
  // Loopback is fine: the fake server answers.
  result = Run({"project", "list"}, environment);
  EXPECT_EQ(result.code, kExitOk) << result.err;
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
            "labels: 0\n"
            "revisions: 0\n");
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
  EXPECT_EQ(result.out, "accepted=1 duplicate=1 revised=1 stale=0 rejected=0\n");
  EXPECT_EQ(server_->LiveLabel("birds", "a", "w1"), 0);
  const CliResult shown = Run({"project", "show", "birds"});
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("\nrevisions: 1\n"));
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

// submit lists the first 5 rejections with their CSV line, item and annotator (the first row
// included), then how many more there were; a retried stream is noted on stderr.
TEST_F(CliTest, SubmitListsFiveRejectionsByLineAndCountsTheRest) {
  CreateBirdsWithLabels();
  std::string csv = "item,annotator,label\n";
  for (int r = 0; r < 6; ++r) absl::StrAppend(&csv, std::string(257, 'a' + r), ",w9,true\n");
  absl::StrAppend(&csv, "ok,w9,false\n");
  const std::string labels = WriteFile("long_ids.csv", csv);
  server_->FailNextBatches(1, absl::StatusCode::kUnavailable, "db down");
  const CliResult result =
      Run({"submit", "--project=birds", absl::StrCat("--csv=", labels)});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  std::string expected = "accepted=1 duplicate=0 revised=0 stale=0 rejected=6\n";
  for (int r = 0; r < 5; ++r) {
    absl::StrAppend(&expected, "  rejected ", labels, " line ", r + 2, " (item \"",
                    std::string(257, 'a' + r),
                    "\", annotator \"w9\"): item: is 257 bytes, more than the limit of 256\n");
  }
  absl::StrAppend(&expected, "  (1 more rejections not shown)\n");
  EXPECT_EQ(result.out, expected);
  EXPECT_THAT(result.err, HasSubstr("reopened the stream 1 time(s) after retryable errors"));
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

// accuracy skips a gold item of the project that has no labels, and says so; a row of the gold
// CSV without a label is an error naming its line.
TEST_F(CliTest, AccuracySkipsUnlabelledItemsAndRefusesRowsWithoutGold) {
  CreateBirdsWithLabels();
  const std::string items = WriteFile("unlabelled.csv", "item\nquiet\n");
  ASSERT_EQ(Run({"item", "add", "--project=birds", absl::StrCat("--csv=", items)}).code,
            kExitOk);
  const std::string gold = WriteFile("gold_quiet.csv", "item,label\na,true\nquiet,false\n");
  CliResult result = Run({"accuracy", "--project=birds", absl::StrCat("--gold_csv=", gold)});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "accuracy=1.0000 (1 gold items)\n"
            "skipped gold items: 1 without labels\n");
  const std::string partial = WriteFile("gold_partial.csv", "item,label\na,true\nb,\n");
  result = Run({"accuracy", "--project=birds", absl::StrCat("--gold_csv=", partial)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.err,
              HasSubstr(absl::StrCat(partial, ": line 3: item \"b\" has no gold label")));
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
  // Only clamped items: nothing to score, and the error says why (it said they had no labels,
  // although q had one).
  result = Run({"accuracy", "--project=feat", absl::StrCat("--gold_csv=", gold)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.err, HasSubstr("can be scored in project \"feat\": 2 clamped to gold by "
                                    "item add"));
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

TEST_F(CliTest, EveryCommandHasCompleteHelp) {
  const std::string program_help = RunWithoutServer({"--help"}).out;
  for (const CommandSpec& command : CliCommands()) {
    SCOPED_TRACE(command.name);
    EXPECT_FALSE(command.summary.empty());
    EXPECT_FALSE(command.details.empty());
    for (const FlagSpec& flag : command.flags) {
      EXPECT_FALSE(flag.help.empty()) << flag.name;
    }
    EXPECT_THAT(program_help, HasSubstr(command.summary));
    std::vector<std::string> args = absl::StrSplit(command.name, ' ');
    args.push_back("--help");
    const CliResult help = RunWithoutServer(args);
    EXPECT_EQ(help.code, kExitOk);
    EXPECT_THAT(help.out,
                StartsWith(absl::StrCat("Usage: verity ", command.name)));
    EXPECT_THAT(help.out, HasSubstr("--output=text|json"));
    for (const FlagSpec& flag : command.flags) {
      EXPECT_THAT(help.out, HasSubstr(absl::StrCat("--", flag.name)));
    }
  }
  for (const char* group :
       {"model", "suggest", "annotator", "project", "key"}) {
    EXPECT_EQ(RunWithoutServer({"help", group}).code, kExitOk) << group;
  }
  const CliResult result = RunWithoutServer({"model"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err,
              StartsWith("verity: \"model\" needs a subcommand: status, "
                         "versions, train\n"));
}

// The usage lines of `--help` ("project create NAME ...", "project show NAME", "project
// settings NAME ...") take exactly one NAME; the flags marked "Required." are needed; the
// "Default:" values are the ones used when a flag is left out.
TEST_F(CliTest, ArgumentCountsRequiredFlagsAndDefaultsAreThoseOfTheHelp) {
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"project", "create", "--classes=a,b"},
        std::vector<std::string>{"project", "show"},
        std::vector<std::string>{"project", "settings", "--method=ds"}}) {
    const std::string name = absl::StrCat(command[0], " ", command[1]);
    SCOPED_TRACE(name);
    CliResult result = Run(command);
    EXPECT_EQ(result.code, kExitUsage);
    EXPECT_THAT(result.err,
                StartsWith(absl::StrCat("verity: \"", name,
                                        "\" takes 1 argument (NAME), got none\n")));
    std::vector<std::string> two = command;
    two.insert(two.begin() + 2, {"p1", "p2"});
    result = Run(two);
    EXPECT_EQ(result.code, kExitUsage);
    EXPECT_THAT(result.err, StartsWith(absl::StrCat("verity: \"", name,
                                                    "\" takes 1 argument (NAME), got \"p1 "
                                                    "p2\"\n")));
  }
  for (const auto& [command, flag] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"annotator", "add", "--project=birds"}, "--csv=FILE"},
           {{"accuracy", "--project=birds"}, "--gold_csv=FILE"},
           {{"suggest", "annotators", "--project=birds"}, "--item=ID"},
           {{"posteriors"}, "--project=NAME"}}) {
    SCOPED_TRACE(flag);
    const CliResult result = Run(command);
    EXPECT_EQ(result.code, kExitUsage);
    EXPECT_THAT(result.err, HasSubstr(absl::StrCat("\" needs ", flag, "\n")));
  }

  // --batch_size defaults to 1000 labels per batch: 2,001 labels go in 3 batches.
  ASSERT_EQ(Run({"project", "create", "many", "--classes=a,b"}).code, kExitOk);
  std::string labels = "item,annotator,label\n";
  for (int i = 0; i < 2001; ++i) absl::StrAppend(&labels, "i", i, ",w", i % 15, ",a\n");
  const CliResult submit =
      Run({"submit", "--project=many", absl::StrCat("--csv=", WriteFile("many.csv", labels))});
  ASSERT_EQ(submit.code, kExitOk) << submit.err;
  EXPECT_EQ(server_->received_batch_ids().size(), 3u);
  // --k defaults to 10 items and 10 annotators.
  CliResult result = Run({"suggest", "items", "--project=many", "--annotator=new",
                          "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 12) << result.out;
  result = Run({"suggest", "annotators", "--project=many", "--item=i0", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 12) << result.out;
  // model versions: --limit defaults to 20.
  for (int fit = 0; fit < 21; ++fit) server_->Fit("many");
  result = Run({"model", "versions", "--project=many", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 22) << result.out;
}

TEST_F(CliTest, OutputMustBeTextOrJson) {
  const CliResult result = Run({"project", "list", "--output=yaml"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_EQ(result.err,
            "verity: --output=yaml: expected text or json\nRun 'verity "
            "project list --help' for usage.\n");
}

TEST_F(CliTest, ProjectCommandsPrintJson) {
  CliResult result = Run({"project", "list", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "[]\n");
  result = Run({"project", "create", "birds", "--classes=false,true",
                "--method=mv", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  const std::string birds =
      "{\"name\":\"birds\",\"classes\":[\"false\",\"true\"],"
      "\"item_feature_dim\":0,\"annotator_feature_dim\":0,\"method\":\"mv\","
      "\"settings\":{\"model\":{\"method\":\"mv\",\"confusion_smoothing\":0,"
      "\"prior_smoothing\":0,\"max_iterations\":0,\"tolerance\":0,"
      "\"refit_min_new_labels\":0,\"refit_new_label_fraction\":0,"
      "\"calibration\":\"\"},"
      "\"assignment\":{\"min_labels_per_item\":0,\"max_labels_per_item\":0,"
      "\"confidence_target\":0,\"lease_seconds\":0,\"policy\":\"default\","
      "\"gold_items_for_new_annotators\":0},"
      "\"limits\":{\"max_items\":0,\"max_annotators\":0,\"max_labels\":0,"
      "\"max_confusion_cells\":0,\"max_feature_values\":0,\"max_revisions\":0}},"
      "\"created_at\":\"2023-11-14T22:13:20.000Z\",\"num_items\":0,"
      "\"num_annotators\":0,\"num_labels\":0,\"num_revisions\":0}";
  EXPECT_EQ(result.out, birds + "\n");
  result = Run({"project", "show", "birds", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, birds + "\n");
  ASSERT_EQ(Run({"project", "create", "cats", "--classes=a,b"}).code, kExitOk);
  result = Run({"project", "list", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("[\n" + birds + ",\n{\"name\":\"cats\""));
  EXPECT_THAT(result.out, EndsWith("}\n]\n"));

  // Errors stay on stderr: stdout is empty, not half a document.
  result = Run({"project", "show", "nope", "--output=json"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "verity: NOT_FOUND: project \"nope\" does not exist\n");
}

TEST_F(CliTest, ProjectCreateAndSettingsSetModelAndAssignmentSettings) {
  CliResult result = Run({"project", "create", "birds", "--classes=false,true",
                          "--confidence_target=0.95", "--lease_seconds=60"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out,
              HasSubstr("settings: assignment { confidence_target: 0.95 "
                        "lease_seconds: 60 }\n"));

  // Only the flags given change; the rest is kept.
  result = Run({"project", "settings", "birds", "--method=mv",
                "--policy=uncertainty", "--max_iterations=50"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("method: mv\n"));
  EXPECT_THAT(result.out,
              HasSubstr("settings: model { max_iterations: 50 } assignment { "
                        "confidence_target: 0.95 lease_seconds: 60 policy: "
                        "ASSIGNMENT_POLICY_UNCERTAINTY }\n"));
  result = Run({"project", "settings", "birds", "--method=default",
                "--max_iterations=0", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out,
              HasSubstr("\"method\":\"auto\",\"settings\":{\"model\":{"
                        "\"method\":\"auto\",\"confusion_smoothing\":0,"
                        "\"prior_smoothing\":0,\"max_iterations\":0,"));
  EXPECT_THAT(result.out, HasSubstr("\"confidence_target\":0.95,"
                                    "\"lease_seconds\":60,"
                                    "\"policy\":\"uncertainty\""));

  // The limits (settings.limits) are flags too; 0 is the server's default.
  result = Run({"project", "settings", "birds", "--max_items=100", "--max_revisions=5000000000",
                "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("\"limits\":{\"max_items\":100,\"max_annotators\":0,"
                                    "\"max_labels\":0,\"max_confusion_cells\":0,"
                                    "\"max_feature_values\":0,\"max_revisions\":5000000000}"));
  result = Run({"project", "settings", "birds", "--max_labels=-1"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("verity: --max_labels=-1: "));
  // --calibration: auto or none, default clears it; anything else is a usage error.
  result = Run({"project", "settings", "birds", "--calibration=none"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("settings: model { calibration: \"none\" }"));
  result = Run({"project", "settings", "birds", "--calibration=default", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("\"calibration\":\"\""));
  result = Run({"project", "settings", "birds", "--calibration=platt"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err,
              StartsWith("verity: --calibration=platt: expected auto, none or default\n"));

  result = Run({"project", "settings", "birds"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("verity: \"project settings\" needs at "
                                     "least one setting flag"));
  result = Run({"project", "settings", "birds", "--policy=greedy"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err,
              StartsWith("verity: --policy=greedy: expected one of "
                         "information_gain, uncertainty, uniform, random, "
                         "default\n"));
  result = Run({"project", "settings", "birds", "--confidence_target=1.5"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("verity: --confidence_target=1.5: "
                                     "expected a number in [0, 1]\n"));
  result = Run({"project", "settings", "nope", "--method=ds"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err, "verity: NOT_FOUND: project \"nope\" does not exist\n");
}

TEST_F(CliTest, AnnotatorAddSendsFeaturesAndCountsUpdates) {
  ASSERT_EQ(Run({"project", "create", "feat", "--classes=no,yes",
                 "--annotator_feature_dim=2"})
                .code,
            kExitOk);
  const std::string annotators =
      WriteFile("annotators.csv", "annotator,f1,f0\nw1,1,2\nw2,3,4\n");
  CliResult result = Run({"annotator", "add", "--project=feat",
                          absl::StrCat("--csv=", annotators)});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "added=2 updated=0\n");
  result = Run({"annotator", "add", "--project=feat",
                absl::StrCat("--csv=", annotators), "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "{\"added\":0,\"updated\":2}\n");
  result = Run({"project", "show", "feat"});
  EXPECT_THAT(result.out, HasSubstr("annotators: 2\n"));

  const std::string wrong =
      WriteFile("annotators3.csv", "id,f0,f1,f2\nw,1,2,3\n");
  result = Run(
      {"annotator", "add", "--project=feat", absl::StrCat("--csv=", wrong)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err,
            absl::StrCat("verity: INVALID_ARGUMENT: ", wrong,
                         ": 3 feature columns, but project \"feat\" has "
                         "annotator_feature_dim 2\n"));
}

TEST_F(CliTest, AnnotatorListAndShowMatchTheShortFormAndPrintJson) {
  CreateBirdsWithLabels();
  const CliResult list = Run({"annotator", "list", "--project=birds"});
  ASSERT_EQ(list.code, kExitOk) << list.err;
  EXPECT_EQ(list.out, Run({"annotator", "--project=birds"}).out);
  EXPECT_THAT(list.out, StartsWith("ANNOTATOR  LABELS  ACCURACY\n"));
  const CliResult show = Run({"annotator", "show", "w3", "--project=birds"});
  ASSERT_EQ(show.code, kExitOk) << show.err;
  EXPECT_EQ(show.out, Run({"annotator", "w3", "--project=birds"}).out);
  EXPECT_THAT(show.out, HasSubstr("  true   1.0000  0.0000\n"));

  CliResult result =
      Run({"annotator", "show", "w3", "--project=birds", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "[\n{\"annotator\":\"w3\",\"num_labels\":1,\"accuracy\":0,"
            "\"confusion\":{\"false\":{\"false\":1,\"true\":0},"
            "\"true\":{\"false\":1,\"true\":0}}}\n]\n");
  result = Run({"annotator", "list", "--project=birds", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 5)
      << result.out;
  EXPECT_THAT(result.out, StartsWith("[\n{\"annotator\":\"w1\","
                                     "\"num_labels\":3,\"accuracy\":1,"));

  result = Run({"annotator", "show", "--project=birds"});
  EXPECT_EQ(result.code, kExitUsage);
  result = Run({"annotator", "show", "nobody", "--project=birds"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err,
            "verity: NOT_FOUND: annotator \"nobody\" does not exist\n");
}

TEST_F(CliTest, SubmitAndAccuracyPrintJson) {
  CreateBirdsWithLabels();
  const std::string labels =
      WriteFile("labels4.csv", "item,annotator,label\na,w1,false\nd,w4,1\n");
  CliResult result = Run({"submit", "--project=birds",
                          absl::StrCat("--csv=", labels), "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "{\"accepted\":1,\"duplicate\":0,\"revised\":1,\"stale\":0,\"rejected\":0,"
            "\"rejections\":[],\"retries\":0}\n");
  const std::string gold =
      WriteFile("gold4.csv", "item,label\nb,false\nz,false\n");
  result = Run({"accuracy", "--project=birds",
                absl::StrCat("--gold_csv=", gold), "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "{\"accuracy\":1,\"gold_items\":1,\"skipped\":{\"without_labels\":"
            "0,\"clamped_to_gold\":0,\"not_in_project\":1}}\n");
}

TEST_F(CliTest, PosteriorsPrintAJsonArray) {
  CreateBirdsWithLabels();
  CliResult result =
      Run({"posteriors", "--project=birds", "--items=a", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "[\n{\"item\":\"a\",\"label\":\"true\",\"label_index\":1,"
            "\"confidence\":0.6666666666666666,\"probabilities\":{\"false\":"
            "0.3333333333333333,\"true\":0.6666666666666666},\"num_labels\":3,"
            "\"model_version\":0,\"includes_newer_labels\":false,"
            "\"is_gold\":false}\n]\n");
  result =
      Run({"posteriors", "--project=birds", "--page_size=2", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 5);
  EXPECT_THAT(result.out, HasSubstr("},\n{\"item\":\"c\","));

  const std::string out = absl::StrCat(::testing::TempDir(), "/post.json");
  result = Run({"posteriors", "--project=birds", absl::StrCat("--out=", out),
                "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            absl::StrCat("{\"out\":\"", out, "\",\"posteriors\":3}\n"));
  EXPECT_THAT(ReadFile(out), StartsWith("[\n{\"item\":\"a\""));
}

// --out=FILE: a command that fails after opening its output leaves an existing FILE as it was
// and no FILE.partial behind.
TEST_F(CliTest, AFailedCommandLeavesItsOutFileAsItWas) {
  CreateBirdsWithLabels();
  const std::string out = WriteFile("kept.csv", "earlier output\n");
  const CliResult result = Run({"posteriors", "--project=birds", "--items=a,missing",
                                absl::StrCat("--out=", out)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.err, HasSubstr("NOT_FOUND"));
  EXPECT_EQ(ReadFile(out), "earlier output\n");
  EXPECT_FALSE(std::ifstream(absl::StrCat(out, ".partial")).good());
}

TEST_F(CliTest, ExportWritesCsvAndJsonLinesOfEveryItem) {
  CreateBirdsWithLabels();
  CliResult result =
      Run({"export", "--project=birds", "--format=csv", "--page_size=2"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "item,label,label_index,confidence,p_false,p_true,num_labels,"
            "model_version,includes_newer_labels,is_gold\n"
            "a,true,1,0.6666666666666666,0.3333333333333333,"
            "0.6666666666666666,3,0,false,false\n"
            "b,false,0,1,1,0,2,0,false,false\n"
            "c,true,1,1,0,1,1,0,false,false\n");
  // csv is the default.
  EXPECT_EQ(Run({"export", "--project=birds"}).out, result.out);

  const std::string out = absl::StrCat(::testing::TempDir(), "/birds.jsonl");
  result = Run({"export", "--project=birds", "--format=jsonl", "--page_size=1",
                absl::StrCat("--out=", out)});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, absl::StrCat("wrote 3 posteriors to ", out, "\n"));
  const std::string jsonl = ReadFile(out);
  std::vector<std::string> lines =
      absl::StrSplit(jsonl, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << jsonl;
  EXPECT_EQ(lines[1],
            "{\"item\":\"b\",\"label\":\"false\",\"label_index\":0,"
            "\"confidence\":1,\"probabilities\":{\"false\":1,\"true\":0},"
            "\"num_labels\":2,\"model_version\":0,"
            "\"includes_newer_labels\":false,\"is_gold\":false}");
  EXPECT_THAT(lines[2], StartsWith("{\"item\":\"c\","));

  // A failed export leaves the existing file alone.
  result = Run({"export", "--project=nope", "--format=jsonl",
                absl::StrCat("--out=", out)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(ReadFile(out), jsonl);
  result = Run({"export", "--project=birds", "--format=xml"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err,
              StartsWith("verity: --format=xml: expected csv or jsonl\n"));
}

TEST_F(CliTest, ExportShowsProgressOnlyWhenItsOutputIsNotATerminal) {
  CreateBirdsWithLabels();
  CliEnvironment terminal;
  terminal.show_progress = true;
  terminal.stdout_is_terminal = false;  // Piped to a file: draw the meter.
  CliResult result =
      Run({"export", "--project=birds", "--format=jsonl"}, terminal);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.err, StartsWith("\r3/3 items (100%)"));
  EXPECT_THAT(result.err, HasSubstr("items/s  ETA"));
  EXPECT_THAT(result.err, EndsWith("\r\x1b[K"));
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 3);

  // Rows printed on the terminal itself: no meter in between.
  terminal.stdout_is_terminal = true;
  result = Run({"export", "--project=birds", "--format=jsonl"}, terminal);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.err, "");
  // ... unless the rows go to --out.
  const std::string out = absl::StrCat(::testing::TempDir(), "/p.csv");
  result = Run({"posteriors", "--project=birds", absl::StrCat("--out=", out)},
               terminal);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.err, StartsWith("\r3/3 items (100%)"));
  // stderr not a terminal (the default environment): nothing.
  EXPECT_EQ(Run({"export", "--project=birds"}).err, "");
}

TEST_F(CliTest, SuggestItemsListsOpenItemsBestFirst) {
  CreateBirdsWithLabels();
  CliResult result =
      Run({"suggest", "items", "--project=birds", "--annotator=w9", "--k=2"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "ITEM  SCORE     P_CORRECT  LEASE_EXPIRES_AT\n"
            "a     0.333333  0.7500     2023-11-14T22:25:00.000Z\n"
            "b     0         0.7500     2023-11-14T22:25:00.000Z\n");
  result = Run({"suggest", "items", "--project=birds", "--annotator=w9",
                "--candidates=c,zz", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "[\n{\"item\":\"c\",\"score\":0,\"p_correct\":0.75,"
            "\"lease_expires_at\":\"2023-11-14T22:25:00.000Z\"}\n]\n");
  // w1 labelled every item.
  result = Run({"suggest", "items", "--project=birds", "--annotator=w1"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "no open items for annotator \"w1\"\n");
  result = Run({"suggest", "items", "--project=birds", "--annotator=w1",
                "--output=json"});
  EXPECT_EQ(result.out, "[]\n");

  result =
      Run({"suggest", "items", "--project=birds", "--annotator=w1", "--k=0"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err,
              StartsWith("verity: --k=0: expected an integer in [1, 1000]\n"));
  result = Run({"suggest", "items", "--project=birds"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err,
              StartsWith("verity: \"suggest items\" needs --annotator=ID\n"));
}

TEST_F(CliTest, SuggestAnnotatorsRanksThoseWhoHaveNotLabelledTheItem) {
  CreateBirdsWithLabels();
  CliResult result =
      Run({"suggest", "annotators", "--project=birds", "--item=c"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "ANNOTATOR  SCORE  P_CORRECT\n"
            "w2         1      1.0000\n"
            "w3         0      0.0000\n");
  result = Run({"suggest", "annotators", "--project=birds", "--item=c",
                "--candidates=w3", "--k=1", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "[\n{\"annotator\":\"w3\",\"score\":0,\"p_correct\":0}\n]\n");
  result = Run({"suggest", "annotators", "--project=birds", "--item=zz"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err, "verity: NOT_FOUND: item \"zz\" does not exist\n");
}

TEST_F(CliTest, ModelTrainFitsAndVersionsAndStatusPrintJson) {
  ASSERT_EQ(Run({"project", "create", "empty", "--classes=a,b"}).code, kExitOk);
  CliResult result = Run({"model", "train", "--project=empty"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err,
            "verity: FAILED_PRECONDITION: project \"empty\" has no labels to "
            "fit\n");
  result = Run({"model", "versions", "--project=empty", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "[]\n");

  CreateBirdsWithLabels();
  result = Run({"model", "train", "--project=birds"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "version: 1\n"
            "method: ds\n"
            "watermark: 6\n"
            "num_labels: 6\n"
            "log_likelihood: -12.5\n"
            "iterations: 7\n"
            "duration_ms: 1.25\n"
            "created_at: 2023-11-14T22:15:00.000Z\n");
  const std::string version2 =
      "{\"version\":2,\"method\":\"ds\",\"watermark\":6,\"num_labels\":6,"
      "\"log_likelihood\":-12.5,\"iterations\":7,\"duration_ms\":1.25,"
      "\"created_at\":\"2023-11-14T22:15:00.000Z\"}";
  result = Run({"model", "train", "--project=birds", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, version2 + "\n");

  result = Run({"model", "versions", "--project=birds", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("[\n" + version2 + ",\n{\"version\":1,"));
  EXPECT_EQ(Run({"versions", "--project=birds", "--output=json"}).out,
            result.out);
  result = Run({"model", "versions", "--project=birds", "--limit=1"});
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 2);

  result = Run({"model", "status", "--project=birds", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "{\"project\":\"birds\",\"method\":\"ds\",\"num_labels\":6,"
            "\"labels_since_version\":0,\"training\":false,"
            "\"current_version\":" +
                version2 + "}\n");
  EXPECT_EQ(Run({"status", "--project=birds", "--output=json"}).out,
            result.out);
  EXPECT_EQ(Run({"model", "status", "--project=birds"}).out,
            Run({"status", "--project=birds"}).out);
}

TEST_F(CliTest, ModelTrainShowsElapsedTimeOnATerminal) {
  CreateBirdsWithLabels();
  CliEnvironment terminal;
  terminal.show_progress = true;
  const CliResult result =
      Run({"model", "train", "--project=birds", "--timeout=2m"}, terminal);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.err, StartsWith("\rtraining birds: 0s\x1b[K"));
  EXPECT_THAT(result.err, EndsWith("\r\x1b[K"));
  EXPECT_THAT(result.out, StartsWith("version: 1\n"));
}

TEST_F(CliTest, KeyCreateListAndRevoke) {
  const std::string secret =
      absl::StrCat("vk_0000000000000001_", std::string(64, 'e'));
  CliResult result = Run({"key", "create", "--role=reader",
                          "--projects=birds,dogs", "--name=dashboard"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, absl::StrCat("secret_key: ", secret,
                                     "\n"
                                     "key_id: 0000000000000001\n"
                                     "name: dashboard\n"
                                     "role: reader\n"
                                     "projects: birds,dogs\n"
                                     "created_at: 2023-11-14T22:16:40.000Z\n"
                                     "revoked_at: -\n"));
  EXPECT_EQ(result.err,
            "verity: note: store secret_key now; the server never shows it "
            "again\n");
  result = Run({"key", "create", "--role", "admin"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("\nprojects: *\n"));

  result = Run({"key", "list"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "KEY_ID            NAME       ROLE    PROJECTS    CREATED_AT       "
            "         REVOKED_AT\n"
            "0000000000000001  dashboard  reader  birds,dogs  "
            "2023-11-14T22:16:40.000Z  -\n"
            "0000000000000002  -          admin   *           "
            "2023-11-14T22:16:40.000Z  -\n");

  result = Run({"key", "revoke", "0000000000000001"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("key_id: 0000000000000001\n"));
  EXPECT_THAT(result.out, EndsWith("\nrevoked_at: 2023-11-14T22:18:20.000Z\n"));
  result = Run({"key", "list"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, Not(HasSubstr("0000000000000001")));
  result = Run({"key", "list", "--all"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("  2023-11-14T22:18:20.000Z\n"));

  result = Run({"key", "revoke", "00000000000000ff"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_EQ(result.err,
            "verity: NOT_FOUND: API key \"00000000000000ff\" does not exist\n");
}

TEST_F(CliTest, KeyCommandsPrintJson) {
  CliResult result = Run({"key", "list", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "[]\n");
  result = Run(
      {"key", "create", "--role=writer", "--projects=birds", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  const std::string key_json =
      "\"key_id\":\"0000000000000001\",\"name\":\"\",\"role\":\"writer\","
      "\"projects\":[\"birds\"],\"created_at\":\"2023-11-14T22:16:40.000Z\",";
  EXPECT_EQ(result.out,
            absl::StrCat("{\"secret_key\":\"vk_0000000000000001_",
                         std::string(64, 'e'), "\",", key_json,
                         "\"revoked_at\":null,\"created_by\":\"\"}\n"));
  EXPECT_EQ(result.err, "");
  result = Run({"key", "list", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            absl::StrCat("[\n{", key_json,
                         "\"revoked_at\":null,\"created_by\":\"\"}\n]\n"));
  result = Run({"key", "revoke", "0000000000000001", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            absl::StrCat("{", key_json,
                         "\"revoked_at\":\"2023-11-14T22:18:20.000Z\","
                         "\"created_by\":\"\"}\n"));
}

TEST_F(CliTest, KeyUsageErrorsExitWithTwo) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"key", "create"}, "verity: \"key create\" needs --role"},
      {{"key", "create", "--role=owner"},
       "verity: --role=owner: expected one of reader, writer, admin\n"},
      {{"key", "create", "--role=reader", "--projects="},
       "verity: --projects: expected project names separated by commas"},
      {{"key", "create", "--role=reader", "--projects=a,,b"},
       "verity: --projects: expected project names separated by commas"},
      {{"key", "create", "--role=reader",
        absl::StrCat("--name=", std::string(257, 'n'))},
       "verity: --name: at most 256 bytes\n"},
      {{"key", "revoke"}, "verity: "},
      {{"key", "revoke", "a", "b"}, "verity: "},
      {{"key", "revoke",
        absl::StrCat("vk_0000000000000001_", std::string(64, 'e'))},
       "verity: KEY_ID is the key's id (16 hex digits, see `key list`), not "
       "the key itself\n"},
      {{"key", "list", "--all=maybe"}, "verity: "},
      {{"key"}, "verity: \"key\" needs a subcommand: create, list, revoke\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrJoin(c.args, " "));
    const CliResult result = Run(c.args);
    EXPECT_EQ(result.code, kExitUsage);
    EXPECT_THAT(result.err, StartsWith(c.error));
    EXPECT_EQ(result.out, "");
  }
  // Nothing reached the server.
  EXPECT_THAT(server_->key_call_authorizations(), IsEmpty());
}

TEST_F(CliTest, ApiKeyComesFromTheFlagElseTheEnvironment) {
  CliEnvironment environment;
  ASSERT_EQ(Run({"key", "list"}, environment).code, kExitOk);
  environment.api_key = "vk_from_environment";
  ASSERT_EQ(Run({"key", "list"}, environment).code, kExitOk);
  ASSERT_EQ(Run({"key", "list", "--api_key=vk_from_flag"}, environment).code,
            kExitOk);
  ASSERT_EQ(
      Run({"--api_key", "vk_before_command", "key", "list"}, environment).code,
      kExitOk);
  // An explicitly empty flag sends no key at all.
  ASSERT_EQ(Run({"key", "list", "--api_key="}, environment).code, kExitOk);
  // A key read with its newline ($(cat admin.key) keeps none, a file read
  // elsewhere may).
  environment.api_key = "vk_with_newline\n";
  ASSERT_EQ(Run({"key", "list"}, environment).code, kExitOk);
  EXPECT_THAT(
      server_->key_call_authorizations(),
      ElementsAre("", "Bearer vk_from_environment", "Bearer vk_from_flag",
                  "Bearer vk_before_command", "", "Bearer vk_with_newline"));
}

// A ProjectService and ModelService that record the deadline of each ListProjects and
// TrainModel call, as the server sees it.
class DeadlineRecordingServices {
 public:
  DeadlineRecordingServices() : projects_(*this), models_(*this) {}

  void Register(grpc::ServerBuilder& builder) {
    builder.RegisterService(&projects_);
    builder.RegisterService(&models_);
  }
  std::vector<absl::Time> deadlines() const {
    absl::MutexLock lock(&mutex_);
    return deadlines_;
  }

 private:
  void Record(const grpc::ServerContext& context) {
    absl::MutexLock lock(&mutex_);
    deadlines_.push_back(absl::FromChrono(context.deadline()));
  }

  class Projects final : public v1::ProjectService::Service {
   public:
    explicit Projects(DeadlineRecordingServices& owner) : owner_(owner) {}
    grpc::Status ListProjects(grpc::ServerContext* context, const v1::ListProjectsRequest*,
                              v1::ListProjectsResponse*) override {
      owner_.Record(*context);
      return grpc::Status::OK;
    }

   private:
    DeadlineRecordingServices& owner_;
  };
  class Models final : public v1::ModelService::Service {
   public:
    explicit Models(DeadlineRecordingServices& owner) : owner_(owner) {}
    grpc::Status TrainModel(grpc::ServerContext* context, const v1::TrainModelRequest*,
                            v1::TrainModelResponse* response) override {
      owner_.Record(*context);
      response->mutable_version()->set_version(1);
      return grpc::Status::OK;
    }

   private:
    DeadlineRecordingServices& owner_;
  };

  mutable absl::Mutex mutex_;
  std::vector<absl::Time> deadlines_ ABSL_GUARDED_BY(mutex_);
  Projects projects_;
  Models models_;
};

// A gRPC server on a free loopback port serving `services` (a fake with Register(builder)),
// and the --server flag that reaches it; server is null if it did not start.
struct FakeServer {
  std::unique_ptr<grpc::Server> server;
  std::string flag;
};
template <typename Services>
FakeServer StartFakeServer(Services& services) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  services.Register(builder);
  FakeServer fake;
  fake.server = builder.BuildAndStart();
  fake.flag = absl::StrCat("--server=127.0.0.1:", port);
  return fake;
}

// --help: --timeout is the "Deadline of each call: 30s, 2m, 500ms; a plain number is seconds
// (`model train` waits 30m unless given)". The server sees each call's deadline, rounded up by
// the grpc-timeout header (by up to 1 %).
TEST_F(CliTest, TimeoutIsTheDeadlineOfEachCallAndModelTrainWaitsThirtyMinutesUnlessGiven) {
  DeadlineRecordingServices services;
  FakeServer fake = StartFakeServer(services);
  ASSERT_NE(fake.server, nullptr);
  const std::string& flag = fake.flag;
  const std::vector<std::vector<std::string>> commands = {
      {"project", "list", flag},
      {"project", "list", "--timeout=2m", flag},
      {"project", "list", "--timeout=90", flag},
      {"model", "train", "--project=birds", flag},
      {"model", "train", "--project=birds", "--timeout=45s", flag}};
  const std::vector<absl::Duration> expected = {
      absl::Seconds(30), absl::Minutes(2), absl::Seconds(90), absl::Minutes(30), absl::Seconds(45)};
  for (size_t i = 0; i < commands.size(); ++i) {
    SCOPED_TRACE(absl::StrJoin(commands[i], " "));
    const absl::Time before = absl::Now();
    const CliResult result = RunWithoutServer(commands[i]);
    const absl::Time after = absl::Now();
    ASSERT_EQ(result.code, kExitOk) << result.err;
    const std::vector<absl::Time> deadlines = services.deadlines();
    ASSERT_EQ(deadlines.size(), i + 1);
    EXPECT_GE(deadlines[i], before + expected[i] - absl::Seconds(1));
    EXPECT_LE(deadlines[i], after + expected[i] + expected[i] / 100 + absl::Seconds(1));
  }
  fake.server->Shutdown();
}

// cli.h: progress goes to err when show_progress is set; progress.h: the meter's line is
// erased at the end so later output starts clean.
TEST_F(CliTest, SubmitDrawsAMeterAndErasesIt) {
  const std::string classes = WriteFile("classes.txt", "false\ntrue\n");
  ASSERT_EQ(Run({"project", "create", "birds", absl::StrCat("--classes_file=", classes)}).code,
            kExitOk);
  const std::string labels =
      WriteFile("labels.csv", "item,annotator,label\na,w1,true\nb,w1,false\nc,w2,true\n");
  CliEnvironment terminal;
  terminal.show_progress = true;
  const CliResult result =
      Run({"submit", "--project=birds", absl::StrCat("--csv=", labels)}, terminal);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.err, StartsWith("\r3/3 labels (100%)"));
  EXPECT_THAT(result.err, EndsWith("\r\x1b[K"));
  EXPECT_EQ(result.out, "accepted=3 duplicate=0 revised=0 stale=0 rejected=0\n");
}

// A server whose ListPosteriors answers every page with the same next_page_token: following it
// would print the same page again and again.
class RepeatingTokenProjectService final : public v1::ProjectService::Service {
 public:
  grpc::Status GetProject(grpc::ServerContext*, const v1::GetProjectRequest* request,
                          v1::GetProjectResponse* response) override {
    response->mutable_project()->set_name(request->project());
    response->mutable_project()->add_classes("no");
    response->mutable_project()->add_classes("yes");
    response->mutable_project()->set_num_items(2);
    return grpc::Status::OK;
  }
};
class RepeatingTokenTruthService final : public v1::TruthService::Service {
 public:
  grpc::Status ListPosteriors(grpc::ServerContext*, const v1::ListPosteriorsRequest*,
                              v1::ListPosteriorsResponse* response) override {
    v1::Posterior* posterior = response->add_posteriors();
    posterior->set_item("x");
    posterior->add_probabilities(0.25);
    posterior->add_probabilities(0.75);
    posterior->set_map_label(1);
    posterior->set_confidence(0.75);
    response->set_next_page_token("again");
    return grpc::Status::OK;
  }
};

// Paging through posteriors ends in a failure, not an endless repetition, when the server
// hands back the token it was given; --out is then left unwritten.
TEST_F(CliTest, PosteriorsFailWhenTheServerRepeatsAPageToken) {
  RepeatingTokenProjectService projects;
  RepeatingTokenTruthService truth;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&projects);
  builder.RegisterService(&truth);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string out = absl::StrCat(::testing::TempDir(), "/repeated.csv");
  const CliResult result =
      RunWithoutServer({"posteriors", "--project=loop", absl::StrCat("--out=", out),
                        absl::StrCat("--server=127.0.0.1:", port)});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.err, HasSubstr("page token \"again\""));
  EXPECT_FALSE(std::ifstream(out).good());
  server->Shutdown();
}

// A ProjectService that knows one project, "birds" (classes a, b, no items), and a
// TruthService whose ListPosteriors records the page_size of each call and answers one empty
// page.
class PageSizeRecordingServices {
 public:
  PageSizeRecordingServices() : projects_(*this), truth_(*this) {}

  void Register(grpc::ServerBuilder& builder) {
    builder.RegisterService(&projects_);
    builder.RegisterService(&truth_);
  }
  std::vector<int32_t> page_sizes() const {
    absl::MutexLock lock(&mutex_);
    return page_sizes_;
  }

 private:
  void Record(int32_t page_size) {
    absl::MutexLock lock(&mutex_);
    page_sizes_.push_back(page_size);
  }

  class Projects final : public v1::ProjectService::Service {
   public:
    explicit Projects(PageSizeRecordingServices&) {}
    grpc::Status GetProject(grpc::ServerContext*, const v1::GetProjectRequest* request,
                            v1::GetProjectResponse* response) override {
      if (request->project() != "birds") {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such project");
      }
      response->mutable_project()->set_name("birds");
      response->mutable_project()->add_classes("a");
      response->mutable_project()->add_classes("b");
      return grpc::Status::OK;
    }
  };
  class Truth final : public v1::TruthService::Service {
   public:
    explicit Truth(PageSizeRecordingServices& owner) : owner_(owner) {}
    grpc::Status ListPosteriors(grpc::ServerContext*, const v1::ListPosteriorsRequest* request,
                                v1::ListPosteriorsResponse*) override {
      owner_.Record(request->page_size());
      return grpc::Status::OK;
    }

   private:
    PageSizeRecordingServices& owner_;
  };

  mutable absl::Mutex mutex_;
  std::vector<int32_t> page_sizes_ ABSL_GUARDED_BY(mutex_);
  Projects projects_;
  Truth truth_;
};

// --help of `posteriors` and `export`: --page_size=N is the number of "Posteriors per
// ListPosteriors call", "Default: 1000". Without the flag each call asks for 1000; with it, for
// the number given.
TEST_F(CliTest, PosteriorsAndExportAskForPagesOfTheDocumentedDefaultSize) {
  PageSizeRecordingServices services;
  FakeServer fake = StartFakeServer(services);
  ASSERT_NE(fake.server, nullptr);
  const std::string& flag = fake.flag;
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"posteriors", "--project=birds", flag},
        std::vector<std::string>{"export", "--project=birds", flag},
        std::vector<std::string>{"export", "--project=birds", "--page_size=7", flag},
        std::vector<std::string>{"posteriors", "--project=birds", "--page_size=3", flag}}) {
    const CliResult result = RunWithoutServer(command);
    ASSERT_EQ(result.code, kExitOk) << absl::StrJoin(command, " ") << ": " << result.err;
  }
  EXPECT_THAT(services.page_sizes(), ElementsAre(1000, 1000, 7, 3));
  fake.server->Shutdown();
}

// README and `verity --help`: --server defaults to localhost:50051. A command given no
// --server calls the server there. (Skipped when another process holds the port.)
TEST_F(CliTest, WithoutServerTheCommandCallsLocalhostPort50051) {
  PageSizeRecordingServices services;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("localhost:50051", grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  services.Register(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port != 50051) GTEST_SKIP() << "localhost:50051 is taken";
  const CliResult result = RunWithoutServer({"posteriors", "--project=birds", "--timeout=10s"});
  EXPECT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(services.page_sizes(), ElementsAre(1000));
  server->Shutdown();
}

// `annotator list --help`: "--confusion prints each profile with its confusion matrix
// instead", as the short form `annotator --confusion` does. `annotator show ID ...`: "For each
// ID" a profile. Hand-derived from CreateBirdsWithLabels: the MAP classes are a true, b false,
// c true, so w1 (a true, b false, c true) answers each class as itself.
TEST_F(CliTest, AnnotatorListPrintsConfusionOnRequestAndShowTakesSeveralIds) {
  CreateBirdsWithLabels();
  CliResult result = Run({"annotator", "list", "--project=birds", "--confusion"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("annotator: w1\nnum_labels: 3\naccuracy: 1.0000\n"
                                    "confusion (rows: true class, columns: answered class):\n"
                                    "         false   true\n"
                                    "  false  1.0000  0.0000\n"
                                    "  true   0.0000  1.0000\n"));
  EXPECT_EQ(result.out, Run({"annotator", "--project=birds", "--confusion"}).out);

  result = Run({"annotator", "show", "w3", "w1", "--project=birds"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  const size_t w3 = result.out.find("annotator: w3\n");
  const size_t w1 = result.out.find("annotator: w1\nnum_labels: 3\n");
  ASSERT_NE(w3, std::string::npos) << result.out;
  ASSERT_NE(w1, std::string::npos) << result.out;
  EXPECT_LT(w3, w1) << result.out;
  result = Run({"annotator", "show", "w3", "w1", "--project=birds", "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("[\n{\"annotator\":\"w3\",\"num_labels\":1,"));
  EXPECT_THAT(result.out, HasSubstr(",\n{\"annotator\":\"w1\",\"num_labels\":3,"));
}

// `project create --help` takes every flag of `project settings`, each setting the field of
// ProjectSettings it names (`project show --output=json`: "settings" with every setting).
TEST_F(CliTest, EverySettingsFlagSetsItsField) {
  const CliResult result = Run({"project",
                                "create",
                                "birds",
                                "--classes=a,b",
                                "--method=ds",
                                "--confusion_smoothing=0.5",
                                "--prior_smoothing=2",
                                "--max_iterations=30",
                                "--tolerance=0.001",
                                "--refit_min_new_labels=7",
                                "--refit_new_label_fraction=0.25",
                                "--calibration=none",
                                "--min_labels_per_item=2",
                                "--max_labels_per_item=5",
                                "--confidence_target=0.9",
                                "--lease_seconds=120",
                                "--policy=uniform",
                                "--gold_items_for_new_annotators=3",
                                "--max_items=10",
                                "--max_annotators=11",
                                "--max_labels=12",
                                "--max_confusion_cells=13",
                                "--max_feature_values=14",
                                "--max_revisions=15",
                                "--output=json"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out,
              HasSubstr("\"settings\":{\"model\":{\"method\":\"ds\",\"confusion_smoothing\":0.5,"
                        "\"prior_smoothing\":2,\"max_iterations\":30,\"tolerance\":0.001,"
                        "\"refit_min_new_labels\":7,\"refit_new_label_fraction\":0.25,"
                        "\"calibration\":\"none\"},"
                        "\"assignment\":{\"min_labels_per_item\":2,\"max_labels_per_item\":5,"
                        "\"confidence_target\":0.9,\"lease_seconds\":120,\"policy\":\"uniform\","
                        "\"gold_items_for_new_annotators\":3},"
                        "\"limits\":{\"max_items\":10,\"max_annotators\":11,\"max_labels\":12,"
                        "\"max_confusion_cells\":13,\"max_feature_values\":14,"
                        "\"max_revisions\":15}}"));
}

// `verity --help` ends with the exit codes: "0 success; 1 the command failed ...; 2 a usage
// error". The codes a command returns are those numbers.
TEST_F(CliTest, TheExitCodesAreThoseTheHelpDocuments) {
  const CliResult help = RunWithoutServer({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("Exit status: 0 success; 1 the command failed (one line "
                                  "\"verity: CODE: message\"\non stderr); 2 a usage error.\n"));
  EXPECT_EQ(Run({"project", "show", "nope"}).code, 1);
  EXPECT_EQ(Run({"project", "show"}).code, 2);
  EXPECT_EQ(Run({"project", "list"}).code, 0);
}

// cli_commands.h: the global flags are "--server, the TLS files, --timeout, --output,
// --api_key, --help" (and README's --allow_plaintext_key). `verity --help` lists each under
// "Global flags", one per line, and every command's help lists them too.
TEST_F(CliTest, HelpListsEveryGlobalFlag) {
  const std::vector<std::string> globals = {"--server=HOST:PORT[,HOST:PORT...]",
                                            "--tls_ca=FILE",
                                            "--tls_cert=FILE",
                                            "--tls_key=FILE",
                                            "--timeout=DURATION",
                                            "--output=text|json",
                                            "--api_key=KEY",
                                            "--allow_plaintext_key",
                                            "--help"};
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, std::vector<std::string>{"submit", "--help"}}) {
    SCOPED_TRACE(absl::StrJoin(args, " "));
    const CliResult help = RunWithoutServer(args);
    ASSERT_EQ(help.code, kExitOk);
    const size_t section = help.out.find("Global flags");
    ASSERT_NE(section, std::string::npos) << help.out;
    for (const std::string& flag : globals) {
      EXPECT_THAT(help.out.substr(section), HasSubstr(absl::StrCat("\n  ", flag))) << flag;
    }
  }
}

}  // namespace
}  // namespace verity::client
