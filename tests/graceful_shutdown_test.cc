// Graceful shutdown (issue 6): SIGTERM to the verity_server binary, running on its embedded
// PostgreSQL, while several SubmitAnnotations streams keep sending batches.
//
// What must hold: the process exits 0 within kExitBound of the signal; once it has logged the
// shutdown, a new connection is refused (UNAVAILABLE); every batch submitted before the
// shutdown is committed AND acked, and every batch read after it is acked UNAVAILABLE (nothing
// of it written), so the database afterwards holds exactly the annotations of the batches acked
// OK, no more, no less, and no batch is acked twice; each stream, closed by its client on the
// first UNAVAILABLE ack as the client library does, ends with status OK; the embedded
// PostgreSQL is stopped cleanly (no postmaster.pid, no postmaster process for the data
// directory, and pg_controldata reports "shut down": no recovery at the next start); and the
// server logged event=shutdown ... event=stopped.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "pqxx/connection"
#include "pqxx/nontransaction"
#include "pqxx/result"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"
#include "verity/v1/ingest.grpc.pb.h"

namespace verity::tests {
namespace {

constexpr int kStreams = 4;
constexpr int kBatchSize = 50;
// Batches written ahead of their acks on each stream (the client library's default).
constexpr int kMaxUnacked = 8;
// OK acks every stream must have before the SIGTERM, so all of them are mid-ingest.
constexpr int kAcksBeforeSigterm = 5;
// A stream stops writing after this many batches even if nothing stops it (a safety net:
// the shutdown ends every stream long before).
constexpr int kMaxBatchesPerStream = 20000;
constexpr absl::Duration kExitBound = absl::Seconds(30);

const char kProject[] = "shutdown";

// (item, annotator, label).
using Label = std::tuple<std::string, std::string, int>;

uint64_t BatchId(int stream, int index) {
  return static_cast<uint64_t>(stream) * 1000000 + index + 1;
}

// Batch `index` of stream `stream`. Its items are its own, so no two batches write the same
// (item, annotator) pair and every stored row names the one batch it came from.
v1::AnnotationBatch MakeBatch(int stream, int index) {
  v1::AnnotationBatch batch;
  batch.set_batch_id(BatchId(stream, index));
  batch.set_project(kProject);
  for (int k = 0; k < kBatchSize; ++k) {
    v1::Annotation* a = batch.add_annotations();
    a->set_item(absl::StrCat("s", stream, "-b", index, "-i", k / 5));
    a->set_annotator(absl::StrCat("annotator-", k % 5));
    a->set_label((stream + index + k) % 3);
  }
  return batch;
}

std::vector<Label> LabelsOf(const v1::AnnotationBatch& batch) {
  std::vector<Label> labels;
  for (const v1::Annotation& a : batch.annotations()) {
    labels.emplace_back(a.item(), a.annotator(), a.label());
  }
  return labels;
}

// What one stream saw.
struct StreamRecord {
  int sent = 0;                    // Batches 0..sent-1 were written (or their write attempted).
  std::vector<v1::BatchAck> acks;  // In arrival order.
  bool acks_in_order = true;       // Each ack named the oldest unacked batch.
  grpc::Status status;
};

// Acks of all streams so far, for the main thread to wait on and to sample.
class AckCounter {
 public:
  explicit AckCounter(int streams) : ok_per_stream_(streams, 0) {}
  void Record(int stream, bool ok) {
    absl::MutexLock lock(&mu_);
    ++total_;
    if (ok) ++ok_per_stream_[stream];
  }
  int total() {
    absl::MutexLock lock(&mu_);
    return total_;
  }
  // True once every stream has `n` OK acks, false after `timeout`.
  bool AwaitEveryStreamAcked(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (int count : ok_per_stream_) {
        if (count < n) return false;
      }
      return true;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  absl::Mutex mu_;
  std::vector<int> ok_per_stream_ ABSL_GUARDED_BY(mu_);
  int total_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sends batches 0, 1, ... of `stream` with up to kMaxUnacked unacked, as the client library
// does: on the first ack with an error, or a failed write, it stops writing, half-closes,
// reads the acks still due and finishes.
StreamRecord RunStream(v1::IngestService::Stub& stub, int stream, AckCounter& counter) {
  StreamRecord record;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
  auto rpc = stub.SubmitAnnotations(&context);
  std::deque<uint64_t> in_flight;
  bool writing = true;
  bool writes_done = false;
  v1::BatchAck ack;
  while (true) {
    if (writing && record.sent < kMaxBatchesPerStream &&
        static_cast<int>(in_flight.size()) < kMaxUnacked) {
      const v1::AnnotationBatch batch = MakeBatch(stream, record.sent++);
      if (rpc->Write(batch)) {
        in_flight.push_back(batch.batch_id());
      } else {
        writing = false;
      }
      continue;
    }
    if (!writes_done && (!writing || record.sent == kMaxBatchesPerStream)) {
      rpc->WritesDone();
      writes_done = true;
    }
    if (in_flight.empty() || !rpc->Read(&ack)) break;
    if (ack.batch_id() != in_flight.front()) record.acks_in_order = false;
    in_flight.pop_front();
    counter.Record(stream, ack.error_code() == 0);
    if (ack.error_code() != 0) writing = false;
    record.acks.push_back(ack);
  }
  record.status = rpc->Finish();
  return record;
}

// A channel with a connection of its own: channels with the same target and arguments share
// gRPC's global subchannel pool, so a "new" channel would reuse the streams' connection.
std::shared_ptr<grpc::Channel> NewConnection(const std::string& address) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Pids of the live processes whose command line contains `needle`.
std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
  std::vector<pid_t> found;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::string cmdline = ReadFile(entry.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (absl::StrContains(cmdline, needle)) found.push_back(pid);
  }
  return found;
}

// What pg_controldata says of the cluster in `pgdata` ("" when it cannot run).
std::string ControlData(const std::string& pgdata) {
  std::error_code ignored;
  for (const auto& version : std::filesystem::directory_iterator("/usr/lib/postgresql", ignored)) {
    const std::string tool = version.path().string() + "/bin/pg_controldata";
    if (!std::filesystem::exists(tool)) continue;
    FILE* out = popen((tool + " '" + pgdata + "' 2>&1").c_str(), "r");
    if (out == nullptr) return "";
    std::string text;
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof buffer, out)) > 0;) text.append(buffer, n);
    pclose(out);
    return text;
  }
  return "";
}

