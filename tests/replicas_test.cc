// Several verity_server replicas over one PostgreSQL database: labels streamed through one
// replica are served by the others (LISTEN/NOTIFY and catch-up reads by seq,
// server/replication/replica_follower.h), and concurrent writers through different replicas
// converge on the database's live labels.
//
// Each replica is an in-process VerityServer on its own real gRPC port. The oracle for "the
// database's live labels" is a replica started after the writes, which loads every project
// from PostgreSQL (the restart path, which does not follow anything).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/verity_server.h"
#include "storage/fit_lock.h"
#include "tests/replica_harness.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {
namespace {

constexpr int kClasses = 3;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

class ReplicasTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pg_ = TestPostgres::Start("verity-replicas").release(); }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override { ASSERT_NE(pg_, nullptr); }
  void TearDown() override {
    for (auto& r : replicas_) r->server->Shutdown();
  }

  // Starts a replica over the suite's database. No background refits: every replica serves
  // the same (majority-vote) model, so their posteriors must match exactly.
  Replica& StartReplica(
      std::optional<server::TrainingScheduler::Options> training = std::nullopt,
      int64_t memory_budget_bytes = 0) {
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
    if (training.has_value()) options.training = *training;
    options.memory_budget_bytes = memory_budget_bytes;
    options.evict_after_idle = absl::ZeroDuration();
    auto server = server::VerityServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    replicas_.push_back(ConnectReplica(std::move(*server)));
    return *replicas_.back();
  }

  static void CreateProject(Replica& r, const std::string& name,
                            v1::TruthMethod method = v1::TRUTH_METHOD_UNSPECIFIED) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(name);
    request.mutable_project()->mutable_settings()->mutable_model()->set_method(method);
    for (int c = 0; c < kClasses; ++c) request.mutable_project()->add_classes(absl::StrCat("c", c));
    v1::CreateProjectResponse response;
    grpc::Status status = r.projects->CreateProject(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  // The project as `r` serves it (GetProject, expected to succeed).
  static v1::Project ServedProject(Replica& r, const std::string& project) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::GetProjectRequest request;
    request.set_project(project);
    v1::GetProjectResponse response;
    grpc::Status status = r.projects->GetProject(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.project();
  }

  // The project's live label count as `r` serves it.
  static int64_t NumLabels(Replica& r, const std::string& project) {
    return ServedProject(r, project).num_labels();
  }

  // Every posterior `r` serves, in item creation order.
  static std::vector<v1::Posterior> Posteriors(Replica& r, const std::string& project) {
    std::vector<v1::Posterior> all;
    std::string token;
    do {
      grpc::ClientContext context;
      context.set_deadline(Deadline());
      v1::ListPosteriorsRequest request;
      request.set_project(project);
      request.set_page_size(10000);
      request.set_page_token(token);
      v1::ListPosteriorsResponse response;
      grpc::Status status = r.truth->ListPosteriors(&context, request, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) break;
      all.insert(all.end(), response.posteriors().begin(), response.posteriors().end());
      token = response.next_page_token();
    } while (!token.empty());
    return all;
  }

  // Sends `batches` on one stream of `r`; every batch must be acked without error.
  static void Submit(Replica& r, const std::vector<v1::AnnotationBatch>& batches) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto stream = r.ingest->SubmitAnnotations(&context);
    for (const auto& b : batches) ASSERT_TRUE(stream->Write(b));
    stream->WritesDone();
    v1::BatchAck ack;
    size_t acks = 0;
    while (stream->Read(&ack)) {
      ++acks;
      EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
    }
    grpc::Status status = stream->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(acks, batches.size());
  }

  // Random labels of `items` items by `annotators` annotators, `per_batch` to a batch. The
  // same (item, annotator) may come back with another label: a revision.
  static std::vector<v1::AnnotationBatch> RandomBatches(const std::string& project, int batches,
                                                        int per_batch, int items, int annotators,
                                                        uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<v1::AnnotationBatch> out(batches);
    for (int b = 0; b < batches; ++b) {
      out[b].set_batch_id(b + 1);
      out[b].set_project(project);
      for (int i = 0; i < per_batch; ++i) {
        v1::Annotation* a = out[b].add_annotations();
        a->set_item(absl::StrCat("item-", rng() % items));
        a->set_annotator(absl::StrCat("annotator-", rng() % annotators));
        a->set_label(static_cast<int32_t>(rng() % kClasses));
      }
    }
    return out;
  }

  // Waits (up to 10 s) until `r` serves `expected` live labels of `project`.
  static bool AwaitLabels(Replica& r, const std::string& project, int64_t expected) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (absl::Now() < give_up) {
      if (NumLabels(r, project) == expected) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  static bool SamePosteriors(const std::vector<v1::Posterior>& a,
                             const std::vector<v1::Posterior>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].item() != b[i].item() || a[i].num_labels() != b[i].num_labels() ||
          a[i].probabilities_size() != b[i].probabilities_size()) {
        return false;
      }
      for (int c = 0; c < a[i].probabilities_size(); ++c) {
        if (std::abs(a[i].probabilities(c) - b[i].probabilities(c)) > 1e-12) return false;
      }
    }
    return true;
  }

  // Expects two replicas' posteriors to be the same items with the same numbers.
  static void ExpectSamePosteriors(const std::vector<v1::Posterior>& a,
                                   const std::vector<v1::Posterior>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].item(), b[i].item()) << what << " #" << i;
      EXPECT_EQ(a[i].num_labels(), b[i].num_labels()) << what << " " << a[i].item();
      EXPECT_EQ(a[i].map_label(), b[i].map_label()) << what << " " << a[i].item();
      ASSERT_EQ(a[i].probabilities_size(), b[i].probabilities_size()) << what;
      for (int c = 0; c < a[i].probabilities_size(); ++c) {
        EXPECT_NEAR(a[i].probabilities(c), b[i].probabilities(c), 1e-12)
            << what << " " << a[i].item() << " class " << c;
      }
    }
  }

  static TestPostgres* pg_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

