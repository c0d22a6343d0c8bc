// The lease promises of the v1 API held in single-replica mode (VerityServer::Options::
// follow_replicas = false, the binary's --follow_replicas=false). There SuggestItems leases in
// memory (RankAndLeaseItems) and hands the leases to the LeasePersister, which writes them to
// PostgreSQL behind the request path; every other server test runs the default several-replica
// mode, which claims leases in PostgreSQL first. Expectations are the proto text's
// (assignment.proto: a suggestion "reserves one label slot on the item until this time (or
// until the annotator's label for it arrives)"; projects.proto: lease_seconds) and the storage
// layer's (storage/lease_store.h: leases are in PostgreSQL "so they survive a restart";
// server/assignment/lease_persister.h: written every flush interval "and at Shutdown"). Each
// test drives an in-process server over a real gRPC channel and a real PostgreSQL.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
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
#include "verity/v1/assignment.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/projects.pb.h"

namespace verity::tests {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::verity::testing::IsOk;

// Writes batch `id`, one label (item, annotator "w1", class 1) naming `project` ("" for the
// stream's), on `stream` and returns its ack.
v1::BatchAck SendOneLabel(grpc::ClientReaderWriter<v1::AnnotationBatch, v1::BatchAck>& stream,
                          uint64_t id, const std::string& project, const std::string& item) {
  v1::AnnotationBatch batch;
  batch.set_batch_id(id);
  batch.set_project(project);
  v1::Annotation* a = batch.add_annotations();
  a->set_item(item);
  a->set_annotator("w1");
  a->set_label(1);
  v1::BatchAck ack;
  EXPECT_TRUE(stream.Write(batch));
  EXPECT_TRUE(stream.Read(&ack));
  return ack;
}

class SingleReplicaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pg_ = TestPostgres::Start("verity-single-replica").release(); }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(pg_, nullptr);
    StartServer();
  }
  void TearDown() override { StopServer(); }

  // A server over the suite's database that follows no other replica.
  // memory_budget_bytes > 0: the memory budget, with projects unloadable at once when idle.
  void StartServer(int64_t memory_budget_bytes = 0,
                   std::function<void(const server::LiveProject&)> before_fit = nullptr,
                   int max_concurrent_fits = server::TrainingScheduler::Options().max_concurrent_fits) {
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 2);
    options.memory_budget_bytes = memory_budget_bytes;
    options.training.before_fit_for_testing = std::move(before_fit);
    options.training.max_concurrent_fits = max_concurrent_fits;
    options.evict_after_idle = absl::ZeroDuration();
    options.follow_replicas = false;
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    // The mode under test: leases are not claimed in PostgreSQL on the request path.
    ASSERT_FALSE(server_->core().shared_leases);
    channel_ = client::CreateInsecureChannel(absl::StrCat("127.0.0.1:", server_->port()));
    client_ = std::make_unique<client::VerityClient>(channel_, client::ClientOptions{});
  }
  void StopServer() {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }

  // A two-class project with the items `ids`, at most `max_labels` labels per item and leases
  // of `lease_seconds`.
  void CreateProject(const std::string& name, const std::vector<std::string>& ids,
                     int32_t max_labels, int32_t lease_seconds = 600) {
    v1::Project project;
    project.set_name(name);
    project.add_classes("no");
    project.add_classes("yes");
    v1::AssignmentSettings* assignment = project.mutable_settings()->mutable_assignment();
    assignment->set_max_labels_per_item(max_labels);
    assignment->set_lease_seconds(lease_seconds);
    ASSERT_THAT(client_->CreateProject(project), IsOk());
    std::vector<v1::Item> items;
    for (const std::string& id : ids) items.emplace_back().set_id(id);
    ASSERT_THAT(client_->AddItems(name, items), IsOk());
  }

  // Submits (item, annotator, label) triples on one stream; every one must be accepted.
  void Submit(const std::string& project, const std::vector<LabelTriple>& labels) {
    SubmitAllAccepted(*client_, project, labels);
  }

  // SuggestItems for `annotator` (k = 10, restricted to `candidates` if any), expected to
  // succeed.
  std::vector<v1::ItemSuggestion> Suggest(const std::string& project, const std::string& annotator,
                                          const std::vector<std::string>& candidates = {}) {
    absl::StatusOr<std::vector<v1::ItemSuggestion>> suggestions =
        client_->SuggestItems(project, annotator, 10, candidates);
    EXPECT_THAT(suggestions, IsOk());
    if (!suggestions.ok()) return {};
    return *std::move(suggestions);
  }

  // The item ids of Suggest(...), in order.
  std::vector<std::string> SuggestedItems(const std::string& project, const std::string& annotator,
                                          const std::vector<std::string>& candidates = {}) {
    std::vector<std::string> items;
    for (const v1::ItemSuggestion& s : Suggest(project, annotator, candidates)) {
      items.push_back(s.item());
    }
    return items;
  }

  static TestPostgres* pg_;
  std::unique_ptr<server::VerityServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<client::VerityClient> client_;
};

