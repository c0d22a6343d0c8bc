// VerityClient's AssignmentService and UpdateProjectSettings methods against
// a recording stand-in server: the request fields arrive as given, the
// responses come back whole, and a server error keeps its code.

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"

namespace verity::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

// Records the last request of each RPC and answers from canned responses.
class RecordingAssignmentService final
    : public v1::AssignmentService::Service {
 public:
  grpc::Status SuggestItems(grpc::ServerContext*,
                            const v1::SuggestItemsRequest* request,
                            v1::SuggestItemsResponse* response) override {
    absl::MutexLock lock(&mu_);
    last_items_request_ = *request;
    if (request->project() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no project missing");
    }
    for (int i = 0; i < request->k() && i < request->candidate_items_size();
         ++i) {
      v1::ItemSuggestion* s = response->add_suggestions();
      s->set_item(request->candidate_items(i));
      s->set_score(1.0 / (i + 1));
      s->set_p_correct(0.75);
    }
    return grpc::Status::OK;
  }
  grpc::Status SuggestAnnotators(
      grpc::ServerContext*, const v1::SuggestAnnotatorsRequest* request,
      v1::SuggestAnnotatorsResponse* response) override {
    absl::MutexLock lock(&mu_);
    last_annotators_request_ = *request;
    v1::AnnotatorSuggestion* s = response->add_suggestions();
    s->set_annotator(request->candidates_size() > 0 ? request->candidates(0)
                                                    : "anyone");
    s->set_score(0.5);
    return grpc::Status::OK;
  }

  v1::SuggestItemsRequest last_items_request() {
    absl::MutexLock lock(&mu_);
    return last_items_request_;
  }
  v1::SuggestAnnotatorsRequest last_annotators_request() {
    absl::MutexLock lock(&mu_);
    return last_annotators_request_;
  }

 private:
  absl::Mutex mu_;
  v1::SuggestItemsRequest last_items_request_ ABSL_GUARDED_BY(mu_);
  v1::SuggestAnnotatorsRequest last_annotators_request_ ABSL_GUARDED_BY(mu_);
};

class SettingsOnlyProjectService final : public v1::ProjectService::Service {
 public:
  grpc::Status UpdateProjectSettings(
      grpc::ServerContext*, const v1::UpdateProjectSettingsRequest* request,
      v1::UpdateProjectSettingsResponse* response) override {
    if (request->settings().assignment().confidence_target() > 1) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "settings.assignment.confidence_target: must be in "
                          "[0, 1]");
    }
    response->mutable_project()->set_name(request->project());
    *response->mutable_project()->mutable_settings() = request->settings();
    return grpc::Status::OK;
  }
};

class VerityClientAssignmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&assignment_);
    builder.RegisterService(&projects_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ClientOptions options;
    options.deadline = absl::Seconds(10);
    client_ = std::make_unique<VerityClient>(
        CreateInsecureChannel(absl::StrCat("127.0.0.1:", port)), options);
  }
  void TearDown() override { server_->Shutdown(); }

  RecordingAssignmentService assignment_;
  SettingsOnlyProjectService projects_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<VerityClient> client_;
};

TEST_F(VerityClientAssignmentTest, SuggestItemsSendsCandidatesAndReturnsAll) {
  const std::vector<std::string> candidates = {"i3", "i1", "i2"};
  absl::StatusOr<std::vector<v1::ItemSuggestion>> suggestions =
      client_->SuggestItems("birds", "w7", 2, candidates);
  ASSERT_THAT(suggestions, IsOk());
  ASSERT_EQ(suggestions->size(), 2u);
  EXPECT_EQ((*suggestions)[0].item(), "i3");
  EXPECT_EQ((*suggestions)[1].item(), "i1");
  EXPECT_DOUBLE_EQ((*suggestions)[1].score(), 0.5);
  EXPECT_DOUBLE_EQ((*suggestions)[1].p_correct(), 0.75);

  const v1::SuggestItemsRequest request = assignment_.last_items_request();
  EXPECT_EQ(request.project(), "birds");
  EXPECT_EQ(request.annotator(), "w7");
  EXPECT_EQ(request.k(), 2);
  EXPECT_THAT(request.candidate_items(), ElementsAre("i3", "i1", "i2"));
}

TEST_F(VerityClientAssignmentTest, SuggestItemsKeepsTheServersErrorCode) {
  EXPECT_THAT(client_->SuggestItems("missing", "w1", 1, {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

TEST_F(VerityClientAssignmentTest, SuggestAnnotatorsSendsItemAndCandidates) {
  const std::vector<std::string> candidates = {"w2", "w9"};
  absl::StatusOr<std::vector<v1::AnnotatorSuggestion>> suggestions =
      client_->SuggestAnnotators("birds", "i4", 3, candidates);
  ASSERT_THAT(suggestions, IsOk());
  ASSERT_EQ(suggestions->size(), 1u);
  EXPECT_EQ((*suggestions)[0].annotator(), "w2");

  const v1::SuggestAnnotatorsRequest request =
      assignment_.last_annotators_request();
  EXPECT_EQ(request.project(), "birds");
  EXPECT_EQ(request.item(), "i4");
  EXPECT_EQ(request.k(), 3);
  EXPECT_THAT(request.candidates(), ElementsAre("w2", "w9"));
}

TEST_F(VerityClientAssignmentTest, UpdateProjectSettingsReturnsTheProject) {
  v1::ProjectSettings settings;
  settings.mutable_assignment()->set_policy(
      v1::ASSIGNMENT_POLICY_UNCERTAINTY);
  settings.mutable_assignment()->set_confidence_target(0.95);
  absl::StatusOr<v1::Project> project =
      client_->UpdateProjectSettings("birds", settings);
  ASSERT_THAT(project, IsOk());
  EXPECT_EQ(project->name(), "birds");
  EXPECT_EQ(project->settings().assignment().policy(),
            v1::ASSIGNMENT_POLICY_UNCERTAINTY);
  EXPECT_DOUBLE_EQ(project->settings().assignment().confidence_target(),
                   0.95);
}

TEST_F(VerityClientAssignmentTest, UpdateProjectSettingsKeepsInvalidArgument) {
  v1::ProjectSettings settings;
  settings.mutable_assignment()->set_confidence_target(2);
  EXPECT_THAT(client_->UpdateProjectSettings("birds", settings),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("confidence_target")));
}

}  // namespace
}  // namespace verity::client