TestPostgres* ReplicasTest::pg_ = nullptr;

// ListProjects loads nothing (projects.proto, docs/SECURITY.md): a project created and written
// through one replica after another started is listed by the other from its stored record and
// counts, and is still not loaded there. Before, the listing loaded it, so one reader's listing
// could make a server load every project the reader may see.
TEST_F(ReplicasTest, AProjectThisReplicaNeverLoadedIsListedWithoutLoadingIt) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  CreateProject(a, "listed-elsewhere");
  Submit(a, RandomBatches("listed-elsewhere", 2, 50, 30, 7, 11));
  const v1::Project on_a = ServedProject(a, "listed-elsewhere");
  ASSERT_GT(on_a.num_labels(), 0);
  ASSERT_GT(on_a.num_revisions(), 0);  // The random batches revise some of their pairs.
  ASSERT_EQ(b.server->core().registry->IfLoaded("listed-elsewhere"), nullptr);

  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::ListProjectsResponse listed;
  ASSERT_TRUE(b.projects->ListProjects(&context, v1::ListProjectsRequest(), &listed).ok());
  const v1::Project* found = nullptr;
  for (const v1::Project& p : listed.projects()) {
    if (p.name() == "listed-elsewhere") found = &p;
  }
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(b.server->core().registry->IfLoaded("listed-elsewhere"), nullptr)
      << "listing loaded the project";
  EXPECT_EQ(found->num_items(), on_a.num_items());
  EXPECT_EQ(found->num_annotators(), on_a.num_annotators());
  EXPECT_EQ(found->num_labels(), on_a.num_labels());
  EXPECT_EQ(found->num_revisions(), on_a.num_revisions());
  EXPECT_EQ(found->classes_size(), kClasses);
  EXPECT_EQ(found->settings().SerializeAsString(), on_a.settings().SerializeAsString());
  // GetProject is a use: it loads the project and says the same.
  EXPECT_EQ(ServedProject(b, "listed-elsewhere").num_labels(), on_a.num_labels());
  EXPECT_NE(b.server->core().registry->IfLoaded("listed-elsewhere"), nullptr);
}

