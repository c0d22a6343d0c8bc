#include "storage/embedded_postgres.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/connection"
#include "pqxx/except"
#include "pqxx/nontransaction"
#include "pqxx/result"
#include "storage/testing/temp_dir.h"

namespace verity {
namespace storage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::verity::storage::testing::TempDir;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

EmbeddedPostgres::Options TestOptions(const std::string& data_dir) {
  EmbeddedPostgres::Options options;
  options.data_dir = data_dir;
  options.durable = false;
  options.shared_buffers = "16MB";
  return options;
}

std::string QueryOne(const std::string& url, const std::string& sql) {
  pqxx::connection conn(url);
  pqxx::nontransaction txn(conn);
  return txn.exec1(sql)[0].as<std::string>();
}

void Exec(const std::string& url, const std::string& sql) {
  pqxx::connection conn(url);
  pqxx::nontransaction txn(conn);
  txn.exec0(sql);
}

class EmbeddedPostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TempDir> dir = TempDir::Create("verity-embedded-pg-test-");
    ASSERT_THAT(dir, IsOk());
    dir_ = std::make_unique<TempDir>(*std::move(dir));
    data_dir_ = dir_->path() + "/data";
  }

  std::unique_ptr<TempDir> dir_;
  std::string data_dir_;
};

TEST_F(EmbeddedPostgresTest, StartsServesOnlyAUnixSocketAndStops) {
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> pg =
      EmbeddedPostgres::Start(TestOptions(data_dir_));
  ASSERT_THAT(pg, IsOk());
  const std::string url = (*pg)->connection_url();
  EXPECT_THAT(url, HasSubstr((*pg)->socket_dir()));
  EXPECT_EQ((*pg)->socket_dir(), data_dir_ + "/run");
  EXPECT_FALSE((*pg)->reused_running_server());

  EXPECT_EQ(QueryOne(url, "SELECT current_database()"), "verity");
  EXPECT_EQ(QueryOne(url, "SELECT current_user"), "verity");
  EXPECT_EQ(QueryOne(url, "SHOW listen_addresses"), "");
  EXPECT_EQ(QueryOne(url, "SHOW server_encoding"), "UTF8");

  struct stat st;
  ASSERT_EQ(::stat((*pg)->socket_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);

  EXPECT_THAT((*pg)->Stop(), IsOk());
  EXPECT_THROW(pqxx::connection{url}, pqxx::broken_connection);
  EXPECT_THAT((*pg)->Stop(), IsOk());  // Idempotent.
}

TEST_F(EmbeddedPostgresTest, RestartOnSameDirectoryKeepsData) {
  std::string url;
  {
    absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> pg =
        EmbeddedPostgres::Start(TestOptions(data_dir_));
    ASSERT_THAT(pg, IsOk());
    url = (*pg)->connection_url();
    Exec(url, "CREATE TABLE kept (v text)");
    Exec(url, "INSERT INTO kept VALUES ('still here')");
    ASSERT_THAT((*pg)->Stop(), IsOk());
  }
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> pg =
      EmbeddedPostgres::Start(TestOptions(data_dir_));
  ASSERT_THAT(pg, IsOk());
  EXPECT_FALSE((*pg)->reused_running_server());
  EXPECT_EQ((*pg)->connection_url(), url);
  EXPECT_EQ(QueryOne(url, "SELECT v FROM kept"), "still here");
}

// Options::exclusive: while one owner holds the data directory, a second exclusive start fails
// FAILED_PRECONDITION naming the holder's pid, and neither starts nor stops anything (the first
// owner's cluster keeps serving). Once the first owner has stopped, the directory is free.
TEST_F(EmbeddedPostgresTest, AnExclusiveOwnerKeepsASecondOneOut) {
  EmbeddedPostgres::Options options = TestOptions(data_dir_);
  options.exclusive = true;
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> first = EmbeddedPostgres::Start(options);
  ASSERT_THAT(first, IsOk());
  const std::string url = (*first)->connection_url();
  {
    absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> second = EmbeddedPostgres::Start(options);
    EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 HasSubstr(absl::StrCat("in use by process ", ::getpid()))));
  }
  EXPECT_EQ(QueryOne(url, "SELECT current_database()"), "verity");
  ASSERT_THAT((*first)->Stop(), IsOk());
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> again = EmbeddedPostgres::Start(options);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(QueryOne(url, "SELECT current_database()"), "verity");
}

TEST_F(EmbeddedPostgresTest, ReusesServerLeftRunningByAKilledProcess) {
  // The first object plays a process that was SIGKILLed: it never stops the
  // postmaster, and a new process starts on the same directory.
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> first =
      EmbeddedPostgres::Start(TestOptions(data_dir_));
  ASSERT_THAT(first, IsOk());
  Exec((*first)->connection_url(), "CREATE TABLE t (v int)");
  Exec((*first)->connection_url(), "INSERT INTO t VALUES (42)");

  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> second =
      EmbeddedPostgres::Start(TestOptions(data_dir_));
  ASSERT_THAT(second, IsOk());
  EXPECT_TRUE((*second)->reused_running_server());
  EXPECT_EQ(QueryOne((*second)->connection_url(), "SELECT v FROM t"), "42");

  EXPECT_THAT((*second)->Stop(), IsOk());
  // The server is gone; stopping through the first object still succeeds.
  EXPECT_THAT((*first)->Stop(), IsOk());
}