TestPostgres* SingleReplicaTest::pg_ = nullptr;

absl::Time FromTimestamp(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// projects.proto: a suggestion reserves a slot on its item for lease_seconds, and
// assignment.proto's lease_expires_at says until when. One item, at most 1 label on it: while
// a's lease holds, b is suggested nothing.
TEST_F(SingleReplicaTest, ASuggestionHoldsItsSlotForLeaseSeconds) {
  CreateProject("holds", {"only"}, /*max_labels=*/1, /*lease_seconds=*/60);
  const absl::Time asked = absl::Now();
  std::vector<v1::ItemSuggestion> first = Suggest("holds", "a");
  const absl::Time answered = absl::Now();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].item(), "only");
  const absl::Time expires = FromTimestamp(first[0].lease_expires_at());
  EXPECT_GE(expires, asked + absl::Seconds(60) - absl::Milliseconds(50));
  EXPECT_LE(expires, answered + absl::Seconds(60) + absl::Milliseconds(50));
  EXPECT_THAT(SuggestedItems("holds", "b"), IsEmpty());
  EXPECT_THAT(SuggestedItems("holds", "c"), IsEmpty());
}

// assignment.proto: the slot is reserved "until this time (or until the annotator's label for
// it arrives)". With at most 2 labels on the item, a's lease held after a's label would count
// twice (1 label + 1 lease = 2) and leave nothing for c.
TEST_F(SingleReplicaTest, ALeaseEndsWhenTheAnnotatorsLabelArrives) {
  CreateProject("lease-ends", {"only"}, /*max_labels=*/2);
  ASSERT_THAT(SuggestedItems("lease-ends", "a"), ElementsAre("only"));
  Submit("lease-ends", {{"only", "a", 1}});
  EXPECT_THAT(SuggestedItems("lease-ends", "c"), ElementsAre("only"));
  // The slots are still counted: a's label and c's lease fill the item.
  EXPECT_THAT(SuggestedItems("lease-ends", "d"), IsEmpty());
}

// storage/lease_store.h: leases are kept in PostgreSQL "so they survive a restart"; in this
// mode the LeasePersister writes them, at the latest at Shutdown. Two items, at most 1 label
// each: a is suggested "held" (the only candidate it asks about); after a restart over the same
// database b is suggested "free" only, so the project is served and a's lease still holds.
TEST_F(SingleReplicaTest, ALeaseSurvivesARestart) {
  CreateProject("restart", {"held", "free"}, /*max_labels=*/1);
  ASSERT_THAT(SuggestedItems("restart", "a", {"held"}), ElementsAre("held"));
  StopServer();
  StartServer();
  EXPECT_THAT(SuggestedItems("restart", "b"), ElementsAre("free"));
  EXPECT_THAT(SuggestedItems("restart", "c", {"held"}), IsEmpty());
}