// max_revisions across replicas: each server checks a batch against the history count the
// database gave it at the load or at its own latest commit, so a replica that only followed the
// others' revisions admits a batch with a stale count. The commit's own UPDATE of the count
// refuses it. Limit 3: A writes three revisions; B, loaded before them, is sent a fourth.
// Before, B committed it (4 rows in history).
TEST_F(ReplicasTest, AReplicaWithAStaleRevisionCountCannotPassMaxRevisions) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name("flipped-elsewhere");
    request.mutable_project()->mutable_settings()->mutable_limits()->set_max_revisions(3);
    for (int c = 0; c < kClasses; ++c) request.mutable_project()->add_classes(absl::StrCat("c", c));
    v1::CreateProjectResponse response;
    grpc::Status status = a.projects->CreateProject(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  auto batch = [](uint64_t id, int label) {
    v1::AnnotationBatch out;
    out.set_batch_id(id);
    out.set_project("flipped-elsewhere");
    v1::Annotation* annotation = out.add_annotations();
    annotation->set_item("i");
    annotation->set_annotator("w");
    annotation->set_label(label);
    return out;
  };
  ASSERT_EQ(ServedProject(b, "flipped-elsewhere").num_revisions(), 0);  // B loads it now.
  Submit(a, {batch(1, 0), batch(2, 1), batch(3, 0), batch(4, 1)});  // Three revisions.
  ASSERT_EQ(ServedProject(a, "flipped-elsewhere").num_revisions(), 3);
  // B follows A's labels (the live label is now 1) but not the count.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up) {
    std::vector<v1::Posterior> served = Posteriors(b, "flipped-elsewhere");
    if (served.size() == 1 && served[0].num_labels() == 1 && served[0].map_label() == 1) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = b.ingest->SubmitAnnotations(&context);
  ASSERT_TRUE(stream->Write(batch(5, 0)));
  stream->WritesDone();
  v1::BatchAck ack;
  ASSERT_TRUE(stream->Read(&ack));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << "revised " << ack.revised() << ": " << ack.error_message();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_revisions (3")) << ack.error_message();
  pqxx::connection connection(pg_->url());
  pqxx::nontransaction txn(connection);
  EXPECT_EQ(txn.exec1("SELECT count(*) FROM annotation_history h JOIN projects p "
                      "USING (project_id) WHERE p.name = 'flipped-elsewhere'")[0]
                .as<int64_t>(),
            3);
  EXPECT_EQ(ServedProject(b, "flipped-elsewhere").num_revisions(), 3);
}

TEST_F(ReplicasTest, LabelsStreamedThroughOneReplicaAreServedByTheOthers) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  Replica& c = StartReplica();
  const std::string project = "streamed-through-a";
  CreateProject(a, project);
  // B and C load the project (empty) before any label: from then on they follow it.
  EXPECT_EQ(NumLabels(b, project), 0);
  EXPECT_EQ(NumLabels(c, project), 0);

  Submit(a, RandomBatches(project, 20, 250, 400, 30, /*seed=*/1));
  const int64_t on_a = NumLabels(a, project);
  ASSERT_GT(on_a, 0);
  ASSERT_TRUE(AwaitLabels(b, project, on_a)) << "B serves " << NumLabels(b, project);
  ASSERT_TRUE(AwaitLabels(c, project, on_a)) << "C serves " << NumLabels(c, project);

  Replica& fresh = StartReplica();  // Loads the database's live labels.
  const std::vector<v1::Posterior> truth = Posteriors(fresh, project);
  EXPECT_EQ(NumLabels(fresh, project), on_a);
  ExpectSamePosteriors(truth, Posteriors(a, project), "A");
  ExpectSamePosteriors(truth, Posteriors(b, project), "B");
  ExpectSamePosteriors(truth, Posteriors(c, project), "C");

  // Every replica answers suggestions from the same labels.
  for (Replica* r : {&a, &b, &c}) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::SuggestItemsRequest request;
    request.set_project(project);
    request.set_annotator("annotator-new");
    request.set_k(5);
    v1::SuggestItemsResponse response;
    grpc::Status status = r->assignment->SuggestItems(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.suggestions_size(), 5);
  }
}

