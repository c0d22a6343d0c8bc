// The tie rule of truth.proto: Posterior.map_label is the index of the most probable class,
// "lowest index on ties". Each test builds items whose posteriors tie exactly (the tied
// probabilities are asserted equal first, so only the rule can decide the label) and reads them
// through both GetPosteriors and ListPosteriors of an in-process server over a real gRPC channel
// and a real PostgreSQL. Majority vote (and every method before its first fit) gives an item
// the smoothed vote shares (count + s) / (n + K s), so equal counts give equal doubles.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "common/status_matchers.h"
#include "server/verity_server.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/common.pb.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::tests {
namespace {

using ::verity::testing::IsOk;

// One item's expected outcome: `label` among the exactly `tied` most probable classes.
struct Expected {
  std::string item;
  int32_t label;
  std::vector<int32_t> tied;
};

class TieRuleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pg_ = TestPostgres::Start("verity-tie-rule").release(); }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(pg_, nullptr);
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 2);
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<client::VerityClient>(
        client::CreateInsecureChannel(absl::StrCat("127.0.0.1:", server_->port())),
        client::ClientOptions{});
  }
  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }

  void CreateProject(const std::string& name, const std::vector<std::string>& classes,
                     v1::TruthMethod method) {
    v1::Project project;
    project.set_name(name);
    for (const std::string& c : classes) project.add_classes(c);
    if (method != v1::TRUTH_METHOD_UNSPECIFIED) {
      project.mutable_settings()->mutable_model()->set_method(method);
    }
    ASSERT_THAT(client_->CreateProject(project), IsOk());
  }

  // Submits (item, annotator, label) triples on one stream; every one must be accepted.
  void Submit(const std::string& project, const std::vector<LabelTriple>& labels) {
    SubmitAllAccepted(*client_, project, labels);
  }

  // Checks every expected item through GetPosteriors and through ListPosteriors (pages of 2,
  // so the items span pages); each posterior must carry `model_version`.
  void ExpectLabels(const std::string& project, const std::vector<Expected>& expected,
                    int64_t model_version) {
    std::vector<std::string> ids;
    for (const Expected& e : expected) ids.push_back(e.item);
    absl::StatusOr<std::vector<v1::Posterior>> got = client_->GetPosteriors(project, ids);
    ASSERT_THAT(got, IsOk());
    ASSERT_EQ(got->size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("GetPosteriors, item ", expected[i].item));
      ExpectTieRule((*got)[i], expected[i], model_version);
    }

    std::map<std::string, v1::Posterior> listed;
    std::string token;
    do {
      absl::StatusOr<v1::ListPosteriorsResponse> page = client_->ListPosteriors(project, 2, token);
      ASSERT_THAT(page, IsOk());
      for (const v1::Posterior& p : page->posteriors()) listed[p.item()] = p;
      token = page->next_page_token();
    } while (!token.empty());
    for (const Expected& e : expected) {
      SCOPED_TRACE(absl::StrCat("ListPosteriors, item ", e.item));
      auto it = listed.find(e.item);
      ASSERT_NE(it, listed.end());
      ExpectTieRule(it->second, e, model_version);
    }
  }

  static void ExpectTieRule(const v1::Posterior& p, const Expected& e, int64_t model_version) {
    EXPECT_EQ(p.model_version(), model_version);
    ASSERT_GT(p.probabilities_size(), 0);
    // The premise: the tied classes share exactly the largest probability.
    const double top = p.probabilities(e.tied.front());
    for (int32_t c = 0; c < p.probabilities_size(); ++c) {
      const bool tied = std::find(e.tied.begin(), e.tied.end(), c) != e.tied.end();
      if (tied) {
        EXPECT_EQ(p.probabilities(c), top) << "class " << c << " is not exactly tied";
      } else {
        EXPECT_LT(p.probabilities(c), top) << "class " << c;
      }
    }
    // The rule.
    EXPECT_EQ(p.map_label(), e.label);
    EXPECT_EQ(p.confidence(), top);
  }

  static TestPostgres* pg_;
  std::unique_ptr<server::VerityServer> server_;
  std::unique_ptr<client::VerityClient> client_;
};

TestPostgres* TieRuleTest::pg_ = nullptr;

TEST_F(TieRuleTest, MajorityVoteTieOfTwoClassesGoesToTheFirst) {
  CreateProject("two", {"a", "b"}, v1::TRUTH_METHOD_MAJORITY_VOTE);
  Submit("two", {{"ab", "w1", 0}, {"ab", "w2", 1},
                 // The same tie with the second class submitted first.
                 {"ba", "w1", 1}, {"ba", "w2", 0},
                 // No tie: b wins, so the label is not class 0 whatever the posterior.
                 {"bb", "w1", 1}, {"bb", "w2", 1}, {"bb", "w3", 0}});
  ExpectLabels("two", {{"ab", 0, {0, 1}}, {"ba", 0, {0, 1}}, {"bb", 1, {1}}},
               /*model_version=*/0);
}

TEST_F(TieRuleTest, MajorityVoteTieOfClassesOneAndTwoGoesToClassOne) {
  CreateProject("three", {"x", "y", "z"}, v1::TRUTH_METHOD_MAJORITY_VOTE);
  Submit("three", {{"zy", "w1", 2}, {"zy", "w2", 1},
                   {"yz", "w1", 1}, {"yz", "w2", 2},
                   {"xyz", "w1", 2}, {"xyz", "w2", 1}, {"xyz", "w3", 0},
                   {"zzy", "w1", 2}, {"zzy", "w2", 2}, {"zzy", "w3", 1}});
  // An item with no labels is uniform: a three-way tie.
  v1::Item unlabelled;
  unlabelled.set_id("none");
  ASSERT_THAT(client_->AddItems("three", {unlabelled}), IsOk());
  const std::vector<Expected> expected = {{"zy", 1, {1, 2}},
                                          {"yz", 1, {1, 2}},
                                          {"xyz", 0, {0, 1, 2}},
                                          {"zzy", 2, {2}},
                                          {"none", 0, {0, 1, 2}}};
  ExpectLabels("three", expected, /*model_version=*/0);

  // A majority-vote fit serves the same vote shares from its version.
  absl::StatusOr<v1::ModelVersion> fitted = client_->TrainModel("three", absl::Minutes(1));
  ASSERT_THAT(fitted, IsOk());
  ASSERT_EQ(fitted->version(), 1);
  ExpectLabels("three", expected, /*model_version=*/1);
}

TEST_F(TieRuleTest, DefaultMethodBeforeItsFirstFitTiesToTheLowestIndex) {
  // The default method is Dawid-Skene; before its first fit it serves the smoothed vote.
  CreateProject("default", {"x", "y", "z"}, v1::TRUTH_METHOD_UNSPECIFIED);
  Submit("default", {{"zy", "w1", 2}, {"zy", "w2", 1},
                     {"ab", "w3", 0}, {"ab", "w4", 1},
                     {"zz", "w1", 2}});
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("default");
  ASSERT_THAT(status, IsOk());
  ASSERT_FALSE(status->has_current_version());
  ExpectLabels("default", {{"zy", 1, {1, 2}}, {"ab", 0, {0, 1}}, {"zz", 2, {2}}},
               /*model_version=*/0);
}

}  // namespace
}  // namespace verity::tests
