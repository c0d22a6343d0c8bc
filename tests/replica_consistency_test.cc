// Black-box probes of several verity_server replicas over one PostgreSQL database, and of
// restarts: what one replica writes must be served by the others (and by a replica started
// later) as README.md, deploy/README.md ("Several replicas") and proto/verity/v1/*.proto say.
//
// Each replica is an in-process VerityServer on its own real gRPC port, as in replicas_test.
// Expectations come from the documentation quoted above each test, not from the code.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/verity_server.h"
#include "tests/replica_harness.h"
#include "tests/server_process.h"
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

constexpr int kClasses = 3;

class ReplicaConsistencyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pg_ = TestPostgres::Start("verity-replica-probe").release(); }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override { ASSERT_NE(pg_, nullptr); }
  void TearDown() override {
    for (auto& r : replicas_) {
      if (r->server) r->server->Shutdown();
    }
  }

  Replica& StartReplica(
      const std::function<void(server::VerityServer::Options&)>& customize = nullptr) {
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
    options.evict_after_idle = absl::ZeroDuration();
    if (customize) customize(options);
    auto server = server::VerityServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    replicas_.push_back(ConnectReplica(std::move(*server)));
    return *replicas_.back();
  }

  // UpdateProjectSettings of `project` through `r`; its status.
  static grpc::Status UpdateSettings(Replica& r, const std::string& project,
                                     const v1::ProjectSettings& settings) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::UpdateProjectSettingsRequest request;
    request.set_project(project);
    *request.mutable_settings() = settings;
    v1::UpdateProjectSettingsResponse response;
    return r.projects->UpdateProjectSettings(&context, request, &response);
  }

  static void Stop(Replica& r) {
    r.server->Shutdown();
    r.server.reset();
  }

  static void CreateProject(Replica& r, const std::string& name,
                            v1::TruthMethod method = v1::TRUTH_METHOD_DAWID_SKENE,
                            const v1::AssignmentSettings* assignment = nullptr) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(name);
    request.mutable_project()->mutable_settings()->mutable_model()->set_method(method);
    if (assignment != nullptr) {
      *request.mutable_project()->mutable_settings()->mutable_assignment() = *assignment;
    }
    for (int c = 0; c < kClasses; ++c) request.mutable_project()->add_classes(absl::StrCat("c", c));
    v1::CreateProjectResponse response;
    grpc::Status status = r.projects->CreateProject(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  static v1::Project ServedProject(Replica& r, const std::string& project) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::GetProjectRequest request;
    request.set_project(project);
    v1::GetProjectResponse response;
    grpc::Status status = r.projects->GetProject(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.project();
  }

  static void AddItems(Replica& r, const std::string& project, const std::vector<v1::Item>& items) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::AddItemsRequest request;
    request.set_project(project);
    for (const auto& item : items) *request.add_items() = item;
    v1::AddItemsResponse response;
    grpc::Status status = r.projects->AddItems(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  static v1::Item Item(const std::string& id, std::optional<double> priority = std::nullopt,
                       std::optional<int> gold = std::nullopt) {
    v1::Item item;
    item.set_id(id);
    if (priority) item.set_priority(*priority);
    if (gold) item.set_gold_label(*gold);
    return item;
  }

  static void Submit(Replica& r, const std::string& project,
                     const std::vector<LabelTriple>& labels) {
    grpc::ClientContext context;
    r.Prepare(context);
    auto stream = r.ingest->SubmitAnnotations(&context);
    v1::AnnotationBatch batch;
    batch.set_batch_id(1);
    batch.set_project(project);
    for (const auto& a : Annotations(labels)) *batch.add_annotations() = a;
    ASSERT_TRUE(stream->Write(batch));
    stream->WritesDone();
    v1::BatchAck ack;
    int acks = 0;
    while (stream->Read(&ack)) {
      ++acks;
      EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
    }
    grpc::Status status = stream->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(acks, 1);
  }

  // Labels of `items` items by `annotators` annotators, mostly class (item % 3).
  static std::vector<LabelTriple> SomeLabels(int items, int annotators, int offset = 0) {
    std::vector<LabelTriple> labels;
    for (int i = 0; i < items; ++i) {
      for (int a = 0; a < annotators; ++a) {
        const int truth = i % kClasses;
        const int label = ((i + a + offset) % 5 == 0) ? (truth + 1) % kClasses : truth;
        labels.emplace_back(absl::StrCat("item-", i), absl::StrCat("ann-", a + offset), label);
      }
    }
    return labels;
  }

  static grpc::Status SuggestItems(Replica& r, const std::string& project,
                                   const std::string& annotator, int k,
                                   v1::SuggestItemsResponse* response,
                                   const std::vector<std::string>& candidates = {}) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::SuggestItemsRequest request;
    request.set_project(project);
    request.set_annotator(annotator);
    request.set_k(k);
    for (const auto& c : candidates) request.add_candidate_items(c);
    return r.assignment->SuggestItems(&context, request, response);
  }

  static std::vector<std::string> SuggestedItems(Replica& r, const std::string& project,
                                                 const std::string& annotator, int k) {
    v1::SuggestItemsResponse response;
    grpc::Status status = SuggestItems(r, project, annotator, k, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> items;
    for (const auto& s : response.suggestions()) items.push_back(s.item());
    return items;
  }

  static absl::StatusOr<v1::ModelVersion> Train(Replica& r, const std::string& project) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::TrainModelRequest request;
    request.set_project(project);
    v1::TrainModelResponse response;
    grpc::Status status = r.model->TrainModel(&context, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response.version();
  }

  static v1::GetModelStatusResponse ModelStatus(Replica& r, const std::string& project) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::GetModelStatusRequest request;
    request.set_project(project);
    v1::GetModelStatusResponse response;
    grpc::Status status = r.model->GetModelStatus(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  static std::vector<v1::ModelVersion> Versions(Replica& r, const std::string& project) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::ListModelVersionsRequest request;
    request.set_project(project);
    request.set_limit(1000);
    v1::ListModelVersionsResponse response;
    grpc::Status status = r.model->ListModelVersions(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.versions().begin(), response.versions().end()};
  }

  static std::vector<v1::Posterior> Posteriors(Replica& r, const std::string& project,
                                               const std::vector<std::string>& items) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::GetPosteriorsRequest request;
    request.set_project(project);
    for (const auto& i : items) request.add_items(i);
    v1::GetPosteriorsResponse response;
    grpc::Status status = r.truth->GetPosteriors(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.posteriors().begin(), response.posteriors().end()};
  }

  // Polls `done` every 20 ms until it holds or `within` passes; true if it held.
  static bool Eventually(absl::Duration within, const std::function<bool()>& done) {
    const absl::Time give_up = absl::Now() + within;
    while (absl::Now() < give_up) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return done();
  }

  static TestPostgres* pg_;
  std::vector<std::unique_ptr<Replica>> replicas_;

  // Fits through A twice (B serving each version), runs `change` through A, then TrainModel
  // through B at once: it must fit anew, with `expected_method` (the TrainModel tests below).
  void TrainModelOnBRightAfterAChangeOnA(bool workers, const std::string& project,
                                         const std::function<void(Replica& a)>& change,
                                         v1::TruthMethod expected_method) {
    const std::string dir = MakeTempDir("verity-probe-workers");
    auto mode = [&](server::VerityServer::Options& o) {
      if (workers) {
        o.training.use_workers = true;
        o.training.train_wait = absl::Seconds(120);
      }
    };
    std::optional<WorkerProcess> worker;
    if (workers) worker.emplace(pg_->url(), "w", dir + "/w.log", /*lease_seconds=*/5);
    Replica& a = StartReplica(mode);
    Replica& b = StartReplica(mode);
    CreateProject(a, project);
    ServedProject(b, project);
    Submit(a, project, SomeLabels(30, 4));
    const int64_t labels = ServedProject(a, project).num_labels();
    ASSERT_TRUE(Eventually(absl::Seconds(5),
                           [&] { return ServedProject(b, project).num_labels() == labels; }));
    auto v1 = Train(a, project);
    ASSERT_TRUE(v1.ok()) << v1.status();
    ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
      return ModelStatus(b, project).current_version().version() == v1->version();
    }));
    // B has just re-read the project: an item added through A, served by B.
    AddItems(a, project, {Item("unlabelled")});
    ASSERT_TRUE(
        Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 31; }));
    auto v_mid = Train(a, project);  // The unlabelled item is a change too: fit it away.
    ASSERT_TRUE(v_mid.ok()) << v_mid.status();
    ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
      return ModelStatus(b, project).current_version().version() == v_mid->version();
    }));
    change(a);
    auto v2 = Train(b, project);
    ASSERT_TRUE(v2.ok()) << v2.status();
    EXPECT_GT(v2->version(), v_mid->version()) << "B returned the version fitted before the change";
    EXPECT_EQ(v2->method(), expected_method);
    worker.reset();
    RemoveTree(dir);
  }

  // Sets the project's method to mv through `a`.
  void SetMajorityVote(Replica& a, const std::string& project) {
    v1::ProjectSettings settings;
    settings.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
    ASSERT_TRUE(UpdateSettings(a, project, settings).ok());
  }
};