// The server's children of this process; SIGKILLed when the server overstays kExitBound, so
// that a hung shutdown fails the test instead of hanging it.
void KillChildServers() {
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const std::string stat = ReadFile(entry.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t parent = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &parent) && parent == getpid() &&
        absl::StrContains(stat.substr(0, close), "verity_server")) {
      kill(pid, SIGKILL);
    }
  }
}

// Every live label of the project, read from the cluster in `pg_dir` (started for the read
// and stopped again).
std::set<Label> StoredLabels(const std::string& pg_dir) {
  storage::EmbeddedPostgres::Options options;
  options.data_dir = pg_dir;
  auto cluster = storage::EmbeddedPostgres::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  std::set<Label> labels;
  {
    pqxx::connection connection((*cluster)->connection_url());
    pqxx::nontransaction txn(connection);
    const pqxx::result rows = txn.exec(absl::StrCat(
        "SELECT i.external_id, a.external_id, n.label FROM annotations n "
        "JOIN projects p ON p.project_id = n.project_id "
        "JOIN items i ON i.project_id = n.project_id AND i.item_index = n.item_index "
        "JOIN annotators a ON a.project_id = n.project_id "
        "AND a.annotator_index = n.annotator_index WHERE p.name = ",
        txn.quote(kProject)));
    for (const auto& row : rows) {
      labels.emplace(row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<int>());
    }
    // No pair is written twice, so nothing can have been revised.
    EXPECT_EQ(txn.exec1("SELECT count(*) FROM annotation_history")[0].as<int64_t>(), 0);
  }
  EXPECT_TRUE((*cluster)->Stop().ok());
  return labels;
}

class GracefulShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("verity-graceful-shutdown");
    ASSERT_FALSE(dir_.empty());
    server_ = std::make_unique<ServerProcess>(RunfilePath("server/verity_server"), dir_);
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  void TearDown() override {
    server_.reset();
    // Should the test have failed with the cluster still up, stop it before removing it.
    if (std::filesystem::exists(pgdata() + "/postmaster.pid")) {
      storage::EmbeddedPostgres::Options options;
      options.data_dir = dir_ + "/var";
      if (auto cluster = storage::EmbeddedPostgres::Start(options); cluster.ok()) {
        (*cluster)->Stop().IgnoreError();
      }
    }
    RemoveTree(dir_);
  }
  // ServerProcess passes --data_dir=<dir>/var; the cluster lives in its pgdata/.
  std::string pgdata() const { return dir_ + "/var/pgdata"; }

  std::string dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(GracefulShutdownTest, SigtermDuringIngestAcksEveryCommittedBatchAndStopsPostgres) {
  client::VerityClient client(client::CreateInsecureChannel(server_->address()), {});
  v1::Project project;
  project.set_name(kProject);
  for (const char* c : {"a", "b", "c"}) project.add_classes(c);
  ASSERT_TRUE(client.CreateProject(project).ok());
  // The postmaster of this data directory runs (so the check after the exit means something).
  ASSERT_FALSE(ProcessesMentioning(pgdata()).empty());
  ASSERT_TRUE(std::filesystem::exists(pgdata() + "/postmaster.pid"));

  // Several streams, each on its own channel, sending until the shutdown stops them.
  AckCounter counter(kStreams);
  std::vector<StreamRecord> records(kStreams);
  std::vector<std::thread> streams;
  for (int s = 0; s < kStreams; ++s) {
    streams.emplace_back([&, s] {
      auto stub = v1::IngestService::NewStub(client::CreateInsecureChannel(server_->address()));
      records[s] = RunStream(*stub, s, counter);
    });
  }
  // Not ASSERT: the streams must still be ended by the shutdown below before the threads go.
  EXPECT_TRUE(counter.AwaitEveryStreamAcked(kAcksBeforeSigterm, absl::Seconds(60)));

  // SIGTERM, and wait for the exit on another thread.
  const absl::Time sigterm_at = absl::Now();
  std::future<absl::Status> exit_status =
      std::async(std::launch::async, [this] { return server_->Stop(); });

  // Once the server has logged the shutdown, a new connection is refused (UNAVAILABLE).
  const absl::Time probe_deadline = absl::Now() + kExitBound;
  while (!absl::StrContains(ReadFile(server_->log_path()), "event=shutdown") &&
         absl::Now() < probe_deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::Status refused;
  while (absl::Now() < probe_deadline) {
    refused = client::VerityClient(NewConnection(server_->address()), {}).ListProjects().status();
    if (!refused.ok()) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;

  if (exit_status.wait_for(absl::ToChronoNanoseconds(sigterm_at + kExitBound - absl::Now())) !=
      std::future_status::ready) {
    ADD_FAILURE() << "verity_server still running " << kExitBound << " after SIGTERM; see "
                  << server_->log_path();
    KillChildServers();
  }
  EXPECT_TRUE(exit_status.get().ok()) << "see " << server_->log_path();
  const absl::Duration exit_time = absl::Now() - sigterm_at;
  EXPECT_LT(exit_time, kExitBound);
  for (std::thread& t : streams) t.join();

  // After the exit: still refused, PostgreSQL stopped, the sequence logged.
  client::VerityClient after_exit(NewConnection(server_->address()), {});
  EXPECT_EQ(after_exit.ListProjects().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(std::filesystem::exists(pgdata() + "/postmaster.pid"));
  EXPECT_THAT(ProcessesMentioning(pgdata()), ::testing::IsEmpty());
  // A clean stop, not a crash: the next start needs no recovery.
  EXPECT_THAT(ControlData(pgdata()),
              ::testing::ContainsRegex("Database cluster state: +shut down\n"));
  const std::string log = ReadFile(server_->log_path());
  const size_t shutdown_at = log.find("event=shutdown signal=15");
  const size_t stopped_at = log.find("event=stopped");
  EXPECT_NE(shutdown_at, std::string::npos) << log;
  EXPECT_NE(stopped_at, std::string::npos) << log;
  EXPECT_LT(shutdown_at, stopped_at) << log;
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("event=fatal")));

  // The acks: in order, each batch at most once; OK ones are complete; once a stream saw an
  // UNAVAILABLE ack, it saw no more OK ones (nothing is committed after the drain).
  std::set<Label> acked_labels;
  int acked_ok = 0, acked_unavailable = 0;
  for (int s = 0; s < kStreams; ++s) {
    const StreamRecord& record = records[s];
    SCOPED_TRACE(absl::StrCat("stream ", s));
    EXPECT_TRUE(record.acks_in_order);
    EXPECT_TRUE(record.status.ok())
        << record.status.error_code() << " " << record.status.error_message();
    // Every batch written got its ack (OK or UNAVAILABLE) before the stream ended.
    EXPECT_EQ(static_cast<int>(record.acks.size()), record.sent);
    bool unavailable_seen = false;
    for (size_t i = 0; i < record.acks.size(); ++i) {
      const v1::BatchAck& ack = record.acks[i];
      EXPECT_EQ(ack.batch_id(), BatchId(s, static_cast<int>(i)));
      if (ack.error_code() == 0) {
        EXPECT_FALSE(unavailable_seen) << "batch " << ack.batch_id() << " acked OK after an "
                                       << "UNAVAILABLE ack";
        EXPECT_EQ(ack.accepted(), kBatchSize) << "batch " << ack.batch_id();
        ++acked_ok;
        for (Label& l : LabelsOf(MakeBatch(s, static_cast<int>(i)))) {
          acked_labels.insert(std::move(l));
        }
      } else {
        EXPECT_EQ(ack.error_code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE))
            << "batch " << ack.batch_id() << ": " << ack.error_message();
        EXPECT_THAT(ack.error_message(), ::testing::HasSubstr("shutting down"));
        unavailable_seen = true;
        ++acked_unavailable;
      }
    }
    // Every batch the server read before the shutdown was acked OK, and the stream saw the
    // shutdown as an UNAVAILABLE ack.
    EXPECT_TRUE(unavailable_seen);
  }

  // The database holds exactly the acked annotations: none acked and lost, none written
  // without an ack.
  const std::set<Label> stored = StoredLabels(dir_ + "/var");
  std::vector<Label> lost, unacked;
  std::set_difference(acked_labels.begin(), acked_labels.end(), stored.begin(), stored.end(),
                      std::back_inserter(lost));
  std::set_difference(stored.begin(), stored.end(), acked_labels.begin(), acked_labels.end(),
                      std::back_inserter(unacked));
  EXPECT_THAT(lost, ::testing::IsEmpty()) << "acked, not stored";
  EXPECT_THAT(unacked, ::testing::IsEmpty()) << "stored, never acked";

  std::cerr << "graceful shutdown: exit " << exit_time << " after SIGTERM; " << acked_ok
            << " batches acked OK, " << acked_unavailable << " UNAVAILABLE; "
            << "new connection refused with " << refused << "\n";
  for (int s = 0; s < kStreams; ++s) {
    std::cerr << "  stream " << s << ": sent " << records[s].sent << ", acks "
              << records[s].acks.size() << ", status " << records[s].status.error_code() << " "
              << records[s].status.error_message() << "\n";
  }
}


