// The README's five-minute tour, run in-process: the `verity` CLI against a real VerityServer
// over a real gRPC channel and a real (embedded) PostgreSQL, on ../shared/datasets/bluebirds.
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

TEST_F(CliEndToEndTest, ErrorsAreOneLineWithTheStatusCode) {
  CliResult missing = Run({"status", "--project=nope"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, StartsWith("verity: NOT_FOUND: "));
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;
}

}  // namespace
}  // namespace verity::tests