TestPostgres* ReplicaConsistencyTest::pg_ = nullptr;
// assignment.proto, SuggestAnnotators: "The k annotators ... who should label `item` next,
// best first; never one who already labelled it or holds a lease on it." deploy/README.md:
// "any replica accepts any call" and leases are claimed "in PostgreSQL". A lease taken through
// replica A must keep its holder out of replica B's SuggestAnnotators for that item.
TEST_F(ReplicaConsistencyTest, SuggestAnnotatorsOnBNeverNamesTheHolderOfALeaseTakenOnA) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "lease-holder-elsewhere";
  CreateProject(a, project);
  AddItems(a, project, {Item("x")});
  {
    grpc::ClientContext context;
    a.Prepare(context);
    v1::AddAnnotatorsRequest request;
    request.set_project(project);
    request.add_annotators()->set_id("holder");
    request.add_annotators()->set_id("other");
    v1::AddAnnotatorsResponse response;
    ASSERT_TRUE(a.projects->AddAnnotators(&context, request, &response).ok());
  }
  ServedProject(b, project);  // B loads the project.
  // B knows the item and both annotators (within the 1 s poll).
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
    v1::Project p = ServedProject(b, project);
    return p.num_items() == 1 && p.num_annotators() == 2;
  }));

  v1::SuggestItemsResponse leased;
  ASSERT_TRUE(SuggestItems(a, project, "holder", 1, &leased).ok());
  ASSERT_EQ(leased.suggestions_size(), 1);
  ASSERT_EQ(leased.suggestions(0).item(), "x");

  auto suggested_annotators = [&](Replica& r) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::SuggestAnnotatorsRequest request;
    request.set_project(project);
    request.set_item("x");
    request.set_k(10);
    request.add_candidates("holder");
    request.add_candidates("other");
    v1::SuggestAnnotatorsResponse response;
    grpc::Status status = r.assignment->SuggestAnnotators(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::set<std::string> names;
    for (const auto& s : response.suggestions()) names.insert(s.annotator());
    return names;
  };
  // The replica that leased: the holder is left out (the test's own check of the promise).
  ASSERT_EQ(suggested_annotators(a), std::set<std::string>{"other"});
  // The other replica, given well over its 1 s poll.
  std::set<std::string> on_b;
  EXPECT_TRUE(Eventually(absl::Seconds(5),
                         [&] {
                           on_b = suggested_annotators(b);
                           return on_b == std::set<std::string>{"other"};
                         }))
      << "B still suggests " << on_b.size()
      << " annotators, holder included: " << on_b.count("holder");
}