TEST_F(ReplicasTest, ConcurrentWritersThroughTwoReplicasConvergeOnTheDatabase) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  Replica& c = StartReplica();
  const std::string project = "two-writers";
  CreateProject(a, project);
  EXPECT_EQ(NumLabels(b, project), 0);
  EXPECT_EQ(NumLabels(c, project), 0);

  // Both write the same small set of pairs, so most labels revise one the other replica
  // wrote: a replica that applied them out of seq order would end on a different label.
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      Replica& r = w == 0 ? a : b;
      for (int round = 0; round < 10; ++round) {
        Submit(r, RandomBatches(project, 4, 100, 40, 8, /*seed=*/100 * w + round));
      }
    });
  }
  for (std::thread& t : writers) t.join();

  Replica& fresh = StartReplica();
  const int64_t in_database = NumLabels(fresh, project);
  ASSERT_GT(in_database, 0);
  const std::vector<v1::Posterior> truth = Posteriors(fresh, project);
  for (Replica* r : {&a, &b, &c}) ASSERT_TRUE(AwaitLabels(*r, project, in_database));
  // The counts can match before the last revisions arrive; give the followers a moment.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  for (Replica* r : {&a, &b, &c}) {
    std::vector<v1::Posterior> served = Posteriors(*r, project);
    while (absl::Now() < give_up && !SamePosteriors(truth, served)) {
      absl::SleepFor(absl::Milliseconds(20));
      served = Posteriors(*r, project);
    }
    ExpectSamePosteriors(truth, served, r == &a ? "A" : r == &b ? "B" : "C");
  }
}

TEST_F(ReplicasTest, MeasuresFreshnessAcrossReplicas) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "freshness";
  CreateProject(a, project);
  EXPECT_EQ(NumLabels(b, project), 0);
  // One label at a time: the time from A's ack to B serving it.
  std::vector<double> ms;
  for (int i = 0; i < 50; ++i) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(1);
    batch.set_project(project);
    v1::Annotation* label = batch.add_annotations();
    label->set_item(absl::StrCat("item-", i));
    label->set_annotator("annotator");
    label->set_label(i % kClasses);
    Submit(a, {batch});
    const absl::Time acked = absl::Now();
    ASSERT_TRUE(AwaitLabels(b, project, i + 1));
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - acked));
  }
  std::sort(ms.begin(), ms.end());
  // A measurement, not a timed assertion (see docs/PERFORMANCE.md for the benchmark).
  std::cout << "cross-replica freshness over " << ms.size() << " labels: p50 "
            << ms[ms.size() / 2] << " ms, p99 " << ms[ms.size() * 99 / 100] << " ms, max "
            << ms.back() << " ms\n";
}

