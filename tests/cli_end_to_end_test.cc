// The README's five-minute tour, run in-process: the `verity` CLI against a real VerityServer
// over a real gRPC channel and a real (embedded) PostgreSQL, on ../shared/datasets/bluebirds.
// API keys: the `verity` binary itself, with VERITY_API_KEY in its environment, against a
// server with authentication on.
//
// Every subcommand of client/cli_commands.cc runs here against the real server:
//   project create, submit, posteriors, accuracy, status .. TourOnBluebirdsBeatsMajorityVote
//   model train, model versions, model status,
//   suggest items, suggest annotators ..................... TrainThenVersionsAsJsonAndSuggest...
//   export (jsonl, csv) ................................... ExportsASmallProjectAsJsonLinesAndCsv
//   key create, key list, key revoke ...................... CliAuthEndToEndTest
// and, not run against a real server before (only against client/cli_test.cc's fake):
//   project list, project show, project settings, item add (--csv, --gold_csv), annotator
//   add, annotator list, annotator show, annotator (short form), versions
//                                            ProjectSettingsItemsAndAnnotatorsOnASmallProject
// The tie rule of truth.proto (lowest class index) through posteriors and export:
//   ExactTiesTakeTheLowestClassIndexInPosteriorsAndExport.
// item add and annotator add of 10,000 rows of 512 features (calls split under the server's
// message limit), and errors of the `verity` binary one line on stderr (gRPC's own log lines
// dropped): the tests after ProjectSettingsItemsAndAnnotatorsOnASmallProject.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli.h"
#include "models/testing/dataset_path.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"

namespace verity::tests {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

class CliEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("verity-cli-e2e");
    storage::EmbeddedPostgres::Options pg_options;
    pg_options.data_dir = dir_ + "/pg";
    auto pg = storage::EmbeddedPostgres::Start(pg_options);
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
    server::VerityServer::Options options;
    options.listen = "127.0.0.1:0";
    options.postgres_url = pg_->connection_url();
    options.training.run_in_background = false;
    ConfigureServer(options);
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto datasets = models::testing::FindDatasetsDirectory();
    ASSERT_TRUE(datasets.ok()) << datasets.status();
    bluebirds_ = *datasets + "/bluebirds";
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    if (pg_ != nullptr) EXPECT_TRUE(pg_->Stop().ok());
    RemoveTree(dir_);
  }

  // Changes the options of the server SetUp starts.
  virtual void ConfigureServer(server::VerityServer::Options& options) {}

  CliResult Run(std::vector<std::string> args) {
    args.push_back(absl::StrCat("--server=127.0.0.1:", server_->port()));
    std::ostringstream out, err;
    int code = client::RunCli(args, out, err);
    return {code, out.str(), err.str()};
  }

  // Runs the `verity` binary itself (what a user runs: gRPC's own logging goes to the
  // process's stderr, which RunCli's streams do not see) with `args` as given, stdin from
  // /dev/null, VERITY_API_KEY set to `api_key` in its environment (absent when nullopt), and
  // waits for it.
  CliResult RunVerityBinary(const std::vector<std::string>& args,
                            const std::optional<std::string>& api_key = std::nullopt) {
    const std::string binary = RunfilePath("client/verity");
    std::vector<std::string> argv_text = {binary};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<std::string> env_text;
    for (char** variable = environ; *variable != nullptr; ++variable) {
      if (!absl::StartsWith(*variable, "VERITY_API_KEY=")) env_text.push_back(*variable);
    }
    if (api_key.has_value()) env_text.push_back("VERITY_API_KEY=" + *api_key);
    std::vector<char*> argv, envp;
    for (std::string& arg : argv_text) argv.push_back(arg.data());
    for (std::string& variable : env_text) envp.push_back(variable.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);

    const std::string out_path = dir_ + "/verity.out", err_path = dir_ + "/verity.err";
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, out_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = -1;
    const int spawned =
        posix_spawn(&pid, binary.c_str(), &files, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&files);
    if (spawned != 0) {
      return {-1, "", absl::StrCat("cannot run ", binary, ": ", std::strerror(spawned))};
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
      return {-1, "", absl::StrCat(binary, " did not exit normally (status ", status, ")")};
    }
    return {WEXITSTATUS(status), ReadText(out_path), ReadText(err_path)};
  }

  static std::string ReadText(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // A CSV of `rows` ids (prefix0, prefix1, ...) under the column `id_column`, each with `dim`
  // feature columns f0..f<dim-1> of small values.
  std::string WriteFeaturesCsv(const std::string& name, const std::string& id_column,
                               const std::string& prefix, int rows, int dim) {
    const std::string path = dir_ + "/" + name;
    std::ofstream csv(path);
    csv << id_column;
    for (int j = 0; j < dim; ++j) csv << ",f" << j;
    csv << "\n";
    for (int i = 0; i < rows; ++i) {
      csv << prefix << i;
      for (int j = 0; j < dim; ++j) csv << "," << ((i + j) % 10) / 10.0;
      csv << "\n";
    }
    return path;
  }

  std::string dir_;
  std::string bluebirds_;
  std::unique_ptr<storage::EmbeddedPostgres> pg_;
  std::unique_ptr<server::VerityServer> server_;
};

