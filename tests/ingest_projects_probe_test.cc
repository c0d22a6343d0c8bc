// Black-box probe of ingest, projects and model versions: the promises of
// proto/verity/v1/ingest.proto, projects.proto, models.proto and common.proto, held against an
// in-process server over a real gRPC channel and a private PostgreSQL. Every expectation is
// quoted from those texts (or computed by hand from them), never taken from the server's output.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/verity_server.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {
namespace {

constexpr int64_t kT = 1'700'000'000;  // A client_time, in seconds.

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

// One annotation; `seconds` (and `nanos`) set its client_time when given.
v1::Annotation Ann(const std::string& item, const std::string& annotator, int32_t label,
                   std::optional<int64_t> seconds = std::nullopt, int32_t nanos = 0) {
  v1::Annotation a;
  a.set_item(item);
  a.set_annotator(annotator);
  a.set_label(label);
  if (seconds.has_value()) {
    a.mutable_client_time()->set_seconds(*seconds);
    a.mutable_client_time()->set_nanos(nanos);
  }
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

v1::Item Item(const std::string& id) {
  v1::Item item;
  item.set_id(id);
  return item;
}

class IngestProjectsProbeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pg_ = TestPostgres::Start("verity-ingest-projects-probe").release();
  }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(pg_, nullptr);
    auto server = server::VerityServer::Start(TestServerOptions(pg_->url(), 4));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
    projects_ = v1::ProjectService::NewStub(channel_);
    ingest_ = v1::IngestService::NewStub(channel_);
    models_ = v1::ModelService::NewStub(channel_);
    truth_ = v1::TruthService::NewStub(channel_);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }

  grpc::Status CreateProject(const std::string& name, const v1::ProjectSettings& settings = {},
                             const std::vector<std::string>& classes = {"no", "yes"},
                             v1::Project* created = nullptr, int item_feature_dim = 0,
                             int annotator_feature_dim = 0) {
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(name);
    for (const std::string& c : classes) request.mutable_project()->add_classes(c);
    request.mutable_project()->set_item_feature_dim(item_feature_dim);
    request.mutable_project()->set_annotator_feature_dim(annotator_feature_dim);
    *request.mutable_project()->mutable_settings() = settings;
    v1::CreateProjectResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    grpc::Status status = projects_->CreateProject(&context, request, &response);
    if (created != nullptr) *created = response.project();
    return status;
  }

  v1::Project GetProject(const std::string& name) {
    v1::GetProjectRequest request;
    request.set_project(name);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    const grpc::Status status = projects_->GetProject(&context, request, &response);
    EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
    return response.project();
  }

  grpc::Status UpdateSettings(const std::string& project, const v1::ProjectSettings& settings,
                              v1::Project* updated = nullptr) {
    v1::UpdateProjectSettingsRequest request;
    request.set_project(project);
    *request.mutable_settings() = settings;
    v1::UpdateProjectSettingsResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    grpc::Status status = projects_->UpdateProjectSettings(&context, request, &response);
    if (updated != nullptr) *updated = response.project();
    return status;
  }

  grpc::Status ListProjectsPage(const std::string& token, v1::ListProjectsResponse* response) {
    v1::ListProjectsRequest request;
    request.set_page_token(token);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return projects_->ListProjects(&context, request, response);
  }

  grpc::Status AddItems(const std::string& project, const std::vector<v1::Item>& items,
                        v1::AddItemsResponse* response = nullptr) {
    v1::AddItemsRequest request;
    request.set_project(project);
    for (const v1::Item& item : items) *request.add_items() = item;
    v1::AddItemsResponse local;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return projects_->AddItems(&context, request, response ? response : &local);
  }

  grpc::Status AddAnnotators(const std::string& project,
                             const std::vector<v1::Annotator>& annotators,
                             v1::AddAnnotatorsResponse* response = nullptr) {
    v1::AddAnnotatorsRequest request;
    request.set_project(project);
    for (const v1::Annotator& a : annotators) *request.add_annotators() = a;
    v1::AddAnnotatorsResponse local;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return projects_->AddAnnotators(&context, request, response ? response : &local);
  }

  // Every batch written on one stream before any ack is read; the acks in arrival order.
  std::vector<v1::BatchAck> SubmitOnOneStream(const std::vector<v1::AnnotationBatch>& batches) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto stream = ingest_->SubmitAnnotations(&context);
    for (const v1::AnnotationBatch& b : batches) EXPECT_TRUE(stream->Write(b));
    stream->WritesDone();
    std::vector<v1::BatchAck> acks;
    v1::BatchAck ack;
    while (stream->Read(&ack)) acks.push_back(ack);
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return acks;
  }

  // One batch on its own stream; its ack.
  v1::BatchAck Submit(const std::string& project, const std::vector<v1::Annotation>& annotations,
                      uint64_t batch_id = 1) {
    std::vector<v1::BatchAck> acks = SubmitOnOneStream({Batch(batch_id, project, annotations)});
    EXPECT_EQ(acks.size(), 1u);
    return acks.empty() ? v1::BatchAck{} : acks[0];
  }

  grpc::Status Train(const std::string& project, v1::ModelVersion* version = nullptr) {
    v1::TrainModelRequest request;
    request.set_project(project);
    v1::TrainModelResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
    grpc::Status status = models_->TrainModel(&context, request, &response);
    if (version != nullptr) *version = response.version();
    return status;
  }

  std::vector<v1::ModelVersion> Versions(const std::string& project, int limit = 0) {
    v1::ListModelVersionsRequest request;
    request.set_project(project);
    request.set_limit(limit);
    v1::ListModelVersionsResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    const grpc::Status status = models_->ListModelVersions(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.versions().begin(), response.versions().end()};
  }

  v1::GetModelStatusResponse ModelStatus(const std::string& project) {
    v1::GetModelStatusRequest request;
    request.set_project(project);
    v1::GetModelStatusResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    const grpc::Status status = models_->GetModelStatus(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  grpc::Status GetPosteriors(const std::string& project, const std::vector<std::string>& items,
                             v1::GetPosteriorsResponse* response) {
    v1::GetPosteriorsRequest request;
    request.set_project(project);
    for (const std::string& id : items) request.add_items(id);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return truth_->GetPosteriors(&context, request, response);
  }

  // Expects GetPosteriors to serve `items` under exactly those ids, in order, item i with one
  // label and MAP class i % 2, and GetAnnotatorProfiles to serve `annotators` under theirs, each
  // with `labels_per_annotator` labels. `when` goes into every failure message.
  void ExpectServedUnderTheirIds(const std::string& project, const std::vector<std::string>& items,
                                 const std::vector<std::string>& annotators,
                                 int labels_per_annotator, const std::string& when) {
    v1::GetPosteriorsResponse response;
    const grpc::Status status = GetPosteriors(project, items, &response);
    ASSERT_TRUE(status.ok()) << when << ": " << status.error_message();
    ASSERT_EQ(response.posteriors_size(), static_cast<int>(items.size())) << when;
    for (size_t i = 0; i < items.size(); ++i) {
      const v1::Posterior& p = response.posteriors(static_cast<int>(i));
      EXPECT_EQ(p.item(), items[i]) << when;
      EXPECT_EQ(p.num_labels(), 1) << when << " " << items[i];
      EXPECT_EQ(p.map_label(), static_cast<int>(i % 2)) << when << " " << items[i];
    }
    v1::GetAnnotatorProfilesRequest request;
    request.set_project(project);
    for (const std::string& id : annotators) request.add_annotators(id);
    v1::GetAnnotatorProfilesResponse profiles;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    const grpc::Status got = truth_->GetAnnotatorProfiles(&context, request, &profiles);
    ASSERT_TRUE(got.ok()) << when << ": " << got.error_message();
    ASSERT_EQ(profiles.profiles_size(), static_cast<int>(annotators.size())) << when;
    for (size_t i = 0; i < annotators.size(); ++i) {
      EXPECT_EQ(profiles.profiles(static_cast<int>(i)).annotator(), annotators[i]) << when;
      EXPECT_EQ(profiles.profiles(static_cast<int>(i)).num_labels(), labels_per_annotator)
          << when << " " << annotators[i];
    }
  }

  // The item ids of every page of ListPosteriors.
  std::set<std::string> ListedItems(const std::string& project) {
    std::set<std::string> listed;
    std::string token;
    do {
      v1::ListPosteriorsRequest request;
      request.set_project(project);
      request.set_page_token(token);
      v1::ListPosteriorsResponse page;
      grpc::ClientContext context;
      context.set_deadline(Deadline());
      const grpc::Status got = truth_->ListPosteriors(&context, request, &page);
      EXPECT_TRUE(got.ok()) << got.error_message();
      if (!got.ok()) break;
      for (const v1::Posterior& p : page.posteriors()) listed.insert(p.item());
      token = page.next_page_token();
    } while (!token.empty());
    return listed;
  }

  v1::Posterior Posterior(const std::string& project, const std::string& item) {
    v1::GetPosteriorsResponse response;
    const grpc::Status status = GetPosteriors(project, {item}, &response);
    EXPECT_TRUE(status.ok()) << item << ": " << status.error_message();
    if (response.posteriors_size() != 1) return {};
    return response.posteriors(0);
  }

  static TestPostgres* pg_;
  std::unique_ptr<server::VerityServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ProjectService::Stub> projects_;
  std::unique_ptr<v1::IngestService::Stub> ingest_;
  std::unique_ptr<v1::ModelService::Stub> models_;
  std::unique_ptr<v1::TruthService::Stub> truth_;
};

TestPostgres* IngestProjectsProbeTest::pg_ = nullptr;

// ---------------------------------------------------------------------------------------------
// Ingest
// ---------------------------------------------------------------------------------------------

// ingest.proto, AnnotationBatch.batch_id: "Caller-chosen id echoed in the ack, so a client can
// match acks to batches"; BatchAck: "Acks come in the order the batches were sent". Five batches
// written before any ack is read, with ids that are not increasing (the largest uint64, 0, a
// repeated 7): the acks carry exactly those ids in that order, each with its one new label.
TEST_F(IngestProjectsProbeTest, AcksEchoEveryBatchIdInTheOrderTheBatchesWereSent) {
  ASSERT_TRUE(CreateProject("echo-ids").ok());
  const std::vector<uint64_t> ids = {std::numeric_limits<uint64_t>::max(), 0, 7, 7, 42};
  std::vector<v1::AnnotationBatch> batches;
  for (size_t i = 0; i < ids.size(); ++i) {
    batches.push_back(Batch(ids[i], "echo-ids", {Ann(absl::StrCat("i", i), "w", 0)}));
  }
  const std::vector<v1::BatchAck> acks = SubmitOnOneStream(batches);
  ASSERT_EQ(acks.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(acks[i].batch_id(), ids[i]) << i;
    EXPECT_EQ(acks[i].error_code(), 0) << acks[i].error_message();
    EXPECT_EQ(acks[i].accepted(), 1) << i;
  }
}

// ingest.proto, Annotation: "There is one live label per (item, annotator): resending the same
// label is an acknowledged duplicate; a different label is a revision (history is kept, the
// latest counts)". Within one batch, without client times: x twice the same is accepted 1 +
// duplicate 1; y with 0 then 1 is accepted 1 + revised 1 and serves 1. Two live labels
// (Project.num_labels), one revision in history (num_revisions).
TEST_F(IngestProjectsProbeTest, APairTwiceInOneBatchIsADuplicateOrARevision) {
  ASSERT_TRUE(CreateProject("pair-twice").ok());
  const v1::BatchAck ack = Submit(
      "pair-twice", {Ann("x", "w", 0), Ann("x", "w", 0), Ann("y", "w", 0), Ann("y", "w", 1)});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 2) << ack.DebugString();
  EXPECT_EQ(ack.duplicate(), 1) << ack.DebugString();
  EXPECT_EQ(ack.revised(), 1) << ack.DebugString();
  EXPECT_EQ(ack.stale(), 0) << ack.DebugString();
  EXPECT_EQ(Posterior("pair-twice", "y").map_label(), 1);
  EXPECT_EQ(Posterior("pair-twice", "y").num_labels(), 1);
  const v1::Project project = GetProject("pair-twice");
  EXPECT_EQ(project.num_labels(), 2);
  EXPECT_EQ(project.num_revisions(), 1);
}

