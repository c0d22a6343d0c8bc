// Promises of the v1 API's proto comments that no other test held the server to: leases end
// when the annotator's label arrives and SuggestAnnotators takes none (assignment.proto), a
// stream's later batch may name another project (ingest.proto), UpdateProjectSettings replaces
// the settings whole (projects.proto), GetModelStatus's labels_since_version and calibration
// (models.proto), what lia serves for items and annotators its fit did not see, and that an
// annotator's accuracy is the prior-weighted diagonal of the confusion served with it
// (truth.proto). Each test drives an in-process server over a real gRPC channel and a real
// PostgreSQL; the expectations are the proto text's.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "common/status_matchers.h"
#include "server/verity_server.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/assignment.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/models.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.grpc.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::tests {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

class ApiPromisesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pg_ = TestPostgres::Start("verity-api-promises").release(); }
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
    channel_ = client::CreateInsecureChannel(absl::StrCat("127.0.0.1:", server_->port()));
    client_ = std::make_unique<client::VerityClient>(channel_, client::ClientOptions{});
  }
  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }

  void CreateProject(const std::string& name, const v1::ProjectSettings& settings = {}) {
    v1::Project project;
    project.set_name(name);
    project.add_classes("no");
    project.add_classes("yes");
    *project.mutable_settings() = settings;
    ASSERT_THAT(client_->CreateProject(project), IsOk());
  }

  // The largest sequence number of the stored live labels of project `project_id`.
  absl::StatusOr<int64_t> NewestSeq(int64_t project_id) {
    return server_->core().storage->pool->WithTransaction(
        "newest seq", [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
          return txn.exec_params1("SELECT max(seq) FROM annotations WHERE project_id = $1",
                                  project_id)[0]
              .as<int64_t>();
        });
  }

  // A project with one unlabelled item, "only", and at most `max_labels` labels per item.
  void CreateProjectWithOneItem(const std::string& name, int32_t max_labels) {
    v1::ProjectSettings settings;
    settings.mutable_assignment()->set_max_labels_per_item(max_labels);
    CreateProject(name, settings);
    AddItems(name, {"only"});
  }

  void AddItems(const std::string& project, const std::vector<std::string>& ids) {
    std::vector<v1::Item> items;
    for (const std::string& id : ids) items.emplace_back().set_id(id);
    ASSERT_THAT(client_->AddItems(project, items), IsOk());
  }

  // A batch of one label (annotator "w", class 1) of `item`, for `project` ("" = the stream's).
  static v1::AnnotationBatch OneLabelBatch(uint64_t id, const std::string& project,
                                           const std::string& item) {
    v1::AnnotationBatch b;
    b.set_batch_id(id);
    b.set_project(project);
    v1::Annotation* a = b.add_annotations();
    a->set_item(item);
    a->set_annotator("w");
    a->set_label(1);
    return b;
  }

  // Writes `batches` on one SubmitAnnotations stream and returns their acks; the stream must
  // end OK.
  std::vector<v1::BatchAck> SubmitOnOneStream(const std::vector<v1::AnnotationBatch>& batches) {
    auto ingest = v1::IngestService::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto stream = ingest->SubmitAnnotations(&context);
    for (const v1::AnnotationBatch& b : batches) EXPECT_TRUE(stream->Write(b));
    stream->WritesDone();
    std::vector<v1::BatchAck> acks;
    for (v1::BatchAck ack; stream->Read(&ack);) acks.push_back(ack);
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return acks;
  }

  // Submits (item, annotator, label) triples on one stream; every one must be accepted.
  void Submit(const std::string& project, const std::vector<LabelTriple>& labels) {
    SubmitAllAccepted(*client_, project, labels);
  }

  // The item ids SuggestItems returns to `annotator` (k = 10), in order.
  std::vector<std::string> SuggestedItems(const std::string& project, const std::string& annotator) {
    absl::StatusOr<std::vector<v1::ItemSuggestion>> suggestions =
        client_->SuggestItems(project, annotator, 10, {});
    EXPECT_THAT(suggestions, IsOk());
    std::vector<std::string> items;
    if (suggestions.ok()) {
      for (const v1::ItemSuggestion& s : *suggestions) items.push_back(s.item());
    }
    return items;
  }

  // A hang guard, not a speed check: a neural fit shares the machine with other suites.
  absl::StatusOr<v1::ModelVersion> Train(const std::string& project) {
    return client_->TrainModel(project, absl::Minutes(10));
  }

  // GetAnnotatorProfiles with a confusion detail, which the client library does not take.
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> ProfilesWithDetail(
      const std::string& project, const std::vector<std::string>& annotators,
      v1::ConfusionDetail detail) {
    v1::GetAnnotatorProfilesRequest request;
    request.set_project(project);
    for (const std::string& annotator : annotators) request.add_annotators(annotator);
    request.set_confusion_detail(detail);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::GetAnnotatorProfilesResponse response;
    const grpc::Status status =
        v1::TruthService::NewStub(channel_)->GetAnnotatorProfiles(&context, request, &response);
    if (!status.ok()) return client::FromGrpcStatus(status);
    return std::vector<v1::AnnotatorProfile>(response.profiles().begin(),
                                             response.profiles().end());
  }

  static TestPostgres* pg_;
  std::unique_ptr<server::VerityServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<client::VerityClient> client_;
};

TestPostgres* ApiPromisesTest::pg_ = nullptr;

// assignment.proto: a suggestion reserves a slot "until this time (or until the annotator's
// label for it arrives)". With at most 2 labels on the item, a's lease held after a's label
// would count twice (1 label + 1 lease = 2) and leave nothing for c.
TEST_F(ApiPromisesTest, ALeaseEndsWhenTheAnnotatorsLabelArrives) {
  CreateProjectWithOneItem("lease-ends", /*max_labels=*/2);
  ASSERT_THAT(SuggestedItems("lease-ends", "a"), ElementsAre("only"));
  Submit("lease-ends", {{"only", "a", 1}});
  EXPECT_THAT(SuggestedItems("lease-ends", "c"), ElementsAre("only"));
  // The slots are still counted: a's label and c's lease fill the item.
  EXPECT_THAT(SuggestedItems("lease-ends", "d"), IsEmpty());
}

// assignment.proto: SuggestAnnotators "does not lease". With at most 1 label on the item, any
// lease it took for a would leave nothing for b.
TEST_F(ApiPromisesTest, SuggestAnnotatorsTakesNoLease) {
  CreateProjectWithOneItem("no-lease", /*max_labels=*/1);
  // A known annotator, so a lease could be recorded against them.
  v1::Annotator a;
  a.set_id("a");
  ASSERT_THAT(client_->AddAnnotators("no-lease", {a}), IsOk());
  for (int call = 0; call < 3; ++call) {
    absl::StatusOr<std::vector<v1::AnnotatorSuggestion>> suggested =
        client_->SuggestAnnotators("no-lease", "only", 1, {"a"});
    ASSERT_THAT(suggested, IsOk());
    std::vector<std::string> annotators;
    for (const v1::AnnotatorSuggestion& s : *suggested) annotators.push_back(s.annotator());
    EXPECT_THAT(annotators, ElementsAre("a")) << "call " << call;
  }
  EXPECT_THAT(SuggestedItems("no-lease", "b"), ElementsAre("only"));
  // The limit holds: b's lease takes the only slot.
  EXPECT_THAT(SuggestedItems("no-lease", "c"), IsEmpty());
}

// README / assignment.proto: SuggestAnnotators ranks by expected information gain, the score
// an ItemSuggestion carries: the expected reduction of the item's posterior entropy if the
// annotator labels it. A reduction can be neither negative nor more than the entropy itself
// (the posterior after a label has entropy >= 0), and p_correct is a probability. Three
// annotators who agree on six items are competent (p_correct well above the entropy of an
// item two of them already labelled "yes").
TEST_F(ApiPromisesTest, AnAnnotatorSuggestionsScoreIsAnEntropyReduction) {
  CreateProject("annotator-gain");
  std::vector<LabelTriple> labels;
  for (int i = 0; i < 6; ++i) {
    for (const char* a : {"a", "b", "c"}) labels.push_back({absl::StrCat("i", i), a, i % 2});
  }
  labels.push_back({"target", "a", 1});
  labels.push_back({"target", "b", 1});
  Submit("annotator-gain", labels);
  absl::StatusOr<std::vector<v1::Posterior>> posterior =
      client_->GetPosteriors("annotator-gain", {"target"});
  ASSERT_THAT(posterior, IsOk());
  ASSERT_EQ(posterior->size(), 1u);
  double entropy = 0;
  for (double p : (*posterior)[0].probabilities()) {
    if (p > 0) entropy -= p * std::log(p);
  }
  absl::StatusOr<std::vector<v1::AnnotatorSuggestion>> suggested =
      client_->SuggestAnnotators("annotator-gain", "target", 1, {"c"});
  ASSERT_THAT(suggested, IsOk());
  ASSERT_EQ(suggested->size(), 1u);
  const v1::AnnotatorSuggestion& c = (*suggested)[0];
  EXPECT_EQ(c.annotator(), "c");
  EXPECT_GE(c.score(), 0.0);
  EXPECT_LE(c.score(), entropy + 1e-12) << "p_correct " << c.p_correct();
  EXPECT_GT(c.p_correct(), 0.5);
  EXPECT_LE(c.p_correct(), 1.0);
}

// ingest.proto: "later batches may leave it empty to reuse it, or name another project". One
// stream: x to A, y to B, z with no project (B again). GetPosteriors answers NOT_FOUND for an
// item the project does not have (truth.proto).
TEST_F(ApiPromisesTest, ALaterBatchOfAStreamMayNameAnotherProject) {
  CreateProject("stream-a");
  CreateProject("stream-b");
  const std::vector<v1::BatchAck> acks = SubmitOnOneStream(
      {OneLabelBatch(1, "stream-a", "x"), OneLabelBatch(2, "stream-b", "y"),
       OneLabelBatch(3, "", "z")});
  ASSERT_EQ(acks.size(), 3u);
  for (uint64_t b = 0; b < 3; ++b) {
    EXPECT_EQ(acks[b].batch_id(), b + 1);
    EXPECT_EQ(acks[b].error_code(), 0) << acks[b].error_message();
    EXPECT_EQ(acks[b].accepted(), 1) << "batch " << b + 1;
  }
  auto posteriors = [&](const std::string& project, const std::string& item) {
    return client_->GetPosteriors(project, {item});
  };
  absl::StatusOr<std::vector<v1::Posterior>> x = posteriors("stream-a", "x");
  ASSERT_THAT(x, IsOk());
  EXPECT_EQ((*x)[0].num_labels(), 1);
  EXPECT_THAT(posteriors("stream-a", "y"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(posteriors("stream-a", "z"), StatusIs(absl::StatusCode::kNotFound));
  for (const char* item : {"y", "z"}) {
    absl::StatusOr<std::vector<v1::Posterior>> in_b = posteriors("stream-b", item);
    ASSERT_THAT(in_b, IsOk()) << item;
    EXPECT_EQ((*in_b)[0].num_labels(), 1) << item;
  }
  EXPECT_THAT(posteriors("stream-b", "x"), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<v1::Project> a = client_->GetProject("stream-a");
  absl::StatusOr<v1::Project> b = client_->GetProject("stream-b");
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->num_labels(), 1);
  EXPECT_EQ(b->num_labels(), 2);
}

// ingest.proto: a later batch that leaves the project out reuses the project the stream named
// last. When naming another project fails (here it does not exist), later batches without a
// project go to that named project too, so they fail the same way: none of them is written to
// the project named before (the authorization interceptor checks them against the named one).
TEST_F(ApiPromisesTest, ABatchAfterAFailedSwitchOfProjectIsNotWrittenToTheEarlierProject) {
  CreateProject("switch-from");
  const std::vector<v1::BatchAck> acks = SubmitOnOneStream(
      {OneLabelBatch(1, "switch-from", "x"), OneLabelBatch(2, "no-such-project", "y"),
       OneLabelBatch(3, "", "z")});
  ASSERT_EQ(acks.size(), 3u);
  EXPECT_EQ(acks[0].accepted(), 1) << acks[0].error_message();
  for (int b : {1, 2}) {
    EXPECT_EQ(acks[b].accepted(), 0) << "batch " << b + 1;
    EXPECT_EQ(acks[b].error_code(), static_cast<int>(absl::StatusCode::kNotFound))
        << "batch " << b + 1 << ": " << acks[b].error_message();
    EXPECT_TRUE(absl::StrContains(acks[b].error_message(), "no-such-project"))
        << acks[b].error_message();
  }
  EXPECT_THAT(client_->GetPosteriors("switch-from", {"z"}),
              StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<v1::Project> from = client_->GetProject("switch-from");
  ASSERT_THAT(from, IsOk());
  EXPECT_EQ(from->num_labels(), 1);
}

// projects.proto: UpdateProjectSettings "replaces the project's settings whole, except that an
// unset model.method keeps the project's method"; zero values mean the server's default. An
// update that sets only max_labels_per_item leaves every other setting at zero, the method
// as created, and the old item limit no longer refuses a sixth item.
TEST_F(ApiPromisesTest, UpdateProjectSettingsReplacesTheSettingsWholeButTheMethod) {
  v1::ProjectSettings created;
  created.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  created.mutable_model()->set_max_iterations(7);
  created.mutable_model()->set_calibration("none");
  created.mutable_assignment()->set_min_labels_per_item(3);
  created.mutable_assignment()->set_lease_seconds(30);
  created.mutable_limits()->set_max_items(5);
  CreateProject("replace", created);
  // The premise: the limit is in force.
  AddItems("replace", {"i1", "i2", "i3", "i4", "i5"});
  v1::Item sixth;
  sixth.set_id("i6");
  EXPECT_THAT(client_->AddItems("replace", {sixth}),
              StatusIs(absl::StatusCode::kResourceExhausted));

  v1::ProjectSettings update;
  update.mutable_assignment()->set_max_labels_per_item(4);
  absl::StatusOr<v1::Project> updated = client_->UpdateProjectSettings("replace", update);
  ASSERT_THAT(updated, IsOk());
  absl::StatusOr<v1::Project> read = client_->GetProject("replace");
  ASSERT_THAT(read, IsOk());
  for (const v1::Project* project : {&*updated, &*read}) {
    SCOPED_TRACE(project == &*updated ? "UpdateProjectSettings response" : "GetProject");
    const v1::ProjectSettings& s = project->settings();
    EXPECT_EQ(s.model().method(), v1::TRUTH_METHOD_DAWID_SKENE);
    EXPECT_EQ(s.model().max_iterations(), 0);
    EXPECT_EQ(s.model().calibration(), "");
    EXPECT_EQ(s.assignment().min_labels_per_item(), 0);
    EXPECT_EQ(s.assignment().lease_seconds(), 0);
    EXPECT_EQ(s.assignment().max_labels_per_item(), 4);
    EXPECT_EQ(s.limits().max_items(), 0);
  }
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("replace");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->method(), v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_THAT(client_->AddItems("replace", {sixth}), IsOk());
}

// models.proto: labels_since_version counts the labels committed after the current version's
// watermark, and calibration is "absent when ModelSettings.calibration is \"none\"".
TEST_F(ApiPromisesTest, ModelStatusCountsLabelsSinceTheVersionAndOmitsCalibrationNone) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_calibration("none");
  CreateProject("since", settings);
  std::vector<std::tuple<std::string, std::string, int32_t>> labels;
  for (int i = 0; i < 6; ++i) {
    for (int w = 0; w < 3; ++w) {
      labels.emplace_back(absl::StrCat("i", i), absl::StrCat("w", w), (i + (w == 2 ? 1 : 0)) % 2);
    }
  }
  Submit("since", labels);
  absl::StatusOr<v1::ModelVersion> first = Train("since");
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("since");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), first->version());
  EXPECT_EQ(status->labels_since_version(), 0);
  EXPECT_FALSE(status->has_calibration()) << status->calibration().DebugString();

  Submit("since", {{"i0", "late", 0}, {"i1", "late", 1}, {"i2", "late", 0}});
  status = client_->GetModelStatus("since");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), first->version());
  EXPECT_EQ(status->num_labels(), 21);
  EXPECT_EQ(status->labels_since_version(), 3);
  EXPECT_FALSE(status->has_calibration()) << status->calibration().DebugString();

  absl::StatusOr<v1::ModelVersion> second = Train("since");
  ASSERT_THAT(second, IsOk());
  status = client_->GetModelStatus("since");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), second->version());
  EXPECT_EQ(status->labels_since_version(), 0);
  EXPECT_FALSE(status->has_calibration()) << status->calibration().DebugString();
}

