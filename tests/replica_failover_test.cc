// Clients that fail over (issue 19, point 5): real verity_server processes over one PostgreSQL
// database, and clients configured with all of their addresses.
//
//  - The C++ client, given three replicas, streams labels while the replica holding the stream
//    is killed with SIGKILL mid-stream: the call completes, every label is in PostgreSQL with
//    its value, the totals count each label once (accepted + duplicate, nothing lost), both
//    survivors serve every label (they follow each other), and unary calls made throughout
//    never fail.
//  - The `verity` CLI with --server=a,b keeps working when one of the two has been killed.
//  - TLS: a channel to two replicas checks their certificates against the first host's name.
//
// Each server is started after the project exists, so that every one knows it.
#include <grpcpp/grpcpp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/verity_client.h"
#include "server/testing/http_get.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/projects.pb.h"

namespace verity::tests {
namespace {

using ::testing::HasSubstr;

constexpr int kItems = 3000;
constexpr int kLabelsPerItem = 8;  // Annotators per item: 24,000 labels in all.
constexpr int kBatchSize = 200;    // 120 batches.

class ReplicaFailoverTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    postgres_ = TestPostgres::Start("verity-replica-failover").release();
  }
  static void TearDownTestSuite() {
    delete postgres_;
    postgres_ = nullptr;
  }

  void SetUp() override { ASSERT_NE(postgres_, nullptr); }

  // A verity_server process on the suite's database, listening on 127.0.0.1.
  std::unique_ptr<ServerProcess> StartReplica(std::vector<std::string> extra_flags = {}) {
    const std::string dir = MakeTempDir("verity-replica");
    dirs_.push_back(dir);
    extra_flags.push_back("--postgres_url=" + postgres_->url());
    // Each replica its own metrics port (see Holds()); 0 would turn them off.
    extra_flags.push_back(absl::StrCat("--metrics_port=", FreeLoopbackPort()));
    auto replica = std::make_unique<ServerProcess>(RunfilePath("server/verity_server"), dir,
                                                   std::move(extra_flags));
    const absl::Status started = replica->Start();
    EXPECT_TRUE(started.ok()) << started;
    return started.ok() ? std::move(replica) : nullptr;
  }

  void TearDown() override {
    for (const std::string& dir : dirs_) RemoveTree(dir);
  }

  // A TCP port on 127.0.0.1 that nothing listens on right now.
  static int FreeLoopbackPort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof(address);
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port = ntohs(address.sin_port);
    }
    close(fd);
    return port;
  }

  // The metrics port `replica` logged when it started listening.
  static int MetricsPort(const ServerProcess& replica) {
    std::ifstream log(replica.log_path());
    std::string line;
    while (std::getline(log, line)) {
      if (!absl::StrContains(line, "event=listening")) continue;
      const size_t at = line.find(" metrics_port=");
      int port = 0;
      if (at != std::string::npos &&
          absl::SimpleAtoi(line.substr(at + 14, line.find(' ', at + 1) - at - 14), &port)) {
        return port;
      }
    }
    return 0;
  }

  // Whether `replica` committed ingest batches: the replica the stream went to. (Every replica
  // serves the labels, since they follow each other; only the holder counts batches.)
  static bool Holds(const ServerProcess& replica) {
    absl::StatusOr<verity::testing::HttpResponse> metrics =
        verity::testing::HttpGet(MetricsPort(replica), "/metrics");
    if (!metrics.ok()) return false;
    for (absl::string_view line : absl::StrSplit(metrics->body, '\n')) {
      double value = 0;
      if (absl::ConsumePrefix(&line, "verity_ingest_batches_total ") &&
          absl::SimpleAtod(line, &value)) {
        return value > 0;
      }
    }
    return false;
  }

  static client::VerityClient ClientOf(const std::string& servers) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        client::CreateChannel(servers, client::ChannelSecurity());
    EXPECT_TRUE(channel.ok()) << channel.status();
    client::ClientOptions options;
    options.deadline = absl::Seconds(20);
    return client::VerityClient(*channel, options);
  }

  static v1::Project Project(const std::string& name) {
    v1::Project project;
    project.set_name(name);
    for (const char* c : {"a", "b", "c"}) project.add_classes(c);
    return project;
  }

  // Live labels of `project` in PostgreSQL, by "item/annotator".
  static absl::flat_hash_map<std::string, int> LabelsInPostgres(const std::string& project) {
    pqxx::connection sql(postgres_->url());
    pqxx::work txn(sql);
    absl::flat_hash_map<std::string, int> labels;
    for (const pqxx::row& row : txn.exec_params(
             "SELECT i.external_id, a.external_id, n.label FROM annotations n "
             "JOIN projects p ON p.project_id = n.project_id "
             "JOIN items i ON i.project_id = n.project_id AND i.item_index = n.item_index "
             "JOIN annotators a ON a.project_id = n.project_id "
             "  AND a.annotator_index = n.annotator_index "
             "WHERE p.name = $1",
             project)) {
      labels[absl::StrCat(row[0].as<std::string>(), "/", row[1].as<std::string>())] =
          row[2].as<int>();
    }
    return labels;
  }

  static int64_t CountInPostgres(const std::string& project) {
    pqxx::connection sql(postgres_->url());
    pqxx::work txn(sql);
    return txn.exec_params1("SELECT count(*) FROM annotations n JOIN projects p "
                            "ON p.project_id = n.project_id WHERE p.name = $1",
                            project)[0]
        .as<int64_t>();
  }

  static TestPostgres* postgres_;
  std::vector<std::string> dirs_;
};

