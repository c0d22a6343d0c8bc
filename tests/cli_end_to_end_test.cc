// The README's five-minute tour, run in-process: the `verity` CLI against a real VerityServer
// over a real gRPC channel and a real (embedded) PostgreSQL, on ../shared/datasets/bluebirds.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "models/testing/dataset_path.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"

namespace verity::tests {
namespace {

using ::testing::HasSubstr;
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
  EXPECT_THAT(submitted.out, HasSubstr("accepted=4212 duplicate=0 revised=0 rejected=0"));

  // Resending the same file changes nothing.
  CliResult again = Run({"submit", "--project=birds", "--csv=" + bluebirds_ + "/labels.csv"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("accepted=0 duplicate=4212 revised=0 rejected=0"));

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
  EXPECT_EQ(submitted.out, "accepted=5 duplicate=0 revised=0 rejected=0\n");

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

}  // namespace
}  // namespace verity::tests