// README.md: "--max_leases_per_project: outstanding assignment leases a project may hold; a
// SuggestItems whose k would pass it is refused with RESOURCE_EXHAUSTED until labels arrive or
// leases expire". assignment.proto: "RESOURCE_EXHAUSTED ... when k more leases would take the
// project past the server's --max_leases_per_project outstanding leases". Leases are claimed
// in PostgreSQL across replicas (deploy/README.md), so the project's outstanding leases are
// those of every replica.
TEST_F(ReplicaConsistencyTest, MaxLeasesPerProjectCountsTheLeasesOfEveryReplica) {
  auto limit = [](server::VerityServer::Options& o) { o.max_leases_per_project = 4; };
  Replica& a = StartReplica(limit);
  Replica& b = StartReplica(limit);
  const std::string project = "leases-over-two-replicas";
  CreateProject(a, project);
  std::vector<v1::Item> items;
  for (int i = 0; i < 20; ++i) items.push_back(Item(absl::StrCat("it-", i)));
  AddItems(a, project, items);
  ASSERT_TRUE(
      Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 20; }));

  v1::SuggestItemsResponse on_a;
  ASSERT_TRUE(SuggestItems(a, project, "w-a", 4, &on_a).ok());
  ASSERT_EQ(on_a.suggestions_size(), 4);
  // A itself now refuses one more.
  {
    v1::SuggestItemsResponse more;
    grpc::Status s = SuggestItems(a, project, "w-a2", 1, &more);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  absl::SleepFor(absl::Seconds(2));  // Past the 1 s poll.
  v1::SuggestItemsResponse on_b;
  grpc::Status s = SuggestItems(b, project, "w-b", 4, &on_b);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << "B leased " << on_b.suggestions_size()
      << " more items while the project already held 4 outstanding leases (limit 4)";
}