// ingest.proto, Annotation: "'Latest' is by client_time when both the live label and the new
// one carry it ... Otherwise (either without client_time, or equal times) the label committed
// last counts." The live label carries a time, the new one does not: the new one is a revision,
// not stale, and is served.
TEST_F(IngestProjectsProbeTest, AnUntimedLabelRevisesATimedLiveLabel) {
  ASSERT_TRUE(CreateProject("untimed-after-timed").ok());
  EXPECT_EQ(Submit("untimed-after-timed", {Ann("x", "w", 0, kT + 200)}).accepted(), 1);
  const v1::BatchAck ack = Submit("untimed-after-timed", {Ann("x", "w", 1)});
  EXPECT_EQ(ack.revised(), 1) << ack.DebugString();
  EXPECT_EQ(ack.stale(), 0) << ack.DebugString();
  EXPECT_EQ(Posterior("untimed-after-timed", "x").map_label(), 1);
}

// Same rule, the other way round: the live label has no time, the new one has the oldest
// time allowed (0001-01-01T00:00:00Z, "must lie in [0001-01-01T00:00:00Z, ...]"). Only one
// carries a time, so the label committed last counts: a revision, served.
TEST_F(IngestProjectsProbeTest, ATimedLabelRevisesAnUntimedLiveLabelHoweverOld) {
  ASSERT_TRUE(CreateProject("timed-after-untimed").ok());
  EXPECT_EQ(Submit("timed-after-untimed", {Ann("x", "w", 0)}).accepted(), 1);
  const int64_t year_one = -62'135'596'800;  // 0001-01-01T00:00:00Z in Unix seconds.
  const v1::BatchAck ack = Submit("timed-after-untimed", {Ann("x", "w", 1, year_one)});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.rejected(), 0) << ack.DebugString();
  EXPECT_EQ(ack.revised(), 1) << ack.DebugString();
  EXPECT_EQ(ack.stale(), 0) << ack.DebugString();
  EXPECT_EQ(Posterior("timed-after-untimed", "x").map_label(), 1);
}

// ingest.proto, Annotation: "(either without client_time, or equal times) the label committed
// last counts". Two different labels with the same client_time: the second is a revision.
TEST_F(IngestProjectsProbeTest, EqualClientTimesLetTheLabelCommittedLastCount) {
  ASSERT_TRUE(CreateProject("equal-times").ok());
  EXPECT_EQ(Submit("equal-times", {Ann("x", "w", 0, kT, 123'456'000)}).accepted(), 1);
  const v1::BatchAck ack = Submit("equal-times", {Ann("x", "w", 1, kT, 123'456'000)});
  EXPECT_EQ(ack.revised(), 1) << ack.DebugString();
  EXPECT_EQ(ack.stale(), 0) << ack.DebugString();
  EXPECT_EQ(Posterior("equal-times", "x").map_label(), 1);
}

// ingest.proto, Annotation.client_time: "Stored to the microsecond", and "equal times: the label
// committed last counts". Two times 300 ns apart within one microsecond (T + 400 ns for the live
// label, T + 100 ns for the new one; truncated or rounded, both are T + 0 µs) are equal as
// stored, so the new label is a revision and served, not stale.
TEST_F(IngestProjectsProbeTest, TimesWithinOneMicrosecondAreEqual) {
  ASSERT_TRUE(CreateProject("same-microsecond").ok());
  EXPECT_EQ(Submit("same-microsecond", {Ann("x", "w", 0, kT, 400)}).accepted(), 1);
  const v1::BatchAck ack = Submit("same-microsecond", {Ann("x", "w", 1, kT, 100)});
  EXPECT_EQ(ack.revised(), 1) << ack.DebugString();
  EXPECT_EQ(ack.stale(), 0) << ack.DebugString();
  EXPECT_EQ(Posterior("same-microsecond", "x").map_label(), 1);
}