// docs/SECURITY.md: "TrainModel with nothing new since the current version's fit returns that
// version and writes nothing". AddAnnotators repeating an annotator's features is nothing new;
// changed features are (a competence network reads them).
TEST_F(ApiPromisesTest, TrainModelAfterTheSameAnnotatorFeaturesAgainReturnsTheCurrentVersion) {
  v1::Project project;
  project.set_name("same-features");
  project.add_classes("no");
  project.add_classes("yes");
  project.set_annotator_feature_dim(2);
  project.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  ASSERT_THAT(client_->CreateProject(project), IsOk());
  v1::Annotator annotator;
  annotator.set_id("w0");
  annotator.add_features(0.5f);
  annotator.add_features(-1.0f);
  ASSERT_THAT(client_->AddAnnotators("same-features", {annotator}), IsOk());
  Submit("same-features", {{"i0", "w0", 1}, {"i1", "w0", 0}, {"i0", "w1", 1}});
  absl::StatusOr<v1::ModelVersion> first = Train("same-features");
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(client_->AddAnnotators("same-features", {annotator}), IsOk());
  absl::StatusOr<v1::ModelVersion> again = Train("same-features");
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->version(), first->version());
  annotator.set_features(1, 2.0f);
  ASSERT_THAT(client_->AddAnnotators("same-features", {annotator}), IsOk());
  absl::StatusOr<v1::ModelVersion> changed = Train("same-features");
  ASSERT_THAT(changed, IsOk());
  EXPECT_EQ(changed->version(), first->version() + 1);
}

// truth.proto, for lia: "an item created after the fit gets the mean item's" difficulty, and
// the embedding is "empty ... for annotators not in the current version's fit". Two items
// created after the fit (one added, one by its first label) get the same difficulty; two
// annotators created after it (one added, one by their first label) no embedding.
TEST_F(ApiPromisesTest, LiaServesTheMeanDifficultyAndNoEmbeddingForWhatItsFitDidNotSee) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_LIA);
  CreateProject("lia-after-fit", settings);
  // 40 items, each labelled by 6 annotators who are wrong 25%, 29%, ..., 45% of the time.
  std::mt19937 rng(7);
  std::vector<std::tuple<std::string, std::string, int32_t>> labels;
  for (int i = 0; i < 40; ++i) {
    const int truth = static_cast<int>(rng() % 2);
    for (int w = 0; w < 6; ++w) {
      const bool wrong = static_cast<int>(rng() % 100) < 25 + 4 * w;
      labels.emplace_back(absl::StrCat("i", i), absl::StrCat("w", w), wrong ? 1 - truth : truth);
    }
  }
  Submit("lia-after-fit", labels);
  absl::StatusOr<v1::ModelVersion> fitted = Train("lia-after-fit");
  ASSERT_THAT(fitted, IsOk());
  ASSERT_EQ(fitted->method(), v1::TRUTH_METHOD_LIA);

  AddItems("lia-after-fit", {"added-item"});
  v1::Annotator added;
  added.set_id("added-annotator");
  ASSERT_THAT(client_->AddAnnotators("lia-after-fit", {added}), IsOk());
  Submit("lia-after-fit", {{"labelled-item", "w0", 1}, {"i0", "labelling-annotator", 0}});

  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(absl::StrCat("i", i));
  ids.push_back("added-item");
  ids.push_back("labelled-item");
  absl::StatusOr<std::vector<v1::Posterior>> posteriors =
      client_->GetPosteriors("lia-after-fit", ids);
  ASSERT_THAT(posteriors, IsOk());
  ASSERT_THAT(*posteriors, SizeIs(42));
  // The premise: the fit learned a difficulty per item, not one for all.
  double lowest = 1, highest = 0;
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE((*posteriors)[i].has_difficulty()) << ids[i];
    lowest = std::min(lowest, (*posteriors)[i].difficulty());
    highest = std::max(highest, (*posteriors)[i].difficulty());
  }
  EXPECT_LT(lowest, highest);
  const v1::Posterior& added_item = (*posteriors)[40];
  const v1::Posterior& labelled_item = (*posteriors)[41];
  ASSERT_TRUE(added_item.has_difficulty());
  ASSERT_TRUE(labelled_item.has_difficulty());
  EXPECT_EQ(labelled_item.num_labels(), 1);
  EXPECT_DOUBLE_EQ(added_item.difficulty(), labelled_item.difficulty());
  EXPECT_GE(added_item.difficulty(), 0.0);
  EXPECT_LE(added_item.difficulty(), 1.0);

  absl::StatusOr<std::vector<v1::AnnotatorProfile>> profiles = client_->GetAnnotatorProfiles(
      "lia-after-fit", {"w0", "added-annotator", "labelling-annotator"});
  ASSERT_THAT(profiles, IsOk());
  ASSERT_THAT(*profiles, SizeIs(3));
  // The premise: an annotator in the fit has an embedding.
  EXPECT_THAT((*profiles)[0].embedding(), SizeIs(16));
  EXPECT_THAT((*profiles)[1].embedding(), IsEmpty());
  EXPECT_THAT((*profiles)[2].embedding(), IsEmpty());
}

// truth.proto: AnnotatorProfile.accuracy is the "probability of a correct label under the
// current class prior: sum_k prior_k * confusion[k][k]", confusion being the matrix the profile
// carries. The API does not serve the prior, so the test holds each method's accuracies to what
// that sum allows of one prior (a distribution over the classes, the same for every annotator
// of the project): accuracy lies between the smallest and the largest diagonal entry, and an
// annotator whose two diagonal entries differ implies prior_yes = (accuracy - C[no][no]) /
// (C[yes][yes] - C[no][no]), which must be one number for all of them and near the data's share
// of yes items (32 of 40). CONFUSION_DETAIL_NONE leaves out the matrix, not the accuracy: the
// same number either way.
TEST_F(ApiPromisesTest, AccuracyIsThePriorWeightedDiagonalOfTheServedConfusion) {
  // 40 items, every fifth of class no; four annotators wrong 10%, 15%, 20% and 25% of the time,
  // and one who answers yes to everything, whose two diagonal entries are far apart.
  std::mt19937 rng(11);
  std::vector<std::tuple<std::string, std::string, int32_t>> labels;
  for (int i = 0; i < 40; ++i) {
    const int truth = i % 5 == 0 ? 0 : 1;
    for (int w = 0; w < 4; ++w) {
      const bool wrong = static_cast<int>(rng() % 100) < 10 + 5 * w;
      labels.emplace_back(absl::StrCat("i", i), absl::StrCat("w", w), wrong ? 1 - truth : truth);
    }
    labels.emplace_back(absl::StrCat("i", i), "yes-sayer", 1);
  }
  const std::vector<std::string> annotators = {"w0", "w1", "w2", "w3", "yes-sayer"};
  struct Method {
    v1::TruthMethod method;
    const char* name;
    // common.proto: "full confusion per annotator", so the yes-sayer's diagonal entries differ.
    bool full_confusion;
  };
  for (const Method& m : {Method{v1::TRUTH_METHOD_DAWID_SKENE, "ds", true},
                          Method{v1::TRUTH_METHOD_MAJORITY_VOTE, "mv", false},
                          Method{v1::TRUTH_METHOD_ONE_COIN, "one-coin", false},
                          Method{v1::TRUTH_METHOD_GLAD, "glad", false},
                          Method{v1::TRUTH_METHOD_MACE, "mace", false},
                          Method{v1::TRUTH_METHOD_LIA, "lia", false}}) {
    SCOPED_TRACE(m.name);
    const std::string project = absl::StrCat("accuracy-", m.name);
    v1::ProjectSettings settings;
    settings.mutable_model()->set_method(m.method);
    settings.mutable_model()->set_calibration("none");
    CreateProject(project, settings);
    Submit(project, labels);
    absl::StatusOr<v1::ModelVersion> fitted = Train(project);
    ASSERT_THAT(fitted, IsOk());
    ASSERT_EQ(fitted->method(), m.method);

    absl::StatusOr<std::vector<v1::AnnotatorProfile>> full =
        ProfilesWithDetail(project, annotators, v1::CONFUSION_DETAIL_FULL);
    absl::StatusOr<std::vector<v1::AnnotatorProfile>> none =
        ProfilesWithDetail(project, annotators, v1::CONFUSION_DETAIL_NONE);
    ASSERT_THAT(full, IsOk());
    ASSERT_THAT(none, IsOk());
    ASSERT_THAT(*full, SizeIs(annotators.size()));
    ASSERT_THAT(*none, SizeIs(annotators.size()));
    std::vector<std::pair<std::string, double>> implied_yes_priors;  // (annotator, prior_yes)
    for (size_t a = 0; a < annotators.size(); ++a) {
      SCOPED_TRACE(annotators[a]);
      const v1::AnnotatorProfile& profile = (*full)[a];
      ASSERT_EQ(profile.annotator(), annotators[a]);
      ASSERT_EQ((*none)[a].annotator(), annotators[a]);
      ASSERT_TRUE(profile.has_confusion());
      ASSERT_EQ(profile.confusion().num_classes(), 2);
      ASSERT_THAT(profile.confusion().probabilities(), SizeIs(4));
      const double no_no = profile.confusion().probabilities(0);
      const double yes_yes = profile.confusion().probabilities(3);
      const double accuracy = profile.accuracy();
      EXPECT_GE(accuracy, std::min(no_no, yes_yes) - 1e-12)
          << "C[no][no] " << no_no << ", C[yes][yes] " << yes_yes;
      EXPECT_LE(accuracy, std::max(no_no, yes_yes) + 1e-12)
          << "C[no][no] " << no_no << ", C[yes][yes] " << yes_yes;
      EXPECT_FALSE((*none)[a].has_confusion());
      EXPECT_EQ((*none)[a].accuracy(), accuracy);
      if (std::abs(yes_yes - no_no) > 0.2) {
        implied_yes_priors.emplace_back(annotators[a], (accuracy - no_no) / (yes_yes - no_no));
      }
    }
    // The premise: some annotator's accuracy tells the prior apart.
    if (m.full_confusion) {
      ASSERT_THAT(implied_yes_priors, Not(IsEmpty()));
    }
    for (const auto& [annotator, prior_yes] : implied_yes_priors) {
      EXPECT_NEAR(prior_yes, implied_yes_priors.front().second, 1e-9)
          << annotator << " and " << implied_yes_priors.front().first;
      EXPECT_GE(prior_yes, 0.65) << annotator;
      EXPECT_LE(prior_yes, 0.95) << annotator;
    }
  }
}