// projects.proto ProjectLimits: "What one project may hold. A batch ... that would pass a limit
// is refused whole with RESOURCE_EXHAUSTED ... Calls at the same moment, through one server or
// several replicas of one database, may together pass max_items, max_annotators and max_labels
// by at most their own size". Two replicas writing batches of 30 at once pass max_labels 100 by
// at most 30, and are refused past that.
TEST_F(ReplicaConsistencyTest, TwoReplicasWritingAtOncePassMaxLabelsByAtMostOneBatch) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "max-labels-two-writers";
  CreateProject(a, project);
  {
    v1::ProjectSettings settings;
    settings.mutable_limits()->set_max_labels(100);
    ASSERT_TRUE(UpdateSettings(a, project, settings).ok());
  }
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
    return ServedProject(b, project).settings().limits().max_labels() == 100;
  }));
  // Rounds of 30 labels sent to both replicas at once, until one is refused.
  int round = 0;
  for (; round < 5; ++round) {
    auto send = [&](Replica& r, const std::string& tag, int* accepted) {
      grpc::ClientContext context;
      r.Prepare(context);
      auto stream = r.ingest->SubmitAnnotations(&context);
      v1::AnnotationBatch batch;
      batch.set_batch_id(1);
      batch.set_project(project);
      for (int i = 0; i < 30; ++i) {
        v1::Annotation* an = batch.add_annotations();
        an->set_item(absl::StrCat(tag, "-", round, "-", i));
        an->set_annotator("w");
        an->set_label(0);
      }
      stream->Write(batch);
      stream->WritesDone();
      v1::BatchAck ack;
      if (stream->Read(&ack)) *accepted = ack.accepted();
      stream->Finish();
    };
    int on_a = 0, on_b = 0;
    std::thread ta([&] { send(a, "a", &on_a); });
    std::thread tb([&] { send(b, "b", &on_b); });
    ta.join();
    tb.join();
    absl::SleepFor(absl::Milliseconds(1500));
  }
  // Counted through a fresh replica as well.
  Replica& c = StartReplica();
  const int64_t held = ServedProject(c, project).num_labels();
  EXPECT_LE(held, 130) << "the project holds " << held << " live labels, max_labels 100";
  EXPECT_GE(held, 100) << "batches were refused before the project was full";
}

