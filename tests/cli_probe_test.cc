// Probe tests of the `verity` CLI: documented promises (the CLI's --help text, README.md,
// proto/verity/v1/*.proto) that the CLI does not keep, run in-process against a real
// VerityServer over a real gRPC channel and a real (embedded) PostgreSQL, as
// cli_end_to_end_test does. Each expectation is quoted above its test; every test here failed
// when it was written.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"

namespace verity::tests {
namespace {

using ::testing::HasSubstr;

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

class CliProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("verity-cli-probe");
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
  std::unique_ptr<storage::EmbeddedPostgres> pg_;
  std::unique_ptr<server::VerityServer> server_;
};

// `verity item add --help`: "Create or update items: features, gold, priority." ... "optionally
// f0,f1,...,f<D-1> with D the project's item_feature_dim. Items are sent 10,000 per call;
// existing items are updated. Prints added=N updated=N". README.md's project limits allow
// 10,000,000 items and 268,435,456 feature values per project; 10,000 items of 512 features
// (5,120,000 values) are well within them, and the CLI accepts --item_feature_dim up to 65536.
// Observed: the 10,000-item call (about 20 MB of floats) passes the server's 16 MiB message
// limit and the command fails whole: "verity: RESOURCE_EXHAUSTED: Received message larger than
// max (20608896 vs. 16777216)"; nothing is written.
TEST_F(CliProbeTest, ItemAddWritesTenThousandItemsOf512Features) {
  CliResult created = Run({"project", "create", "feat", "--classes=a,b", "--item_feature_dim=512"});
  ASSERT_EQ(created.code, 0) << created.err;
  const std::string csv = WriteFeaturesCsv("items.csv", "item", "i", 10000, 512);
  CliResult added = Run({"item", "add", "--project=feat", "--csv=" + csv});
  EXPECT_EQ(added.code, 0) << added.err;
  EXPECT_EQ(added.out, "added=10000 updated=0\n") << added.err;
}

// `verity annotator add --help`: "Create or update annotators and their features." ...
// "optionally f0,f1,...,f<D-1> with D the project's annotator_feature_dim. ... Sent 10,000 per
// call; existing annotators are updated. Prints added=N updated=N". README.md: 1,000,000
// annotators and 268,435,456 feature values per project.
// Observed: "verity: RESOURCE_EXHAUSTED: Received message larger than max (20608896 vs.
// 16777216)"; nothing is written.
TEST_F(CliProbeTest, AnnotatorAddWritesTenThousandAnnotatorsOf512Features) {
  CliResult created =
      Run({"project", "create", "feat", "--classes=a,b", "--annotator_feature_dim=512"});
  ASSERT_EQ(created.code, 0) << created.err;
  const std::string csv = WriteFeaturesCsv("annotators.csv", "annotator", "w", 10000, 512);
  CliResult added = Run({"annotator", "add", "--project=feat", "--csv=" + csv});
  EXPECT_EQ(added.code, 0) << added.err;
  EXPECT_EQ(added.out, "added=10000 updated=0\n") << added.err;
}

}  // namespace
}  // namespace verity::tests