// projects.proto: AddItems and AddAnnotators add new ids and update existing ones, and the
// response counts each. An id given twice in one call is one new entity, added by its first
// entry and updated by its second: added counts what the project gained.
// truth.proto: GetPosteriors takes 1 to 10,000 ids and ListPosteriors pages of up to 10,000
// items, and projects have up to 256 classes; but the server sends at most 16 MiB. At 256
// classes a posterior takes over 2,048 bytes, so 10,000 of them (over 20 MB) do not fit. A
// page ends early (its token continues it: every item once, in creation order); GetPosteriors
// answers RESOURCE_EXHAUSTED naming `items`; the client's GetPosteriors splits its calls and
// returns every posterior. (Before the fix both calls failed on gRPC's send limit.)
TEST_F(ApiPromisesTest, PosteriorsOfManyClassesArePagedWithinTheResponseLimit) {
  const int kItems = 10000;
  v1::Project project;
  project.set_name("many-classes");
  for (int c = 0; c < 256; ++c) project.add_classes(absl::StrCat("c", c));
  ASSERT_THAT(client_->CreateProject(project), IsOk());
  std::vector<std::string> ids;
  for (int i = 0; i < kItems; ++i) ids.push_back(absl::StrCat("item-", 100000 + i));
  AddItems("many-classes", ids);

  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    absl::StatusOr<v1::ListPosteriorsResponse> page =
        client_->ListPosteriors("many-classes", /*page_size=*/10000, token);
    ASSERT_THAT(page, IsOk());
    ASSERT_GT(page->posteriors_size(), 0);
    for (const v1::Posterior& p : page->posteriors()) {
      listed.push_back(p.item());
      EXPECT_EQ(p.probabilities_size(), 256);
    }
    token = page->next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(listed, ids);
  EXPECT_GE(pages, 2) << "10,000 posteriors of 256 classes cannot fit in one 16 MiB response";

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GetPosteriorsRequest request;
  request.set_project("many-classes");
  for (const std::string& id : ids) request.add_items(id);
  v1::GetPosteriorsResponse response;
  const grpc::Status status =
      v1::TruthService::NewStub(channel_)->GetPosteriors(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StartsWith(status.error_message(), "items:")) << status.error_message();

  absl::StatusOr<std::vector<v1::Posterior>> got = client_->GetPosteriors("many-classes", ids);
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(got->size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ((*got)[i].item(), ids[i]) << i;
}

// truth.proto: GetAnnotatorProfiles with ids answers RESOURCE_EXHAUSTED when their profiles
// would pass the 16 MiB response limit ("ask for fewer ids"). At 256 classes a full confusion
// takes 512 KiB, so 100 annotators do not fit in one response; the client's
// GetAnnotatorProfiles splits its calls and returns every profile, in order.
TEST_F(ApiPromisesTest, TheClientSplitsAnnotatorProfilesOfManyClasses) {
  v1::Project project;
  project.set_name("many-classes-annotators");
  for (int c = 0; c < 256; ++c) project.add_classes(absl::StrCat("c", c));
  ASSERT_THAT(client_->CreateProject(project), IsOk());
  std::vector<v1::Annotator> annotators;
  std::vector<std::string> ids;
  for (int a = 0; a < 100; ++a) {
    ids.push_back(absl::StrCat("w", a));
    annotators.emplace_back().set_id(ids.back());
  }
  ASSERT_THAT(client_->AddAnnotators("many-classes-annotators", annotators), IsOk());
  EXPECT_THAT(ProfilesWithDetail("many-classes-annotators", ids, v1::CONFUSION_DETAIL_FULL),
              StatusIs(absl::StatusCode::kResourceExhausted));
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> got =
      client_->GetAnnotatorProfiles("many-classes-annotators", ids);
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(got->size(), ids.size());
  for (size_t a = 0; a < ids.size(); ++a) {
    EXPECT_EQ((*got)[a].annotator(), ids[a]);
    EXPECT_EQ((*got)[a].confusion().probabilities_size(), 256 * 256);
  }
}

TEST_F(ApiPromisesTest, AnIdTwiceInOneCallIsAddedOnceAndUpdatedOnce) {
  CreateProject("twice");
  AddItems("twice", {"old"});
  std::vector<v1::Item> items(4);
  items[0].set_id("new");
  items[1].set_id("new");
  items[2].set_id("old");
  items[3].set_id("newer");
  absl::StatusOr<client::AddItemsTotals> added_items = client_->AddItems("twice", items);
  ASSERT_THAT(added_items, IsOk());
  EXPECT_EQ(added_items->added, 2);
  EXPECT_EQ(added_items->updated, 2);
  std::vector<v1::Annotator> annotators(3);
  annotators[0].set_id("a");
  annotators[1].set_id("b");
  annotators[2].set_id("a");
  absl::StatusOr<client::AddItemsTotals> added_annotators =
      client_->AddAnnotators("twice", annotators);
  ASSERT_THAT(added_annotators, IsOk());
  EXPECT_EQ(added_annotators->added, 2);
  EXPECT_EQ(added_annotators->updated, 1);
  absl::StatusOr<v1::Project> project = client_->GetProject("twice");
  ASSERT_THAT(project, IsOk());
  EXPECT_EQ(project->num_items(), 3);
  EXPECT_EQ(project->num_annotators(), 2);
}

// projects.proto, ModelSettings.method: "UNSPECIFIED: auto for a project created from now on
// (the server stores AUTO), ds for one created before auto existed". The project below is
// written straight to the database as a server from before auto stored it: its settings blob is
// ProjectSettings without a method (UNSPECIFIED is not on the wire). This server loads it on
// first use and must fit it with ds and report ds (GetModelStatus: "the method the next fit will
// use"; the version's method), also after an UpdateProjectSettings that sets no method ("an
// unset model.method keeps the project's method") and after a restart.
TEST_F(ApiPromisesTest, AProjectStoredBeforeAutoIsFittedAndReportedAsDs) {
  v1::ProjectSettings old_settings;
  old_settings.mutable_assignment()->set_max_labels_per_item(5);
  ASSERT_EQ(old_settings.model().method(), v1::TRUTH_METHOD_UNSPECIFIED);
  storage::ProjectRecord record;
  record.name = "before-auto";
  record.classes = {"no", "yes"};
  record.settings = old_settings.SerializeAsString();
  absl::StatusOr<storage::ProjectRecord> stored =
      server_->core().storage->projects->CreateProject(record);
  ASSERT_THAT(stored, IsOk());
  const int64_t project_id = stored->project_id;

  absl::StatusOr<v1::GetModelStatusResponse> before = client_->GetModelStatus("before-auto");
  ASSERT_THAT(before, IsOk());
  EXPECT_EQ(before->method(), v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(before->chosen_method(), "") << "chosen_method is for method auto only";

  Submit("before-auto", {{"i1", "a", 1}, {"i1", "b", 1}, {"i1", "c", 0},
                         {"i2", "a", 0}, {"i2", "b", 0}, {"i2", "c", 0},
                         {"i3", "a", 1}, {"i3", "b", 0}, {"i3", "c", 1}});
  absl::StatusOr<v1::ModelVersion> fitted = Train("before-auto");
  ASSERT_THAT(fitted, IsOk());
  EXPECT_EQ(fitted->method(), v1::TRUTH_METHOD_DAWID_SKENE);
  absl::StatusOr<storage::ModelVersionRecord> stored_version =
      server_->core().storage->versions->GetModelVersionMetadata(project_id, fitted->version());
  ASSERT_THAT(stored_version, IsOk());
  EXPECT_EQ(stored_version->method, "ds");
  absl::StatusOr<v1::GetModelStatusResponse> after = client_->GetModelStatus("before-auto");
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(after->method(), v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(after->current_version().method(), v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(after->chosen_method(), "");
  absl::StatusOr<std::vector<v1::ModelVersion>> versions =
      client_->ListModelVersions("before-auto", 0);
  ASSERT_THAT(versions, IsOk());
  ASSERT_THAT(*versions, SizeIs(1));
  EXPECT_EQ((*versions)[0].method(), v1::TRUTH_METHOD_DAWID_SKENE);

  // An update without a method keeps the project's method: still ds, not the new default.
  v1::ProjectSettings update;
  update.mutable_assignment()->set_max_labels_per_item(6);
  ASSERT_THAT(client_->UpdateProjectSettings("before-auto", update), IsOk());
  absl::StatusOr<v1::ModelVersion> refitted = Train("before-auto");
  ASSERT_THAT(refitted, IsOk());
  EXPECT_EQ(refitted->method(), v1::TRUTH_METHOD_DAWID_SKENE);

  // A restarted server loads it from the database again: still ds.
  TearDown();
  SetUp();
  ASSERT_NE(server_, nullptr);
  absl::StatusOr<v1::GetModelStatusResponse> restarted = client_->GetModelStatus("before-auto");
  ASSERT_THAT(restarted, IsOk());
  EXPECT_EQ(restarted->method(), v1::TRUTH_METHOD_DAWID_SKENE);
  absl::StatusOr<v1::ModelVersion> after_restart = Train("before-auto");
  ASSERT_THAT(after_restart, IsOk());
  EXPECT_EQ(after_restart->method(), v1::TRUTH_METHOD_DAWID_SKENE);
}

// The other half of the same comment: a project created now with method UNSPECIFIED is auto,
// and "the server stores AUTO" — the database row itself names AUTO, so that it is not taken
// for a project from before auto (which UNSPECIFIED means when read back), also after a restart.
TEST_F(ApiPromisesTest, ANewProjectWithoutAMethodIsStoredAsAuto) {
  CreateProject("after-auto");
  absl::StatusOr<storage::ProjectRecord> row =
      server_->core().storage->projects->GetProjectByName("after-auto");
  ASSERT_THAT(row, IsOk());
  v1::ProjectSettings stored;
  ASSERT_TRUE(stored.ParseFromString(row->settings));
  EXPECT_EQ(stored.model().method(), v1::TRUTH_METHOD_AUTO);

  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("after-auto");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->method(), v1::TRUTH_METHOD_AUTO);

  TearDown();
  SetUp();
  ASSERT_NE(server_, nullptr);
  absl::StatusOr<v1::GetModelStatusResponse> restarted = client_->GetModelStatus("after-auto");
  ASSERT_THAT(restarted, IsOk());
  EXPECT_EQ(restarted->method(), v1::TRUTH_METHOD_AUTO);
}

// truth.proto: GetPosteriors answers "in request order", whatever the order of creation.
TEST_F(ApiPromisesTest, GetPosteriorsAnswersInRequestOrder) {
  CreateProject("order");
  // i0 has 1 label, i1 2, i2 3, so that each answer shows which item it is.
  Submit("order", {{"i0", "w0", 0},
                   {"i1", "w0", 1}, {"i1", "w1", 1},
                   {"i2", "w0", 0}, {"i2", "w1", 0}, {"i2", "w2", 0}});
  auto truth = v1::TruthService::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GetPosteriorsRequest request;
  request.set_project("order");
  for (const char* id : {"i2", "i0", "i1"}) request.add_items(id);
  v1::GetPosteriorsResponse response;
  const grpc::Status status = truth->GetPosteriors(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.posteriors_size(), 3);
  EXPECT_EQ(response.posteriors(0).item(), "i2");
  EXPECT_EQ(response.posteriors(0).num_labels(), 3);
  EXPECT_EQ(response.posteriors(1).item(), "i0");
  EXPECT_EQ(response.posteriors(1).num_labels(), 1);
  EXPECT_EQ(response.posteriors(2).item(), "i1");
  EXPECT_EQ(response.posteriors(2).num_labels(), 2);
}

// models.proto: ListModelVersions' limit is "1 to 1,000; 0 = 20. Newest first", and every
// field of a ModelVersion is the stored version's, its watermark the sequence number of the
// newest annotation the fit saw.
TEST_F(ApiPromisesTest, ListModelVersionsHonoursTheLimitNewestFirstWithTheStoredFields) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("versions", settings);
  for (int v = 0; v < 3; ++v) {
    Submit("versions", {{absl::StrCat("i", v), "w0", 0}, {absl::StrCat("i", v), "w1", 1},
                        {absl::StrCat("i", v), "w2", v % 2}});
    ASSERT_THAT(Train("versions"), IsOk());
  }
  auto versions_of = [&](int32_t limit) {
    std::vector<int32_t> out;
    absl::StatusOr<std::vector<v1::ModelVersion>> listed =
        client_->ListModelVersions("versions", limit);
    EXPECT_THAT(listed, IsOk());
    if (listed.ok()) {
      for (const v1::ModelVersion& v : *listed) out.push_back(v.version());
    }
    return out;
  };
  EXPECT_THAT(versions_of(1), ElementsAre(3));
  EXPECT_THAT(versions_of(2), ElementsAre(3, 2));
  EXPECT_THAT(versions_of(1000), ElementsAre(3, 2, 1));
  EXPECT_THAT(versions_of(0), ElementsAre(3, 2, 1));
  EXPECT_THAT(client_->ListModelVersions("versions", 1001),
              StatusIs(absl::StatusCode::kInvalidArgument));

  absl::StatusOr<std::vector<v1::ModelVersion>> listed =
      client_->ListModelVersions("versions", 1);
  ASSERT_THAT(listed, IsOk());
  ASSERT_THAT(*listed, SizeIs(1));
  const v1::ModelVersion& newest = (*listed)[0];
  absl::StatusOr<storage::ProjectRecord> project =
      server_->core().storage->projects->GetProjectByName("versions");
  ASSERT_THAT(project, IsOk());
  absl::StatusOr<std::vector<storage::ModelVersionRecord>> stored =
      server_->core().storage->versions->ListModelVersions(project->project_id, 1);
  ASSERT_THAT(stored, IsOk());
  ASSERT_THAT(*stored, SizeIs(1));
  const storage::ModelVersionRecord& row = (*stored)[0];
  EXPECT_EQ(newest.version(), row.version);
  EXPECT_EQ(newest.method(), v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(newest.num_labels(), 9);
  EXPECT_EQ(newest.num_labels(), row.num_labels);
  EXPECT_EQ(newest.watermark(), row.watermark);
  EXPECT_DOUBLE_EQ(newest.log_likelihood(), row.log_likelihood);
  EXPECT_LT(newest.log_likelihood(), 0);
  EXPECT_EQ(newest.iterations(), row.iterations);
  EXPECT_GE(newest.iterations(), 1);
  EXPECT_DOUBLE_EQ(newest.duration_ms(), row.duration_ms);
  EXPECT_EQ(newest.created_at().seconds(), absl::ToUnixSeconds(row.created_at));
  // The fit saw every label: its watermark is the largest sequence number of the project's
  // annotations.
  absl::StatusOr<int64_t> newest_seq = NewestSeq(project->project_id);
  ASSERT_THAT(newest_seq, IsOk());
  EXPECT_EQ(newest.watermark(), *newest_seq);
}

// models.proto: a ModelVersion's watermark is the "sequence number of the newest annotation
// the fit saw", not a count of labels. A revision (w0 relabels i0) draws a sequence number but
// leaves 3 labels: the 4 commits end at sequence number 4 or above, and TrainModel,
// ListModelVersions and GetModelStatus all report that number with num_labels 3.
TEST_F(ApiPromisesTest, AWatermarkIsASequenceNumberNotALabelCount) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("watermark", settings);
  Submit("watermark", {{"i0", "w0", 0}, {"i0", "w1", 1}, {"i0", "w2", 0}});
  absl::StatusOr<client::SubmitTotals> revision = client_->SubmitAnnotations(
      "watermark", Annotations({{"i0", "w0", 1}}), client::SubmitOptions{});
  ASSERT_THAT(revision, IsOk());
  ASSERT_EQ(revision->revised, 1);
  absl::StatusOr<storage::ProjectRecord> project =
      server_->core().storage->projects->GetProjectByName("watermark");
  ASSERT_THAT(project, IsOk());
  absl::StatusOr<int64_t> newest_seq = NewestSeq(project->project_id);
  ASSERT_THAT(newest_seq, IsOk());
  ASSERT_GE(*newest_seq, 4) << "the premise: 4 commits of a label drew 4 sequence numbers";

  absl::StatusOr<v1::ModelVersion> trained = Train("watermark");
  ASSERT_THAT(trained, IsOk());
  EXPECT_EQ(trained->num_labels(), 3);
  EXPECT_EQ(trained->watermark(), *newest_seq);
  absl::StatusOr<std::vector<v1::ModelVersion>> listed =
      client_->ListModelVersions("watermark", 0);
  ASSERT_THAT(listed, IsOk());
  ASSERT_THAT(*listed, SizeIs(1));
  EXPECT_EQ((*listed)[0].num_labels(), 3);
  EXPECT_EQ((*listed)[0].watermark(), *newest_seq);
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("watermark");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), trained->version());
  EXPECT_EQ(status->current_version().watermark(), *newest_seq);
  EXPECT_EQ(status->labels_since_version(), 0);
}

