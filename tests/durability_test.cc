// Durability: acked annotations survive SIGKILLs of the server at random points during
// multi-stream ingest (several rounds), and resending everything
// after a restart yields exactly the full set once (ARCHITECTURE.md: "acked means durable").
// Each SIGKILL leaves the embedded PostgreSQL running, and the restart reuses it.
#include <grpcpp/grpcpp.h>

#include <signal.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/server_process.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {
namespace {

constexpr int kItems = 3000;
constexpr int kLabelsPerItem = 8;
constexpr int kBatchSize = 200;
constexpr int kStreams = 3;
constexpr int kKillRounds = 3;

// Every batch of the test, with unique batch ids 1..N.
std::vector<v1::AnnotationBatch> MakeBatches(const std::string& project) {
  std::mt19937 rng(7);
  std::vector<v1::AnnotationBatch> batches;
  v1::AnnotationBatch current;
  for (int i = 0; i < kItems; ++i) {
    for (int j = 0; j < kLabelsPerItem; ++j) {
      v1::Annotation* a = current.add_annotations();
      a->set_item(absl::StrCat("item-", i));
      a->set_annotator(absl::StrCat("worker-", (i * 7 + j * 13) % 97));
      a->set_label(static_cast<int>(rng() % 3));
      if (current.annotations_size() == kBatchSize) {
        current.set_batch_id(batches.size() + 1);
        current.set_project(project);
        batches.push_back(std::move(current));
        current = v1::AnnotationBatch();
      }
    }
  }
  return batches;
}

// Acked batch ids, shared by the streams' reader threads.
class AckLog {
 public:
  void Record(const v1::BatchAck& ack) {
    absl::MutexLock lock(&mu_);
    acks_.push_back(ack);
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return acks_.size();
  }
  void AwaitAtLeast(size_t n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return acks_.size() >= n; };
    mu_.Await(absl::Condition(&reached));
  }
  std::vector<v1::BatchAck> acks() {
    absl::MutexLock lock(&mu_);
    return acks_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::BatchAck> acks_ ABSL_GUARDED_BY(mu_);
};

// Sends `batches` on one stream, pipelined; records every ack. Returns when the stream ends
// (normally or because the server died).
void StreamBatches(v1::IngestService::Stub& stub, const std::vector<const v1::AnnotationBatch*>& batches,
                   AckLog& log) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto stream = stub.SubmitAnnotations(&context);
  std::thread reader([&] {
    v1::BatchAck ack;
    while (stream->Read(&ack)) log.Record(ack);
  });
  for (const v1::AnnotationBatch* b : batches) {
    if (!stream->Write(*b)) break;
  }
  stream->WritesDone();
  reader.join();
  stream->Finish().error_code();  // The outcome is judged from the acks.
}

// Sends every batch again on one stream and returns the acks by batch id.
std::map<uint64_t, v1::BatchAck> ResendAll(v1::IngestService::Stub& stub,
                                           const std::vector<v1::AnnotationBatch>& batches) {
  AckLog log;
  std::vector<const v1::AnnotationBatch*> all;
  for (const auto& b : batches) all.push_back(&b);
  StreamBatches(stub, all, log);
  std::map<uint64_t, v1::BatchAck> by_id;
  for (const v1::BatchAck& ack : log.acks()) by_id[ack.batch_id()] = ack;
  return by_id;
}