// ingest.proto, Annotation: "A duplicate carrying a later client_time than the live label's, or
// the only one, gives the live label that time". A duplicate carrying an EARLIER time does not:
// the live label keeps t=200, so a different label made at t=150 and arriving after is older
// than the live label, "kept in history only and acked as stale"; 0 stays served.
TEST_F(IngestProjectsProbeTest, AnOlderDuplicateDoesNotMoveTheLiveLabelsTimeBack) {
  ASSERT_TRUE(CreateProject("older-duplicate").ok());
  EXPECT_EQ(Submit("older-duplicate", {Ann("x", "w", 0, kT + 200)}).accepted(), 1);
  EXPECT_EQ(Submit("older-duplicate", {Ann("x", "w", 0, kT + 100)}).duplicate(), 1);
  const v1::BatchAck ack = Submit("older-duplicate", {Ann("x", "w", 1, kT + 150)});
  EXPECT_EQ(ack.stale(), 1) << ack.DebugString();
  EXPECT_EQ(ack.revised(), 0) << ack.DebugString();
  EXPECT_EQ(Posterior("older-duplicate", "x").map_label(), 0);
}

// ingest.proto: a stale label is "kept in history only ... the live label stays". In one batch
// on a new pair: 1 at t=200 (new: accepted), then 0 at t=100 (older: stale). 1 is served, the
// item has one live label, and the history holds the stale one (Project.num_revisions counts
// "revised and stale labels kept in the project's history").
TEST_F(IngestProjectsProbeTest, AnOlderLabelLaterInTheSameBatchIsStale) {
  ASSERT_TRUE(CreateProject("stale-in-batch").ok());
  const v1::BatchAck ack =
      Submit("stale-in-batch", {Ann("x", "w", 1, kT + 200), Ann("x", "w", 0, kT + 100)});
  EXPECT_EQ(ack.accepted(), 1) << ack.DebugString();
  EXPECT_EQ(ack.stale(), 1) << ack.DebugString();
  EXPECT_EQ(ack.revised(), 0) << ack.DebugString();
  const v1::Posterior p = Posterior("stale-in-batch", "x");
  EXPECT_EQ(p.map_label(), 1);
  EXPECT_EQ(p.num_labels(), 1);
  const v1::Project project = GetProject("stale-in-batch");
  EXPECT_EQ(project.num_labels(), 1);
  EXPECT_EQ(project.num_revisions(), 1);
}

// ingest.proto, Rejection: "index: Position of the annotation in its batch", "reason: Names the
// offending field, e.g. "label 7 out of range [0, 2)""; rejected annotations are "never
// written" and the rest of the batch is. Five annotations, the last four invalid each in one
// field: rejections 1..4, in batch order, each naming its field (the label's with the value and
// the range of the example); one accepted.
TEST_F(IngestProjectsProbeTest, RejectionsGiveTheirPositionAndNameTheField) {
  ASSERT_TRUE(CreateProject("rejections").ok());
  v1::Annotation bad_time = Ann("t", "w", 0, kT);
  bad_time.mutable_client_time()->set_seconds(253'402'300'800);  // 10000-01-01T00:00:00Z
  const v1::BatchAck ack = Submit("rejections", {Ann("ok", "w", 1), Ann("x", "w", 7),
                                                 Ann("", "w", 0), Ann("y", "a\tb", 0), bad_time});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 1) << ack.DebugString();
  EXPECT_EQ(ack.rejected(), 4) << ack.DebugString();
  ASSERT_EQ(ack.rejections_size(), 4) << ack.DebugString();
  const std::vector<std::string> fields = {"label", "item", "annotator", "client_time"};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ack.rejections(r).index(), r + 1) << ack.DebugString();
    EXPECT_TRUE(absl::StrContains(ack.rejections(r).reason(), fields[r]))
        << "rejection " << r << ": " << ack.rejections(r).reason();
  }
  EXPECT_TRUE(absl::StrContains(ack.rejections(0).reason(), "7 out of range [0, 2)"))
      << ack.rejections(0).reason();
  const v1::Project project = GetProject("rejections");
  EXPECT_EQ(project.num_labels(), 1);
  EXPECT_EQ(project.num_items(), 1);
}

// ingest.proto, BatchAck: "Resending is always safe", "what was written is acked as duplicate".
// A batch of three new labels sent twice: the second time all three are duplicates, and the
// project still holds three live labels and nothing in its history.
TEST_F(IngestProjectsProbeTest, AResentBatchIsAckedAsDuplicatesAndChangesNothing) {
  ASSERT_TRUE(CreateProject("resend").ok());
  const std::vector<v1::Annotation> labels = {Ann("a", "w", 0), Ann("b", "w", 1),
                                              Ann("a", "v", 1, kT)};
  const v1::BatchAck first = Submit("resend", labels, 1);
  EXPECT_EQ(first.accepted(), 3) << first.DebugString();
  const v1::BatchAck again = Submit("resend", labels, 1);
  EXPECT_EQ(again.error_code(), 0) << again.error_message();
  EXPECT_EQ(again.duplicate(), 3) << again.DebugString();
  EXPECT_EQ(again.accepted() + again.revised() + again.stale() + again.rejected(), 0)
      << again.DebugString();
  const v1::Project project = GetProject("resend");
  EXPECT_EQ(project.num_labels(), 3);
  EXPECT_EQ(project.num_revisions(), 0);
}