TestPostgres* ReplicaFailoverTest::postgres_ = nullptr;

std::vector<v1::Annotation> Annotations() {
  std::vector<v1::Annotation> annotations;
  annotations.reserve(kItems * kLabelsPerItem);
  for (int i = 0; i < kItems; ++i) {
    for (int j = 0; j < kLabelsPerItem; ++j) {
      v1::Annotation& a = annotations.emplace_back();
      a.set_item(absl::StrCat("item-", i));
      a.set_annotator(absl::StrCat("worker-", (i * 7 + j * 13) % 61));
      a.set_label((i + j) % 3);
    }
  }
  return annotations;
}

TEST_F(ReplicaFailoverTest, StreamFinishesOnTheSurvivorWhenItsReplicaIsKilled) {
  std::unique_ptr<ServerProcess> first = StartReplica();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(ClientOf(first->address()).CreateProject(Project("failover")).ok());
  std::unique_ptr<ServerProcess> second = StartReplica();
  ASSERT_NE(second, nullptr);
  std::unique_ptr<ServerProcess> third = StartReplica();
  ASSERT_NE(third, nullptr);
  ServerProcess* replicas[] = {first.get(), second.get(), third.get()};

  const std::string all = absl::StrCat(first->address(), ",", second->address(), ",",
                                       third->address());
  client::VerityClient client = ClientOf(all);

  // Unary calls through the list, all along: none may fail.
  std::atomic<bool> done{false};
  std::atomic<int> unary_calls{0};
  absl::Mutex mu;
  std::vector<std::string> unary_failures;
  std::thread reader([&] {
    while (!done.load()) {
      absl::StatusOr<v1::Project> project = client.GetProject("failover");
      absl::StatusOr<std::vector<v1::Project>> projects = client.ListProjects();
      unary_calls += 2;
      absl::MutexLock lock(&mu);
      if (!project.ok()) unary_failures.push_back(project.status().ToString());
      if (!projects.ok()) unary_failures.push_back(projects.status().ToString());
      if (projects.ok() && projects->empty()) unary_failures.push_back("no projects listed");
    }
  });

  const std::vector<v1::Annotation> annotations = Annotations();
  const int64_t total = static_cast<int64_t>(annotations.size());
  ServerProcess* holder = nullptr;  // The replica the stream went to.
  ServerProcess* killed = nullptr;
  absl::Time killed_at, broken_at, resumed_at;
  int64_t acked_at_kill = 0;
  client::SubmitOptions options;
  options.batch_size = kBatchSize;
  options.on_progress = [&](const client::SubmitProgress& progress) {
    if (holder == nullptr) {
      for (ServerProcess* replica : replicas) {
        if (Holds(*replica)) holder = replica;
      }
      ASSERT_NE(holder, nullptr);
    } else if (killed == nullptr && progress.acked >= total / 3) {
      // Kill once the holder has committed batches this callback has not seen acked yet (the
      // client reads no ack while it runs), so that some committed labels lose their ack.
      const absl::Time give_up = absl::Now() + absl::Seconds(5);
      while (CountInPostgres("failover") <= progress.acked && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      holder->Kill();
      killed = holder;
      killed_at = absl::Now();
      acked_at_kill = progress.acked;
    } else if (broken_at != absl::InfinitePast() && resumed_at == absl::InfinitePast()) {
      resumed_at = absl::Now();  // The first ack of the reopened stream.
    }
  };
  broken_at = resumed_at = absl::InfinitePast();
  // Called for the back-off once the broken stream has ended.
  options.sleep = [&](absl::Duration backoff) {
    if (killed != nullptr && broken_at == absl::InfinitePast()) broken_at = absl::Now();
    absl::SleepFor(backoff);
  };
  absl::StatusOr<client::SubmitTotals> totals =
      client.SubmitAnnotations("failover", annotations, options);
  done = true;
  reader.join();

  ASSERT_TRUE(totals.ok()) << totals.status();
  ASSERT_NE(killed, nullptr);
  EXPECT_GE(totals->retries, 1);
  // Each label counted once: new, or a duplicate of what the dead replica committed without
  // acking. Nothing lost, nothing revised or rejected.
  EXPECT_EQ(totals->accepted + totals->duplicate, total);
  EXPECT_EQ(totals->revised, 0);
  EXPECT_EQ(totals->rejected, 0);
  ASSERT_NE(broken_at, absl::InfinitePast());
  ASSERT_NE(resumed_at, absl::InfinitePast());
  std::cerr << "killed the replica on port " << killed->port() << " after " << acked_at_kill
            << " acked labels; stream ended " << absl::FormatDuration(broken_at - killed_at)
            << " later, first ack of the reopened stream (after the back-off of "
            << absl::FormatDuration(options.initial_backoff) << ") "
            << absl::FormatDuration(resumed_at - killed_at) << " after the kill; accepted=" << totals->accepted << " duplicate=" << totals->duplicate
            << " retries=" << totals->retries << "; unary calls=" << unary_calls.load() << "\n";

  // Every label (all acked, as the call succeeded) is durable with its value.
  const absl::flat_hash_map<std::string, int> stored = LabelsInPostgres("failover");
  EXPECT_EQ(stored.size(), annotations.size());
  int missing_or_wrong = 0;
  for (const v1::Annotation& a : annotations) {
    auto it = stored.find(absl::StrCat(a.item(), "/", a.annotator()));
    if (it == stored.end() || it->second != a.label()) ++missing_or_wrong;
  }
  EXPECT_EQ(missing_or_wrong, 0);

  // The survivors serve every label, those the dead replica acked included: they followed them.
  for (ServerProcess* survivor : replicas) {
    if (survivor == killed) continue;
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    int64_t served = 0;
    while (absl::Now() < give_up) {
      absl::StatusOr<v1::Project> seen = ClientOf(survivor->address()).GetProject("failover");
      ASSERT_TRUE(seen.ok()) << seen.status();
      served = seen->num_labels();
      if (served == total) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(served, total) << "replica on port " << survivor->port();
  }

  // Resending everything to the survivor changes nothing: PostgreSQL decides what is a
  // duplicate.
  client::SubmitOptions resend;
  resend.batch_size = kBatchSize;
  absl::StatusOr<client::SubmitTotals> again =
      client.SubmitAnnotations("failover", annotations, resend);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->accepted, 0);
  EXPECT_EQ(again->duplicate, total);
  EXPECT_EQ(LabelsInPostgres("failover").size(), annotations.size());

  {
    absl::MutexLock lock(&mu);
    EXPECT_THAT(unary_failures, ::testing::IsEmpty());
  }
  EXPECT_GT(unary_calls.load(), 0);
  // And after the kill, through the survivor alone.
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<v1::Project> project = client.GetProject("failover");
    ASSERT_TRUE(project.ok()) << project.status();
    EXPECT_EQ(project->name(), "failover");
  }
}