// projects.proto: CreateProject ignores the output-only fields of the project it is given.
TEST_F(ApiPromisesTest, CreateProjectIgnoresOutputOnlyFields) {
  v1::Project project;
  project.set_name("output-only");
  project.add_classes("no");
  project.add_classes("yes");
  project.set_num_items(99);
  project.set_num_annotators(7);
  project.set_num_labels(1234);
  project.mutable_created_at()->set_seconds(86400);
  const absl::Time before = absl::Now();
  absl::StatusOr<v1::Project> created = client_->CreateProject(project);
  ASSERT_THAT(created, IsOk());
  for (const absl::StatusOr<v1::Project>& p : {created, client_->GetProject("output-only")}) {
    ASSERT_THAT(p, IsOk());
    EXPECT_EQ(p->num_items(), 0);
    EXPECT_EQ(p->num_annotators(), 0);
    EXPECT_EQ(p->num_labels(), 0);
    EXPECT_GE(p->created_at().seconds(), absl::ToUnixSeconds(before) - 60);
  }
}

// projects.proto: AddItems on an existing id replaces its gold, and the served posterior
// follows: clamped to the new gold class.
TEST_F(ApiPromisesTest, AChangedGoldLabelIsServedAtOnce) {
  CreateProject("regold");
  Submit("regold", {{"x", "w0", 0}, {"x", "w1", 0}, {"x", "w2", 0}});
  auto set_gold = [&](int32_t gold) {
    v1::Item item;
    item.set_id("x");
    item.set_gold_label(gold);
    ASSERT_THAT(client_->AddItems("regold", {item}), IsOk());
  };
  auto served = [&] {
    absl::StatusOr<std::vector<v1::Posterior>> p = client_->GetPosteriors("regold", {"x"});
    EXPECT_THAT(p, IsOk());
    return p.ok() && p->size() == 1 ? (*p)[0] : v1::Posterior();
  };
  set_gold(0);
  v1::Posterior p = served();
  EXPECT_TRUE(p.is_gold());
  EXPECT_EQ(p.map_label(), 0);
  set_gold(1);  // Against every crowd label.
  p = served();
  EXPECT_TRUE(p.is_gold());
  EXPECT_EQ(p.map_label(), 1);
  ASSERT_EQ(p.probabilities_size(), 2);
  EXPECT_DOUBLE_EQ(p.probabilities(1), 1.0);
  EXPECT_DOUBLE_EQ(p.probabilities(0), 0.0);
}

// projects.proto: a refused AddAnnotators is refused whole; the valid annotators before the
// bad one are not created either.
TEST_F(ApiPromisesTest, ARefusedAddAnnotatorsCreatesNoAnnotator) {
  CreateProject("refused-annotators");
  std::vector<v1::Annotator> annotators(3);
  annotators[0].set_id("good-0");
  annotators[1].set_id("good-1");
  annotators[2].set_id("bad\tid");
  EXPECT_THAT(client_->AddAnnotators("refused-annotators", annotators),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client_->GetAnnotatorProfiles("refused-annotators", {"good-0"}),
              StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<v1::Project> project = client_->GetProject("refused-annotators");
  ASSERT_THAT(project, IsOk());
  EXPECT_EQ(project->num_annotators(), 0);
}

// projects.proto / README (--memory_budget_mb): ListProjects lists a project the memory budget
// unloaded from its stored record, without loading it; the listing must still say what
// GetProject says: the classes, feature dimensions, settings, creation time and counts.
TEST_F(ApiPromisesTest, AnUnloadedProjectIsListedAsGetProjectDescribesIt) {
  TearDown();
  server::VerityServer::Options options = TestServerOptions(pg_->url(), 2);
  options.memory_budget_bytes = 1;  // Every idle project is over it.
  options.evict_after_idle = absl::ZeroDuration();
  auto started = server::VerityServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);
  channel_ = client::CreateInsecureChannel(absl::StrCat("127.0.0.1:", server_->port()));
  client_ = std::make_unique<client::VerityClient>(channel_, client::ClientOptions{});

  v1::Project project;
  project.set_name("unloaded-listing");
  for (const char* c : {"cat", "dog", "bird"}) project.add_classes(c);
  project.set_item_feature_dim(3);
  project.set_annotator_feature_dim(2);
  project.mutable_settings()->mutable_assignment()->set_max_labels_per_item(4);
  project.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  ASSERT_THAT(client_->CreateProject(project), IsOk());
  Submit("unloaded-listing", {{"i0", "a", 0}, {"i0", "b", 1}, {"i1", "a", 2}});
  // A label replaced by a different one: one revision (Project.num_revisions).
  absl::StatusOr<client::SubmitTotals> revised = client_->SubmitAnnotations(
      "unloaded-listing", Annotations({{"i0", "a", 1}}), client::SubmitOptions{});
  ASSERT_THAT(revised, IsOk());
  ASSERT_EQ(revised->revised, 1);
  absl::StatusOr<v1::Project> described = client_->GetProject("unloaded-listing");
  ASSERT_THAT(described, IsOk());

  // A fit now, so that no background refit of the new labels holds the project; a pass of the
  // budget's own thread may still hold it a moment (a held project is skipped): pass again
  // until it is unloaded (at most 30 s, a hang guard).
  ASSERT_THAT(Train("unloaded-listing"), IsOk());
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (server_->core().registry->IfLoaded("unloaded-listing") != nullptr &&
         absl::Now() < give_up) {
    server_->core().registry->EvictOverBudget(absl::Now() + absl::Hours(1));
    if (server_->core().registry->IfLoaded("unloaded-listing") != nullptr) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ASSERT_EQ(server_->core().registry->IfLoaded("unloaded-listing"), nullptr);
  absl::StatusOr<std::vector<v1::Project>> listed = client_->ListProjects();
  ASSERT_THAT(listed, IsOk());
  const v1::Project* found = nullptr;
  for (const v1::Project& p : *listed) {
    if (p.name() == "unloaded-listing") found = &p;
  }
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(server_->core().registry->IfLoaded("unloaded-listing"), nullptr)
      << "listing loaded the unloaded project";
  EXPECT_THAT(found->classes(), ElementsAre("cat", "dog", "bird"));
  EXPECT_EQ(found->item_feature_dim(), 3);
  EXPECT_EQ(found->annotator_feature_dim(), 2);
  EXPECT_EQ(found->settings().assignment().max_labels_per_item(), 4);
  EXPECT_EQ(found->settings().model().method(), v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(found->settings().SerializeAsString(), described->settings().SerializeAsString());
  EXPECT_EQ(found->num_items(), 2);
  EXPECT_EQ(found->num_annotators(), 2);
  EXPECT_EQ(found->num_labels(), 3);
  EXPECT_EQ(found->num_revisions(), 1);
  EXPECT_EQ(found->created_at().seconds(), described->created_at().seconds());
  EXPECT_EQ(found->created_at().nanos(), described->created_at().nanos());
}

// ingest.proto: "Latest" is by client_time, "stored to the microsecond": a label made 300 ms
// before the live one, within the same second, is older. It is acked stale and the live label
// stays served.
TEST_F(ApiPromisesTest, ALabelOlderWithinTheSameSecondIsStale) {
  CreateProject("sub-second");
  auto labelled_at = [](uint64_t id, int32_t label, int32_t nanos) {
    v1::AnnotationBatch b = OneLabelBatch(id, "sub-second", "x");
    b.mutable_annotations(0)->set_label(label);
    b.mutable_annotations(0)->mutable_client_time()->set_seconds(1700000000);
    b.mutable_annotations(0)->mutable_client_time()->set_nanos(nanos);
    return b;
  };
  std::vector<v1::BatchAck> newer = SubmitOnOneStream({labelled_at(1, 1, 500000000)});
  ASSERT_THAT(newer, SizeIs(1));
  EXPECT_EQ(newer[0].error_code(), 0) << newer[0].error_message();
  EXPECT_EQ(newer[0].accepted(), 1);
  std::vector<v1::BatchAck> older = SubmitOnOneStream({labelled_at(2, 0, 200000000)});
  ASSERT_THAT(older, SizeIs(1));
  EXPECT_EQ(older[0].error_code(), 0) << older[0].error_message();
  EXPECT_EQ(older[0].stale(), 1);
  EXPECT_EQ(older[0].revised(), 0);
  // The client library sums the same outcome into its totals (SubmitTotals.stale).
  absl::StatusOr<client::SubmitTotals> again = client_->SubmitAnnotations(
      "sub-second", {labelled_at(3, 0, 100000000).annotations(0)}, client::SubmitOptions{});
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->stale, 1);
  EXPECT_EQ(again->accepted + again->duplicate + again->revised, 0);
  absl::StatusOr<std::vector<v1::Posterior>> served = client_->GetPosteriors("sub-second", {"x"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(1));
  EXPECT_EQ((*served)[0].map_label(), 1);
  EXPECT_EQ((*served)[0].num_labels(), 1);
}

// ingest.proto: "the latest counts", and "'Latest' is by client_time when both the live label
// and the new one carry it: a label older than the live one (e.g. a late retry of an old batch)
// is kept in history only and acked as stale". An annotator answers 0 at t=100, 1 at t=150 and
// 0 again at t=200; the t=150 batch arrives last. The t=200 label is acked duplicate (it repeats
// the live label) but its time is dropped, so the late t=150 label is taken as newer, acked
// revised, and served: the annotator's latest answer (0, at t=200) is lost.
TEST_F(ApiPromisesTest, ALateLabelOlderThanARepeatOfTheLiveLabelIsStale) {
  CreateProject("repeat-then-late");
  auto labelled_at = [](uint64_t id, int32_t label, int64_t seconds) {
    v1::AnnotationBatch b = OneLabelBatch(id, "repeat-then-late", "x");
    b.mutable_annotations(0)->set_label(label);
    b.mutable_annotations(0)->mutable_client_time()->set_seconds(seconds);
    return b;
  };
  std::vector<v1::BatchAck> first = SubmitOnOneStream({labelled_at(1, 0, 1700000100)});
  ASSERT_THAT(first, SizeIs(1));
  EXPECT_EQ(first[0].accepted(), 1) << first[0].DebugString();
  std::vector<v1::BatchAck> latest = SubmitOnOneStream({labelled_at(2, 0, 1700000200)});
  ASSERT_THAT(latest, SizeIs(1));
  EXPECT_EQ(latest[0].error_code(), 0) << latest[0].error_message();
  std::vector<v1::BatchAck> late = SubmitOnOneStream({labelled_at(3, 1, 1700000150)});
  ASSERT_THAT(late, SizeIs(1));
  EXPECT_EQ(late[0].error_code(), 0) << late[0].error_message();
  EXPECT_EQ(late[0].stale(), 1) << "t=150 is older than the latest label, t=200: "
                                << late[0].DebugString();
  EXPECT_EQ(late[0].revised(), 0);
  absl::StatusOr<std::vector<v1::Posterior>> served =
      client_->GetPosteriors("repeat-then-late", {"x"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(1));
  EXPECT_EQ((*served)[0].map_label(), 0) << "the label made last (t=200) is 0";
}

// keys.proto: RevokeKey is INVALID_ARGUMENT only for an empty key_id "or one of more than 64
// characters"; any other unknown key_id, 64 characters included, is NOT_FOUND.
TEST_F(ApiPromisesTest, RevokingAnUnknownKeyIdOf64CharactersIsNotFound) {
  EXPECT_THAT(client_->RevokeKey(std::string(64, 'a')), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client_->RevokeKey(std::string(65, 'a')),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// models.proto: choice_reason says why auto chose: "the criterion ("gold_cv",
// "held_out_labels" or "fallback"), its value for each candidate and the rule applied". Here an
// item has 2 labels, yet too few labels are held out to score the candidates, so ds serves by
// fallback: the reason must name that criterion and must not claim that no item has 2 labels.
TEST_F(ApiPromisesTest, AutoFallbackReasonNamesItsCriterionAndDoesNotDenyAnItemWithTwoLabels) {
  CreateProject("auto-reason");
  Submit("auto-reason", {{"i0", "a", 0}, {"i0", "b", 0}, {"i1", "a", 1}, {"i2", "b", 1}});
  ASSERT_THAT(Train("auto-reason"), IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("auto-reason");
  ASSERT_THAT(status, IsOk());
  ASSERT_EQ(status->method(), v1::TRUTH_METHOD_AUTO);
  const std::string& reason = status->choice_reason();
  EXPECT_FALSE(absl::StrContains(reason, "no item with 2 labels"))
      << "item i0 has 2 labels; choice_reason: " << reason;
  EXPECT_TRUE(absl::StartsWith(reason, "fallback") || absl::StartsWith(reason, "held_out_labels"))
      << "choice_reason names no criterion: " << reason;
}

// A small noisy two-class project: 30 items, 5 annotators of differing accuracy.
std::vector<LabelTriple> NoisyLabels() {
  std::vector<LabelTriple> labels;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double accuracy[5] = {0.95, 0.85, 0.7, 0.6, 0.55};
  for (int i = 0; i < 30; ++i) {
    const int truth = i % 2;
    for (int w = 0; w < 5; ++w) {
      const int label = u(rng) < accuracy[w] ? truth : 1 - truth;
      labels.emplace_back(absl::StrCat("i", i), absl::StrCat("w", w), label);
    }
  }
  return labels;
}

// models.proto, TrainModel: it returns the current version "when nothing a fit reads has
// changed since the current version's fit (no new or revised label, gold label, item,
// feature or model setting ...)". Sending the same settings again, or changing only the
// assignment settings, changes nothing a fit reads; a new confusion_smoothing is a changed
// model setting, so the next TrainModel fits a new version.
TEST_F(ApiPromisesTest, AChangedModelSettingIsNewInputForTrainModelAndTheSameOneIsNot) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("setting-change", settings);
  Submit("setting-change", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("setting-change");
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(client_->UpdateProjectSettings("setting-change", settings), IsOk());
  absl::StatusOr<v1::ModelVersion> same = Train("setting-change");
  ASSERT_THAT(same, IsOk());
  EXPECT_EQ(same->version(), first->version()) << "the same settings again";
  settings.mutable_assignment()->set_min_labels_per_item(3);
  ASSERT_THAT(client_->UpdateProjectSettings("setting-change", settings), IsOk());
  same = Train("setting-change");
  ASSERT_THAT(same, IsOk());
  EXPECT_EQ(same->version(), first->version()) << "only an assignment setting changed";
  settings.mutable_model()->set_confusion_smoothing(5.0);
  ASSERT_THAT(client_->UpdateProjectSettings("setting-change", settings), IsOk());
  absl::StatusOr<v1::ModelVersion> changed = Train("setting-change");
  ASSERT_THAT(changed, IsOk());
  EXPECT_EQ(changed->version(), first->version() + 1) << "confusion_smoothing changed";
}

// projects.proto: "A background refit starts when the labels committed since the last fit
// reach max(refit_min_new_labels, refit_new_label_fraction * labels)". With 150 labels, a
// minimum of 6 and a fraction of 0.01 (1.5), 5 new labels start no refit and the 6th does.
TEST_F(ApiPromisesTest, ABackgroundRefitStartsAtTheConfiguredNumberOfNewLabels) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_refit_min_new_labels(6);
  settings.mutable_model()->set_refit_new_label_fraction(0.01);
  CreateProject("refit-threshold", settings);
  Submit("refit-threshold", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("refit-threshold");
  ASSERT_THAT(first, IsOk());
  std::vector<LabelTriple> five;
  for (int i = 0; i < 5; ++i) five.emplace_back(absl::StrCat("i", i), "late", i % 2);
  Submit("refit-threshold", five);
  ASSERT_THAT(server_->core().scheduler->RefitDueProjectsNow(), IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("refit-threshold");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), first->version()) << "5 < 6 new labels";
  Submit("refit-threshold", {{"i5", "late", 1}});
  ASSERT_THAT(server_->core().scheduler->RefitDueProjectsNow(), IsOk());
  status = client_->GetModelStatus("refit-threshold");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), first->version() + 1) << "6 new labels";
  EXPECT_EQ(status->labels_since_version(), 0);
}

// models.proto, GetModelStatusResponse: "After the project's method changes from auto they
// [chosen_method, choice_reason] still describe the served version, until the next fit
// replaces it; `method` above is the one that fit will use." And "(else empty)" after a fit
// by another method.
TEST_F(ApiPromisesTest, AutosChoiceDescribesTheServedVersionUntilTheNextFit) {
  CreateProject("auto-then-ds");
  Submit("auto-then-ds", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("auto-then-ds");
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->method(), v1::TRUTH_METHOD_AUTO);
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("auto-then-ds");
  ASSERT_THAT(status, IsOk());
  const std::string chosen = status->chosen_method();
  const std::string reason = status->choice_reason();
  EXPECT_THAT(chosen, Not(IsEmpty()));
  EXPECT_THAT(reason, Not(IsEmpty()));
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_ONE_COIN);
  ASSERT_THAT(client_->UpdateProjectSettings("auto-then-ds", settings), IsOk());
  status = client_->GetModelStatus("auto-then-ds");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->method(), v1::TRUTH_METHOD_ONE_COIN);
  EXPECT_EQ(status->current_version().version(), first->version());
  EXPECT_EQ(status->chosen_method(), chosen);
  EXPECT_EQ(status->choice_reason(), reason);
  absl::StatusOr<v1::ModelVersion> second = Train("auto-then-ds");
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->version(), first->version() + 1);
  EXPECT_EQ(second->method(), v1::TRUTH_METHOD_ONE_COIN);
  status = client_->GetModelStatus("auto-then-ds");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->chosen_method(), "");
  EXPECT_EQ(status->choice_reason(), "");
}