// deploy/README.md, "Several replicas": "items, gold, ... the others re-read the project's
// items ... and apply what differs"; "model versions: the save notifies; the others read the
// new version's parameters once and serve it". truth.proto AnnotatorProfile.accuracy:
// "Probability of a correct label under the current class prior: sum_k prior_k *
// confusion[k][k]." With one gold item, set through A before A's fit, the writer A, the
// follower B and a replica C started afterwards hold the same items, labels and version, so
// they must serve the same profiles (tolerance 1e-6).
TEST_F(ReplicaConsistencyTest, AFollowerServesTheWritersAnnotatorAccuracyInAProjectWithGold) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "profiles-with-gold";
  CreateProject(a, project);
  ServedProject(b, project);
  Submit(a, project, SomeLabels(30, 4));
  // B has just re-read the project's items: an item added through A, served by B.
  AddItems(a, project, {Item("unlabelled")});
  ASSERT_TRUE(
      Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 31; }));
  // The gold item, then the fit at once.
  AddItems(a, project, {Item("item-5", std::nullopt, /*gold=*/1)});
  auto v1 = Train(a, project);
  ASSERT_TRUE(v1.ok()) << v1.status();
  const int64_t labels = ServedProject(a, project).num_labels();
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
    auto p = Posteriors(b, project, {"item-5"});
    return ServedProject(b, project).num_labels() == labels && p.size() == 1 && p[0].is_gold() &&
           ModelStatus(b, project).current_version().version() == v1->version();
  }));
  absl::SleepFor(absl::Seconds(5));  // Well past the 1 s poll, once more.
  Replica& c = StartReplica();
  auto profiles = [&](Replica& r) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::GetAnnotatorProfilesRequest request;
    request.set_project(project);
    v1::GetAnnotatorProfilesResponse response;
    EXPECT_TRUE(r.truth->GetAnnotatorProfiles(&context, request, &response).ok());
    return response;
  };
  const auto pa = profiles(a), pb = profiles(b), pc = profiles(c);
  ASSERT_EQ(pa.profiles_size(), 4);
  ASSERT_EQ(pb.profiles_size(), 4);
  ASSERT_EQ(pc.profiles_size(), 4);
  for (int i = 0; i < pa.profiles_size(); ++i) {
    const std::string who = pa.profiles(i).annotator();
    EXPECT_NEAR(pa.profiles(i).accuracy(), pb.profiles(i).accuracy(), 1e-6)
        << who << ": writer A vs follower B";
    EXPECT_NEAR(pa.profiles(i).accuracy(), pc.profiles(i).accuracy(), 1e-6)
        << who << ": writer A vs replica C started afterwards";
  }
}

// deploy/README.md, "Several replicas": settings reach the others "within the 1 s poll", and
// "model versions: ... the others read the new version's parameters once and serve it".
// models.proto GetModelStatusResponse.calibration: "absent when ModelSettings.calibration is
// 'none'"; projects.proto ModelSettings.calibration "none" = "the model's own posteriors". A
// settings change through A followed at once by A's fit: after the poll, B serves what A serves.
TEST_F(ReplicaConsistencyTest, ASettingChangedJustBeforeAFitOnAIsServedAlikeByB) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "calibration-race";
  CreateProject(a, project, v1::TRUTH_METHOD_DAWID_SKENE);
  ServedProject(b, project);
  Submit(a, project, SomeLabels(30, 4));
  auto v1 = Train(a, project);
  ASSERT_TRUE(v1.ok()) << v1.status();
  // B has just re-read the project: an item added through A, served by B.
  AddItems(a, project, {Item("unlabelled")});
  ASSERT_TRUE(
      Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 31; }));
  {
    v1::ProjectSettings settings;
    settings.mutable_model()->set_calibration("none");
    settings.mutable_model()->set_confusion_smoothing(5.0);
    ASSERT_TRUE(UpdateSettings(a, project, settings).ok());
  }
  auto v2 = Train(a, project);
  ASSERT_TRUE(v2.ok()) << v2.status();
  ASSERT_GT(v2->version(), v1->version());
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
    return ModelStatus(b, project).current_version().version() == v2->version();
  }));
  absl::SleepFor(absl::Seconds(5));
  const auto sa = ModelStatus(a, project), sb = ModelStatus(b, project);
  EXPECT_EQ(sa.has_calibration(), sb.has_calibration())
      << "A: {" << sa.calibration().ShortDebugString() << "} B: {"
      << sb.calibration().ShortDebugString() << "}";
  EXPECT_EQ(ServedProject(b, project).settings().model().calibration(), "none");
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) ids.push_back(absl::StrCat("item-", i));
  auto pa = Posteriors(a, project, ids), pb = Posteriors(b, project, ids);
  ASSERT_EQ(pa.size(), pb.size());
  int differ = 0;
  double most = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    for (int k = 0; k < kClasses; ++k) {
      const double d = std::abs(pa[i].probabilities(k) - pb[i].probabilities(k));
      if (d > 1e-9) ++differ;
      most = std::max(most, d);
    }
  }
  EXPECT_EQ(differ, 0) << "largest difference " << most;
}

