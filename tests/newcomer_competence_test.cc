// A lia project's annotator added with features after the fit: the confusion its competence
// network predicts for them (truth.proto, predicted_from_features) is the one every call uses.
// Found by a black-box probe; each test quotes the promise it checks and drives an in-process
// server over a real gRPC channel and a real PostgreSQL. The DISABLED_ test is a known gap
// (docs/ASSIGNMENT.md): the online update of posteriors between fits still applies the
// population confusion to a newcomer's label; run it with --gtest_also_run_disabled_tests.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/testing/http_get.h"
#include "server/verity_server.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {
namespace {

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

using Label = std::tuple<std::string, std::string, int>;

v1::Annotation Ann(const std::string& item, const std::string& annotator, int label,
                   int64_t seconds = -1) {
  v1::Annotation a;
  a.set_item(item);
  a.set_annotator(annotator);
  a.set_label(label);
  if (seconds >= 0) a.mutable_client_time()->set_seconds(seconds);
  return a;
}

v1::AnnotationBatch Batch(uint64_t id, const std::string& project,
                          const std::vector<v1::Annotation>& annotations) {
  v1::AnnotationBatch batch;
  batch.set_batch_id(id);
  batch.set_project(project);
  for (const v1::Annotation& a : annotations) *batch.add_annotations() = a;
  return batch;
}

class NewcomerCompetenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pg_ = TestPostgres::Start("verity-ingest-assign-probe").release();
  }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(pg_, nullptr);
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }

  // Replaces the server with one started with `options` (over the same database).
  void Restart(server::VerityServer::Options options) {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
  }

  // A lia project `project` of 3 classes and 2 annotator features: 40 annotators (feature 0
  // is +1 for the skilled, right 90% of the time, and -1 for guessers, right 40%) label 300
  // items 5 times each; after the fit, "new-skilled" ({1, 0.1}) and "new-guesser" ({-1, 0.1})
  // are added, and their profiles must say predicted_from_features.
  void SetUpLiaProjectWithNewcomers(const std::string& project) {
    {
      v1::CreateProjectRequest request;
      request.mutable_project()->set_name(project);
      for (const char* c : {"a", "b", "c"}) request.mutable_project()->add_classes(c);
      request.mutable_project()->set_annotator_feature_dim(2);
      request.mutable_project()->mutable_settings()->mutable_model()->set_method(
          v1::TRUTH_METHOD_LIA);
      v1::CreateProjectResponse response;
      grpc::ClientContext context;
      context.set_deadline(Deadline());
      ASSERT_TRUE(
          v1::ProjectService::NewStub(channel_)->CreateProject(&context, request, &response).ok());
    }
    auto add_annotators = [&](const std::vector<std::pair<std::string, std::vector<float>>>& rows) {
      v1::AddAnnotatorsRequest request;
      request.set_project(project);
      for (const auto& [id, features] : rows) {
        v1::Annotator* a = request.add_annotators();
        a->set_id(id);
        for (float f : features) a->add_features(f);
      }
      v1::AddAnnotatorsResponse response;
      grpc::ClientContext context;
      context.set_deadline(Deadline());
      const grpc::Status status =
          v1::ProjectService::NewStub(channel_)->AddAnnotators(&context, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
    };
    constexpr int kAnnotators = 40, kItems = 300;
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> unit(0, 1);
    std::vector<std::pair<std::string, std::vector<float>>> crowd;
    for (int a = 0; a < kAnnotators; ++a) {
      crowd.push_back(
          {absl::StrCat("w", a), {a % 2 == 0 ? 1.0f : -1.0f, static_cast<float>(unit(rng) - 0.5)}});
    }
    ASSERT_NO_FATAL_FAILURE(add_annotators(crowd));
    std::vector<v1::Annotation> annotations;
    std::vector<int> pool(kAnnotators);
    for (int a = 0; a < kAnnotators; ++a) pool[a] = a;
    for (int i = 0; i < kItems; ++i) {
      const int y = static_cast<int>(rng() % 3);
      for (int j = 0; j < 5; ++j) {
        std::swap(pool[j], pool[j + rng() % (kAnnotators - j)]);
        const bool skilled = pool[j] % 2 == 0;
        int label = y;
        if (unit(rng) >= (skilled ? 0.9 : 0.4)) label = (y + 1 + static_cast<int>(rng() % 2)) % 3;
        annotations.push_back(Ann(absl::StrCat("i", i), absl::StrCat("w", pool[j]), label));
      }
    }
    EXPECT_EQ(SubmitBatch(Batch(1, project, annotations)).accepted(), kItems * 5);
    {
      v1::TrainModelRequest request;
      request.set_project(project);
      v1::TrainModelResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
      const grpc::Status status =
          v1::ModelService::NewStub(channel_)->TrainModel(&context, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
    ASSERT_NO_FATAL_FAILURE(
        add_annotators({{"new-skilled", {1.0f, 0.1f}}, {"new-guesser", {-1.0f, 0.1f}}}));
    v1::GetAnnotatorProfilesResponse profiles;
    ASSERT_TRUE(GetProfiles(project, {"new-skilled", "new-guesser"}, &profiles).ok());
    ASSERT_EQ(profiles.profiles_size(), 2);
    EXPECT_TRUE(profiles.profiles(0).predicted_from_features());
    EXPECT_TRUE(profiles.profiles(1).predicted_from_features());
  }

  grpc::Status GetProfiles(const std::string& project, const std::vector<std::string>& ids,
                           v1::GetAnnotatorProfilesResponse* response) {
    v1::GetAnnotatorProfilesRequest request;
    request.set_project(project);
    for (const std::string& id : ids) request.add_annotators(id);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::TruthService::NewStub(channel_)->GetAnnotatorProfiles(&context, request, response);
  }

  grpc::Status ListPosteriors(const std::string& project, int page_size, const std::string& token,
                              v1::ListPosteriorsResponse* response) {
    v1::ListPosteriorsRequest request;
    request.set_project(project);
    request.set_page_size(page_size);
    request.set_page_token(token);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::TruthService::NewStub(channel_)->ListPosteriors(&context, request, response);
  }

  v1::Posterior Posterior(const std::string& project, const std::string& item) {
    v1::GetPosteriorsResponse response;
    const grpc::Status status = GetPosteriors(project, {item}, &response);
    EXPECT_TRUE(status.ok()) << item << ": " << status.error_message();
    if (response.posteriors_size() != 1) return {};
    return response.posteriors(0);
  }

  grpc::Status CreateProject(const std::string& name, const v1::ProjectSettings& settings = {},
                             int num_classes = 2) {
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(name);
    for (int k = 0; k < num_classes; ++k) {
      request.mutable_project()->add_classes(absl::StrCat("c", k));
    }
    *request.mutable_project()->mutable_settings() = settings;
    v1::CreateProjectResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::ProjectService::NewStub(channel_)->CreateProject(&context, request, &response);
  }

  grpc::Status AddItems(const std::string& project, const std::vector<v1::Item>& items,
                        v1::AddItemsResponse* response = nullptr) {
    v1::AddItemsRequest request;
    request.set_project(project);
    for (const v1::Item& item : items) *request.add_items() = item;
    v1::AddItemsResponse local;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::ProjectService::NewStub(channel_)->AddItems(&context, request,
                                                           response ? response : &local);
  }

  static v1::Item Item(const std::string& id) {
    v1::Item item;
    item.set_id(id);
    return item;
  }
  static v1::Item GoldItem(const std::string& id, int gold) {
    v1::Item item = Item(id);
    item.set_gold_label(gold);
    return item;
  }

  v1::Project GetProject(const std::string& name) {
    v1::GetProjectRequest request;
    request.set_project(name);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    EXPECT_TRUE(
        v1::ProjectService::NewStub(channel_)->GetProject(&context, request, &response).ok());
    return response.project();
  }

  // TrainModel of `project`; its response in `response` when given.
  grpc::Status TrainModel(const std::string& project, v1::TrainModelResponse* response = nullptr) {
    v1::TrainModelRequest request;
    request.set_project(project);
    v1::TrainModelResponse local;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::ModelService::NewStub(channel_)->TrainModel(&context, request,
                                                           response ? response : &local);
  }

  grpc::Status UpdateSettings(const std::string& project, const v1::ProjectSettings& settings) {
    v1::UpdateProjectSettingsRequest request;
    request.set_project(project);
    *request.mutable_settings() = settings;
    v1::UpdateProjectSettingsResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::ProjectService::NewStub(channel_)->UpdateProjectSettings(&context, request,
                                                                        &response);
  }

  // One batch on its own stream; its ack.
  v1::BatchAck SubmitBatch(const v1::AnnotationBatch& batch) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto stream = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&context);
    EXPECT_TRUE(stream->Write(batch));
    stream->WritesDone();
    v1::BatchAck ack;
    EXPECT_TRUE(stream->Read(&ack));
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return ack;
  }

  v1::BatchAck Submit(const std::string& project, const std::vector<Label>& labels) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(1);
    batch.set_project(project);
    for (const auto& [item, annotator, label] : labels) {
      v1::Annotation* a = batch.add_annotations();
      a->set_item(item);
      a->set_annotator(annotator);
      a->set_label(label);
    }
    return SubmitBatch(batch);
  }

  grpc::Status SuggestItems(const std::string& project, const std::string& annotator, int k,
                            v1::SuggestItemsResponse* response,
                            const std::vector<std::string>& candidates = {}) {
    v1::SuggestItemsRequest request;
    request.set_project(project);
    request.set_annotator(annotator);
    request.set_k(k);
    for (const std::string& c : candidates) request.add_candidate_items(c);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::AssignmentService::NewStub(channel_)->SuggestItems(&context, request, response);
  }

  std::vector<std::string> SuggestedIds(const std::string& project, const std::string& annotator,
                                        int k) {
    v1::SuggestItemsResponse response;
    const grpc::Status status = SuggestItems(project, annotator, k, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> ids;
    for (const v1::ItemSuggestion& s : response.suggestions()) ids.push_back(s.item());
    return ids;
  }

  grpc::Status SuggestAnnotators(const std::string& project, const std::string& item, int k,
                                 const std::vector<std::string>& candidates,
                                 v1::SuggestAnnotatorsResponse* response) {
    v1::SuggestAnnotatorsRequest request;
    request.set_project(project);
    request.set_item(item);
    request.set_k(k);
    for (const std::string& c : candidates) request.add_candidates(c);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::AssignmentService::NewStub(channel_)->SuggestAnnotators(&context, request, response);
  }

  grpc::Status GetPosteriors(const std::string& project, const std::vector<std::string>& items,
                             v1::GetPosteriorsResponse* response) {
    v1::GetPosteriorsRequest request;
    request.set_project(project);
    for (const std::string& id : items) request.add_items(id);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::TruthService::NewStub(channel_)->GetPosteriors(&context, request, response);
  }

  static TestPostgres* pg_;
  std::unique_ptr<server::VerityServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TestPostgres* NewcomerCompetenceTest::pg_ = nullptr;

// assignment.proto: ItemSuggestion.p_correct and AnnotatorSuggestion.p_correct are the same
// quantity ("Predicted probability that the annotator labels the item correctly"), and both
// scores are the "Expected reduction of the item's posterior entropy if the annotator labels
// it". projects.proto INFORMATION_GAIN: "from the current posterior and the annotator's
// predicted confusion matrix (competence-aware)"; docs/ASSIGNMENT.md: "C = C(i, a) the
// annotator's predicted confusion matrix under the current model version". truth.proto
// AnnotatorProfile.predicted_from_features: "True when confusion and accuracy are predicted
// from the annotator's features (AddAnnotators) by the method's competence network: lia, for
// an annotator the current version's fit did not see". So for a lia annotator added with
// features after the fit, SuggestItems (annotator, candidate i0) must give the p_correct and
// score that SuggestAnnotators (i0, that annotator) gives, and tell a skilled newcomer from a
// guesser as SuggestAnnotators does.
TEST_F(NewcomerCompetenceTest, SuggestItemsAndSuggestAnnotatorsAgreeForANewAnnotatorWithFeatures) {
  const std::string project = "lia-features";
  ASSERT_NO_FATAL_FAILURE(SetUpLiaProjectWithNewcomers(project));
  std::map<std::string, double> item_p_correct;
  for (const char* annotator : {"new-skilled", "new-guesser"}) {
    v1::SuggestAnnotatorsResponse by_item;
    ASSERT_TRUE(SuggestAnnotators(project, "i0", 1, {annotator}, &by_item).ok());
    ASSERT_EQ(by_item.suggestions_size(), 1);
    v1::SuggestItemsResponse by_annotator;
    ASSERT_TRUE(SuggestItems(project, annotator, 1, &by_annotator, {"i0"}).ok());
    ASSERT_EQ(by_annotator.suggestions_size(), 1);
    EXPECT_NEAR(by_annotator.suggestions(0).p_correct(), by_item.suggestions(0).p_correct(), 1e-9)
        << annotator;
    EXPECT_NEAR(by_annotator.suggestions(0).score(), by_item.suggestions(0).score(), 1e-9)
        << annotator;
    item_p_correct[annotator] = by_annotator.suggestions(0).p_correct();
  }
  // The competence network tells the skilled from the guesser (as SuggestAnnotators does).
  EXPECT_GT(item_p_correct["new-skilled"], item_p_correct["new-guesser"] + 0.2);
}

// truth.proto: GetPosteriors answers "Current posteriors of the given items, reflecting every
// acked label"; includes_newer_labels: the item's labels newer than the fit are "updated online
// with the version's annotator parameters"; AnnotatorProfile.confusion: "Estimated by the
// project's current model", and predicted_from_features: "True when confusion and accuracy are
// predicted from the annotator's features (AddAnnotators) by the method's competence network:
// lia, for an annotator the current version's fit did not see". So one label 0 on a fresh item
// moves its posterior by that annotator's served confusion: from a newcomer whose predicted
// confusion is skilled (C[0][0] ~ 0.88) it says more for class 0 than from a newcomer predicted
// to be a guesser (C[0][0] ~ 0.29, below C[1][0] and C[2][0]). Checked against the served
// confusions: for every other class k, C_skilled[0][0] / C_skilled[k][0] exceeds
// C_guesser[0][0] / C_guesser[k][0], so class 0 must be more probable after the skilled label
// whatever the prior. Still open: the labels since the fit are applied through the model's
// ItemPosterior, which has no annotator features for an annotator outside the fit.
TEST_F(NewcomerCompetenceTest, DISABLED_ANewcomersLabelMovesThePosteriorByTheirPredictedConfusion) {
  const std::string project = "lia-online";
  ASSERT_NO_FATAL_FAILURE(SetUpLiaProjectWithNewcomers(project));
  v1::GetAnnotatorProfilesResponse profiles;
  ASSERT_TRUE(GetProfiles(project, {"new-skilled", "new-guesser"}, &profiles).ok());
  ASSERT_EQ(profiles.profiles_size(), 2);
  const auto& skilled = profiles.profiles(0).confusion().probabilities();
  const auto& guesser = profiles.profiles(1).confusion().probabilities();
  ASSERT_EQ(skilled.size(), 9);
  ASSERT_EQ(guesser.size(), 9);
  for (int k = 1; k < 3; ++k) {
    ASSERT_GT(skilled[0] / skilled[k * 3], guesser[0] / guesser[k * 3]) << k;
  }
  const v1::BatchAck ack = SubmitBatch(
      Batch(2, project, {Ann("fresh-s", "new-skilled", 0), Ann("fresh-g", "new-guesser", 0)}));
  ASSERT_EQ(ack.accepted(), 2) << ack.DebugString();
  const v1::Posterior from_skilled = Posterior(project, "fresh-s");
  const v1::Posterior from_guesser = Posterior(project, "fresh-g");
  ASSERT_EQ(from_skilled.probabilities_size(), 3);
  ASSERT_EQ(from_guesser.probabilities_size(), 3);
  EXPECT_EQ(from_skilled.num_labels(), 1);
  EXPECT_EQ(from_guesser.num_labels(), 1);
  EXPECT_GT(from_skilled.probabilities(0), from_guesser.probabilities(0) + 1e-6)
      << "after a skilled newcomer's label 0: " << from_skilled.ShortDebugString()
      << "\nafter a guesser newcomer's label 0: " << from_guesser.ShortDebugString();
}

}  // namespace
}  // namespace verity::tests