TEST_F(ReplicaFailoverTest, CliWithTwoServersWorksWhenOneIsKilled) {
  std::unique_ptr<ServerProcess> first = StartReplica();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(ClientOf(first->address()).CreateProject(Project("cli-failover")).ok());
  std::unique_ptr<ServerProcess> second = StartReplica();
  ASSERT_NE(second, nullptr);
  const std::string servers = absl::StrCat("--server=", first->address(), ",", second->address());
  first->Kill();

  const std::string csv = dirs_.front() + "/labels.csv";
  {
    std::ofstream out(csv);
    out << "item,annotator,label\n";
    for (int i = 0; i < 50; ++i) out << "cli-item-" << i << ",w" << i % 5 << "," << "abc"[i % 3] << "\n";
  }
  auto run = [](std::vector<std::string> args) {
    std::ostringstream out, err;
    const int code = client::RunCli(args, out, err);
    return std::make_tuple(code, out.str(), err.str());
  };
  for (int i = 0; i < 5; ++i) {
    auto [code, out, err] = run({"project", "list", servers});
    ASSERT_EQ(code, client::kExitOk) << err;
    EXPECT_THAT(out, HasSubstr("cli-failover"));
  }
  auto [code, out, err] = run({"submit", "--project=cli-failover", "--csv=" + csv, servers});
  ASSERT_EQ(code, client::kExitOk) << err;
  EXPECT_EQ(out, "accepted=50 duplicate=0 revised=0 stale=0 rejected=0\n");
  EXPECT_EQ(LabelsInPostgres("cli-failover").size(), 50u);
}