// projects.proto UpdateProjectSettingsRequest.settings: "Replaces the project's settings whole,
// except that an unset model.method keeps the project's method." The project's method is the
// one A set, even when B's 1 s poll has not brought it yet: an update through B right after,
// without a method, keeps it (no write is lost).
TEST_F(ReplicaConsistencyTest, AnUpdateThroughBRightAfterAMethodChangeOnAKeepsThatMethod) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "method-kept-right-after";
  CreateProject(a, project, v1::TRUTH_METHOD_DAWID_SKENE);
  ServedProject(b, project);
  // B has just re-read the project: an item added through A, served by B.
  AddItems(a, project, {Item("unlabelled")});
  ASSERT_TRUE(
      Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 1; }));
  {
    v1::ProjectSettings settings;
    settings.mutable_model()->set_method(v1::TRUTH_METHOD_GLAD);
    ASSERT_TRUE(UpdateSettings(a, project, settings).ok());
  }
  v1::UpdateProjectSettingsResponse through_b;
  {
    grpc::ClientContext context;
    b.Prepare(context);
    v1::UpdateProjectSettingsRequest request;
    request.set_project(project);
    request.mutable_settings()->mutable_assignment()->set_lease_seconds(60);
    ASSERT_TRUE(b.projects->UpdateProjectSettings(&context, request, &through_b).ok());
  }
  EXPECT_EQ(through_b.project().settings().model().method(), v1::TRUTH_METHOD_GLAD);
  absl::SleepFor(absl::Seconds(2));
  Replica& c = StartReplica();
  EXPECT_EQ(ServedProject(c, project).settings().model().method(), v1::TRUTH_METHOD_GLAD)
      << "stored method " << ServedProject(c, project).settings().model().method();
  EXPECT_EQ(ServedProject(a, project).settings().model().method(), v1::TRUTH_METHOD_GLAD);
  EXPECT_EQ(ServedProject(b, project).settings().model().method(), v1::TRUTH_METHOD_GLAD);
}

// projects.proto ProjectLimits: "What one project may hold. A batch, AddItems or AddAnnotators
// call that would pass a limit is refused whole with RESOURCE_EXHAUSTED". Items added through
// A, then (not at the same time) through B.
TEST_F(ReplicaConsistencyTest, AddItemsThroughBAfterAFilledTheProjectIsRefused) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "max-items-one-after-another";
  CreateProject(a, project);
  {
    v1::ProjectSettings settings;
    settings.mutable_limits()->set_max_items(10);
    ASSERT_TRUE(UpdateSettings(a, project, settings).ok());
  }
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
    return ServedProject(b, project).settings().limits().max_items() == 10;
  }));
  AddItems(a, project, {Item("first")});
  ASSERT_TRUE(
      Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 1; }));
  std::vector<v1::Item> nine;
  for (int i = 0; i < 9; ++i) nine.push_back(Item(absl::StrCat("a-", i)));
  AddItems(a, project, nine);  // The project holds 10: full.
  grpc::ClientContext context;
  b.Prepare(context);
  v1::AddItemsRequest request;
  request.set_project(project);
  for (int i = 0; i < 5; ++i) *request.add_items() = Item(absl::StrCat("b-", i));
  v1::AddItemsResponse response;
  grpc::Status status = b.projects->AddItems(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << "added " << response.added();
  absl::SleepFor(absl::Seconds(2));
  Replica& c = StartReplica();
  EXPECT_LE(ServedProject(c, project).num_items(), 10);
}

// Same, annotators (max_annotators).
TEST_F(ReplicaConsistencyTest, AddAnnotatorsThroughBAfterAFilledTheProjectIsRefused) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "max-annotators-one-after-another";
  CreateProject(a, project);
  {
    v1::ProjectSettings settings;
    settings.mutable_limits()->set_max_annotators(10);
    ASSERT_TRUE(UpdateSettings(a, project, settings).ok());
  }
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
    return ServedProject(b, project).settings().limits().max_annotators() == 10;
  }));
  auto add = [&](Replica& r, const std::string& tag, int n) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::AddAnnotatorsRequest request;
    request.set_project(project);
    for (int i = 0; i < n; ++i) request.add_annotators()->set_id(absl::StrCat(tag, i));
    v1::AddAnnotatorsResponse response;
    return r.projects->AddAnnotators(&context, request, &response);
  };
  ASSERT_TRUE(add(a, "first-", 1).ok());
  ASSERT_TRUE(Eventually(absl::Seconds(5),
                         [&] { return ServedProject(b, project).num_annotators() == 1; }));
  ASSERT_TRUE(add(a, "a-", 9).ok());
  grpc::Status status = add(b, "b-", 5);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  absl::SleepFor(absl::Seconds(2));
  Replica& c = StartReplica();
  EXPECT_LE(ServedProject(c, project).num_annotators(), 10);
}