// The two promises together across a restart: a lease answered by its annotator's label before
// the restart does not come back after it (lease_store.h: a lease holds "until it expires or
// that annotator's label for the item arrives"), even though the persister may write the lease
// after the label. At most 2 labels: a's label and b's lease fill the item; a lease of a's
// brought back would leave b nothing.
TEST_F(SingleReplicaTest, ALeaseAnsweredBeforeARestartStaysEndedAfterIt) {
  CreateProject("answered", {"only"}, /*max_labels=*/2);
  ASSERT_THAT(SuggestedItems("answered", "a"), ElementsAre("only"));
  Submit("answered", {{"only", "a", 0}});
  StopServer();
  StartServer();
  EXPECT_THAT(SuggestedItems("answered", "b"), ElementsAre("only"));
  EXPECT_THAT(SuggestedItems("answered", "c"), IsEmpty());
}

// Promise (README: the posteriors of the touched items are updated before the ack, so a query
// made after an ack sees the label; --memory_budget_mb unloads projects no call used for
// --evict_idle_seconds). An open ingest stream keeps using its project: its batches after the
// first name no project, and the memory budget must not unload the project under it, else
// they are committed into an unloaded copy, acked, and (without replicas to follow) never
// served by the copy the next query loads.
TEST_F(SingleReplicaTest, AProjectAnOpenStreamWritesToIsNotUnloadedUnderIt) {
  StopServer();
  StartServer(/*memory_budget_bytes=*/1);
  CreateProject("streamed", {"a", "b"}, /*max_labels=*/5);
  auto stub = v1::IngestService::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = stub->SubmitAnnotations(&context);
  const auto send = [&](uint64_t id, const std::string& project, const std::string& item) {
    const v1::BatchAck ack = SendOneLabel(*stream, id, project, item);
    EXPECT_EQ(ack.batch_id(), id);
    EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
    EXPECT_EQ(ack.accepted(), 1);
  };
  send(1, "streamed", "a");
  // The budget's pass (it also runs every second) at a time when every project is idle.
  server_->core().registry->EvictOverBudget(absl::Now() + absl::Hours(1));
  absl::SleepFor(absl::Milliseconds(1500));
  absl::StatusOr<std::vector<v1::Posterior>> before = client_->GetPosteriors("streamed", {"a"});
  ASSERT_THAT(before, IsOk());
  EXPECT_EQ((*before)[0].num_labels(), 1);
  send(2, "", "b");  // The stream's project, unnamed.
  absl::StatusOr<std::vector<v1::Posterior>> after =
      client_->GetPosteriors("streamed", {"a", "b"});
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ((*after)[0].num_labels(), 1);
  EXPECT_EQ((*after)[1].num_labels(), 1) << "the label acked on the stream is not served";
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// README (--evict_idle_seconds: "unloading projects idle that long (no call, no batch)"): every
// batch is a use of its project, the unnamed batches of a stream included, so a project whose
// stream wrote to it a moment ago is not idle. Idle 60 s here; the stream's first batch is 3 s
// older than its second, and the budget's pass is run as of 58.5 s after the second: idle
// 58.5 s counted from the second batch, 61.5 s from the first.
TEST_F(SingleReplicaTest, EveryBatchOfAStreamIsAUseOfItsProject) {
  StopServer();
  StartServer(/*memory_budget_bytes=*/1);
  server_->core().registry->EnforceMemoryBudget(1, absl::Seconds(60));
  CreateProject("used-by-batches", {"a", "b"}, /*max_labels=*/5);
  auto stub = v1::IngestService::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = stub->SubmitAnnotations(&context);
  const auto send = [&](uint64_t id, const std::string& project, const std::string& item) {
    const v1::BatchAck ack = SendOneLabel(*stream, id, project, item);
    EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  };
  send(1, "used-by-batches", "a");
  absl::SleepFor(absl::Seconds(3));
  send(2, "", "b");
  const absl::Time second = absl::Now();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_THAT(server_->core().registry->EvictOverBudget(second + absl::Seconds(58.5)),
              ::testing::Not(::testing::Contains("used-by-batches")));
  EXPECT_NE(server_->core().registry->IfLoaded("used-by-batches"), nullptr);
  // Idle past 60 s from the second batch, it is unloaded.
  EXPECT_THAT(server_->core().registry->EvictOverBudget(second + absl::Seconds(61)),
              ::testing::Contains("used-by-batches"));
}

// docs/SECURITY.md: "TrainModel with nothing new since the current version's fit returns that
// version and writes nothing". Without other replicas there is no fit lock in PostgreSQL; calls
// that arrive together wait for the project's fit in progress and must then find it current,
// not fit again. The hook holds the first fit for 500 ms so that all four calls are waiting.
TEST_F(SingleReplicaTest, TrainModelCallsThatArriveTogetherStoreOneVersion) {
  StopServer();
  std::atomic<int> fits{0};
  StartServer(0, [&fits](const server::LiveProject& project) {
    if (project.identity().name != "together") return;
    ++fits;
    absl::SleepFor(absl::Milliseconds(500));
  });
  CreateProject("together", {"i0", "i1"}, /*max_labels=*/0);
  Submit("together", {{"i0", "a", 1}, {"i0", "b", 1}, {"i1", "a", 0}, {"i1", "b", 1}});
  std::vector<absl::StatusOr<v1::ModelVersion>> trained(4, absl::UnknownError("not run"));
  std::vector<std::thread> callers;
  for (size_t c = 0; c < trained.size(); ++c) {
    callers.emplace_back(
        [this, &trained, c] { trained[c] = client_->TrainModel("together", absl::Minutes(2)); });
  }
  for (std::thread& caller : callers) caller.join();
  for (const absl::StatusOr<v1::ModelVersion>& version : trained) {
    ASSERT_THAT(version, IsOk());
    EXPECT_EQ(version->version(), 1);
  }
  EXPECT_EQ(fits.load(), 1);
  absl::StatusOr<std::vector<v1::ModelVersion>> stored = client_->ListModelVersions("together", 0);
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ(stored->size(), 1u);
}

// models.proto: TrainModel answers CANCELLED when the call is cancelled while it waits, and a
// caller that gave up gets no fit. One fit slot (--max_concurrent_fits=1), held for a second by
// a fit of another project; a TrainModel of "gave-up", waiting for that slot, passes its
// 200 ms deadline. Without the cancellation its handler would fit "gave-up" once the slot
// frees, for a caller long gone.
TEST_F(SingleReplicaTest, ATrainModelCancelledWhileItWaitsForASlotFitsNothing) {
  StopServer();
  std::atomic<int> busy_fits{0}, fits{0};
  StartServer(
      0,
      [&](const server::LiveProject& project) {
        if (project.identity().name == "busy") {
          ++busy_fits;
          absl::SleepFor(absl::Seconds(1));
        }
        if (project.identity().name == "gave-up") ++fits;
      },
      /*max_concurrent_fits=*/1);
  for (const char* name : {"busy", "gave-up"}) {
    CreateProject(name, {"i0", "i1"}, /*max_labels=*/0);
    Submit(name, {{"i0", "a", 1}, {"i0", "b", 1}, {"i1", "a", 0}, {"i1", "b", 1}});
  }
  absl::StatusOr<v1::ModelVersion> busy = absl::UnknownError("not run");
  std::thread busy_caller([&] { busy = client_->TrainModel("busy", absl::Minutes(2)); });
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (busy_fits.load() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(busy_fits.load(), 1);
  absl::StatusOr<v1::ModelVersion> second =
      client_->TrainModel("gave-up", absl::Milliseconds(200));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded) << second.status();
  busy_caller.join();
  ASSERT_THAT(busy, IsOk());
  // The handler of "gave-up" has had time to fit, had it gone on (the hook counts a fit as it
  // starts).
  const absl::Time watch_until = absl::Now() + absl::Seconds(3);
  while (fits.load() == 0 && absl::Now() < watch_until) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(fits.load(), 0);
  absl::StatusOr<std::vector<v1::ModelVersion>> stored = client_->ListModelVersions("gave-up", 0);
  ASSERT_THAT(stored, IsOk());
  EXPECT_TRUE(stored->empty());
}

}  // namespace
}  // namespace verity::tests