int PostmasterPid(const std::string& data_dir) {
  std::ifstream in(data_dir + "/pgdata/postmaster.pid");
  int pid = 0;
  in >> pid;
  return pid;
}

bool ProcessGone(int pid) {
  if (::kill(pid, 0) != 0) return true;
  // A zombie awaiting its reaper counts as gone.
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string pid_field, comm, state;
  stat >> pid_field >> comm >> state;
  return state == "Z";
}

TEST_F(EmbeddedPostgresTest, StartsAfterThePostmasterWasKilled) {
  std::string url;
  {
    absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> pg =
        EmbeddedPostgres::Start(TestOptions(data_dir_));
    ASSERT_THAT(pg, IsOk());
    url = (*pg)->connection_url();
    Exec(url, "CREATE TABLE t (v int)");
    Exec(url, "INSERT INTO t VALUES (7)");
    const int pid = PostmasterPid(data_dir_);
    ASSERT_GT(pid, 0);
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!ProcessGone(pid) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(ProcessGone(pid));
  }  // The destructor finds no server to stop.
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> pg =
      EmbeddedPostgres::Start(TestOptions(data_dir_));
  ASSERT_THAT(pg, IsOk());
  EXPECT_EQ(QueryOne(url, "SELECT v FROM t"), "7");
}

TEST_F(EmbeddedPostgresTest, LongDataDirectoryPutsSocketUnderTmp) {
  const std::string long_dir =
      absl::StrCat(dir_->path(), "/", std::string(60, 'a'), "/",
                   std::string(60, 'b'), "/data");
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> pg =
      EmbeddedPostgres::Start(TestOptions(long_dir));
  ASSERT_THAT(pg, IsOk());
  EXPECT_THAT((*pg)->socket_dir(), StartsWith("/tmp/verity-pg-"));
  EXPECT_EQ(QueryOne((*pg)->connection_url(), "SELECT 1"), "1");
  const std::string socket_dir = (*pg)->socket_dir();
  EXPECT_THAT((*pg)->Stop(), IsOk());
  ::rmdir(socket_dir.c_str());
}

TEST_F(EmbeddedPostgresTest, RejectsMissingDataDir) {
  EXPECT_THAT(EmbeddedPostgres::Start(TestOptions("")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("data_dir")));
}

TEST_F(EmbeddedPostgresTest, ExplainsADataDirTheServerUserCannotReach) {
  if (::geteuid() != 0) {
    // Only root runs the server as another user; an ordinary user can
    // always reach its own directories, but may not pick another user.
    EmbeddedPostgres::Options options = TestOptions(data_dir_);
    options.os_user = "root";
    EXPECT_THAT(EmbeddedPostgres::Start(options),
                StatusIs(absl::StatusCode::kInvalidArgument));
    return;
  }
  const std::string private_dir = dir_->path() + "/private";
  ASSERT_EQ(::mkdir(private_dir.c_str(), 0700), 0);
  EXPECT_THAT(
      EmbeddedPostgres::Start(TestOptions(private_dir + "/data")),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               ::testing::AllOf(HasSubstr("cannot traverse " + private_dir),
                                HasSubstr("--data_dir"))));
}

// README.md ("make run"): the next start on a --data_dir whose PostgreSQL a killed server left
// running reuses it, and "the log says `embedded PostgreSQL (reused running server ...)`"; the
// log also says where the data lives. A first start says it started the server.
TEST_F(EmbeddedPostgresTest, TheLogSaysWhetherItStartedOrReusedTheServer) {
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> first =
      EmbeddedPostgres::Start(TestOptions(data_dir_));
  const std::string first_log = ::testing::internal::GetCapturedStderr();
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(first_log, HasSubstr("embedded PostgreSQL (started, pid "));
  EXPECT_THAT(first_log, Not(HasSubstr("reused running server")));
  EXPECT_THAT(first_log, HasSubstr(absl::StrCat("data in ", data_dir_)));

  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> second =
      EmbeddedPostgres::Start(TestOptions(data_dir_));
  const std::string second_log = ::testing::internal::GetCapturedStderr();
  ASSERT_THAT(second, IsOk());
  EXPECT_THAT(second_log, HasSubstr("embedded PostgreSQL (reused running server, pid "));
  EXPECT_THAT((*second)->Stop(), IsOk());
  EXPECT_THAT((*first)->Stop(), IsOk());
}

// EmbeddedPostgres::Start: a start that reused a running server and then failed leaves that
// server alone (it did not start it). The first object's server has no "postgres" database
// any more, so the second start finds it running and answering, reuses it, and fails creating
// the verity database (it connects to "postgres" for that); the first's server still serves.
TEST_F(EmbeddedPostgresTest, AStartThatReusedAServerAndFailedLeavesItRunning) {
  absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> first =
      EmbeddedPostgres::Start(TestOptions(data_dir_));
  ASSERT_THAT(first, IsOk());
  const std::string url = (*first)->connection_url();
  Exec(url, "ALTER DATABASE postgres RENAME TO postgres_elsewhere");
  {
    absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> second =
        EmbeddedPostgres::Start(TestOptions(data_dir_));
    EXPECT_THAT(second.status().message(), HasSubstr("creating the verity database"));
  }
  EXPECT_EQ(QueryOne(url, "SELECT current_database()"), "verity");
  EXPECT_THAT((*first)->Stop(), IsOk());
}

}  // namespace
}  // namespace storage
}  // namespace verity