TEST_F(CliEndToEndTest, TourOnBluebirdsBeatsMajorityVote) {
  CliResult created = Run({"project", "create", "birds", "--classes_file=" + bluebirds_ + "/classes.txt"});
  ASSERT_EQ(created.code, 0) << created.err;

  CliResult submitted = Run({"submit", "--project=birds", "--csv=" + bluebirds_ + "/labels.csv"});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_THAT(submitted.out, HasSubstr("accepted=4212 duplicate=0 revised=0 stale=0 rejected=0"));

  // Resending the same file changes nothing.
  CliResult again = Run({"submit", "--project=birds", "--csv=" + bluebirds_ + "/labels.csv"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("accepted=0 duplicate=4212 revised=0 stale=0 rejected=0"));

  ASSERT_TRUE(server_->core().scheduler->RefitDueProjectsNow().ok());
  CliResult status = Run({"status", "--project=birds"});
  ASSERT_EQ(status.code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("labels_since_version: 0"));
  // The default method (auto) says what it chose and why, and the default calibration map
  // (fitted on the crowd labels: no gold here) is shown.
  EXPECT_THAT(status.out, HasSubstr("\ncalibration:\n  kind: "));
  EXPECT_THAT(status.out, HasSubstr("\n  source: crowd_labels\n"));
  EXPECT_THAT(status.out, HasSubstr("\nchosen_method: "));
  EXPECT_THAT(status.out, HasSubstr("\nchoice_reason: "));

  CliResult posteriors = Run({"posteriors", "--project=birds"});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  std::vector<std::string> lines = absl::StrSplit(posteriors.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 109u);  // Header + 108 items.
  EXPECT_THAT(lines[0], StartsWith("item,label,confidence"));

  CliResult accuracy = Run({"accuracy", "--project=birds", "--gold_csv=" + bluebirds_ + "/gold.csv"});
  ASSERT_EQ(accuracy.code, 0) << accuracy.err;
  ASSERT_THAT(accuracy.out, StartsWith("accuracy="));
  double value = 0;
  ASSERT_TRUE(absl::SimpleAtod(accuracy.out.substr(9, 6), &value)) << accuracy.out;
  EXPECT_GE(value, 0.7593 + 0.05) << accuracy.out;
  EXPECT_THAT(accuracy.out, HasSubstr("(108 gold items)"));
}

TEST_F(CliEndToEndTest, TrainThenVersionsAsJsonAndSuggestOnBluebirds) {
  ASSERT_EQ(Run({"project", "create", "birds", "--classes_file=" + bluebirds_ + "/classes.txt"}).code, 0);
  CliResult submitted = Run({"submit", "--project=birds", "--csv=" + bluebirds_ + "/labels.csv"});
  ASSERT_EQ(submitted.code, 0) << submitted.err;

  // Background refits are off in this fixture: the first version is the one TrainModel fits.
  CliResult trained = Run({"model", "train", "--project=birds", "--output=json"});
  ASSERT_EQ(trained.code, 0) << trained.err;
  // A project created without a method is served by auto (the default since issue 18).
  EXPECT_THAT(trained.out, StartsWith("{\"version\":1,\"method\":\"auto\",\"watermark\":"));
  EXPECT_THAT(trained.out, HasSubstr("\"num_labels\":4212,"));

  CliResult versions = Run({"model", "versions", "--project=birds", "--output=json"});
  ASSERT_EQ(versions.code, 0) << versions.err;
  // One version: the array holds exactly the object TrainModel returned.
  EXPECT_EQ(versions.out, "[\n" + trained.out.substr(0, trained.out.size() - 1) + "\n]\n");

  CliResult status = Run({"model", "status", "--project=birds", "--output=json"});
  ASSERT_EQ(status.code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("\"labels_since_version\":0,\"training\":false,"
                                    "\"current_version\":{\"version\":1,"));

  // A new annotator gets three distinct open items, each leased to them.
  CliResult suggested = Run({"suggest", "items", "--project=birds", "--annotator=newcomer", "--k=3"});
  ASSERT_EQ(suggested.code, 0) << suggested.err;
  std::vector<std::string> rows = absl::StrSplit(suggested.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 4u) << suggested.out;
  EXPECT_THAT(rows[0], StartsWith("ITEM "));
  CliResult as_json =
      Run({"suggest", "items", "--project=birds", "--annotator=other", "--k=2", "--output=json"});
  ASSERT_EQ(as_json.code, 0) << as_json.err;
  std::vector<std::string> lines = absl::StrSplit(as_json.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << as_json.out;  // [, two suggestions, ]
  EXPECT_THAT(lines[1], StartsWith("{\"item\":\""));
  EXPECT_THAT(lines[1], HasSubstr("\"lease_expires_at\":\"20"));

  // Every bluebirds worker labelled every item; candidates new to the project can still label it.
  const std::string item = rows[1].substr(0, rows[1].find(' '));
  CliResult annotators = Run({"suggest", "annotators", "--project=birds", "--item=" + item,
                              "--candidates=fresh1,fresh2,fresh3", "--k=2"});
  ASSERT_EQ(annotators.code, 0) << annotators.err;
  EXPECT_EQ(std::count(annotators.out.begin(), annotators.out.end(), '\n'), 3) << annotators.out;
}

TEST_F(CliEndToEndTest, ExportsASmallProjectAsJsonLinesAndCsv) {
  ASSERT_EQ(Run({"project", "create", "pets", "--classes=cat,dog"}).code, 0);
  const std::string labels = dir_ + "/pets.csv";
  std::ofstream(labels) << "item,annotator,label\ni1,a,cat\ni1,b,cat\ni2,a,dog\ni3,b,dog\ni3,c,dog\n";
  CliResult submitted = Run({"submit", "--project=pets", "--csv=" + labels});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "accepted=5 duplicate=0 revised=0 stale=0 rejected=0\n");

  CliResult exported = Run({"export", "--project=pets", "--format=jsonl", "--page_size=2"});
  ASSERT_EQ(exported.code, 0) << exported.err;
  std::vector<std::string> lines = absl::StrSplit(exported.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << exported.out;
  EXPECT_THAT(lines[0], StartsWith("{\"item\":\"i1\",\"label\":\"cat\",\"label_index\":0,"));
  EXPECT_THAT(lines[0], HasSubstr(",\"probabilities\":{\"cat\":"));
  EXPECT_THAT(lines[0], HasSubstr(",\"num_labels\":2,"));
  EXPECT_THAT(lines[1], StartsWith("{\"item\":\"i2\",\"label\":\"dog\","));
  EXPECT_THAT(lines[2], StartsWith("{\"item\":\"i3\",\"label\":\"dog\","));
  EXPECT_THAT(lines[2], HasSubstr(",\"is_gold\":false}"));

  const std::string out = dir_ + "/pets-export.csv";
  CliResult to_file = Run({"export", "--project=pets", "--out=" + out});
  ASSERT_EQ(to_file.code, 0) << to_file.err;
  EXPECT_EQ(to_file.out, "wrote 3 posteriors to " + out + "\n");
  std::ifstream in(out);
  std::string header;
  ASSERT_TRUE(std::getline(in, header));
  EXPECT_EQ(header,
            "item,label,label_index,confidence,p_cat,p_dog,num_labels,model_version,"
            "includes_newer_labels,is_gold");
}

// `model status --help`: the calibration is printed "when the server reports them", before the
// first fit as after it; the text and the JSON show the same fields.
TEST_F(CliEndToEndTest, StatusPrintsTheCalibrationBeforeTheFirstFit) {
  ASSERT_EQ(Run({"project", "create", "early", "--classes=a,b"}).code, 0);
  CliResult json = Run({"model", "status", "--project=early", "--output=json"});
  ASSERT_EQ(json.code, 0) << json.err;
  ASSERT_THAT(json.out, HasSubstr("\"current_version\":null"));
  ASSERT_THAT(json.out, HasSubstr("\"calibration\":{"));
  CliResult text = Run({"model", "status", "--project=early"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("current_version: none (no fit yet)\ncalibration:\n  kind: "));
}

TEST_F(CliEndToEndTest, ErrorsAreOneLineWithTheStatusCode) {
  CliResult missing = Run({"status", "--project=nope"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, StartsWith("verity: NOT_FOUND: "));
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;
}

TEST_F(CliEndToEndTest, ProjectSettingsItemsAndAnnotatorsOnASmallProject) {
  CliResult created = Run({"project", "create", "pets", "--classes=cat,dog",
                           "--annotator_feature_dim=2"});
  ASSERT_EQ(created.code, 0) << created.err;
  EXPECT_THAT(created.out, HasSubstr("method: auto\n"));

  CliResult settings = Run({"project", "settings", "pets", "--method=mv",
                            "--min_labels_per_item=3"});
  ASSERT_EQ(settings.code, 0) << settings.err;
  EXPECT_THAT(settings.out, HasSubstr("\nmethod: mv\n"
                                      "settings: assignment { min_labels_per_item: 3 }\n"));
  // --method=default resets the method to the server's default for new projects, auto (the
  // API keeps the method when it is left unset, so the CLI must name it).
  CliResult reset = Run({"project", "settings", "pets", "--method=default"});
  ASSERT_EQ(reset.code, 0) << reset.err;
  EXPECT_THAT(reset.out, HasSubstr("\nmethod: auto\n"));
  ASSERT_EQ(Run({"project", "settings", "pets", "--method=mv"}).code, 0);  // What follows uses mv.

  // Four items (i4 first in line by priority, i2 gold), then a gold label for i3.
  const std::string items = dir_ + "/items.csv";
  std::ofstream(items) << "item,gold,priority\ni1,,\ni2,dog,\ni3,,\ni4,,2\n";
  CliResult added = Run({"item", "add", "--project=pets", "--csv=" + items});
  ASSERT_EQ(added.code, 0) << added.err;
  EXPECT_EQ(added.out, "added=4 updated=0\n");
  const std::string gold = dir_ + "/gold.csv";
  std::ofstream(gold) << "item,label\ni3,cat\n";
  CliResult gold_added = Run({"item", "add", "--project=pets", "--gold_csv=" + gold});
  ASSERT_EQ(gold_added.code, 0) << gold_added.err;
  EXPECT_EQ(gold_added.out, "added=0 updated=1\n");

  const std::string annotators = dir_ + "/annotators.csv";
  std::ofstream(annotators) << "annotator,f0,f1\na,0.5,1\nb,1,0\n";
  CliResult annotators_added = Run({"annotator", "add", "--project=pets", "--csv=" + annotators});
  ASSERT_EQ(annotators_added.code, 0) << annotators_added.err;
  EXPECT_EQ(annotators_added.out, "added=2 updated=0\n");
  // Three feature columns for a dimension of 2: refused before anything is sent.
  std::ofstream(annotators) << "annotator,f0,f1,f2\nc,1,2,3\n";
  CliResult wrong_dim = Run({"annotator", "add", "--project=pets", "--csv=" + annotators});
  EXPECT_EQ(wrong_dim.code, 1);
  EXPECT_THAT(wrong_dim.err, HasSubstr("has annotator_feature_dim 2"));

  const std::string labels = dir_ + "/labels.csv";
  std::ofstream(labels) << "item,annotator,label\ni1,a,cat\ni1,b,cat\ni2,a,cat\ni3,b,dog\n";
  CliResult submitted = Run({"submit", "--project=pets", "--csv=" + labels});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "accepted=4 duplicate=0 revised=0 stale=0 rejected=0\n");

  CliResult shown = Run({"project", "show", "pets"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_THAT(shown.out, StartsWith("name: pets\nclasses: cat, dog\nitem_feature_dim: 0\n"
                                    "annotator_feature_dim: 2\nmethod: mv\n"
                                    "settings: assignment { min_labels_per_item: 3 }\n"
                                    "created_at: 20"));
  EXPECT_THAT(shown.out, HasSubstr("\nitems: 4\nannotators: 2\nlabels: 4\n"));

  ASSERT_EQ(Run({"project", "create", "other", "--classes=x,y,z"}).code, 0);
  CliResult listed = Run({"project", "list"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  // ListProjects promises no order.
  std::vector<std::string> project_rows = absl::StrSplit(listed.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(project_rows.size(), 3u) << listed.out;
  EXPECT_EQ(project_rows[0], "NAME   CLASSES  ITEMS  ANNOTATORS  LABELS  METHOD");
  EXPECT_THAT(std::vector<std::string>(project_rows.begin() + 1, project_rows.end()),
              UnorderedElementsAre("other  3        0      0           0       auto",
                                   "pets   2        4      2           4       mv"));

  // Gold items are clamped to their gold class whatever their labels; i1 has the smoothed vote
  // (2 + 0.01) / (2 + 2 * 0.01) of models/truth_model.h's vote_smoothing.
  CliResult posteriors = Run({"posteriors", "--project=pets", "--items=i2,i3,i1"});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  EXPECT_EQ(posteriors.out,
            "item,label,confidence,p_cat,p_dog,num_labels\n"
            "i2,dog,1,0,1,1\n"
            "i3,cat,1,1,0,1\n"
            "i1,cat,0.99505,0.99505,0.0049505,2\n");

  // Before any fit every annotator has the uniform confusion matrix: accuracy 1/2.
  CliResult profiles = Run({"annotator", "list", "--project=pets"});
  ASSERT_EQ(profiles.code, 0) << profiles.err;
  EXPECT_EQ(profiles.out,
            "ANNOTATOR  LABELS  ACCURACY\n"
            "a          2       0.5000\n"
            "b          2       0.5000\n");
  CliResult short_list = Run({"annotator", "--project=pets"});
  ASSERT_EQ(short_list.code, 0) << short_list.err;
  EXPECT_EQ(short_list.out, profiles.out);
  const std::string profile_b =
      "annotator: b\nnum_labels: 2\naccuracy: 0.5000\n"
      "confusion (rows: true class, columns: answered class):\n"
      "       cat     dog\n"
      "  cat  0.5000  0.5000\n"
      "  dog  0.5000  0.5000\n";
  CliResult shown_b = Run({"annotator", "show", "b", "--project=pets"});
  ASSERT_EQ(shown_b.code, 0) << shown_b.err;
  EXPECT_EQ(shown_b.out, profile_b);
  CliResult short_b = Run({"annotator", "b", "--project=pets"});
  ASSERT_EQ(short_b.code, 0) << short_b.err;
  EXPECT_EQ(short_b.out, profile_b);
  CliResult unknown = Run({"annotator", "show", "nobody", "--project=pets"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, StartsWith("verity: NOT_FOUND: "));
  EXPECT_THAT(unknown.err, HasSubstr("nobody"));

  // item add's priority: i4 (priority 2) is suggested before every item of priority 0.
  CliResult suggested =
      Run({"suggest", "items", "--project=pets", "--annotator=newcomer", "--k=1"});
  ASSERT_EQ(suggested.code, 0) << suggested.err;
  std::vector<std::string> rows = absl::StrSplit(suggested.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 2u) << suggested.out;
  EXPECT_THAT(rows[1], StartsWith("i4 "));

  CliResult no_versions = Run({"versions", "--project=pets"});
  ASSERT_EQ(no_versions.code, 0) << no_versions.err;
  EXPECT_EQ(no_versions.out, "no model versions yet\n");
  ASSERT_EQ(Run({"model", "train", "--project=pets"}).code, 0);
  CliResult versions = Run({"versions", "--project=pets"});
  ASSERT_EQ(versions.code, 0) << versions.err;
  std::vector<std::string> version_rows = absl::StrSplit(versions.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(version_rows.size(), 2u) << versions.out;
  EXPECT_THAT(version_rows[0], StartsWith("VERSION  METHOD  LABELS  WATERMARK  "));
  std::vector<std::string> fields = absl::StrSplit(version_rows[1], ' ', absl::SkipEmpty());
  ASSERT_GE(fields.size(), 3u) << version_rows[1];
  EXPECT_EQ(fields[0], "1");
  EXPECT_EQ(fields[1], "mv");
  EXPECT_EQ(fields[2], "4");
}

// truth.proto: map_label is the lowest class index on ties. Majority vote gives equal label
// counts exactly equal probabilities, so only that rule decides y (index 1) over z (index 2)
// for zy and yz, and x over y and z for xyz; zzy is a control that z wins.
// `verity item add --help`: "Items are sent in calls of at most 10,000 items and 4 MiB (fewer
// items per call when they carry many features)". README.md's project limits allow 10,000,000
// items and 268,435,456 feature values per project; 10,000 items of 512 features (about 20 MB
// encoded) are well within them. They were sent in one call, past the server's 16 MiB message
// limit: "verity: RESOURCE_EXHAUSTED: Received message larger than max", nothing written.
TEST_F(CliEndToEndTest, ItemAddSplitsTenThousandItemsOf512FeaturesUnderTheMessageLimit) {
  CliResult created = Run({"project", "create", "feat", "--classes=a,b", "--item_feature_dim=512"});
  ASSERT_EQ(created.code, 0) << created.err;
  const std::string csv = WriteFeaturesCsv("items.csv", "item", "i", 10000, 512);
  CliResult added = Run({"item", "add", "--project=feat", "--csv=" + csv});
  EXPECT_EQ(added.code, 0) << added.err;
  EXPECT_EQ(added.out, "added=10000 updated=0\n") << added.err;
}

// `verity annotator add --help`: "Sent in calls of at most 10,000 annotators and 4 MiB (fewer
// per call when they carry many features)". README.md: 1,000,000 annotators and 268,435,456
// feature values per project. 10,000 annotators of 512 features failed as items did.
TEST_F(CliEndToEndTest, AnnotatorAddSplitsTenThousandAnnotatorsOf512FeaturesUnderTheLimit) {
  CliResult created =
      Run({"project", "create", "feat", "--classes=a,b", "--annotator_feature_dim=512"});
  ASSERT_EQ(created.code, 0) << created.err;
  const std::string csv = WriteFeaturesCsv("annotators.csv", "annotator", "w", 10000, 512);
  CliResult added = Run({"annotator", "add", "--project=feat", "--csv=" + csv});
  EXPECT_EQ(added.code, 0) << added.err;
  EXPECT_EQ(added.out, "added=10000 updated=0\n") << added.err;
}

// README.md: "errors stay one line on stderr (a usage error adds one pointing to `--help`)";
// `verity --help`: "Exit status: 0 success; 1 the command failed (one line "verity: CODE:
// message" on stderr); 2 a usage error." Checked on the `verity` binary itself, where gRPC's
// own log lines ("E1129 ... ssl_transport_security.cc:807] Could not load any root
// certificate.", "Handshake failed ...", "grpc_ares_wrapper.cc:899] Failed to parse ...") used
// to come before the CLI's line.
void ExpectOneErrorLine(const CliResult& result) {
  EXPECT_NE(result.code, 0);
  EXPECT_EQ(result.out, "");
  std::vector<std::string> lines = absl::StrSplit(result.err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), result.code == 2 ? 2u : 1u) << result.err;
  EXPECT_THAT(lines[0], StartsWith("verity: ")) << result.err;
}

// --tls_ca (`verity --help`): "PEM CA bundle that signed the server's certificate: connect with
// TLS". A file that is not a PEM certificate is a usage error naming the flag and the file (it
// was exit 1 with eight gRPC log lines and "UNAVAILABLE: empty address list").
TEST_F(CliEndToEndTest, ATlsCaFileThatIsNotPemIsAUsageErrorNamingIt) {
  const std::string bad = dir_ + "/not-a-ca.pem";
  std::ofstream(bad) << "not a certificate\n";
  CliResult result = RunVerityBinary({"project", "list", "--tls_ca=" + bad, "--timeout=5s",
                                      absl::StrCat("--server=127.0.0.1:", server_->port())});
  ExpectOneErrorLine(result);
  EXPECT_EQ(result.code, 2) << result.err;
  EXPECT_THAT(result.err, StartsWith("verity: --tls_ca=" + bad + ": not a PEM CA certificate"));
}

// The same promise for TLS against a plaintext server (a real CA): one line, the call's
// UNAVAILABLE, without gRPC's "Handshake failed with fatal error SSL_ERROR_SSL" line.
TEST_F(CliEndToEndTest, TlsAgainstAPlaintextServerFailsWithOneErrorLine) {
  const std::string ca = dir_ + "/ca.pem";
  const std::string command = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ", dir_, "/ca.key -out ", ca,
      " -days 2 -subj /CN=test-ca 2>/dev/null");
  ASSERT_EQ(std::system(command.c_str()), 0) << "openssl failed";
  CliResult result = RunVerityBinary({"project", "list", "--tls_ca=" + ca, "--timeout=5s",
                                      absl::StrCat("--server=127.0.0.1:", server_->port())});
  ExpectOneErrorLine(result);
  EXPECT_THAT(result.err, StartsWith("verity: UNAVAILABLE: ")) << result.err;
}

// The same promise for an IPv6 literal missing its "]" in --server: a usage error naming
// --server, as for the CLI's other malformed addresses (it was exit 1 with gRPC's "Failed to
// parse [::1:PORT to host:port" line and "UNAVAILABLE: DNS resolution failed").
TEST_F(CliEndToEndTest, AnIpv6ServerAddressWithoutItsBracketIsAUsageErrorNamingServer) {
  CliResult result = RunVerityBinary({"project", "list", "--timeout=5s",
                                      absl::StrCat("--server=[::1:", server_->port())});
  ExpectOneErrorLine(result);
  EXPECT_EQ(result.code, 2) << result.err;
  EXPECT_THAT(result.err, StartsWith("verity: --server: address \"[::1:")) << result.err;
}

TEST_F(CliEndToEndTest, ExactTiesTakeTheLowestClassIndexInPosteriorsAndExport) {
  ASSERT_EQ(Run({"project", "create", "votes", "--classes=x,y,z", "--method=mv"}).code, 0);
  const std::string labels = dir_ + "/votes.csv";
  std::ofstream(labels) << "item,annotator,label\n"
                           "zy,w1,z\nzy,w2,y\n"
                           "yz,w1,y\nyz,w2,z\n"
                           "xyz,w1,z\nxyz,w2,y\nxyz,w3,x\n"
                           "zzy,w1,z\nzzy,w2,z\nzzy,w3,y\n";
  CliResult submitted = Run({"submit", "--project=votes", "--csv=" + labels});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "accepted=10 duplicate=0 revised=0 stale=0 rejected=0\n");

  // Before and after a majority-vote fit (model_version 0, then 1).
  for (const std::string version : {"0", "1"}) {
    SCOPED_TRACE("model version " + version);
    if (version == "1") {
      CliResult trained = Run({"model", "train", "--project=votes"});
      ASSERT_EQ(trained.code, 0) << trained.err;
    }
    CliResult exported = Run({"export", "--project=votes"});
    ASSERT_EQ(exported.code, 0) << exported.err;
    std::vector<std::string> lines = absl::StrSplit(exported.out, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 5u) << exported.out;
    ASSERT_EQ(lines[0], "item,label,label_index,confidence,p_x,p_y,p_z,num_labels,model_version,"
                        "includes_newer_labels,is_gold");
    // item, label, label_index, then the tied probabilities (shortest exact form: equal text
    // is an equal double), the confidence, num_labels and model_version.
    struct Row {
      std::string item, label, index;
      std::vector<int> tied;  // Columns of the tied probabilities, 4 to 6.
      std::string num_labels;
    };
    const std::vector<Row> expected = {{"zy", "y", "1", {5, 6}, "2"},
                                       {"yz", "y", "1", {5, 6}, "2"},
                                       {"xyz", "x", "0", {4, 5, 6}, "3"},
                                       {"zzy", "z", "2", {6}, "3"}};
    for (size_t i = 0; i < expected.size(); ++i) {
      const Row& e = expected[i];
      std::vector<std::string> f = absl::StrSplit(lines[i + 1], ',');
      ASSERT_EQ(f.size(), 11u) << lines[i + 1];
      EXPECT_EQ(f[0], e.item);
      EXPECT_EQ(f[1], e.label) << lines[i + 1];
      EXPECT_EQ(f[2], e.index) << lines[i + 1];
      for (int column : e.tied) EXPECT_EQ(f[column], f[3]) << lines[i + 1];
      EXPECT_EQ(f[7], e.num_labels);
      EXPECT_EQ(f[8], version);
    }

    CliResult jsonl = Run({"export", "--project=votes", "--format=jsonl", "--page_size=3"});
    ASSERT_EQ(jsonl.code, 0) << jsonl.err;
    std::vector<std::string> objects = absl::StrSplit(jsonl.out, '\n', absl::SkipEmpty());
    ASSERT_EQ(objects.size(), 4u) << jsonl.out;
    EXPECT_THAT(objects[0], StartsWith("{\"item\":\"zy\",\"label\":\"y\",\"label_index\":1,"));
    EXPECT_THAT(objects[1], StartsWith("{\"item\":\"yz\",\"label\":\"y\",\"label_index\":1,"));
    EXPECT_THAT(objects[2], StartsWith("{\"item\":\"xyz\",\"label\":\"x\",\"label_index\":0,"));
    EXPECT_THAT(objects[3], StartsWith("{\"item\":\"zzy\",\"label\":\"z\",\"label_index\":2,"));

    CliResult posteriors = Run({"posteriors", "--project=votes", "--items=yz,xyz"});
    ASSERT_EQ(posteriors.code, 0) << posteriors.err;
    std::vector<std::string> rows = absl::StrSplit(posteriors.out, '\n', absl::SkipEmpty());
    ASSERT_EQ(rows.size(), 3u) << posteriors.out;
    EXPECT_THAT(rows[1], StartsWith("yz,y,"));
    EXPECT_THAT(rows[2], StartsWith("xyz,x,"));
  }
}

// The server with authentication on (allowed on loopback too): its bootstrap admin key is
// written to admin.key in the test's directory.
class CliAuthEndToEndTest : public CliEndToEndTest {
 protected:
  void ConfigureServer(server::VerityServer::Options& options) override {
    options.auth.enabled = true;
    options.auth.admin_key_file = dir_ + "/admin.key";
  }

  // The `verity` binary with VERITY_API_KEY set to `api_key` (see RunVerityBinary), against
  // this server.
  CliResult RunVerity(std::vector<std::string> args, const std::optional<std::string>& api_key) {
    args.push_back(absl::StrCat("--server=127.0.0.1:", server_->port()));
    return RunVerityBinary(args, api_key);
  }

  // The value of the line "name: value" of `key create` / `key revoke` output; "" if none.
  static std::string Field(const std::string& out, const std::string& name) {
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      if (absl::ConsumePrefix(&line, name + ": ")) return std::string(line);
    }
    return "";
  }
};

TEST_F(CliAuthEndToEndTest, ReaderKeyQueriesButCannotSubmitAndStopsWorkingOnceRevoked) {
  const std::string admin_key(absl::StripAsciiWhitespace(ReadText(dir_ + "/admin.key")));
  ASSERT_THAT(admin_key, StartsWith("vk_"));
  const std::string admin_key_id = admin_key.substr(3, 16);
  const std::string labels = dir_ + "/pets.csv";
  std::ofstream(labels) << "item,annotator,label\ni1,a,cat\ni1,b,cat\ni2,a,dog\n";

  // The bootstrap admin key sets up two projects and labels one.
  ASSERT_EQ(RunVerity({"project", "create", "P", "--classes=cat,dog"}, admin_key).code, 0);
  ASSERT_EQ(RunVerity({"project", "create", "Q", "--classes=cat,dog"}, admin_key).code, 0);
  CliResult submitted = RunVerity({"submit", "--project=P", "--csv=" + labels}, admin_key);
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "accepted=3 duplicate=0 revised=0 stale=0 rejected=0\n");

  CliResult created =
      RunVerity({"key", "create", "--role=reader", "--projects=P", "--name=dashboard"}, admin_key);
  ASSERT_EQ(created.code, 0) << created.err;
  const std::string reader_key = Field(created.out, "secret_key");
  const std::string reader_key_id = Field(created.out, "key_id");
  ASSERT_THAT(reader_key, StartsWith("vk_" + reader_key_id + "_")) << created.out;
  EXPECT_EQ(Field(created.out, "role"), "reader");
  EXPECT_EQ(Field(created.out, "projects"), "P");
  EXPECT_EQ(Field(created.out, "revoked_at"), "-");

  // The reader key queries its project...
  CliResult posteriors = RunVerity({"posteriors", "--project=P"}, reader_key);
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  EXPECT_THAT(posteriors.out, StartsWith("item,label,confidence,p_cat,p_dog,num_labels\ni1,cat,"));
  // ...but may not write to it, nor read another project.
  CliResult refused = RunVerity({"submit", "--project=P", "--csv=" + labels}, reader_key);
  EXPECT_EQ(refused.code, 1);
  EXPECT_THAT(refused.err, StartsWith("verity: PERMISSION_DENIED: "));
  EXPECT_THAT(refused.err, HasSubstr("API key " + reader_key_id + " has role reader"));
  EXPECT_THAT(refused.err, HasSubstr("needs writer"));
  CliResult other = RunVerity({"status", "--project=Q"}, reader_key);
  EXPECT_EQ(other.code, 1);
  EXPECT_THAT(other.err, StartsWith("verity: PERMISSION_DENIED: "));
  EXPECT_THAT(other.err, HasSubstr("not valid for project \"Q\""));
  CliResult keys_as_reader = RunVerity({"key", "list"}, reader_key);
  EXPECT_EQ(keys_as_reader.code, 1);
  EXPECT_THAT(keys_as_reader.err, StartsWith("verity: PERMISSION_DENIED: "));

  // No key at all; and --api_key= sends none even with the variable set.
  CliResult anonymous = RunVerity({"project", "list"}, std::nullopt);
  EXPECT_EQ(anonymous.code, 1);
  EXPECT_THAT(anonymous.err, StartsWith("verity: UNAUTHENTICATED: no API key"));
  CliResult emptied = RunVerity({"project", "list", "--api_key="}, admin_key);
  EXPECT_EQ(emptied.code, 1);
  EXPECT_THAT(emptied.err, StartsWith("verity: UNAUTHENTICATED: "));

  CliResult listed = RunVerity({"key", "list"}, admin_key);
  ASSERT_EQ(listed.code, 0) << listed.err;
  std::vector<std::string> rows = absl::StrSplit(listed.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 3u) << listed.out;
  EXPECT_THAT(rows[0], StartsWith("KEY_ID "));
  EXPECT_THAT(rows[1], StartsWith(admin_key_id + "  bootstrap admin  admin   *  "));
  EXPECT_THAT(rows[2], StartsWith(reader_key_id + "  dashboard        reader  P  "));

  CliResult revoked = RunVerity({"key", "revoke", reader_key_id}, admin_key);
  ASSERT_EQ(revoked.code, 0) << revoked.err;
  EXPECT_THAT(Field(revoked.out, "revoked_at"), StartsWith("20"));

  CliResult after = RunVerity({"posteriors", "--project=P"}, reader_key);
  EXPECT_EQ(after.code, 1);
  EXPECT_EQ(after.out, "");
  EXPECT_THAT(after.err, StartsWith("verity: UNAUTHENTICATED: "));
  CliResult valid_keys = RunVerity({"key", "list"}, admin_key);
  ASSERT_EQ(valid_keys.code, 0) << valid_keys.err;
  EXPECT_THAT(valid_keys.out, Not(HasSubstr(reader_key_id)));
  CliResult all_keys = RunVerity({"key", "list", "--all", "--output=json"}, admin_key);
  ASSERT_EQ(all_keys.code, 0) << all_keys.err;
  std::vector<std::string> objects = absl::StrSplit(all_keys.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(objects.size(), 4u) << all_keys.out;  // [, the admin key, the reader key, ]
  EXPECT_THAT(objects[2], StartsWith("{\"key_id\":\"" + reader_key_id +
                                     "\",\"name\":\"dashboard\",\"role\":\"reader\","
                                     "\"projects\":[\"P\"],\"created_at\":\"20"));
  EXPECT_THAT(objects[2], HasSubstr(",\"revoked_at\":\"20"));
  EXPECT_THAT(objects[2], HasSubstr(",\"created_by\":\"" + admin_key_id + "\"}"));
}

}  // namespace
}  // namespace verity::tests