// ingest.proto, BatchAck: "sent only after the batch's accepted annotations are committed ...
// (acked means durable)"; service: "Batches of all open streams are committed together (group
// commit)"; README: "a query made after an ack sees the label". Four streams at once, five
// batches of ten new labels each: once every ack is in, each item is served with its label,
// and the project counts all 200.
TEST_F(IngestProjectsProbeTest, EveryAckedLabelOfConcurrentStreamsIsServed) {
  ASSERT_TRUE(CreateProject("concurrent").ok());
  constexpr int kStreams = 4, kBatches = 5, kPerBatch = 10;
  std::vector<std::vector<v1::BatchAck>> acks(kStreams);
  std::vector<std::thread> threads;
  for (int s = 0; s < kStreams; ++s) {
    threads.emplace_back([&, s] {
      std::vector<v1::AnnotationBatch> batches;
      for (int b = 0; b < kBatches; ++b) {
        std::vector<v1::Annotation> annotations;
        for (int i = 0; i < kPerBatch; ++i) {
          annotations.push_back(Ann(absl::StrCat("s", s, "b", b, "i", i), "w", (s + i) % 2));
        }
        batches.push_back(Batch(b, "concurrent", annotations));
      }
      acks[s] = SubmitOnOneStream(batches);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int s = 0; s < kStreams; ++s) {
    ASSERT_EQ(acks[s].size(), static_cast<size_t>(kBatches)) << s;
    for (const v1::BatchAck& ack : acks[s]) EXPECT_EQ(ack.accepted(), kPerBatch) << s;
  }
  for (int s = 0; s < kStreams; ++s) {
    std::vector<std::string> ids;
    for (int b = 0; b < kBatches; ++b) {
      for (int i = 0; i < kPerBatch; ++i) ids.push_back(absl::StrCat("s", s, "b", b, "i", i));
    }
    v1::GetPosteriorsResponse response;
    ASSERT_TRUE(GetPosteriors("concurrent", ids, &response).ok());
    ASSERT_EQ(response.posteriors_size(), kBatches * kPerBatch);
    for (int j = 0; j < response.posteriors_size(); ++j) {
      const v1::Posterior& p = response.posteriors(j);
      EXPECT_EQ(p.num_labels(), 1) << p.item();
      EXPECT_EQ(p.map_label(), (s + j % kPerBatch) % 2) << p.item();
    }
  }
  EXPECT_EQ(GetProject("concurrent").num_labels(), kStreams * kBatches * kPerBatch);
}

// ingest.proto, BatchAck.error_code: RESOURCE_EXHAUSTED when "the batch would pass one of the
// project's limits, ProjectLimits: the message names it ... nothing of the batch was written";
// "A failed batch has accepted, duplicate, revised and stale 0". max_items 2, one item in: a
// batch that revises the existing label and adds two new items (3 > 2) fails whole: the
// revision is not applied either, and the counts stay.
TEST_F(IngestProjectsProbeTest, ABatchPastMaxItemsWritesNotEvenItsRevision) {
  v1::ProjectSettings settings;
  settings.mutable_limits()->set_max_items(2);
  ASSERT_TRUE(CreateProject("max-items-batch", settings).ok());
  EXPECT_EQ(Submit("max-items-batch", {Ann("a", "w", 0)}).accepted(), 1);
  const v1::BatchAck ack =
      Submit("max-items-batch", {Ann("a", "w", 1), Ann("b", "w", 0), Ann("c", "w", 0)});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << ack.DebugString();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_items")) << ack.error_message();
  EXPECT_EQ(ack.accepted() + ack.duplicate() + ack.revised() + ack.stale(), 0) << ack.DebugString();
  EXPECT_EQ(Posterior("max-items-batch", "a").map_label(), 0);
  const v1::Project project = GetProject("max-items-batch");
  EXPECT_EQ(project.num_items(), 1);
  EXPECT_EQ(project.num_labels(), 1);
  EXPECT_EQ(project.num_revisions(), 0);
}

// projects.proto, ProjectLimits: "an admin key scoped to the project may keep or lower them", and
// "A batch, AddItems or AddAnnotators call that would pass a limit is refused whole"; max_labels
// counts "Live labels: one per (item, annotator); a revision adds none". Three items with a
// label each; max_items and max_labels lowered to 1 (below what the project holds): a new item
// (by AddItems or by a label) is refused, but a revision and a resend of existing labels add
// nothing and are taken.
TEST_F(IngestProjectsProbeTest, ALimitLoweredBelowTheProjectRefusesGrowthButNotRevisions) {
  ASSERT_TRUE(CreateProject("lowered").ok());
  EXPECT_EQ(Submit("lowered", {Ann("a", "w", 0), Ann("b", "w", 0), Ann("c", "w", 0)}).accepted(),
            3);
  v1::ProjectSettings lowered;
  lowered.mutable_limits()->set_max_items(1);
  lowered.mutable_limits()->set_max_labels(1);
  const grpc::Status updated = UpdateSettings("lowered", lowered);
  ASSERT_TRUE(updated.ok()) << updated.error_message();
  EXPECT_EQ(AddItems("lowered", {Item("d")}).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Submit("lowered", {Ann("e", "w", 0)}).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  const v1::BatchAck ack = Submit("lowered", {Ann("a", "w", 1), Ann("b", "w", 0)});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.revised(), 1) << ack.DebugString();
  EXPECT_EQ(ack.duplicate(), 1) << ack.DebugString();
  EXPECT_EQ(Posterior("lowered", "a").map_label(), 1);
  const v1::Project project = GetProject("lowered");
  EXPECT_EQ(project.num_items(), 3);
  EXPECT_EQ(project.num_labels(), 3);
}

// ---------------------------------------------------------------------------------------------
// Projects, items and annotators
// ---------------------------------------------------------------------------------------------

// projects.proto, Project: created_at, num_items, num_annotators, num_labels and num_revisions
// are "Output only"; classes are "Ordered class names". CreateProject answers the project as
// stored: the classes in the given order, the feature dimensions, no counts yet, and a creation
// time of this call; GetProject answers the same creation time.
TEST_F(IngestProjectsProbeTest, CreateProjectAnswersTheStoredProjectWithItsCreationTime) {
  const int64_t before = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  v1::Project created;
  ASSERT_TRUE(CreateProject("created", {}, {"zebra", "apple", "mango"}, &created, 3, 2).ok());
  const int64_t after = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  EXPECT_EQ(created.name(), "created");
  ASSERT_EQ(created.classes_size(), 3);
  EXPECT_EQ(created.classes(0), "zebra");
  EXPECT_EQ(created.classes(1), "apple");
  EXPECT_EQ(created.classes(2), "mango");
  EXPECT_EQ(created.item_feature_dim(), 3);
  EXPECT_EQ(created.annotator_feature_dim(), 2);
  EXPECT_EQ(created.num_items() + created.num_annotators() + created.num_labels() +
                created.num_revisions(),
            0);
  EXPECT_GE(created.created_at().seconds(), before - 1);
  EXPECT_LE(created.created_at().seconds(), after + 1);
  const v1::Project got = GetProject("created");
  EXPECT_EQ(got.created_at().seconds(), created.created_at().seconds());
  EXPECT_EQ(got.created_at().nanos(), created.created_at().nanos());
}

// projects.proto, Project.classes: "each 1-128 bytes" (bytes, with no other rule on what they
// hold). 42 CJK characters of 3 bytes (126 bytes) make a valid class name and are served as
// given; 43 of them (129 bytes) are INVALID_ARGUMENT.
TEST_F(IngestProjectsProbeTest, ClassNamesAreMeasuredInBytes) {
  std::string name126, name129;
  for (int i = 0; i < 42; ++i) name126 += "\xE6\x97\xA5";  // U+65E5
  name129 = name126 + "\xE6\x97\xA5";
  ASSERT_EQ(name126.size(), 126u);
  ASSERT_EQ(name129.size(), 129u);
  const grpc::Status ok = CreateProject("utf8-classes", {}, {name126, "caf\xC3\xA9"});
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  const v1::Project got = GetProject("utf8-classes");
  ASSERT_EQ(got.classes_size(), 2);
  EXPECT_EQ(got.classes(0), name126);
  EXPECT_EQ(got.classes(1), "caf\xC3\xA9");
  EXPECT_EQ(CreateProject("utf8-too-long", {}, {name129, "b"}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// projects.proto, CreateProject: "ALREADY_EXISTS if the name is taken"; Project.classes: "Fixed
// at creation". A second CreateProject of the name with other classes and settings changes
// nothing of the first.
TEST_F(IngestProjectsProbeTest, ATakenNameLeavesTheFirstProjectAsItWas) {
  v1::ProjectSettings mv;
  mv.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  ASSERT_TRUE(CreateProject("taken", mv, {"a", "b"}).ok());
  v1::ProjectSettings ds;
  ds.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(CreateProject("taken", ds, {"x", "y", "z"}).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  const v1::Project got = GetProject("taken");
  ASSERT_EQ(got.classes_size(), 2);
  EXPECT_EQ(got.classes(0), "a");
  EXPECT_EQ(got.classes(1), "b");
  EXPECT_EQ(got.settings().model().method(), v1::TRUTH_METHOD_MAJORITY_VOTE);
}

// projects.proto, CreateProject: "INVALID_ARGUMENT on a bad name, classes or dimension". A
// refused CreateProject stores nothing: the name is still free (GetProject NOT_FOUND) and a
// valid CreateProject of it then succeeds.
TEST_F(IngestProjectsProbeTest, ARefusedCreateProjectDoesNotTakeTheName) {
  EXPECT_EQ(CreateProject("refused-first", {}, {"a", "a"}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CreateProject("refused-first", {}, {"a", "b"}, nullptr, -1).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    v1::GetProjectRequest request;
    request.set_project("refused-first");
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    EXPECT_EQ(projects_->GetProject(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  const grpc::Status created = CreateProject("refused-first", {}, {"a", "b"});
  EXPECT_TRUE(created.ok()) << created.error_message();
}

// projects.proto, ListProjects: "in creation order, a page at a time"; ListProjectsResponse:
// "Empty on the last page. A page ends once its projects pass 1 MiB (every project is listed
// whole)". 36 projects of 256 classes of 120 bytes (about 31 KiB each, 1.1 MiB in all): paging
// lists each once, in creation order, over more than one page; every page but the last passes
// 1 MiB, and only with its last project.
TEST_F(IngestProjectsProbeTest, ListProjectsPagesAtOneMebibyteInCreationOrder) {
  constexpr int kProjects = 36;
  std::vector<std::string> classes;
  for (int k = 0; k < 256; ++k) classes.push_back(absl::StrCat(k, "_", std::string(116, 'c')));
  std::vector<std::string> names;
  for (int p = 0; p < kProjects; ++p) {
    names.push_back(absl::StrCat("paged-", 100 - p));  // Not alphabetical: creation order.
    const grpc::Status status = CreateProject(names.back(), {}, classes);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  constexpr size_t kMiB = 1 << 20;
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    v1::ListProjectsResponse page;
    const grpc::Status status = ListProjectsPage(token, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_LT(++pages, 100);
    size_t bytes = 0, bytes_before_last = 0;
    for (const v1::Project& p : page.projects()) {
      bytes_before_last = bytes;
      bytes += p.ByteSizeLong();
      if (absl::StartsWith(p.name(), "paged-")) listed.push_back(p.name());
    }
    token = page.next_page_token();
    if (!token.empty()) {
      EXPECT_GT(bytes, kMiB) << "page " << pages << " ended before 1 MiB";
      EXPECT_LE(bytes_before_last, kMiB) << "page " << pages << " went on past 1 MiB";
    }
  } while (!token.empty());
  EXPECT_GE(pages, 2);
  EXPECT_EQ(listed, names);
}

// projects.proto, ListProjects: "in creation order, a page at a time". A project created while a
// listing is under way is created after every project already listed, so it comes on a later
// page, and no project is listed twice or left out. 36 projects of about 31 KiB (two pages);
// after the first page, one more is created; paging on lists the rest, then the new one last.
TEST_F(IngestProjectsProbeTest, AProjectCreatedDuringAListingComesLastAndOnce) {
  std::vector<std::string> classes;
  for (int k = 0; k < 256; ++k) classes.push_back(absl::StrCat(k, "_", std::string(116, 'c')));
  std::vector<std::string> names;
  for (int p = 0; p < 36; ++p) {
    names.push_back(absl::StrCat("during-", 50 - p));
    const grpc::Status status = CreateProject(names.back(), {}, classes);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  std::vector<std::string> listed;
  std::string token;
  bool created_late = false;
  int pages = 0;
  do {
    v1::ListProjectsResponse page;
    const grpc::Status status = ListProjectsPage(token, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_LT(++pages, 100);
    for (const v1::Project& p : page.projects()) {
      if (absl::StartsWith(p.name(), "during-")) listed.push_back(p.name());
    }
    token = page.next_page_token();
    if (!created_late) {
      ASSERT_FALSE(token.empty()) << "36 projects of 31 KiB fit one page";
      ASSERT_TRUE(CreateProject("during-late", {}, {"a", "b"}).ok());
      names.push_back("during-late");
      created_late = true;
    }
  } while (!token.empty());
  EXPECT_EQ(listed, names);
}

// projects.proto, ListProjects: "The projects the caller's key may see, in creation order" --
// the order in which they were created, also after a restart reloads them from PostgreSQL. Five
// projects created in non-alphabetical order are listed in that order before and after.
TEST_F(IngestProjectsProbeTest, ListProjectsKeepsCreationOrderAcrossARestart) {
  const std::vector<std::string> names = {"order-m", "order-c", "order-z", "order-a", "order-k"};
  for (const std::string& name : names) ASSERT_TRUE(CreateProject(name).ok());
  auto listed = [&] {
    std::vector<std::string> ours;
    std::string token;
    do {
      v1::ListProjectsResponse page;
      const grpc::Status status = ListProjectsPage(token, &page);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) break;
      for (const v1::Project& p : page.projects()) {
        if (absl::StartsWith(p.name(), "order-")) ours.push_back(p.name());
      }
      token = page.next_page_token();
    } while (!token.empty());
    return ours;
  };
  EXPECT_EQ(listed(), names);
  TearDown();
  SetUp();
  EXPECT_EQ(listed(), names);
}

// projects.proto, ListProjects: "INVALID_ARGUMENT naming page_token for a token this server did
// not issue". Tokens no server issues: words, a negative number, an issued token with text
// appended. (Whether an unissued token of the issued form must be refused is left to the
// report: the documentation does not say how a server tells them apart.)
TEST_F(IngestProjectsProbeTest, ListProjectsRefusesATokenItDidNotIssueNamingPageToken) {
  ASSERT_TRUE(CreateProject("token-a").ok());
  ASSERT_TRUE(CreateProject("token-b").ok());
  // A token is issued as decimal digits only, so a sign or a space is not one this server
  // issued either.
  for (const std::string token : {"not-a-token", "-1", "1x", "page 2", " 1", "1 ", "+1"}) {
    v1::ListProjectsResponse page;
    const grpc::Status status = ListProjectsPage(token, &page);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << token;
    EXPECT_TRUE(absl::StrContains(status.error_message(), "page_token"))
        << token << ": " << status.error_message();
  }
}

// projects.proto, Project: num_items "items known (labelled or added)", num_annotators,
// num_labels "live labels (one per item and annotator)", num_revisions "revised and stale
// labels kept in the project's history". Items a, b, c added; annotators u, v added; labels
// (a,u,0), (d,u,1), (d,w,0), then (a,u,1): items a, b, c, d = 4; annotators u, v, w = 3; live
// labels 3; one revision.
TEST_F(IngestProjectsProbeTest, ProjectCountsFollowAddsLabelsAndRevisions) {
  ASSERT_TRUE(CreateProject("counts").ok());
  ASSERT_TRUE(AddItems("counts", {Item("a"), Item("b"), Item("c")}).ok());
  v1::Annotator u, v;
  u.set_id("u");
  v.set_id("v");
  ASSERT_TRUE(AddAnnotators("counts", {u, v}).ok());
  EXPECT_EQ(Submit("counts", {Ann("a", "u", 0), Ann("d", "u", 1), Ann("d", "w", 0)}).accepted(), 3);
  EXPECT_EQ(Submit("counts", {Ann("a", "u", 1)}).revised(), 1);
  const v1::Project project = GetProject("counts");
  EXPECT_EQ(project.num_items(), 4);
  EXPECT_EQ(project.num_annotators(), 3);
  EXPECT_EQ(project.num_labels(), 3);
  EXPECT_EQ(project.num_revisions(), 1);
}

// projects.proto, AddAnnotatorsResponse: "Counted as AddItemsResponse" -- "added: the ids new to
// the project, each counted once; updated: every other entry". w exists (a label created it);
// AddAnnotators [w, z, z] adds z once and updates w and z's second entry.
TEST_F(IngestProjectsProbeTest, AddAnnotatorsCountsAnAnnotatorALabelCreatedAsUpdated) {
  ASSERT_TRUE(CreateProject("annotator-counts").ok());
  EXPECT_EQ(Submit("annotator-counts", {Ann("i", "w", 0)}).accepted(), 1);
  v1::Annotator w, z;
  w.set_id("w");
  z.set_id("z");
  v1::AddAnnotatorsResponse response;
  ASSERT_TRUE(AddAnnotators("annotator-counts", {w, z, z}, &response).ok());
  EXPECT_EQ(response.added(), 1);
  EXPECT_EQ(response.updated(), 2);
  EXPECT_EQ(GetProject("annotator-counts").num_annotators(), 2);
}

// projects.proto, AddItemsRequest: "Existing ids are updated: given features and gold replace
// the old" -- what is not given is not replaced; Item.priority: "Absent: unchanged". An update
// of gold item g that gives only a priority keeps its gold: g is still served is_gold, clamped
// to its class 1, against a label of 0.
TEST_F(IngestProjectsProbeTest, AnItemUpdateWithoutGoldKeepsItsGold) {
  ASSERT_TRUE(CreateProject("keep-gold").ok());
  v1::Item gold = Item("g");
  gold.set_gold_label(1);
  ASSERT_TRUE(AddItems("keep-gold", {gold}).ok());
  EXPECT_EQ(Submit("keep-gold", {Ann("g", "w", 0)}).accepted(), 1);
  v1::Item update = Item("g");
  update.set_priority(5);
  v1::AddItemsResponse response;
  ASSERT_TRUE(AddItems("keep-gold", {update}, &response).ok());
  EXPECT_EQ(response.updated(), 1);
  const v1::Posterior p = Posterior("keep-gold", "g");
  EXPECT_TRUE(p.is_gold());
  EXPECT_EQ(p.map_label(), 1);
}

// projects.proto, Item.features and Annotator.features: "Exactly item_feature_dim finite values,
// or empty". In a project with both dimensions, items and annotators without features are taken
// next to ones with them.
TEST_F(IngestProjectsProbeTest, ItemsAndAnnotatorsMayComeWithoutFeatures) {
  ASSERT_TRUE(CreateProject("no-features", {}, {"a", "b"}, nullptr, 2, 3).ok());
  v1::Item with = Item("with");
  with.add_features(0.5f);
  with.add_features(-1.0f);
  v1::AddItemsResponse items;
  const grpc::Status added = AddItems("no-features", {with, Item("without")}, &items);
  ASSERT_TRUE(added.ok()) << added.error_message();
  EXPECT_EQ(items.added(), 2);
  v1::Annotator a, b;
  a.set_id("a");
  for (float f : {1.0f, 2.0f, 3.0f}) a.add_features(f);
  b.set_id("b");
  v1::AddAnnotatorsResponse annotators;
  const grpc::Status added_annotators = AddAnnotators("no-features", {a, b}, &annotators);
  ASSERT_TRUE(added_annotators.ok()) << added_annotators.error_message();
  EXPECT_EQ(annotators.added(), 2);
  const v1::Project project = GetProject("no-features");
  EXPECT_EQ(project.num_items(), 2);
  EXPECT_EQ(project.num_annotators(), 2);
}

// projects.proto, AddItems: "INVALID_ARGUMENT names the first bad item; nothing is written
// then". Items [ok, gold 9 (out of range), id with a tab]: the error names the second entry
// (items[1], or its id) and not the third, and neither the good nor any other item is written.
TEST_F(IngestProjectsProbeTest, AddItemsNamesTheFirstBadItemAndWritesNothing) {
  ASSERT_TRUE(CreateProject("first-bad").ok());
  v1::Item bad_gold = Item("bad-gold");
  bad_gold.set_gold_label(9);
  const grpc::Status status = AddItems("first-bad", {Item("fine"), bad_gold, Item("has\ttab")});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "items[1]") ||
              absl::StrContains(status.error_message(), "bad-gold"))
      << status.error_message();
  EXPECT_FALSE(absl::StrContains(status.error_message(), "items[2]") ||
               absl::StrContains(status.error_message(), "has\ttab"))
      << status.error_message();
  EXPECT_EQ(GetProject("first-bad").num_items(), 0);
}

// projects.proto, UpdateProjectSettingsResponse and GetProject: settings "Replaces the project's
// settings whole". The new settings are answered by the call, served by GetProject and listed
// by ListProjects.
TEST_F(IngestProjectsProbeTest, UpdatedSettingsAreListedByListProjects) {
  ASSERT_TRUE(CreateProject("listed-settings").ok());
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_GLAD);
  settings.mutable_model()->set_prior_smoothing(2.5);
  settings.mutable_assignment()->set_lease_seconds(77);
  settings.mutable_limits()->set_max_items(1234);
  v1::Project updated;
  const grpc::Status status = UpdateSettings("listed-settings", settings, &updated);
  ASSERT_TRUE(status.ok()) << status.error_message();
  auto check = [&](const v1::Project& p, const std::string& where) {
    EXPECT_EQ(p.settings().model().method(), v1::TRUTH_METHOD_GLAD) << where;
    EXPECT_EQ(p.settings().model().prior_smoothing(), 2.5) << where;
    EXPECT_EQ(p.settings().assignment().lease_seconds(), 77) << where;
    EXPECT_EQ(p.settings().limits().max_items(), 1234) << where;
  };
  check(updated, "UpdateProjectSettings");
  check(GetProject("listed-settings"), "GetProject");
  bool found = false;
  std::string token;
  do {
    v1::ListProjectsResponse page;
    ASSERT_TRUE(ListProjectsPage(token, &page).ok());
    for (const v1::Project& p : page.projects()) {
      if (p.name() == "listed-settings") {
        found = true;
        check(p, "ListProjects");
      }
    }
    token = page.next_page_token();
  } while (!token.empty());
  EXPECT_TRUE(found);
}

// projects.proto, Item: "Ids are 1-256 bytes of UTF-8 text without control characters";
// Annotator: "Ids follow the item id rules". Ids made of the characters that SQL, COPY, CSV and array syntax
// treat specially are still just ids: labelled through ingest (new items and annotators) and
// added by AddItems (one gold), they are served under exactly those ids, before and after a
// restart that reloads them from PostgreSQL.
TEST_F(IngestProjectsProbeTest, IdsOfSpecialCharactersAreKeptExactlyAcrossARestart) {
  ASSERT_TRUE(CreateProject("odd-ids").ok());
  const std::vector<std::string> ids = {"\\N",   "a\\tb", "c,d",   "e\"f", "g'h",
                                        "{i,j}", "NULL",  "k|l\\", "%_*",  "~!@#$^&()=+[]<>?/:;`"};
  std::vector<v1::Annotation> labels;
  for (size_t i = 0; i < ids.size(); ++i) {
    labels.push_back(Ann(ids[i], ids[(i + 1) % ids.size()], static_cast<int32_t>(i % 2)));
  }
  EXPECT_EQ(Submit("odd-ids", labels).accepted(), static_cast<int>(ids.size()));
  v1::Item added = Item("added\\N,\"{}");
  added.set_gold_label(1);
  ASSERT_TRUE(AddItems("odd-ids", {added}).ok());
  auto check = [&](const std::string& when) {
    ExpectServedUnderTheirIds("odd-ids", ids, ids, 1, when);
    const v1::Posterior gold = Posterior("odd-ids", added.id());
    EXPECT_EQ(gold.item(), added.id()) << when;
    EXPECT_TRUE(gold.is_gold()) << when;
    const v1::Project project = GetProject("odd-ids");
    EXPECT_EQ(project.num_items(), static_cast<int64_t>(ids.size()) + 1) << when;
    EXPECT_EQ(project.num_annotators(), static_cast<int64_t>(ids.size())) << when;
  };
  check("before the restart");
  TearDown();
  SetUp();
  check("after the restart");
}

// projects.proto, Item: ids are "1-256 bytes of UTF-8 text without control characters";
// spaces are kept. Real crowdsourcing data names items by their content (wordsim's "boy lad")
// and people by name: ids with inner, leading and trailing spaces and with two-, three- and
// four-byte UTF-8 characters are accepted by ingest (new items and annotators) and by AddItems,
// and are served under exactly those bytes, also by ListPosteriors, before and after a restart.
TEST_F(IngestProjectsProbeTest, IdsWithSpacesAndUtf8AreKeptExactlyAcrossARestart) {
  ASSERT_TRUE(CreateProject("text-ids").ok());
  const std::vector<std::string> items = {"boy lad",
                                          " leading",
                                          "trailing ",
                                          "caf\xc3\xa9 au lait",
                                          "\xe6\x97\xa5\xe6\x9c\xac",
                                          "smile \xf0\x9f\x99\x82"};
  const std::vector<std::string> annotators = {"Jos\xc3\xa9 Ortiz", "worker 2", "  "};
  std::vector<v1::Annotation> labels;
  for (size_t i = 0; i < items.size(); ++i) {
    labels.push_back(Ann(items[i], annotators[i % annotators.size()], static_cast<int32_t>(i % 2)));
  }
  const v1::BatchAck ack = Submit("text-ids", labels);
  EXPECT_EQ(ack.accepted(), static_cast<int>(items.size())) << ack.DebugString();
  v1::Item added = Item("gold \xc3\xa0 la carte");
  added.set_gold_label(1);
  const grpc::Status added_status = AddItems("text-ids", {added});
  ASSERT_TRUE(added_status.ok()) << added_status.error_message();
  auto check = [&](const std::string& when) {
    ExpectServedUnderTheirIds("text-ids", items, annotators, 2, when);
    const v1::Posterior gold = Posterior("text-ids", added.id());
    EXPECT_EQ(gold.item(), added.id()) << when;
    EXPECT_TRUE(gold.is_gold()) << when;
    std::set<std::string> all(items.begin(), items.end());
    all.insert(added.id());
    EXPECT_EQ(ListedItems("text-ids"), all) << when;
  };
  check("before the restart");
  TearDown();
  SetUp();
  check("after the restart");
}

// projects.proto, Project.classes: "Ordered class names, 2 to 256 of them, unique, each 1-128
// bytes ... Fixed at creation." Names that array, CSV or JSON syntax treats specially (commas,
// braces, quotes, a backslash, NULL, spaces at the ends) are class names like any other: the
// project answers them exactly, in order, when created, from GetProject and after a restart.
TEST_F(IngestProjectsProbeTest, ClassNamesOfSpecialCharactersAreKeptExactlyAcrossARestart) {
  const std::vector<std::string> classes = {"a,b", "{c}", "\"d\"", "NULL", "e\\f", " g ",
                                            "h i", "'j'", "k\\\"", "{}",   "it's"};
  v1::Project created;
  const grpc::Status status = CreateProject("odd-classes", {}, classes, &created);
  ASSERT_TRUE(status.ok()) << status.error_message();
  auto check = [&](const v1::Project& p, const std::string& when) {
    ASSERT_EQ(p.classes_size(), static_cast<int>(classes.size())) << when;
    for (size_t k = 0; k < classes.size(); ++k) {
      EXPECT_EQ(p.classes(static_cast<int>(k)), classes[k]) << when;
    }
  };
  check(created, "CreateProject");
  check(GetProject("odd-classes"), "GetProject");
  EXPECT_EQ(Submit("odd-classes", {Ann("x", "w", 9)}).accepted(), 1);
  TearDown();
  SetUp();
  check(GetProject("odd-classes"), "after the restart");
  const v1::Posterior p = Posterior("odd-classes", "x");
  EXPECT_EQ(p.probabilities_size(), static_cast<int>(classes.size()));
  EXPECT_EQ(p.map_label(), 9);
}

// ---------------------------------------------------------------------------------------------
// Model versions
// ---------------------------------------------------------------------------------------------

// models.proto, ModelVersion.version: "1, 2, ... per project". Two projects: a's fits are 1 and
// 2 (a new label between), b's first is 1; ListModelVersions is "Newest first".
TEST_F(IngestProjectsProbeTest, VersionsAreNumberedFromOnePerProject) {
  v1::ProjectSettings mv;
  mv.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  ASSERT_TRUE(CreateProject("versions-a", mv).ok());
  ASSERT_TRUE(CreateProject("versions-b", mv).ok());
  EXPECT_EQ(Submit("versions-a", {Ann("i", "w", 0)}).accepted(), 1);
  EXPECT_EQ(Submit("versions-b", {Ann("i", "w", 1)}).accepted(), 1);
  v1::ModelVersion a1, a2, b1;
  ASSERT_TRUE(Train("versions-a", &a1).ok());
  EXPECT_EQ(Submit("versions-a", {Ann("j", "w", 1)}).accepted(), 1);
  ASSERT_TRUE(Train("versions-a", &a2).ok());
  ASSERT_TRUE(Train("versions-b", &b1).ok());
  EXPECT_EQ(a1.version(), 1);
  EXPECT_EQ(a2.version(), 2);
  EXPECT_EQ(b1.version(), 1);
  const std::vector<v1::ModelVersion> listed = Versions("versions-a");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].version(), 2);
  EXPECT_EQ(listed[1].version(), 1);
  EXPECT_EQ(Versions("versions-b").size(), 1u);
}

// models.proto: ModelVersion is "An immutable result of one fit" with the method it used;
// common.proto, TruthMethod: "changing it takes effect at the next fit". A mv project fitted,
// switched to one_coin and fitted again: version 1 stays mv, version 2 is one_coin, and
// GetModelStatus.method ("The method the next fit will use") says one_coin.
TEST_F(IngestProjectsProbeTest, EachVersionKeepsTheMethodItWasFittedWith) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  ASSERT_TRUE(CreateProject("version-methods", settings).ok());
  EXPECT_EQ(
      Submit("version-methods", {Ann("i", "w", 0), Ann("i", "v", 0), Ann("j", "w", 1)}).accepted(),
      3);
  v1::ModelVersion first, second;
  ASSERT_TRUE(Train("version-methods", &first).ok());
  EXPECT_EQ(first.method(), v1::TRUTH_METHOD_MAJORITY_VOTE);
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_ONE_COIN);
  ASSERT_TRUE(UpdateSettings("version-methods", settings).ok());
  EXPECT_EQ(ModelStatus("version-methods").method(), v1::TRUTH_METHOD_ONE_COIN);
  ASSERT_TRUE(Train("version-methods", &second).ok());
  EXPECT_EQ(second.version(), first.version() + 1);
  EXPECT_EQ(second.method(), v1::TRUTH_METHOD_ONE_COIN);
  const std::vector<v1::ModelVersion> listed = Versions("version-methods");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].method(), v1::TRUTH_METHOD_ONE_COIN);
  EXPECT_EQ(listed[1].method(), v1::TRUTH_METHOD_MAJORITY_VOTE);
  EXPECT_EQ(ModelStatus("version-methods").current_version().version(), second.version());
}

// models.proto, ModelVersion.num_labels: "Live labels the fit saw"; GetModelStatus.num_labels
// "Live labels now", labels_since_version "Labels committed after the current version's
// watermark". 4 new labels, one revised and one stale (t) before the fit: the fit saw 4 live
// labels. Then 2 new labels: 6 now, 2 since the version.
TEST_F(IngestProjectsProbeTest, VersionAndStatusCountLiveLabels) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  ASSERT_TRUE(CreateProject("live-counts", settings).ok());
  EXPECT_EQ(Submit("live-counts", {Ann("a", "w", 0), Ann("a", "v", 0), Ann("b", "w", 1),
                                   Ann("b", "v", 1, kT + 200)})
                .accepted(),
            4);
  EXPECT_EQ(Submit("live-counts", {Ann("a", "w", 1)}).revised(), 1);
  EXPECT_EQ(Submit("live-counts", {Ann("b", "v", 0, kT + 100)}).stale(), 1);
  v1::ModelVersion version;
  ASSERT_TRUE(Train("live-counts", &version).ok());
  EXPECT_EQ(version.num_labels(), 4);
  EXPECT_EQ(Submit("live-counts", {Ann("c", "w", 0), Ann("c", "v", 1)}).accepted(), 2);
  const v1::GetModelStatusResponse status = ModelStatus("live-counts");
  EXPECT_EQ(status.num_labels(), 6);
  EXPECT_EQ(status.labels_since_version(), 2);
  EXPECT_EQ(status.current_version().num_labels(), 4);
}

// models.proto, TrainModel: "When nothing a fit reads has changed since the current version's
// fit (no new or revised label, gold label, item, feature or model setting; a priority is not
// read by the fit), it returns that version and writes nothing." A priority change only: the
// same version, and ListModelVersions still lists one.
TEST_F(IngestProjectsProbeTest, TrainModelAfterOnlyAPriorityChangeReturnsTheCurrentVersion) {
  ASSERT_TRUE(CreateProject("priority-only").ok());
  ASSERT_TRUE(AddItems("priority-only", {Item("i"), Item("j")}).ok());
  EXPECT_EQ(Submit("priority-only", {Ann("i", "w", 0), Ann("j", "w", 1)}).accepted(), 2);
  v1::ModelVersion first, again;
  ASSERT_TRUE(Train("priority-only", &first).ok());
  v1::Item urgent = Item("j");
  urgent.set_priority(10);
  ASSERT_TRUE(AddItems("priority-only", {urgent}).ok());
  ASSERT_TRUE(Train("priority-only", &again).ok());
  EXPECT_EQ(again.version(), first.version());
  EXPECT_EQ(Versions("priority-only").size(), 1u);
}

// models.proto, TrainModel: a new "gold label" is something a fit reads: gold given to an
// existing, labelled item after a fit makes the next TrainModel fit a new version.
TEST_F(IngestProjectsProbeTest, TrainModelAfterANewGoldLabelFitsANewVersion) {
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  ASSERT_TRUE(CreateProject("new-gold", settings).ok());
  EXPECT_EQ(Submit("new-gold", {Ann("i", "w", 0), Ann("i", "v", 1), Ann("j", "w", 1)}).accepted(),
            3);
  v1::ModelVersion first, second;
  ASSERT_TRUE(Train("new-gold", &first).ok());
  v1::Item gold = Item("i");
  gold.set_gold_label(1);
  ASSERT_TRUE(AddItems("new-gold", {gold}).ok());
  ASSERT_TRUE(Train("new-gold", &second).ok());
  EXPECT_EQ(second.version(), first.version() + 1);
}

// models.proto, TrainModel: "FAILED_PRECONDITION when the project has no labels". Labels that
// were all rejected were "never written": the project still has none.
TEST_F(IngestProjectsProbeTest, TrainModelAfterOnlyRejectedLabelsIsAFailedPrecondition) {
  ASSERT_TRUE(CreateProject("only-rejected").ok());
  const v1::BatchAck ack = Submit("only-rejected", {Ann("i", "w", 5), Ann("j", "w", -1)});
  EXPECT_EQ(ack.rejected(), 2) << ack.DebugString();
  EXPECT_EQ(Train("only-rejected").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(Versions("only-rejected").empty());
}

// common.proto, TRUTH_METHOD_KOS: "projects of 2 classes only; CreateProject and
// UpdateProjectSettings refuse it for others" -- a 2-class project takes it, at creation and by
// an update, and its fit is a kos version.
TEST_F(IngestProjectsProbeTest, ATwoClassProjectTakesKosAndFitsIt) {
  v1::ProjectSettings kos;
  kos.mutable_model()->set_method(v1::TRUTH_METHOD_KOS);
  const grpc::Status created = CreateProject("kos-created", kos);
  EXPECT_TRUE(created.ok()) << created.error_message();
  ASSERT_TRUE(CreateProject("kos-updated").ok());
  const grpc::Status updated = UpdateSettings("kos-updated", kos);
  ASSERT_TRUE(updated.ok()) << updated.error_message();
  EXPECT_EQ(Submit("kos-updated",
                   {Ann("i", "w", 0), Ann("i", "v", 0), Ann("j", "w", 1), Ann("j", "v", 1)})
                .accepted(),
            4);
  v1::ModelVersion version;
  const grpc::Status trained = Train("kos-updated", &version);
  ASSERT_TRUE(trained.ok()) << trained.error_message();
  EXPECT_EQ(version.method(), v1::TRUTH_METHOD_KOS);
}

// projects.proto, ModelSettings.method: "UNSPECIFIED: auto for a project created from now on (the
// server stores AUTO)"; UpdateProjectSettingsRequest: "an unset model.method keeps the project's
// method". A project created with glad, updated with settings that leave the method unset (but
// change the smoothing), keeps glad; its next fit is glad.
TEST_F(IngestProjectsProbeTest, AnUpdateWithoutAMethodKeepsAnExplicitMethodForTheNextFit) {
  v1::ProjectSettings glad;
  glad.mutable_model()->set_method(v1::TRUTH_METHOD_GLAD);
  ASSERT_TRUE(CreateProject("keeps-glad", glad).ok());
  v1::ProjectSettings unset;
  unset.mutable_model()->set_prior_smoothing(3);
  v1::Project updated;
  ASSERT_TRUE(UpdateSettings("keeps-glad", unset, &updated).ok());
  EXPECT_EQ(updated.settings().model().method(), v1::TRUTH_METHOD_GLAD);
  EXPECT_EQ(ModelStatus("keeps-glad").method(), v1::TRUTH_METHOD_GLAD);
  EXPECT_EQ(Submit("keeps-glad", {Ann("i", "w", 0), Ann("i", "v", 0), Ann("j", "w", 1)}).accepted(),
            3);
  v1::ModelVersion version;
  ASSERT_TRUE(Train("keeps-glad", &version).ok());
  EXPECT_EQ(version.method(), v1::TRUTH_METHOD_GLAD);
}

// models.proto, ModelVersion.created_at, and ListModelVersions "Newest first": three fits (a new
// label before each) are listed 3, 2, 1 with creation times that do not go backwards from 1 to
// 3, each within the test's run.
TEST_F(IngestProjectsProbeTest, VersionTimesFollowTheirNumbers) {
  v1::ProjectSettings mv;
  mv.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  ASSERT_TRUE(CreateProject("version-times", mv).ok());
  const int64_t before = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (int v = 0; v < 3; ++v) {
    EXPECT_EQ(Submit("version-times", {Ann(absl::StrCat("i", v), "w", v % 2)}).accepted(), 1);
    ASSERT_TRUE(Train("version-times").ok());
  }
  const std::vector<v1::ModelVersion> listed = Versions("version-times");
  ASSERT_EQ(listed.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(listed[k].version(), 3 - k);
    EXPECT_GE(listed[k].created_at().seconds(), before - 1);
    EXPECT_EQ(listed[k].num_labels(), 3 - k);
  }
  for (int k = 0; k + 1 < 3; ++k) {
    const auto& newer = listed[k].created_at();
    const auto& older = listed[k + 1].created_at();
    EXPECT_TRUE(newer.seconds() > older.seconds() ||
                (newer.seconds() == older.seconds() && newer.nanos() >= older.nanos()))
        << k;
  }
}

// projects.proto, GetProject: "UNAVAILABLE, naming the reason, if it exists but its stored state
// cannot be loaded (the other projects serve meanwhile)"; Project.classes: "each 1-128 bytes"
// (no character is excluded). A project whose class name begins with a single quote ("'x") is
// created; the server (a verity_server process, on a database of its own, so that the other
// tests' servers never load the project) is stopped and started again. It must start and serve
// the other project, and answer for this one with its classes or, at worst, UNAVAILABLE naming
// why -- never take the server down.
TEST_F(IngestProjectsProbeTest, AClassNameStartingWithAQuoteDoesNotStopTheServerLoading) {
  const std::string url = pg_->url();
  ASSERT_TRUE(absl::StrContains(url, "dbname='verity'")) << url;
  {
    pqxx::connection conn(url);
    pqxx::nontransaction txn(conn);
    txn.exec0("CREATE DATABASE quoted_class");
  }
  const std::string quoted_url =
      absl::StrReplaceAll(url, {{"dbname='verity'", "dbname='quoted_class'"}});
  const std::string dir = MakeTempDir("verity-ingest-quoted-class-server");
  struct RemoveDir {
    std::string path;
    ~RemoveDir() { RemoveTree(path); }
  } remove_dir{dir};
  ServerProcess server(
      RunfilePath("server/verity_server"), dir,
      {"--postgres_url=" + quoted_url, "--metrics_port=0", "--listen=127.0.0.1:0"});
  ASSERT_TRUE(server.Start().ok());
  auto projects = v1::ProjectService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()));
  auto create = [&](const std::string& name, const std::vector<std::string>& classes) {
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(name);
    for (const std::string& c : classes) request.mutable_project()->add_classes(c);
    v1::CreateProjectResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return projects->CreateProject(&context, request, &response);
  };
  ASSERT_TRUE(create("plain", {"a", "b"}).ok());
  const grpc::Status quoted = create("quoted", {"'x", "y"});
  ASSERT_TRUE(quoted.ok()) << quoted.error_message();
  ASSERT_TRUE(server.Stop().ok());
  const absl::Status restarted = server.Start();
  ASSERT_TRUE(restarted.ok()) << restarted;
  projects = v1::ProjectService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()));
  auto get = [&](const std::string& name, v1::Project* project) {
    v1::GetProjectRequest request;
    request.set_project(name);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    const grpc::Status status = projects->GetProject(&context, request, &response);
    *project = response.project();
    return status;
  };
  v1::Project plain, loaded;
  const grpc::Status plain_status = get("plain", &plain);
  EXPECT_TRUE(plain_status.ok()) << plain_status.error_message();
  const grpc::Status quoted_status = get("quoted", &loaded);
  if (quoted_status.ok()) {
    ASSERT_EQ(loaded.classes_size(), 2);
    EXPECT_EQ(loaded.classes(0), "'x");
  } else {
    EXPECT_EQ(quoted_status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(absl::StrContains(quoted_status.error_message(), "quoted"))
        << quoted_status.error_message();
  }
}

}  // namespace
}  // namespace verity::tests