// projects.proto AddItemsResponse: "added: the ids new to the project, each counted once;
// updated: every other entry"; Item.priority: "Absent: unchanged"; AddItemsRequest: "Existing
// ids are updated: given features and gold replace the old" (so a gold not given stays). An
// item created through A with gold and a priority, then sent again through B right after
// (before B's 1 s poll), without either: it is not new, and keeps its gold and priority.
TEST_F(ReplicaConsistencyTest,
       AnItemResentThroughBRightAfterACreatedItIsAnUpdateThatKeepsGoldAndPriority) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "item-resent-elsewhere";
  CreateProject(a, project);
  std::vector<v1::Item> items;
  for (int i = 0; i < 10; ++i) items.push_back(Item(absl::StrCat("it-", i)));
  AddItems(a, project, items);
  ASSERT_TRUE(
      Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 10; }));
  // x: gold (a gold item is resolved, so never suggested); y: a high priority.
  AddItems(a, project, {Item("x", std::nullopt, /*gold=*/1), Item("y", /*priority=*/5.0)});
  v1::AddItemsResponse response;
  {
    grpc::ClientContext context;
    b.Prepare(context);
    v1::AddItemsRequest request;
    request.set_project(project);
    *request.add_items() = Item("x");
    *request.add_items() = Item("y");
    ASSERT_TRUE(b.projects->AddItems(&context, request, &response).ok());
  }
  EXPECT_EQ(response.added(), 0);
  EXPECT_EQ(response.updated(), 2);
  absl::SleepFor(absl::Seconds(2));
  Replica& c = StartReplica();
  for (Replica* r : {&a, &b, &c}) {
    const std::string name = r == &a ? "A" : r == &b ? "B" : "C (started afterwards)";
    EXPECT_EQ(ServedProject(*r, project).num_items(), 12) << name;
    auto p = Posteriors(*r, project, {"x"});
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(p[0].is_gold()) << name << " lost x's gold";
    EXPECT_EQ(SuggestedItems(*r, project, "probe-" + name.substr(0, 1), 1),
              std::vector<std::string>{"y"})
        << name << " lost y's priority";
  }
}

// projects.proto AddAnnotatorsResponse: "Counted as AddItemsResponse" (added: the ids new to
// the project). An annotator created through A, sent again through B right after.
TEST_F(ReplicaConsistencyTest, AnAnnotatorResentThroughBRightAfterACreatedItIsNotNew) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "annotator-resent-elsewhere";
  CreateProject(a, project);
  AddItems(a, project, {Item("seen")});
  ASSERT_TRUE(
      Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 1; }));
  auto add = [&](Replica& r) {
    grpc::ClientContext context;
    r.Prepare(context);
    v1::AddAnnotatorsRequest request;
    request.set_project(project);
    request.add_annotators()->set_id("w");
    v1::AddAnnotatorsResponse response;
    EXPECT_TRUE(r.projects->AddAnnotators(&context, request, &response).ok());
    return response;
  };
  ASSERT_EQ(add(a).added(), 1);
  const auto on_b = add(b);
  EXPECT_EQ(on_b.added(), 0);
  EXPECT_EQ(on_b.updated(), 1);
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(ServedProject(b, project).num_annotators(), 1);
}