// truth.proto, Posterior: probabilities sum to 1, confidence is probabilities[map_label],
// num_labels counts live labels (a revision adds none, a resend adds none),
// includes_newer_labels says the item has labels newer than the version's fit, model_version
// names that version. ModelVersion.num_labels: "Live labels the fit saw".
TEST_F(ApiPromisesTest, PosteriorFieldsAfterARevisionAndAResend) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("revise-fields", settings);
  std::vector<LabelTriple> labels = NoisyLabels();
  Submit("revise-fields", labels);
  absl::StatusOr<v1::ModelVersion> first = Train("revise-fields");
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->num_labels(), 150);
  // i0's label from w4 is revised, i1's from w0 resent unchanged.
  std::vector<v1::Annotation> revise = Annotations({{"i0", "w4", 1 - std::get<2>(labels[4])}});
  ASSERT_THAT(client_->SubmitAnnotations("revise-fields", revise, client::SubmitOptions{}),
              IsOk());
  std::vector<v1::Annotation> resend = Annotations({labels[5]});
  ASSERT_THAT(client_->SubmitAnnotations("revise-fields", resend, client::SubmitOptions{}),
              IsOk());
  absl::StatusOr<std::vector<v1::Posterior>> served =
      client_->GetPosteriors("revise-fields", {"i0", "i1", "i2"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(3));
  for (const v1::Posterior& p : *served) {
    SCOPED_TRACE(p.DebugString());
    ASSERT_EQ(p.probabilities_size(), 2);
    EXPECT_NEAR(p.probabilities(0) + p.probabilities(1), 1.0, 1e-9);
    EXPECT_DOUBLE_EQ(p.confidence(), p.probabilities(p.map_label()));
    EXPECT_EQ(p.map_label(), p.probabilities(1) > p.probabilities(0) ? 1 : 0);
    EXPECT_EQ(p.num_labels(), 5);
    EXPECT_EQ(p.model_version(), first->version());
  }
  EXPECT_TRUE((*served)[0].includes_newer_labels()) << "i0 has a revised label";
  EXPECT_FALSE((*served)[2].includes_newer_labels()) << "i2 has nothing new";
  absl::StatusOr<v1::ModelVersion> second = Train("revise-fields");
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->version(), first->version() + 1) << "a revised label is new input";
  EXPECT_EQ(second->num_labels(), 150);
  served = client_->GetPosteriors("revise-fields", {"i0"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(1));
  EXPECT_FALSE((*served)[0].includes_newer_labels());
  EXPECT_EQ((*served)[0].model_version(), second->version());
}

// models.proto, TrainModel: "FAILED_PRECONDITION when the project has no labels" -- also when
// it has items, gold ones among them, but no label.
TEST_F(ApiPromisesTest, TrainModelWithItemsButNoLabelsIsFailedPrecondition) {
  CreateProject("items-only");
  v1::Item gold;
  gold.set_id("g");
  gold.set_gold_label(1);
  ASSERT_THAT(client_->AddItems("items-only", {gold}), IsOk());
  AddItems("items-only", {"plain"});
  EXPECT_THAT(Train("items-only"), StatusIs(absl::StatusCode::kFailedPrecondition));
  absl::StatusOr<std::vector<v1::Posterior>> served =
      client_->GetPosteriors("items-only", {"g", "plain"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(2));
  EXPECT_TRUE((*served)[0].is_gold());
  EXPECT_EQ((*served)[0].map_label(), 1);
  EXPECT_EQ((*served)[0].model_version(), 0);
  EXPECT_FALSE((*served)[1].is_gold());
  EXPECT_EQ((*served)[1].num_labels(), 0);
  EXPECT_NEAR((*served)[1].probabilities(0) + (*served)[1].probabilities(1), 1.0, 1e-9);
}

// projects.proto: calibration "none" = the model's own posteriors; models.proto:
// GetModelStatus.calibration is "absent when ModelSettings.calibration is 'none'". Switching
// calibration is a model setting change: the next TrainModel fits a new version and the
// status reports the map again.
TEST_F(ApiPromisesTest, SwitchingCalibrationBackOnIsNewInputAndReportedAgain) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_calibration("none");
  CreateProject("calib-switch", settings);
  Submit("calib-switch", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("calib-switch");
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("calib-switch");
  ASSERT_THAT(status, IsOk());
  EXPECT_FALSE(status->has_calibration());
  settings.mutable_model()->set_calibration("auto");
  ASSERT_THAT(client_->UpdateProjectSettings("calib-switch", settings), IsOk());
  absl::StatusOr<v1::ModelVersion> second = Train("calib-switch");
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->version(), first->version() + 1);
  status = client_->GetModelStatus("calib-switch");
  ASSERT_THAT(status, IsOk());
  ASSERT_TRUE(status->has_calibration());
  EXPECT_EQ(status->calibration().source(), "crowd_labels");
  EXPECT_GT(status->calibration().temperature(), 0.0);
}

// projects.proto: max_iterations is the "EM iteration cap for a full fit". A project created
// with a cap of 2 has its first (full) fit stop within 2 iterations.
TEST_F(ApiPromisesTest, MaxIterationsCapsTheFirstFit) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_tolerance(1e-12);
  settings.mutable_model()->set_max_iterations(2);
  CreateProject("iteration-cap-first", settings);
  Submit("iteration-cap-first", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> capped = Train("iteration-cap-first");
  ASSERT_THAT(capped, IsOk());
  EXPECT_LE(capped->iterations(), 2);
  EXPECT_GE(capped->iterations(), 1);
}

// models.proto: chosen_method and choice_reason describe "the served version" when it was
// fitted by auto, and calibration is "the calibration of the served posteriors". A restart
// serves the same version, so it reports the same choice and the same map.
TEST_F(ApiPromisesTest, AutosChoiceAndTheCalibrationSurviveARestart) {
  CreateProject("auto-restart");
  Submit("auto-restart", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("auto-restart");
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> before = client_->GetModelStatus("auto-restart");
  ASSERT_THAT(before, IsOk());
  ASSERT_THAT(before->chosen_method(), Not(IsEmpty()));
  absl::StatusOr<std::vector<v1::Posterior>> served_before =
      client_->GetPosteriors("auto-restart", {"i0", "i1"});
  ASSERT_THAT(served_before, IsOk());
  TearDown();
  SetUp();
  absl::StatusOr<v1::GetModelStatusResponse> after = client_->GetModelStatus("auto-restart");
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(after->current_version().version(), first->version());
  EXPECT_EQ(after->chosen_method(), before->chosen_method());
  EXPECT_EQ(after->choice_reason(), before->choice_reason());
  EXPECT_EQ(after->has_calibration(), before->has_calibration());
  EXPECT_EQ(after->calibration().source(), before->calibration().source());
  EXPECT_NEAR(after->calibration().temperature(), before->calibration().temperature(), 1e-9);
  absl::StatusOr<std::vector<v1::Posterior>> served_after =
      client_->GetPosteriors("auto-restart", {"i0", "i1"});
  ASSERT_THAT(served_after, IsOk());
  ASSERT_THAT(*served_after, SizeIs(2));
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR((*served_after)[i].probabilities(0), (*served_before)[i].probabilities(0), 1e-9);
    EXPECT_EQ((*served_after)[i].model_version(), first->version());
  }
}

