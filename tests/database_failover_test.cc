// Database failover: a primary PostgreSQL with a synchronous standby, the server given both
// hosts (`target_session_attrs=read-write`), and the primary stopped and the standby promoted
// while a client streams labels. Nothing acked is lost, and ingest continues on the promoted
// standby without restarting the server.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/projects.pb.h"

namespace verity::tests {
namespace {

constexpr char kPgBin[] = "/usr/lib/postgresql/15/bin";

std::unique_ptr<storage::EmbeddedPostgres> StartCluster(const std::string& dir) {
  storage::EmbeddedPostgres::Options options;
  options.data_dir = dir;
  options.durable = false;  // An OS crash is not what this test is about.
  auto started = storage::EmbeddedPostgres::Start(options);
  EXPECT_TRUE(started.ok()) << started.status();
  return started.ok() ? std::move(*started) : nullptr;
}

int64_t Count(const std::string& url, const std::string& sql) {
  pqxx::connection connection(url);
  pqxx::nontransaction txn(connection);
  return txn.exec1(sql)[0].as<int64_t>();
}

TEST(DatabaseFailoverTest, IngestContinuesOnThePromotedStandbyAndNothingAckedIsLost) {
  const std::string dir = MakeTempDir("verity-db-failover");
  std::unique_ptr<storage::EmbeddedPostgres> primary = StartCluster(dir + "/primary");
  ASSERT_NE(primary, nullptr);
  const std::string primary_url = primary->connection_url();

  // The standby: a base backup (as the OS user that owns the clusters) that streams from the
  // primary; the primary then waits for it at every commit.
  ASSERT_EQ(mkdir((dir + "/standby").c_str(), 0700), 0);
  const std::string as_postgres = geteuid() == 0 ? "runuser -u postgres -- " : "";
  if (geteuid() == 0) {
    ASSERT_EQ(std::system(absl::StrCat("chown postgres: ", dir, "/standby").c_str()), 0);
  }
  const std::string primary_socket = dir + "/primary/run";
  ASSERT_EQ(std::system(absl::StrCat(as_postgres, kPgBin, "/pg_basebackup -D ", dir,
                                     "/standby/pgdata -R -X stream -c fast -d 'host=", primary_socket,
                                     " port=5432 user=verity application_name=standby1'")
                            .c_str()),
            0);
  std::unique_ptr<storage::EmbeddedPostgres> standby = StartCluster(dir + "/standby");
  ASSERT_NE(standby, nullptr);
  {
    pqxx::connection connection(primary_url);
    pqxx::nontransaction txn(connection);
    txn.exec("ALTER SYSTEM SET synchronous_standby_names = '*'");
    txn.exec("SELECT pg_reload_conf()");
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (Count(primary_url,
               "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") == 0) {
    ASSERT_LT(absl::Now(), give_up) << "the standby never became synchronous";
    absl::SleepFor(absl::Milliseconds(50));
  }

  // The server knows both hosts; libpq connects to whichever accepts writes.
  server::VerityServer::Options options;
  options.listen = "127.0.0.1:0";
  options.postgres_url = absl::StrCat("host=", primary_socket, ",", dir,
                                      "/standby/run port=5432,5432 dbname=verity user=verity "
                                      "target_session_attrs=read-write");
  options.pool_size = 4;
  options.db_timeout = absl::Seconds(5);
  options.training.run_in_background = false;
  auto server = server::VerityServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  client::ClientOptions client_options;
  client_options.deadline = absl::Seconds(30);
  client::VerityClient client(channel, client_options);
  v1::Project project;
  project.set_name("failover");
  for (const char* c : {"a", "b", "c"}) project.add_classes(c);
  ASSERT_TRUE(client.CreateProject(project).ok());

  std::vector<v1::Annotation> annotations;
  for (int i = 0; i < 3000; ++i) {
    for (int j = 0; j < 3; ++j) {
      v1::Annotation& a = annotations.emplace_back();
      a.set_item(absl::StrCat("item-", i));
      a.set_annotator(absl::StrCat("annotator-", (i + j * 7) % 40));
      a.set_label((i + j) % 3);
    }
  }
  const int64_t total = static_cast<int64_t>(annotations.size());
  bool failed_over = false;
  client::SubmitOptions submit;
  submit.batch_size = 300;
  submit.max_retries = 20;
  submit.max_backoff = absl::Seconds(1);
  submit.on_progress = [&](const client::SubmitProgress& progress) {
    if (failed_over || progress.acked < total / 3) return;
    failed_over = true;
    const absl::Time start = absl::Now();
    primary.reset();  // Stops the primary (fast shutdown).
    const absl::Time stopped = absl::Now();
    pqxx::connection connection(standby->connection_url());
    pqxx::nontransaction txn(connection);
    txn.exec("SELECT pg_promote(true, 60)");
    std::cerr << "failover after " << progress.acked << " acked labels: primary stopped in "
              << absl::FormatDuration(stopped - start) << ", standby promoted in "
              << absl::FormatDuration(absl::Now() - stopped) << "\n";
  };
  const absl::Time submit_start = absl::Now();
  absl::StatusOr<client::SubmitTotals> totals =
      client.SubmitAnnotations("failover", annotations, submit);
  std::cerr << "submit took " << absl::FormatDuration(absl::Now() - submit_start) << "\n";
  ASSERT_TRUE(totals.ok()) << totals.status();
  ASSERT_TRUE(failed_over);
  EXPECT_EQ(totals->accepted + totals->duplicate, total);

  // Every label is in the promoted standby, and the server (never restarted) serves them all.
  EXPECT_EQ(Count(standby->connection_url(), "SELECT count(*) FROM annotations"), total);
  absl::StatusOr<v1::Project> served = client.GetProject("failover");
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->num_labels(), total);

  // And it keeps ingesting.
  std::vector<v1::Annotation> more(1);
  more[0].set_item("after-failover");
  more[0].set_annotator("annotator-0");
  more[0].set_label(1);
  absl::StatusOr<client::SubmitTotals> after = client.SubmitAnnotations("failover", more, submit);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->accepted, 1);
  (*server)->Shutdown();
  server->reset();
  standby.reset();
  RemoveTree(dir);
}

}  // namespace
}  // namespace verity::tests