int64_t LiveLabels(const std::shared_ptr<grpc::Channel>& channel, const std::string& project) {
  auto stub = v1::ProjectService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GetProjectRequest request;
  request.set_project(project);
  v1::GetProjectResponse response;
  grpc::Status status = stub->GetProject(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.project().num_labels();
}

std::vector<v1::Posterior> AllPosteriors(const std::shared_ptr<grpc::Channel>& channel,
                                         const std::string& project) {
  auto stub = v1::TruthService::NewStub(channel);
  std::vector<v1::Posterior> all;
  std::string token;
  do {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ListPosteriorsRequest request;
    request.set_project(project);
    request.set_page_size(1000);
    request.set_page_token(token);
    v1::ListPosteriorsResponse response;
    grpc::Status status = stub->ListPosteriors(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) break;
    for (auto& p : *response.mutable_posteriors()) all.push_back(std::move(p));
    token = response.next_page_token();
  } while (!token.empty());
  return all;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Whether the postmaster named in `pgdata`/postmaster.pid is alive.
bool PostmasterRunning(const std::string& pgdata) {
  std::ifstream in(pgdata + "/postmaster.pid");
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0) return false;
  return kill(pid, 0) == 0;
}

class DurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("verity-durability");
    ASSERT_FALSE(dir_.empty());
    server_ = std::make_unique<ServerProcess>(RunfilePath("server/verity_server"), dir_);
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_TRUE(server_->Stop().ok()) << "see " << server_->log_path();
    }
    server_.reset();
    RemoveTree(dir_);
  }
  std::shared_ptr<grpc::Channel> Connect() {
    return grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  }
  void CreateProject(const std::string& name) {
    auto stub = v1::ProjectService::NewStub(Connect());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(name);
    for (const char* c : {"a", "b", "c"}) request.mutable_project()->add_classes(c);
    v1::CreateProjectResponse response;
    grpc::Status status = stub->CreateProject(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  std::string dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(DurabilityTest, AckedAnnotationsSurviveSigkillAndResendGivesTheFullSetOnce) {
  const std::string project = "durability";
  CreateProject(project);
  const std::vector<v1::AnnotationBatch> batches = MakeBatches(project);
  const int64_t total = static_cast<int64_t>(kItems) * kLabelsPerItem;

  // Rounds: several streams share the batches not acked yet round-robin, and the server is
  // SIGKILLed at a random point (after 10-60 % of them are acked, seeded), then restarted.
  absl::flat_hash_set<uint64_t> acked;
  std::mt19937 rng(20261122);
  for (int round = 0; round < kKillRounds; ++round) {
    std::vector<const v1::AnnotationBatch*> pending;
    for (const v1::AnnotationBatch& b : batches) {
      if (!acked.contains(b.batch_id())) pending.push_back(&b);
    }
    AckLog log;
    {
      auto stub = v1::IngestService::NewStub(Connect());
      // The last quarter of the pending batches waits for a later round, so that every round's
      // kill finds batches not yet acked even when this thread is descheduled for a while
      // after its wait (make test shares the cores): without it the streams could finish
      // before the kill.
      const size_t sendable = pending.size() - std::max<size_t>(1, pending.size() / 4);
      std::vector<std::vector<const v1::AnnotationBatch*>> shares(kStreams);
      for (size_t i = 0; i < sendable; ++i) shares[i % kStreams].push_back(pending[i]);
      std::vector<std::thread> streams;
      for (int s = 0; s < kStreams; ++s) {
        streams.emplace_back([&, s] { StreamBatches(*stub, shares[s], log); });
      }
      const double fraction = std::uniform_real_distribution<double>(0.1, 0.6)(rng);
      log.AwaitAtLeast(std::max<size_t>(1, static_cast<size_t>(fraction * sendable)));
      server_->Kill();
      for (auto& t : streams) t.join();
    }
    // SIGKILL does no shutdown work: the embedded PostgreSQL keeps running (README.md), and
    // the restart below reuses it rather than waiting for crash recovery.
    EXPECT_TRUE(PostmasterRunning(dir_ + "/var/pgdata")) << "round " << round;
    for (const v1::BatchAck& ack : log.acks()) {
      ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
      EXPECT_EQ(ack.accepted() + ack.duplicate() + ack.revised(), kBatchSize);
      acked.insert(ack.batch_id());
    }
    ASSERT_LT(acked.size(), batches.size()) << "round " << round << ": the kill came too late";
    ASSERT_TRUE(server_->Start().ok()) << "restart failed; see " << server_->log_path();
    EXPECT_THAT(ReadWholeFile(server_->log_path()),
                ::testing::HasSubstr("embedded PostgreSQL (reused running server"))
        << "round " << round;
  }
  ASSERT_GT(acked.size(), 0u);

  auto channel = Connect();
  auto stub = v1::IngestService::NewStub(channel);
  std::map<uint64_t, v1::BatchAck> resent = ResendAll(*stub, batches);
  ASSERT_EQ(resent.size(), batches.size());
  for (const auto& [id, ack] : resent) {
    ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
    EXPECT_EQ(ack.revised(), 0) << "batch " << id;
    if (acked.contains(id)) {
      // Acked before the kill: every annotation is already there.
      EXPECT_EQ(ack.duplicate(), kBatchSize) << "acked batch " << id << " lost annotations";
    } else {
      EXPECT_EQ(ack.accepted() + ack.duplicate(), kBatchSize) << "batch " << id;
    }
  }
  // Batches in flight at a kill may or may not have been committed before it: unacked ones
  // come back as accepted or duplicate, never revised, and the total below is exact.
  EXPECT_EQ(LiveLabels(channel, project), total);

  // A second resend changes nothing: exactly the full set, once.
  for (const auto& [id, ack] : ResendAll(*stub, batches)) {
    EXPECT_EQ(ack.duplicate(), kBatchSize) << "batch " << id;
  }
  EXPECT_EQ(LiveLabels(channel, project), total);

  // A clean restart serves exactly the same posteriors.
  std::vector<v1::Posterior> before = AllPosteriors(channel, project);
  ASSERT_EQ(before.size(), static_cast<size_t>(kItems));
  ASSERT_TRUE(server_->Stop().ok());
  ASSERT_TRUE(server_->Start().ok());
  std::vector<v1::Posterior> after = AllPosteriors(Connect(), project);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    ASSERT_EQ(after[i].item(), before[i].item());
    ASSERT_EQ(after[i].num_labels(), kLabelsPerItem);
    ASSERT_EQ(after[i].probabilities_size(), 3);
    for (int c = 0; c < 3; ++c) {
      EXPECT_DOUBLE_EQ(after[i].probabilities(c), before[i].probabilities(c)) << after[i].item();
    }
  }
}

}  // namespace
}  // namespace verity::tests