// The model version `r` serves for `project` (0 before the first).
int32_t ServedVersion(Replica& r, const std::string& project) {
  auto models = v1::ModelService::NewStub(r.channel);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetModelStatusRequest request;
  request.set_project(project);
  v1::GetModelStatusResponse response;
  grpc::Status status = models->GetModelStatus(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.has_current_version() ? response.current_version().version() : 0;
}

TEST_F(ReplicasTest, OneReplicaFitsEachRefitAndTheOthersServeItsVersion) {
  // Every replica trains in the background. The hook runs inside each fit, with the fit lock
  // held, and widens the fit so that overlapping fits would show.
  std::atomic<int> running{0}, most_running{0}, fits{0};
  server::TrainingScheduler::Options training;
  training.run_in_background = true;
  training.poll_interval = absl::Milliseconds(20);
  training.max_busy_fraction = 1.0;
  training.max_staleness = absl::Hours(1);  // Only new labels make a refit due.
  const std::string project = "one-trainer";
  training.before_fit_for_testing = [&](const server::LiveProject& fitted) {
    // The replicas also refit the projects the other tests left in the database.
    if (fitted.identity().name != project) return;
    const int now = ++running;
    int seen = most_running.load();
    while (now > seen && !most_running.compare_exchange_weak(seen, now)) {
    }
    ++fits;
    absl::SleepFor(absl::Milliseconds(300));
    --running;
  };
  Replica& a = StartReplica(training);
  Replica& b = StartReplica(training);
  Replica& c = StartReplica(training);
  CreateProject(a, project, v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(NumLabels(b, project), 0);
  EXPECT_EQ(NumLabels(c, project), 0);

  Submit(a, RandomBatches(project, 10, 200, 300, 20, /*seed=*/7));
  const int64_t labels = NumLabels(a, project);
  for (Replica* r : {&a, &b, &c}) ASSERT_TRUE(AwaitLabels(*r, project, labels));

  // Quiet: no new version for 2 s, and every replica serves the newest stored one.
  pqxx::connection db(pg_->url());
  auto stored_versions = [&] {
    pqxx::work txn(db);
    pqxx::row row = txn.exec_params1(
        "SELECT count(*), count(DISTINCT watermark), COALESCE(max(version), 0) "
        "FROM model_versions WHERE project_id = (SELECT project_id FROM projects WHERE name = $1)",
        project);
    return std::make_tuple(row[0].as<int64_t>(), row[1].as<int64_t>(), row[2].as<int32_t>());
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  int32_t newest = -1;
  absl::Time newest_since = absl::Now();
  while (absl::Now() < give_up) {
    const int32_t now_newest = std::get<2>(stored_versions());
    if (now_newest != newest) {
      newest = now_newest;
      newest_since = absl::Now();
    }
    if (newest > 0 && absl::Now() - newest_since > absl::Seconds(2)) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GT(newest, 0) << "no replica fitted";
  const auto [versions, distinct_watermarks, max_version] = stored_versions();
  EXPECT_EQ(most_running.load(), 1) << "two replicas fitted the project at once";
  EXPECT_EQ(fits.load(), versions) << "every fit stored its version";
  EXPECT_EQ(distinct_watermarks, versions) << "two versions were fitted on the same labels";
  for (Replica* r : {&a, &b, &c}) EXPECT_EQ(ServedVersion(*r, project), max_version);
  std::cout << "fits " << fits.load() << ", versions " << versions << " for " << labels
            << " labels over 3 replicas\n";
}

TEST_F(ReplicasTest, ModelStatusSaysTrainingWhileAnotherReplicaOrAWorkerFits) {
  Replica& r = StartReplica();
  const std::string project = "fitting-elsewhere";
  CreateProject(r, project, v1::TRUTH_METHOD_DAWID_SKENE);
  auto training = [&] {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::GetModelStatusRequest request;
    request.set_project(project);
    v1::GetModelStatusResponse response;
    grpc::Status status = r.model->GetModelStatus(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.training();
  };
  pqxx::connection db(pg_->url());
  const int64_t project_id = [&] {
    pqxx::work txn(db);
    return txn.exec_params1("SELECT project_id FROM projects WHERE name = $1", project)[0]
        .as<int64_t>();
  }();
  EXPECT_FALSE(training());

  // Another replica fitting the project holds its fit lock (storage/fit_lock.h) for the fit.
  pqxx::nontransaction other_replica(db);
  other_replica.exec_params("SELECT pg_advisory_lock($1)", storage::FitLocks::KeyOf(project_id));
  EXPECT_TRUE(training());
  other_replica.exec_params("SELECT pg_advisory_unlock($1)",
                            storage::FitLocks::KeyOf(project_id));
  EXPECT_FALSE(training());
  // Another project's lock says nothing about this one.
  other_replica.exec_params("SELECT pg_advisory_lock($1)",
                            storage::FitLocks::KeyOf(project_id + 1));
  EXPECT_FALSE(training());
  other_replica.exec_params("SELECT pg_advisory_unlock($1)",
                            storage::FitLocks::KeyOf(project_id + 1));

  // A worker fitting it has claimed its job: 'running' under a lease that has not expired.
  other_replica.exec_params(
      "INSERT INTO training_jobs (project_id, state, attempts, worker, lease_expires_at) "
      "VALUES ($1, 'running', 1, 'worker-1', now() + interval '1 minute')",
      project_id);
  EXPECT_TRUE(training());
  // Its lease expired: the worker died, nothing fits.
  other_replica.exec_params(
      "UPDATE training_jobs SET lease_expires_at = now() - interval '1 second' "
      "WHERE project_id = $1",
      project_id);
  EXPECT_FALSE(training());
  other_replica.exec_params(
      "UPDATE training_jobs SET state = 'done', lease_expires_at = now() + interval '1 minute' "
      "WHERE project_id = $1",
      project_id);
  EXPECT_FALSE(training());
}

TEST_F(ReplicasTest, MeasuresHowSoonOtherReplicasServeANewVersion) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  Replica& c = StartReplica();
  const std::string project = "version-freshness";
  CreateProject(a, project, v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(NumLabels(b, project), 0);
  EXPECT_EQ(NumLabels(c, project), 0);
  Submit(a, RandomBatches(project, 2, 200, 100, 10, /*seed=*/3));
  auto models = v1::ModelService::NewStub(a.channel);
  std::vector<double> ms;
  for (int round = 0; round < 5; ++round) {
    Submit(a, RandomBatches(project, 1, 50, 100, 10, /*seed=*/100 + round));
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::TrainModelRequest request;
    request.set_project(project);
    v1::TrainModelResponse response;
    grpc::Status status = models->TrainModel(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    const absl::Time trained = absl::Now();
    const int32_t version = ServedVersion(a, project);
    ASSERT_GT(version, 0);
    for (Replica* r : {&b, &c}) {
      const absl::Time give_up = absl::Now() + absl::Seconds(10);
      while (ServedVersion(*r, project) != version && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(2));
      }
      ASSERT_EQ(ServedVersion(*r, project), version);
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - trained));
    }
  }
  std::sort(ms.begin(), ms.end());
  std::cout << "a new version served by the other replicas after: median " << ms[ms.size() / 2]
            << " ms, max " << ms.back() << " ms (" << ms.size() << " adoptions)\n";
  // The posteriors agree once every replica serves the version.
  const std::vector<v1::Posterior> on_a = Posteriors(a, project);
  ExpectSamePosteriors(on_a, Posteriors(b, project), "B");
  ExpectSamePosteriors(on_a, Posteriors(c, project), "C");
}

TEST_F(ReplicasTest, LeasesAreExclusiveAcrossReplicas) {
  Replica& a = StartReplica();
  const std::string project = "shared-leases";
  {
    // One label per item at most: each item has one open slot, so one lease.
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(project);
    for (int c = 0; c < kClasses; ++c) request.mutable_project()->add_classes(absl::StrCat("c", c));
    request.mutable_project()->mutable_settings()->mutable_assignment()->set_max_labels_per_item(1);
    v1::CreateProjectResponse response;
    grpc::Status status = a.projects->CreateProject(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  constexpr int kItems = 40;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddItemsRequest request;
    request.set_project(project);
    for (int i = 0; i < kItems; ++i) request.add_items()->set_id(absl::StrCat("item-", i));
    v1::AddItemsResponse response;
    grpc::Status status = a.projects->AddItems(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  Replica& b = StartReplica();
  Replica& c = StartReplica();
  std::vector<Replica*> replicas = {&a, &b, &c};

  // 60 annotators, 20 on each replica, all at once, each asking for 2 items: 120 asks for 40
  // slots.
  absl::Mutex mu;
  std::map<std::string, std::vector<std::string>> leased_to;  // item -> annotators
  int failed_calls = 0;
  std::vector<std::thread> askers;
  for (int n = 0; n < 60; ++n) {
    askers.emplace_back([&, n] {
      Replica& r = *replicas[n % 3];
      grpc::ClientContext context;
      context.set_deadline(Deadline());
      v1::SuggestItemsRequest request;
      request.set_project(project);
      request.set_annotator(absl::StrCat("annotator-", n));
      request.set_k(2);
      v1::SuggestItemsResponse response;
      grpc::Status status = r.assignment->SuggestItems(&context, request, &response);
      absl::MutexLock lock(&mu);
      if (!status.ok()) {
        ++failed_calls;
        return;
      }
      for (const v1::ItemSuggestion& s : response.suggestions()) {
        leased_to[s.item()].push_back(request.annotator());
      }
    });
  }
  for (std::thread& t : askers) t.join();
  EXPECT_EQ(failed_calls, 0);
  int leases = 0;
  for (const auto& [item, annotators] : leased_to) {
    leases += static_cast<int>(annotators.size());
    EXPECT_EQ(annotators.size(), 1u) << item << " was leased to " << annotators.size()
                                     << " annotators for its one open slot";
  }
  EXPECT_EQ(leases, kItems) << "every slot leased once";
}

TEST_F(ReplicasTest, ItemsGoldAndSettingsWrittenThroughOneReplicaAreServedByTheOthers) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "items-and-settings";
  CreateProject(a, project);
  EXPECT_EQ(NumLabels(b, project), 0);  // B has loaded the project.

  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddItemsRequest request;
    request.set_project(project);
    for (int i = 0; i < 6; ++i) {
      v1::Item* item = request.add_items();
      item->set_id(absl::StrCat("item-", i));
      if (i % 2 == 0) item->set_gold_label(i % kClasses);
    }
    v1::AddItemsResponse response;
    grpc::Status status = a.projects->AddItems(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::UpdateProjectSettingsRequest request;
    request.set_project(project);
    request.mutable_settings()->mutable_assignment()->set_max_labels_per_item(7);
    v1::UpdateProjectSettingsResponse response;
    grpc::Status status = a.projects->UpdateProjectSettings(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  // B serves the items with their gold labels, and the new settings.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  std::vector<v1::Posterior> served;
  int32_t max_labels = 0;
  while (absl::Now() < give_up) {
    served = Posteriors(b, project);
    max_labels = ServedProject(b, project).settings().assignment().max_labels_per_item();
    if (served.size() == 6 && max_labels == 7) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(served.size(), 6u);
  EXPECT_EQ(max_labels, 7);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(served[i].item(), absl::StrCat("item-", i));
    EXPECT_EQ(served[i].is_gold(), i % 2 == 0) << served[i].item();
    if (i % 2 == 0) EXPECT_EQ(served[i].map_label(), i % kClasses) << served[i].item();
  }
  // The same as a replica that loads the project from PostgreSQL.
  Replica& fresh = StartReplica();
  ExpectSamePosteriors(Posteriors(fresh, project), served, "B");
}

// deploy/README.md: annotators written through one replica are re-read by the others within
// the poll, also annotators without features (before the fix, only their first label brought
// them: B answered NOT_FOUND for their profile and counted one annotator fewer).
TEST_F(ReplicasTest, AnnotatorsAddedWithoutFeaturesThroughOneReplicaAreServedByTheOthers) {
  Replica& a = StartReplica();
  Replica& b = StartReplica();
  const std::string project = "annotators-without-features";
  CreateProject(a, project);
  EXPECT_EQ(NumLabels(b, project), 0);  // B has loaded the project.
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddAnnotatorsRequest request;
    request.set_project(project);
    request.add_annotators()->set_id("w-new");
    v1::AddAnnotatorsResponse response;
    grpc::Status status = a.projects->AddAnnotators(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  auto num_annotators = [&](Replica& r) { return ServedProject(r, project).num_annotators(); };
  ASSERT_EQ(num_annotators(a), 1);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (num_annotators(b) != 1 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(num_annotators(b), 1);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetAnnotatorProfilesRequest request;
  request.set_project(project);
  request.add_annotators("w-new");
  v1::GetAnnotatorProfilesResponse response;
  grpc::Status status = b.truth->GetAnnotatorProfiles(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.profiles_size(), 1);
  EXPECT_EQ(response.profiles(0).annotator(), "w-new");
}

TEST_F(ReplicasTest, ASmallMemoryBudgetServesProjectsLargerThanItByReloadingThem) {
  // Room for about one of the three projects (each ~1,500 labels, 300 items, 20 annotators,
  // K = 3: LiveProject::EstimatedBytes gives about 36,000 + 88,800 + 4,880 bytes).
  Replica& r = StartReplica(std::nullopt, /*memory_budget_bytes=*/150'000);
  std::map<std::string, std::vector<v1::Posterior>> first;
  for (int p = 0; p < 3; ++p) {
    const std::string project = absl::StrCat("budget-", p);
    CreateProject(r, project, v1::TRUTH_METHOD_DAWID_SKENE);
    Submit(r, RandomBatches(project, 3, 500, 300, 20, /*seed=*/50 + p));
    auto models = v1::ModelService::NewStub(r.channel);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::TrainModelRequest request;
    request.set_project(project);
    v1::TrainModelResponse response;
    ASSERT_TRUE(models->TrainModel(&context, request, &response).ok());
    first[project] = Posteriors(r, project);
  }
  // The budget thread unloads idle projects every second; each call reloads its project.
  size_t fewest_loaded = 3;
  const absl::Time until = absl::Now() + absl::Seconds(3);
  while (absl::Now() < until) {
    for (const auto& [project, expected] : first) {
      ExpectSamePosteriors(expected, Posteriors(r, project), project);
      absl::SleepFor(absl::Milliseconds(100));
      fewest_loaded = std::min(fewest_loaded, r.server->core().registry->All().size());
    }
  }
  EXPECT_LT(fewest_loaded, 3u) << "the budget never unloaded a project";
}

// deploy/README.md, "Several replicas": settings reach the other replicas "within the 1 s
// poll", and "a replica that finds [the fit lock] held leaves the fit to the holder and serves
// its version" ("one fit for one burst of labels on three replicas"). A method change made
// through one replica must not make the replicas that still hold the old settings refit the old
// method on top of the new one: probe seen 7 versions (ds, mv, ds, mv, ds, mv, ds->mv...) on
// the same watermark for one `verity project settings --method=mv`, the served method flipping
// between them.
TEST_F(ReplicasTest, AMethodChangeOnOneReplicaIsNotFittedBackAndForthByTheOthers) {
  server::TrainingScheduler::Options training;
  training.run_in_background = true;
  training.poll_interval = absl::Milliseconds(20);
  training.max_busy_fraction = 1.0;
  training.max_staleness = absl::Hours(1);
  const std::string project = "method-ping-pong";
  Replica& a = StartReplica(training);
  Replica& b = StartReplica(training);
  Replica& c = StartReplica(training);
  CreateProject(a, project, v1::TRUTH_METHOD_DAWID_SKENE);
  Submit(a, RandomBatches(project, 10, 200, 300, 20, /*seed=*/11));
  const int64_t labels = NumLabels(a, project);
  for (Replica* r : {&a, &b, &c}) ASSERT_TRUE(AwaitLabels(*r, project, labels));

  pqxx::connection db(pg_->url());
  auto versions = [&] {
    pqxx::work txn(db);
    std::vector<std::pair<int32_t, std::string>> out;
    for (auto row : txn.exec_params(
             "SELECT version, method FROM model_versions WHERE project_id = "
             "(SELECT project_id FROM projects WHERE name = $1) ORDER BY version",
             project)) {
      out.emplace_back(row[0].as<int32_t>(), row[1].as<std::string>());
    }
    return out;
  };
  auto await_quiet = [&] {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    size_t count = 0;
    absl::Time since = absl::Now();
    while (absl::Now() < give_up) {
      const size_t now = versions().size();
      if (now != count) {
        count = now;
        since = absl::Now();
      }
      if (count > 0 && absl::Now() - since > absl::Seconds(3)) return;
      absl::SleepFor(absl::Milliseconds(50));
    }
  };
  await_quiet();
  const size_t before = versions().size();
  ASSERT_GT(before, 0u) << "no replica fitted";

  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::UpdateProjectSettingsRequest request;
    request.set_project(project);
    *request.mutable_settings() = ServedProject(b, project).settings();
    request.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
    v1::UpdateProjectSettingsResponse response;
    grpc::Status status = b.projects->UpdateProjectSettings(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  await_quiet();
  const auto after = versions();
  std::string listing;
  for (const auto& [version, method] : after) listing += absl::StrCat(version, ":", method, " ");
  int old_method_fits = 0;
  for (size_t i = before; i < after.size(); ++i) old_method_fits += after[i].second != "mv";
  EXPECT_EQ(old_method_fits, 0) << "versions of the old method fitted after the change: "
                                << listing;
  EXPECT_LE(after.size() - before, 1u) << "one settings change, no new labels: " << listing;
}

}  // namespace
}  // namespace verity::tests