// projects.proto: confusion_smoothing is a "Dirichlet pseudo-count added to every cell of
// every annotator confusion matrix"; a changed model setting is new input for the next fit.
// A project given a large smoothing by UpdateProjectSettings after its first fit serves, after
// the next fit, what a project created with that smoothing serves for the same labels.
TEST_F(ApiPromisesTest, AConfusionSmoothingSetLaterTakesEffectAtTheNextFit) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_tolerance(1e-12);
  settings.mutable_model()->set_calibration("none");
  CreateProject("smooth-later", settings);
  v1::ProjectSettings smooth = settings;
  smooth.mutable_model()->set_confusion_smoothing(40.0);
  CreateProject("smooth-from-start", smooth);
  Submit("smooth-later", NoisyLabels());
  Submit("smooth-from-start", NoisyLabels());
  ASSERT_THAT(Train("smooth-later"), IsOk());
  ASSERT_THAT(Train("smooth-from-start"), IsOk());
  std::vector<std::string> items;
  for (int i = 0; i < 30; ++i) items.push_back(absl::StrCat("i", i));
  absl::StatusOr<std::vector<v1::Posterior>> unsmoothed =
      client_->GetPosteriors("smooth-later", items);
  ASSERT_THAT(unsmoothed, IsOk());
  ASSERT_THAT(client_->UpdateProjectSettings("smooth-later", smooth), IsOk());
  ASSERT_THAT(Train("smooth-later"), IsOk());
  absl::StatusOr<std::vector<v1::Posterior>> later = client_->GetPosteriors("smooth-later", items);
  absl::StatusOr<std::vector<v1::Posterior>> from_start =
      client_->GetPosteriors("smooth-from-start", items);
  ASSERT_THAT(later, IsOk());
  ASSERT_THAT(from_start, IsOk());
  double max_gap_to_start = 0, max_gap_to_unsmoothed = 0, start_vs_unsmoothed = 0;
  for (int i = 0; i < 30; ++i) {
    const double l = (*later)[i].probabilities(1);
    const double f = (*from_start)[i].probabilities(1);
    const double u = (*unsmoothed)[i].probabilities(1);
    max_gap_to_start = std::max(max_gap_to_start, std::abs(l - f));
    max_gap_to_unsmoothed = std::max(max_gap_to_unsmoothed, std::abs(l - u));
    start_vs_unsmoothed = std::max(start_vs_unsmoothed, std::abs(f - u));
  }
  ASSERT_GT(start_vs_unsmoothed, 0.01) << "the smoothing must matter for this check";
  EXPECT_LT(max_gap_to_start, 1e-3) << "unsmoothed differs from smoothed by "
                                    << start_vs_unsmoothed << "; later by "
                                    << max_gap_to_unsmoothed;
}

// projects.proto: max_iterations is the "EM iteration cap for a full fit"; ModelVersion
// reports the fit's iterations; PERFORMANCE.md's runs state "max_iterations 100 (refit: 100)",
// one cap for full fits and refits. A cap of 2 set by UpdateProjectSettings after a fit
// holds at the next fit (TrainModel fits a new version since a model setting changed).
TEST_F(ApiPromisesTest, MaxIterationsCapsTheNextFitsIterations) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_tolerance(1e-12);
  CreateProject("iteration-cap", settings);
  Submit("iteration-cap", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> free_fit = Train("iteration-cap");
  ASSERT_THAT(free_fit, IsOk());
  EXPECT_GT(free_fit->iterations(), 2);
  EXPECT_LE(free_fit->iterations(), 100) << "the default cap";
  settings.mutable_model()->set_max_iterations(2);
  ASSERT_THAT(client_->UpdateProjectSettings("iteration-cap", settings), IsOk());
  absl::StatusOr<v1::ModelVersion> capped = Train("iteration-cap");
  ASSERT_THAT(capped, IsOk());
  EXPECT_EQ(capped->version(), free_fit->version() + 1);
  EXPECT_LE(capped->iterations(), 2) << "the free fit took " << free_fit->iterations();
  EXPECT_GE(capped->iterations(), 1);
}

// projects.proto: "A background refit starts when the labels committed since the last fit
// reach max(refit_min_new_labels, refit_new_label_fraction * labels)". Thresholds lowered by
// UpdateProjectSettings after the first fit (from the defaults 50 and 0.1 to 3 and 0.01)
// apply to the next refit: 3 new labels of 150 start one.
TEST_F(ApiPromisesTest, RefitThresholdsLoweredLaterApplyToTheNextRefit) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("refit-later", settings);
  Submit("refit-later", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("refit-later");
  ASSERT_THAT(first, IsOk());
  settings.mutable_model()->set_refit_min_new_labels(3);
  settings.mutable_model()->set_refit_new_label_fraction(0.01);
  ASSERT_THAT(client_->UpdateProjectSettings("refit-later", settings), IsOk());
  // The settings change alone may refit (a changed model setting); start from its result.
  ASSERT_THAT(server_->core().scheduler->RefitDueProjectsNow(), IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("refit-later");
  ASSERT_THAT(status, IsOk());
  const int32_t base = status->current_version().version();
  Submit("refit-later", {{"i0", "late", 0}, {"i1", "late", 1}, {"i2", "late", 0}});
  ASSERT_THAT(server_->core().scheduler->RefitDueProjectsNow(), IsOk());
  status = client_->GetModelStatus("refit-later");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), base + 1) << "3 new labels of 153";
  EXPECT_EQ(status->labels_since_version(), 0);
}

// models.proto, TrainModel returns the current version when there is "no new or revised
// label"; truth.proto: includes_newer_labels is true "when the item has labels newer than
// that version's fit". A resend of live labels (acked duplicate) is neither.
TEST_F(ApiPromisesTest, AResendAfterAFitIsNoNewerLabelAndNoNewInput) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("resend-after-fit", settings);
  std::vector<LabelTriple> labels = NoisyLabels();
  Submit("resend-after-fit", labels);
  absl::StatusOr<v1::ModelVersion> first = Train("resend-after-fit");
  ASSERT_THAT(first, IsOk());
  std::vector<LabelTriple> again(labels.begin(), labels.begin() + 5);
  absl::StatusOr<client::SubmitTotals> totals = client_->SubmitAnnotations(
      "resend-after-fit", Annotations(again), client::SubmitOptions{});
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->duplicate, 5);
  absl::StatusOr<std::vector<v1::Posterior>> served =
      client_->GetPosteriors("resend-after-fit", {"i0"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(1));
  EXPECT_FALSE((*served)[0].includes_newer_labels());
  EXPECT_EQ((*served)[0].num_labels(), 5);
  absl::StatusOr<v1::ModelVersion> same = Train("resend-after-fit");
  ASSERT_THAT(same, IsOk());
  EXPECT_EQ(same->version(), first->version());
}

// truth.proto: model_version 0 means "none fitted yet; majority vote is used until the first
// fit"; map_label is the most probable class, confidence its probability.
TEST_F(ApiPromisesTest, BeforeTheFirstFitTheMajorityIsServedAsVersionZero) {
  CreateProject("before-fit");
  Submit("before-fit", {{"x", "a", 1}, {"x", "b", 1}, {"x", "c", 0}, {"y", "a", 0}});
  absl::StatusOr<std::vector<v1::Posterior>> served =
      client_->GetPosteriors("before-fit", {"x", "y"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(2));
  for (const v1::Posterior& p : *served) {
    SCOPED_TRACE(p.DebugString());
    EXPECT_EQ(p.model_version(), 0);
    EXPECT_FALSE(p.has_difficulty());
    EXPECT_NEAR(p.probabilities(0) + p.probabilities(1), 1.0, 1e-9);
    EXPECT_DOUBLE_EQ(p.confidence(), p.probabilities(p.map_label()));
  }
  EXPECT_EQ((*served)[0].map_label(), 1);
  EXPECT_GT((*served)[0].probabilities(1), 0.5);
  EXPECT_EQ((*served)[1].map_label(), 0);
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("before-fit");
  ASSERT_THAT(status, IsOk());
  EXPECT_FALSE(status->has_current_version());
  EXPECT_EQ(status->num_labels(), 4);
  EXPECT_EQ(status->labels_since_version(), 4);
}

// truth.proto, Posterior.map_label: "Index of the most probable class (lowest index on ties)".
// Before the first fit one label of each class makes an even majority.
TEST_F(ApiPromisesTest, AnEvenPosteriorsMapLabelIsTheLowestClass) {
  CreateProject("tie");
  Submit("tie", {{"even", "a", 0}, {"even", "b", 1}, {"odd", "a", 1}});
  absl::StatusOr<std::vector<v1::Posterior>> served = client_->GetPosteriors("tie", {"even"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(1));
  const v1::Posterior& p = (*served)[0];
  ASSERT_EQ(p.probabilities_size(), 2);
  ASSERT_EQ(p.probabilities(0), p.probabilities(1)) << p.DebugString();
  EXPECT_EQ(p.map_label(), 0);
  EXPECT_DOUBLE_EQ(p.confidence(), 0.5);
}

// truth.proto: difficulty is set "for methods that learn one (lia)" and "unset for the other
// methods"; an embedding is served "for methods that learn one (lia, conal)" and is "empty
// for the other methods"; is_gold: "the posterior is clamped to it". common.proto: a method
// change "takes effect at the next fit", so until then the lia version is still served.
TEST_F(ApiPromisesTest, SwitchingFromLiaToDsDropsDifficultyAndEmbeddingAtTheNextFit) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_LIA);
  CreateProject("lia-to-ds", settings);
  Submit("lia-to-ds", NoisyLabels());
  v1::Item gold;
  gold.set_id("i0");  // Truth 0; give it the other class as gold.
  gold.set_gold_label(1);
  ASSERT_THAT(client_->AddItems("lia-to-ds", {gold}), IsOk());
  absl::StatusOr<v1::ModelVersion> lia = Train("lia-to-ds");
  ASSERT_THAT(lia, IsOk());
  ASSERT_EQ(lia->method(), v1::TRUTH_METHOD_LIA);
  auto check = [&](bool lia_served) {
    absl::StatusOr<std::vector<v1::Posterior>> served =
        client_->GetPosteriors("lia-to-ds", {"i0", "i1"});
    ASSERT_THAT(served, IsOk());
    ASSERT_THAT(*served, SizeIs(2));
    EXPECT_TRUE((*served)[0].is_gold());
    EXPECT_EQ((*served)[0].map_label(), 1);
    EXPECT_DOUBLE_EQ((*served)[0].probabilities(1), 1.0);
    for (const v1::Posterior& p : *served) {
      EXPECT_EQ(p.has_difficulty(), lia_served) << p.DebugString();
    }
    absl::StatusOr<std::vector<v1::AnnotatorProfile>> profiles =
        client_->GetAnnotatorProfiles("lia-to-ds", {"w0"});
    ASSERT_THAT(profiles, IsOk());
    ASSERT_THAT(*profiles, SizeIs(1));
    EXPECT_EQ((*profiles)[0].embedding_size() > 0, lia_served);
    EXPECT_FALSE((*profiles)[0].predicted_from_features());
  };
  {
    SCOPED_TRACE("lia fitted");
    check(true);
  }
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  ASSERT_THAT(client_->UpdateProjectSettings("lia-to-ds", settings), IsOk());
  {
    SCOPED_TRACE("ds configured, lia still served");
    check(true);
  }
  absl::StatusOr<v1::ModelVersion> ds = Train("lia-to-ds");
  ASSERT_THAT(ds, IsOk());
  EXPECT_EQ(ds->method(), v1::TRUTH_METHOD_DAWID_SKENE);
  {
    SCOPED_TRACE("ds fitted");
    check(false);
  }
}

// projects.proto: calibration "none" = "the model's own posteriors", "auto" = a posterior
// temperature (on the crowd labels without enough gold); a changed model setting is new input
// for the next fit (models.proto, TrainModel). A project switched from "none" to "auto" after a
// fit serves, after the next fit, what a project created with "auto" serves for the same
// labels, and the status reports the same map.
TEST_F(ApiPromisesTest, ACalibrationSwitchedOnLaterServesWhatItServesFromTheStart) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_tolerance(1e-12);
  settings.mutable_model()->set_calibration("none");
  CreateProject("calib-later", settings);
  v1::ProjectSettings calibrated = settings;
  calibrated.mutable_model()->set_calibration("auto");
  CreateProject("calib-from-start", calibrated);
  Submit("calib-later", NoisyLabels());
  Submit("calib-from-start", NoisyLabels());
  ASSERT_THAT(Train("calib-later"), IsOk());
  ASSERT_THAT(Train("calib-from-start"), IsOk());
  std::vector<std::string> items;
  for (int i = 0; i < 30; ++i) items.push_back(absl::StrCat("i", i));
  absl::StatusOr<std::vector<v1::Posterior>> raw = client_->GetPosteriors("calib-later", items);
  ASSERT_THAT(raw, IsOk());
  ASSERT_THAT(client_->UpdateProjectSettings("calib-later", calibrated), IsOk());
  ASSERT_THAT(Train("calib-later"), IsOk());
  absl::StatusOr<std::vector<v1::Posterior>> later = client_->GetPosteriors("calib-later", items);
  absl::StatusOr<std::vector<v1::Posterior>> from_start =
      client_->GetPosteriors("calib-from-start", items);
  ASSERT_THAT(later, IsOk());
  ASSERT_THAT(from_start, IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> later_status = client_->GetModelStatus("calib-later");
  absl::StatusOr<v1::GetModelStatusResponse> start_status =
      client_->GetModelStatus("calib-from-start");
  ASSERT_THAT(later_status, IsOk());
  ASSERT_THAT(start_status, IsOk());
  EXPECT_NEAR(later_status->calibration().temperature(),
              start_status->calibration().temperature(), 1e-3);
  double gap_to_start = 0, start_vs_raw = 0, later_vs_raw = 0;
  for (int i = 0; i < 30; ++i) {
    gap_to_start = std::max(gap_to_start, std::abs((*later)[i].probabilities(1) -
                                                   (*from_start)[i].probabilities(1)));
    start_vs_raw = std::max(start_vs_raw, std::abs((*from_start)[i].probabilities(1) -
                                                   (*raw)[i].probabilities(1)));
    later_vs_raw = std::max(later_vs_raw, std::abs((*later)[i].probabilities(1) -
                                                   (*raw)[i].probabilities(1)));
  }
  EXPECT_LT(gap_to_start, 1e-3) << "calibrated vs raw: " << start_vs_raw
                                << "; switched later vs raw: " << later_vs_raw
                                << "; temperature " << start_status->calibration().temperature();
}

