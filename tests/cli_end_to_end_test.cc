// The README's five-minute tour, run in-process: the `verity` CLI against a real VerityServer
// over a real gRPC channel and a real (embedded) PostgreSQL, on ../shared/datasets/bluebirds.
// API keys: the `verity` binary itself, with VERITY_API_KEY in its environment, against a
// server with authentication on.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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
    options.listen = "localhost:0";
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
    args.push_back(absl::StrCat("--server=localhost:", server_->port()));
    std::ostringstream out, err;
    int code = client::RunCli(args, out, err);
    return {code, out.str(), err.str()};
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
  EXPECT_THAT(trained.out, StartsWith("{\"version\":1,\"method\":\"ds\",\"watermark\":"));
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

TEST_F(CliEndToEndTest, ErrorsAreOneLineWithTheStatusCode) {
  CliResult missing = Run({"status", "--project=nope"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, StartsWith("verity: NOT_FOUND: "));
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;
}

// The server with authentication on (allowed on loopback too): its bootstrap admin key is
// written to admin.key in the test's directory.
class CliAuthEndToEndTest : public CliEndToEndTest {
 protected:
  void ConfigureServer(server::VerityServer::Options& options) override {
    options.auth.enabled = true;
    options.auth.admin_key_file = dir_ + "/admin.key";
  }

  // Runs the `verity` binary with VERITY_API_KEY set to `api_key` in its environment (absent
  // when nullopt) and waits for it.
  CliResult RunVerity(std::vector<std::string> args, const std::optional<std::string>& api_key) {
    args.push_back(absl::StrCat("--server=localhost:", server_->port()));
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
    const int spawned = posix_spawn(&pid, binary.c_str(), &files, nullptr, argv.data(), envp.data());
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