// Certificates name "localhost" only: with two replicas behind "localhost:p1,localhost:p2"
// (resolved to 127.0.0.1 addresses) the client still checks them against "localhost".
TEST_F(ReplicaFailoverTest, TlsToSeveralReplicasChecksTheFirstHostsName) {
  const std::string d = MakeTempDir("verity-replica-tls");
  dirs_.push_back(d);
  const std::string script = absl::StrCat(
      "set -e; cd ", d, "; ",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
      "  -subj /CN=verity-test-ca 2>/dev/null; ",
      "printf 'subjectAltName=DNS:localhost' > san.ext; ",
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
      "  -subj /CN=localhost 2>/dev/null; ",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "  -out server.pem -days 2 -extfile san.ext 2>/dev/null");
  ASSERT_EQ(std::system(("bash -c '" + script + "'").c_str()), 0) << "openssl failed";
  const std::vector<std::string> tls = {"--tls_cert=" + d + "/server.pem",
                                        "--tls_key=" + d + "/server.key"};
  std::unique_ptr<ServerProcess> first = StartReplica(tls);
  ASSERT_NE(first, nullptr);
  std::unique_ptr<ServerProcess> second = StartReplica(tls);
  ASSERT_NE(second, nullptr);
  // The replicas listen on 127.0.0.1; "localhost" is the name the certificates carry.
  const std::string both =
      absl::StrCat("localhost:", first->port(), ",localhost:", second->port());

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      client::CreateChannel(both, {d + "/ca.pem", "", ""});
  ASSERT_TRUE(channel.ok()) << channel.status();
  client::VerityClient client(*channel, {});
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::vector<v1::Project>> projects = client.ListProjects();
    EXPECT_TRUE(projects.ok()) << projects.status();
  }
  first->Kill();
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::vector<v1::Project>> projects = client.ListProjects();
    EXPECT_TRUE(projects.ok()) << projects.status();
  }
  // A client that does not trust the CA gets nowhere (the handshake is really checked).
  absl::StatusOr<std::shared_ptr<grpc::Channel>> plaintext =
      client::CreateChannel(both, client::ChannelSecurity());
  ASSERT_TRUE(plaintext.ok());
  client::ClientOptions short_deadline;
  short_deadline.deadline = absl::Seconds(5);
  EXPECT_EQ(client::VerityClient(*plaintext, short_deadline).ListProjects().status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace verity::tests