// truth.proto: an item added after the fit is served by the current version (model_version
// "whose parameters produced this posterior"), with no labels and nothing newer than the fit;
// a label on a new item makes includes_newer_labels true.
TEST_F(ApiPromisesTest, AnItemAddedAfterTheFitIsServedByTheCurrentVersion) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("item-after-fit", settings);
  Submit("item-after-fit", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("item-after-fit");
  ASSERT_THAT(first, IsOk());
  AddItems("item-after-fit", {"fresh"});
  Submit("item-after-fit", {{"fresh-labelled", "w0", 1}});
  absl::StatusOr<std::vector<v1::Posterior>> served =
      client_->GetPosteriors("item-after-fit", {"fresh", "fresh-labelled"});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(2));
  for (const v1::Posterior& p : *served) {
    SCOPED_TRACE(p.DebugString());
    EXPECT_EQ(p.model_version(), first->version());
    EXPECT_NEAR(p.probabilities(0) + p.probabilities(1), 1.0, 1e-9);
    EXPECT_DOUBLE_EQ(p.confidence(), p.probabilities(p.map_label()));
  }
  EXPECT_EQ((*served)[0].num_labels(), 0);
  EXPECT_FALSE((*served)[0].includes_newer_labels());
  EXPECT_EQ((*served)[1].num_labels(), 1);
  EXPECT_TRUE((*served)[1].includes_newer_labels());
  EXPECT_EQ((*served)[1].map_label(), 1);
}

// models.proto, TrainModel: it returns the current version only when there is "no new or
// revised label, gold label, item, feature or model setting". An item added by AddItems
// (no labels, no features) after the fit is a new item: the next TrainModel fits.
TEST_F(ApiPromisesTest, TrainModelAfterOnlyANewUnlabelledItemFitsANewVersion) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("new-item-input", settings);
  Submit("new-item-input", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("new-item-input");
  ASSERT_THAT(first, IsOk());
  AddItems("new-item-input", {"fresh"});
  absl::StatusOr<v1::ModelVersion> next = Train("new-item-input");
  ASSERT_THAT(next, IsOk());
  EXPECT_EQ(next->version(), first->version() + 1);
}

// models.proto, TrainModel returns the current version with "no new or revised label";
// truth.proto: includes_newer_labels when the item "has labels newer than that version's fit"
// and num_labels counts live labels. A label older (client_time) than the live one, arriving
// after the fit, is kept in history only (ingest.proto, acked stale): none of these changes.
TEST_F(ApiPromisesTest, AStaleLabelAfterAFitIsNoNewInput) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("stale-after-fit", settings);
  std::vector<v1::Annotation> timed = Annotations(NoisyLabels());
  for (v1::Annotation& a : timed) a.mutable_client_time()->set_seconds(1700000100);
  ASSERT_THAT(client_->SubmitAnnotations("stale-after-fit", timed, client::SubmitOptions{}),
              IsOk());
  absl::StatusOr<v1::ModelVersion> first = Train("stale-after-fit");
  ASSERT_THAT(first, IsOk());
  v1::Annotation old = timed[0];
  old.set_label(1 - old.label());
  old.mutable_client_time()->set_seconds(1700000000);
  absl::StatusOr<client::SubmitTotals> totals =
      client_->SubmitAnnotations("stale-after-fit", {old}, client::SubmitOptions{});
  ASSERT_THAT(totals, IsOk());
  ASSERT_EQ(totals->stale, 1);
  absl::StatusOr<std::vector<v1::Posterior>> served =
      client_->GetPosteriors("stale-after-fit", {old.item()});
  ASSERT_THAT(served, IsOk());
  ASSERT_THAT(*served, SizeIs(1));
  EXPECT_FALSE((*served)[0].includes_newer_labels());
  EXPECT_EQ((*served)[0].num_labels(), 5);
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> profiles =
      client_->GetAnnotatorProfiles("stale-after-fit", {old.annotator()});
  ASSERT_THAT(profiles, IsOk());
  ASSERT_THAT(*profiles, SizeIs(1));
  EXPECT_EQ((*profiles)[0].num_labels(), 30);
  absl::StatusOr<v1::ModelVersion> same = Train("stale-after-fit");
  ASSERT_THAT(same, IsOk());
  EXPECT_EQ(same->version(), first->version());
}

// projects.proto: prior_smoothing is a "pseudo-count added to every class of the class prior";
// a model setting changed by UpdateProjectSettings is new input for the next fit (models.proto)
// and, like the method (common.proto), takes effect there. A project given a large
// prior_smoothing after its first fit serves, after the next fit, what a project created with
// it serves for the same labels.
TEST_F(ApiPromisesTest, APriorSmoothingSetLaterTakesEffectAtTheNextFit) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_tolerance(1e-12);
  settings.mutable_model()->set_calibration("none");
  CreateProject("prior-later", settings);
  v1::ProjectSettings smooth = settings;
  smooth.mutable_model()->set_prior_smoothing(1000.0);
  CreateProject("prior-from-start", smooth);
  // Skewed classes: 24 of 30 items are class 1, so a strong prior smoothing moves the prior.
  std::vector<LabelTriple> labels;
  for (int i = 0; i < 30; ++i) {
    for (int w = 0; w < 3; ++w) {
      const int truth = i < 24 ? 1 : 0;
      labels.emplace_back(absl::StrCat("i", i), absl::StrCat("w", w), w == 2 ? 1 - truth : truth);
    }
  }
  Submit("prior-later", labels);
  Submit("prior-from-start", labels);
  ASSERT_THAT(Train("prior-later"), IsOk());
  ASSERT_THAT(Train("prior-from-start"), IsOk());
  AddItems("prior-later", {"unlabelled"});
  AddItems("prior-from-start", {"unlabelled"});
  auto prior_of = [&](const std::string& project) {
    absl::StatusOr<std::vector<v1::Posterior>> p = client_->GetPosteriors(project, {"unlabelled"});
    EXPECT_THAT(p, IsOk());
    return p.ok() && p->size() == 1 ? (*p)[0].probabilities(1) : -1.0;
  };
  const double before = prior_of("prior-later");
  const double from_start = prior_of("prior-from-start");
  ASSERT_GT(std::abs(before - from_start), 0.05) << "the smoothing must matter for this check";
  ASSERT_THAT(client_->UpdateProjectSettings("prior-later", smooth), IsOk());
  absl::StatusOr<v1::ModelVersion> refit = Train("prior-later");
  ASSERT_THAT(refit, IsOk());
  const double later = prior_of("prior-later");
  EXPECT_NEAR(later, from_start, 1e-3) << "unsmoothed prior " << before;
}

// models.proto, PosteriorCalibration: source "gold" ("log-loss of the gold items") with
// gold_items "the gold items the map was fitted on", else "crowd_labels"; projects.proto: the
// temperature is fitted "on the gold items ... or on the crowd labels without enough gold".
// Gold labels given after a fit are new input (TrainModel); with 60 gold items that have
// labels (enough: end_to_end_test's gold map needs 50) the next fit's map is fitted on gold.
TEST_F(ApiPromisesTest, GoldGivenAfterAFitCalibratesTheNextFit) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("gold-later", settings);
  std::vector<LabelTriple> labels;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < 80; ++i) {
    for (int w = 0; w < 4; ++w) {
      const int truth = i % 2;
      labels.emplace_back(absl::StrCat("i", i), absl::StrCat("w", w),
                          u(rng) < 0.75 ? truth : 1 - truth);
    }
  }
  Submit("gold-later", labels);
  absl::StatusOr<v1::ModelVersion> first = Train("gold-later");
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("gold-later");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->calibration().source(), "crowd_labels");
  std::vector<v1::Item> gold;
  for (int i = 0; i < 60; ++i) {
    v1::Item& item = gold.emplace_back();
    item.set_id(absl::StrCat("i", i));
    item.set_gold_label(i % 2);
  }
  ASSERT_THAT(client_->AddItems("gold-later", gold), IsOk());
  absl::StatusOr<v1::ModelVersion> second = Train("gold-later");
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->version(), first->version() + 1);
  status = client_->GetModelStatus("gold-later");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->calibration().source(), "gold") << status->calibration().DebugString();
  EXPECT_EQ(status->calibration().gold_items(), 60);
  EXPECT_GE(status->calibration().gold_ece_raw(), 0.0);
}

// truth.proto, AnnotatorProfile: predicted_from_features is true only for "lia, for an
// annotator the current version's fit did not see"; the embedding is "empty ... for
// annotators not in the current version's fit". For conal with annotator features, an
// annotator added with features after the fit gets neither.
TEST_F(ApiPromisesTest, ConalPredictsNothingFromFeaturesForAnAnnotatorAfterTheFit) {
  v1::Project project;
  project.set_name("conal-new-annotator");
  project.add_classes("no");
  project.add_classes("yes");
  project.set_annotator_feature_dim(2);
  project.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_CONAL);
  ASSERT_THAT(client_->CreateProject(project), IsOk());
  std::vector<v1::Annotator> annotators;
  for (int w = 0; w < 5; ++w) {
    v1::Annotator& a = annotators.emplace_back();
    a.set_id(absl::StrCat("w", w));
    a.add_features(0.2f * w);
    a.add_features(1.0f - 0.2f * w);
  }
  ASSERT_THAT(client_->AddAnnotators("conal-new-annotator", annotators), IsOk());
  Submit("conal-new-annotator", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> fitted = Train("conal-new-annotator");
  ASSERT_THAT(fitted, IsOk());
  v1::Annotator late;
  late.set_id("late");
  late.add_features(0.1f);
  late.add_features(0.9f);
  ASSERT_THAT(client_->AddAnnotators("conal-new-annotator", {late}), IsOk());
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> profiles =
      client_->GetAnnotatorProfiles("conal-new-annotator", {"w0", "late"});
  ASSERT_THAT(profiles, IsOk());
  ASSERT_THAT(*profiles, SizeIs(2));
  EXPECT_FALSE((*profiles)[0].predicted_from_features());
  EXPECT_GT((*profiles)[0].embedding_size(), 0) << "w0 was in the fit";
  EXPECT_FALSE((*profiles)[1].predicted_from_features());
  EXPECT_EQ((*profiles)[1].embedding_size(), 0);
  EXPECT_EQ((*profiles)[1].num_labels(), 0);
}

// truth.proto, Posterior: "One probability per class, in the project's class order; sums to
// 1", map_label "Index of the most probable class (lowest index on ties)", confidence
// "probabilities[map_label]"; ListPosteriors serves the same posteriors as GetPosteriors.
// Four classes, calibrated (auto) posteriors of every method family that fits in a second.
TEST_F(ApiPromisesTest, CalibratedPosteriorsOfFourClassesKeepTheirInvariants) {
  const v1::TruthMethod methods[] = {v1::TRUTH_METHOD_DAWID_SKENE, v1::TRUTH_METHOD_ONE_COIN,
                                     v1::TRUTH_METHOD_GLAD, v1::TRUTH_METHOD_MACE,
                                     v1::TRUTH_METHOD_WAWA, v1::TRUTH_METHOD_IBCC,
                                     v1::TRUTH_METHOD_AUTO};
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<LabelTriple> labels;
  for (int i = 0; i < 40; ++i) {
    for (int w = 0; w < 4; ++w) {
      const int truth = i % 4;
      const int label = u(rng) < 0.6 ? truth : static_cast<int>(rng() % 4);
      labels.emplace_back(absl::StrCat("i", i), absl::StrCat("w", w), label);
    }
  }
  for (const v1::TruthMethod method : methods) {
    const std::string name = absl::StrCat("four-", static_cast<int>(method));
    SCOPED_TRACE(name);
    v1::Project project;
    project.set_name(name);
    for (const char* c : {"a", "b", "c", "d"}) project.add_classes(c);
    project.mutable_settings()->mutable_model()->set_method(method);
    ASSERT_THAT(client_->CreateProject(project), IsOk());
    Submit(name, labels);
    absl::StatusOr<v1::ModelVersion> fitted = Train(name);
    ASSERT_THAT(fitted, IsOk());
    std::vector<std::string> items;
    for (int i = 0; i < 40; ++i) items.push_back(absl::StrCat("i", i));
    absl::StatusOr<std::vector<v1::Posterior>> served = client_->GetPosteriors(name, items);
    ASSERT_THAT(served, IsOk());
    ASSERT_THAT(*served, SizeIs(40));
    absl::StatusOr<v1::ListPosteriorsResponse> listed = client_->ListPosteriors(name, 0, "");
    ASSERT_THAT(listed, IsOk());
    ASSERT_EQ(listed->posteriors_size(), 40);
    for (int i = 0; i < 40; ++i) {
      const v1::Posterior& p = (*served)[i];
      SCOPED_TRACE(p.DebugString());
      ASSERT_EQ(p.probabilities_size(), 4);
      double sum = 0;
      int argmax = 0;
      for (int k = 0; k < 4; ++k) {
        EXPECT_GE(p.probabilities(k), 0.0);
        sum += p.probabilities(k);
        if (p.probabilities(k) > p.probabilities(argmax)) argmax = k;
      }
      EXPECT_NEAR(sum, 1.0, 1e-9);
      EXPECT_EQ(p.map_label(), argmax);
      EXPECT_DOUBLE_EQ(p.confidence(), p.probabilities(p.map_label()));
      EXPECT_EQ(p.num_labels(), 4);
      EXPECT_EQ(p.model_version(), fitted->version());
      EXPECT_FALSE(p.includes_newer_labels());
      EXPECT_EQ(listed->posteriors(i).SerializeAsString(), p.SerializeAsString());
    }
  }
}