// projects.proto ProjectLimits: "only an admin key valid for every project can raise a limit
// above the project's current one ...; an admin key scoped to the project may keep or lower
// them, and raising one with it is refused with PERMISSION_DENIED naming the limit." The
// project's current limit is the one the global admin set through A, even before B's 1 s poll.
TEST_F(ReplicaConsistencyTest, AScopedAdminCannotRaiseThroughBALimitJustLoweredThroughA) {
  const std::string key_file = pg_->dir() + "/admin.key";
  auto auth = [&](server::VerityServer::Options& o) {
    o.auth.enabled = true;
    o.auth.key_refresh = absl::Seconds(1);
    o.auth.admin_key_file = key_file;
  };
  Replica& a = StartReplica(auth);
  Replica& b = StartReplica(auth);
  std::string admin;
  {
    FILE* f = fopen(key_file.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char buf[512] = {0};
    ASSERT_NE(fgets(buf, sizeof buf, f), nullptr);
    fclose(f);
    admin = buf;
    while (!admin.empty() && (admin.back() == '\n' || admin.back() == ' ')) admin.pop_back();
  }
  a.api_key = admin;
  b.api_key = admin;
  const std::string project = "scoped-admin-raise-elsewhere";
  CreateProject(a, project);
  v1::CreateKeyResponse scoped;
  {
    grpc::ClientContext context;
    a.Prepare(context);
    v1::CreateKeyRequest request;
    request.set_name("project admin");
    request.set_role(v1::ROLE_ADMIN);
    request.add_projects(project);
    ASSERT_TRUE(a.keys->CreateKey(&context, request, &scoped).ok());
  }
  b.api_key = scoped.secret_key();
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] {
    grpc::ClientContext context;
    b.Prepare(context);
    v1::GetProjectRequest request;
    request.set_project(project);
    v1::GetProjectResponse response;
    return b.projects->GetProject(&context, request, &response).ok();
  }));
  // B has just re-read the project: an item added through A, served by B.
  AddItems(a, project, {Item("seen")});
  ASSERT_TRUE(
      Eventually(absl::Seconds(5), [&] { return ServedProject(b, project).num_items() == 1; }));
  {
    v1::ProjectSettings settings;
    settings.mutable_limits()->set_max_items(10);
    ASSERT_TRUE(UpdateSettings(a, project, settings).ok());
  }
  grpc::ClientContext context;
  b.Prepare(context);
  v1::UpdateProjectSettingsRequest request;
  request.set_project(project);
  request.mutable_settings()->mutable_limits()->set_max_items(1000);
  v1::UpdateProjectSettingsResponse response;
  grpc::Status status = b.projects->UpdateProjectSettings(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << "the project-scoped admin raised max_items from 10 to "
      << response.project().settings().limits().max_items();
}

// models.proto TrainModel: "Fits the project's configured method now ... When nothing a fit
// reads has changed since the current version's fit (no new or revised label, gold label,
// item, feature or model setting ...), it returns that version and writes nothing." Here
// something a fit reads changed (through A) since the current version: TrainModel through B,
// right after (before B's 1 s poll), must fit anew, with it. common.proto: a method change
// "takes effect at the next fit". With in-process training, or --trainer=workers.
TEST_F(ReplicaConsistencyTest, TrainModelOnBRightAfterGoldSetOnAFitsIt) {
  const std::string project = "train-right-after-gold";
  TrainModelOnBRightAfterAChangeOnA(
      /*workers=*/false, project,
      [&](Replica& a) { AddItems(a, project, {Item("item-4", std::nullopt, /*gold=*/2)}); },
      v1::TRUTH_METHOD_DAWID_SKENE);
}

TEST_F(ReplicaConsistencyTest, TrainModelOnBRightAfterGoldSetOnAFitsItWithWorkers) {
  const std::string project = "train-right-after-gold-workers";
  TrainModelOnBRightAfterAChangeOnA(
      /*workers=*/true, project,
      [&](Replica& a) { AddItems(a, project, {Item("item-4", std::nullopt, /*gold=*/2)}); },
      v1::TRUTH_METHOD_DAWID_SKENE);
}

TEST_F(ReplicaConsistencyTest, TrainModelOnBRightAfterAMethodChangeOnAUsesIt) {
  const std::string project = "train-right-after-method";
  TrainModelOnBRightAfterAChangeOnA(
      /*workers=*/false, project, [&](Replica& a) { SetMajorityVote(a, project); },
      v1::TRUTH_METHOD_MAJORITY_VOTE);
}

TEST_F(ReplicaConsistencyTest, TrainModelOnBRightAfterAMethodChangeOnAUsesItWithWorkers) {
  const std::string project = "train-right-after-method-workers";
  TrainModelOnBRightAfterAChangeOnA(
      /*workers=*/true, project, [&](Replica& a) { SetMajorityVote(a, project); },
      v1::TRUTH_METHOD_MAJORITY_VOTE);
}

}  // namespace
}  // namespace verity::tests