// README.md: the embedded PostgreSQL is stopped "when the server stops", and a start on the
// same --data_dir "finds it and reuses it". A second start on that --data_dir that fails (here:
// its --listen port is the running server's) must not stop the cluster of the server that is
// still running: that server's calls would all fail UNAVAILABLE ("connection to PostgreSQL
// lost") until it is restarted.
TEST_F(GracefulShutdownTest, AFailedSecondStartOnTheSameDataDirLeavesTheRunningServerServing) {
  client::VerityClient client(client::CreateInsecureChannel(server_->address()), {});
  v1::Project project;
  project.set_name(kProject);
  for (const char* c : {"a", "b"}) project.add_classes(c);
  ASSERT_TRUE(client.CreateProject(project).ok());

  const std::string second_dir = MakeTempDir("verity-second-start");
  ASSERT_FALSE(second_dir.empty());
  {
    ServerProcess second(RunfilePath("server/verity_server"), second_dir,
                         {"--data_dir=" + dir_ + "/var",
                          "--listen=127.0.0.1:" + std::to_string(server_->port())});
    EXPECT_FALSE(second.Start(absl::Seconds(60)).ok())
        << "a second server started on port " << server_->port();
  }
  RemoveTree(second_dir);

  absl::StatusOr<v1::Project> after = client.GetProject(kProject);
  EXPECT_TRUE(after.ok()) << "the running server after a failed second start: "
                          << after.status();
  v1::Project other;
  other.set_name("after-second-start");
  for (const char* c : {"a", "b"}) other.add_classes(c);
  absl::StatusOr<v1::Project> created = client.CreateProject(other);
  EXPECT_TRUE(created.ok()) << created.status();
}

}  // namespace
}  // namespace verity::tests