// models.proto, TrainModel: "When nothing a fit reads has changed since the current version's
// fit (no new or revised label, gold label, item, feature or model setting ...), it returns
// that version and writes nothing." A restart changes none of these; changed item features
// do, the same features again do not.
TEST_F(ApiPromisesTest, TrainModelAfterARestartOrTheSameItemFeaturesReturnsTheCurrentVersion) {
  v1::Project project;
  project.set_name("restart-train");
  project.add_classes("no");
  project.add_classes("yes");
  project.set_item_feature_dim(2);
  project.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  ASSERT_THAT(client_->CreateProject(project), IsOk());
  v1::Item item;
  item.set_id("i0");
  item.add_features(0.5f);
  item.add_features(-0.5f);
  ASSERT_THAT(client_->AddItems("restart-train", {item}), IsOk());
  Submit("restart-train", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("restart-train");
  ASSERT_THAT(first, IsOk());
  TearDown();
  SetUp();
  absl::StatusOr<v1::ModelVersion> after_restart = Train("restart-train");
  ASSERT_THAT(after_restart, IsOk());
  EXPECT_EQ(after_restart->version(), first->version()) << "nothing new but a restart";
  ASSERT_THAT(client_->AddItems("restart-train", {item}), IsOk());
  absl::StatusOr<v1::ModelVersion> same = Train("restart-train");
  ASSERT_THAT(same, IsOk());
  EXPECT_EQ(same->version(), first->version()) << "the same features again";
  item.set_features(1, 3.0f);
  ASSERT_THAT(client_->AddItems("restart-train", {item}), IsOk());
  absl::StatusOr<v1::ModelVersion> changed = Train("restart-train");
  ASSERT_THAT(changed, IsOk());
  EXPECT_EQ(changed->version(), first->version() + 1) << "changed item features";
  absl::StatusOr<std::vector<v1::ModelVersion>> versions =
      client_->ListModelVersions("restart-train", 0);
  ASSERT_THAT(versions, IsOk());
  EXPECT_THAT(*versions, SizeIs(2));
}

// A project refit again and again must not fill the database's disk (storage/
// model_version_store.h: only the newest 3 versions of a project keep their checkpoints, the
// parameters and the stored posteriors and profiles). Every version is still listed
// (ListModelVersions), and after a restart the server serves the newest and warm-starts from it.
TEST_F(ApiPromisesTest, OldVersionsCheckpointsAreFreedAndTheNewestIsServedAfterARestart) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("refit-often", settings);
  Submit("refit-often", NoisyLabels());
  constexpr int kFits = 6;
  for (int fit = 1; fit <= kFits; ++fit) {
    Submit("refit-often", {{absl::StrCat("new", fit), "w0", fit % 2}});
    absl::StatusOr<v1::ModelVersion> version = Train("refit-often");
    ASSERT_THAT(version, IsOk());
    ASSERT_EQ(version->version(), fit);
  }
  absl::StatusOr<storage::ProjectRecord> project =
      server_->core().storage->projects->GetProjectByName("refit-often");
  ASSERT_THAT(project, IsOk());
  auto stored = [&](const std::string& sql) -> int64_t {
    absl::StatusOr<int64_t> n = server_->core().storage->pool->WithTransaction(
        "counting stored checkpoints", [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
          return txn.exec_params1(sql, project->project_id)[0].as<int64_t>();
        });
    EXPECT_THAT(n, IsOk());
    return n.value_or(-1);
  };
  EXPECT_EQ(stored("SELECT count(*) FROM model_versions WHERE project_id = $1 "
                   "AND octet_length(parameters) > 0"),
            3);
  EXPECT_EQ(stored("SELECT count(*) FROM model_version_outputs WHERE project_id = $1"), 3);
  absl::StatusOr<std::vector<v1::ModelVersion>> listed =
      client_->ListModelVersions("refit-often", 100);
  ASSERT_THAT(listed, IsOk());
  ASSERT_THAT(*listed, SizeIs(kFits));
  EXPECT_EQ(listed->back().version(), 1);
  EXPECT_GT(listed->back().num_labels(), 0);

  absl::StatusOr<std::vector<v1::Posterior>> before =
      client_->GetPosteriors("refit-often", {"new1", "i0"});
  ASSERT_THAT(before, IsOk());
  TearDown();
  SetUp();
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("refit-often");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), kFits);
  absl::StatusOr<std::vector<v1::Posterior>> after =
      client_->GetPosteriors("refit-often", {"new1", "i0"});
  ASSERT_THAT(after, IsOk());
  ASSERT_THAT(*after, SizeIs(before->size()));
  for (size_t i = 0; i < after->size(); ++i) {
    EXPECT_EQ((*after)[i].model_version(), kFits);
    EXPECT_FLOAT_EQ((*after)[i].probabilities(1), (*before)[i].probabilities(1));
  }
  Submit("refit-often", {{"after-restart", "w1", 1}});
  absl::StatusOr<v1::ModelVersion> next = Train("refit-often");
  ASSERT_THAT(next, IsOk());
  EXPECT_EQ(next->version(), kFits + 1);
  EXPECT_EQ(stored("SELECT count(*) FROM model_version_outputs WHERE project_id = $1"), 3);
}

// projects.proto: tolerance is the "Relative log-likelihood change below which EM stops". With
// 0.5 a ds fit stops after very few iterations; the default (1e-6) runs longer on the same data.
TEST_F(ApiPromisesTest, ALooseToleranceStopsTheFirstFitEarly) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_tolerance(0.5);
  CreateProject("loose-tolerance", settings);
  settings.mutable_model()->set_tolerance(1e-12);
  CreateProject("tight-tolerance", settings);
  Submit("loose-tolerance", NoisyLabels());
  Submit("tight-tolerance", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> loose = Train("loose-tolerance");
  absl::StatusOr<v1::ModelVersion> tight = Train("tight-tolerance");
  ASSERT_THAT(loose, IsOk());
  ASSERT_THAT(tight, IsOk());
  EXPECT_LE(loose->iterations(), 3);
  EXPECT_GT(tight->iterations(), loose->iterations());
}

// projects.proto: a background refit starts when the new labels "reach
// max(refit_min_new_labels, refit_new_label_fraction * labels)". With a minimum of 1 and a
// fraction of 0.5, 20 new labels on 150 start no refit; 200 more (220 of 370) do.
TEST_F(ApiPromisesTest, TheRefitFractionGovernsWhenItExceedsTheMinimum) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_refit_min_new_labels(1);
  settings.mutable_model()->set_refit_new_label_fraction(0.5);
  CreateProject("refit-fraction", settings);
  Submit("refit-fraction", NoisyLabels());
  absl::StatusOr<v1::ModelVersion> first = Train("refit-fraction");
  ASSERT_THAT(first, IsOk());
  std::vector<LabelTriple> more;
  for (int i = 0; i < 220; ++i) more.emplace_back(absl::StrCat("n", i), "late", i % 2);
  Submit("refit-fraction", std::vector<LabelTriple>(more.begin(), more.begin() + 20));
  ASSERT_THAT(server_->core().scheduler->RefitDueProjectsNow(), IsOk());
  absl::StatusOr<v1::GetModelStatusResponse> status = client_->GetModelStatus("refit-fraction");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), first->version()) << "20 new labels";
  Submit("refit-fraction", std::vector<LabelTriple>(more.begin() + 20, more.end()));
  ASSERT_THAT(server_->core().scheduler->RefitDueProjectsNow(), IsOk());
  status = client_->GetModelStatus("refit-fraction");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->current_version().version(), first->version() + 1) << "220 new labels";
}

// truth.proto GetAnnotatorProfilesResponse.next_page_token: "Empty on the last page". Three
// annotators paged two at a time: the first page carries a token, the second (the last, with
// the one remaining annotator) none; a page that ends exactly at the last annotator has none.
TEST_F(ApiPromisesTest, AnnotatorProfilePagesEndWithoutATokenOnTheLastPage) {
  CreateProject("profile-pages");
  Submit("profile-pages", {{"i0", "a0", 1}, {"i0", "a1", 0}, {"i0", "a2", 1}});
  auto page = [&](int32_t page_size, const std::string& token) {
    v1::GetAnnotatorProfilesRequest request;
    request.set_project("profile-pages");
    request.set_page_size(page_size);
    request.set_page_token(token);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::GetAnnotatorProfilesResponse response;
    const grpc::Status status =
        v1::TruthService::NewStub(channel_)->GetAnnotatorProfiles(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  };
  const v1::GetAnnotatorProfilesResponse first = page(2, "");
  ASSERT_EQ(first.profiles_size(), 2);
  ASSERT_FALSE(first.next_page_token().empty());
  const v1::GetAnnotatorProfilesResponse last = page(2, first.next_page_token());
  ASSERT_EQ(last.profiles_size(), 1);
  EXPECT_EQ(last.profiles(0).annotator(), "a2");
  EXPECT_EQ(last.next_page_token(), "");
  const v1::GetAnnotatorProfilesResponse exact = page(3, "");
  EXPECT_EQ(exact.profiles_size(), 3);
  EXPECT_EQ(exact.next_page_token(), "");
}

// truth.proto GetAnnotatorProfilesRequest.annotators: "each answered once (repeats are
// dropped; the profiles follow the ids' first occurrences)".
TEST_F(ApiPromisesTest, RepeatedAnnotatorIdsAreAnsweredOnceInFirstOccurrenceOrder) {
  CreateProject("profile-repeats");
  Submit("profile-repeats", {{"i0", "a0", 1}, {"i0", "a1", 0}});
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> profiles = ProfilesWithDetail(
      "profile-repeats", {"a1", "a0", "a1", "a0", "a1"}, v1::CONFUSION_DETAIL_NONE);
  ASSERT_THAT(profiles, IsOk());
  std::vector<std::string> annotators;
  for (const v1::AnnotatorProfile& p : *profiles) annotators.push_back(p.annotator());
  EXPECT_THAT(annotators, ElementsAre("a1", "a0"));
}

// truth.proto: ListPosteriorsRequest.page_size "0 = 1,000"; GetAnnotatorProfilesRequest.page_size
// "0 = 1,000". With 1,001 items and annotators the first default page holds 1,000 and a token.
TEST_F(ApiPromisesTest, PageSizeZeroMeansAThousand) {
  CreateProject("default-pages");
  std::vector<v1::Item> items(1001);
  std::vector<v1::Annotator> annotators(1001);
  for (int i = 0; i < 1001; ++i) {
    items[i].set_id(absl::StrCat("i", i));
    annotators[i].set_id(absl::StrCat("a", i));
  }
  ASSERT_THAT(client_->AddItems("default-pages", items), IsOk());
  ASSERT_THAT(client_->AddAnnotators("default-pages", annotators), IsOk());
  absl::StatusOr<v1::ListPosteriorsResponse> posteriors =
      client_->ListPosteriors("default-pages", 0, "");
  ASSERT_THAT(posteriors, IsOk());
  EXPECT_EQ(posteriors->posteriors_size(), 1000);
  ASSERT_FALSE(posteriors->next_page_token().empty());
  absl::StatusOr<v1::ListPosteriorsResponse> rest =
      client_->ListPosteriors("default-pages", 0, posteriors->next_page_token());
  ASSERT_THAT(rest, IsOk());
  ASSERT_EQ(rest->posteriors_size(), 1);
  EXPECT_EQ(rest->posteriors(0).item(), "i1000");
  v1::GetAnnotatorProfilesRequest request;
  request.set_project("default-pages");
  request.set_confusion_detail(v1::CONFUSION_DETAIL_NONE);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GetAnnotatorProfilesResponse profiles;
  const grpc::Status status =
      v1::TruthService::NewStub(channel_)->GetAnnotatorProfiles(&context, request, &profiles);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(profiles.profiles_size(), 1000);
  EXPECT_FALSE(profiles.next_page_token().empty());
  EXPECT_EQ(profiles.profiles(999).annotator(), "a999");
}

// models.proto, ListModelVersionsRequest.limit: "1 to 1,000; 0 = 20. Newest first".
TEST_F(ApiPromisesTest, ListModelVersionsWithoutALimitListsTheNewestTwenty) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  CreateProject("twenty-versions", settings);
  for (int v = 0; v < 21; ++v) {
    Submit("twenty-versions",
           {{absl::StrCat("i", v), "w0", v % 2}, {absl::StrCat("i", v), "w1", 1}});
    ASSERT_THAT(Train("twenty-versions"), IsOk());
  }
  absl::StatusOr<std::vector<v1::ModelVersion>> listed =
      client_->ListModelVersions("twenty-versions", 0);
  ASSERT_THAT(listed, IsOk());
  ASSERT_THAT(*listed, SizeIs(20));
  EXPECT_EQ(listed->front().version(), 21);
  EXPECT_EQ(listed->back().version(), 2);
}

}  // namespace
}  // namespace verity::tests
