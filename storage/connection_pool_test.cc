#include "storage/connection_pool.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/except"
#include "pqxx/nontransaction"
#include "pqxx/result"
#include "storage/testing/postgres_fixture.h"

namespace verity {
namespace storage {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

class ConnectionPoolTest : public PostgresTest {
 protected:
  // Runs `sql` in its own transaction on `p`.
  absl::Status Exec(ConnectionPool& p, const std::string& sql) {
    return p.RunInTransaction("test", [&](pqxx::work& txn) {
      txn.exec(sql);
      return absl::OkStatus();
    });
  }

  absl::StatusOr<int64_t> Count(ConnectionPool& p, const std::string& table) {
    return p.WithTransaction(
        "count", [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
          return txn.exec1("SELECT count(*) FROM " + table)[0].as<int64_t>();
        });
  }
};

TEST_F(ConnectionPoolTest, CreateRejectsBadOptions) {
  ConnectionPool::Options options;
  EXPECT_THAT(ConnectionPool::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("url")));
  options.url = url();
  options.size = 0;
  EXPECT_THAT(ConnectionPool::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size")));
  options.size = 1;
  options.db_timeout = absl::Milliseconds(500);
  EXPECT_THAT(ConnectionPool::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("db_timeout")));
  options.db_timeout = absl::Seconds(1);
  options.url = "host='unterminated";
  EXPECT_THAT(ConnectionPool::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("url")));
}

// Reads a server setting on `p`.
absl::StatusOr<std::string> Show(ConnectionPool& p, const std::string& setting) {
  return p.WithTransaction("show", [&](pqxx::work& txn) -> absl::StatusOr<std::string> {
    return txn.exec1("SHOW " + setting)[0].as<std::string>();
  });
}

TEST_F(ConnectionPoolTest, ConnectionsRunUnderTheDatabaseTimeout) {
  ConnectionPool::Options options;
  options.url = url();
  options.db_timeout = absl::Seconds(3);
  auto p = ConnectionPool::Create(options);
  ASSERT_THAT(p, IsOk());
  EXPECT_THAT(Show(**p, "statement_timeout"), IsOkAndHolds("3s"));
  EXPECT_THAT(Show(**p, "lock_timeout"), IsOkAndHolds("3s"));
  EXPECT_THAT(Show(**p, "idle_in_transaction_session_timeout"), IsOkAndHolds("3s"));
  // Settings the url gives itself win.
  options.url = url() + " options='-c statement_timeout=7s' connect_timeout=9";
  auto own = ConnectionPool::Create(options);
  ASSERT_THAT(own, IsOk());
  EXPECT_THAT(Show(**own, "statement_timeout"), IsOkAndHolds("7s"));
  EXPECT_THAT(Show(**own, "lock_timeout"), IsOkAndHolds("3s"));
}

TEST_F(ConnectionPoolTest, ATransactionThatOutlivesTheDatabaseTimeoutFailsUnavailable) {
  ConnectionPool::Options options;
  options.url = url();
  options.db_timeout = absl::Seconds(1);
  auto p = ConnectionPool::Create(options);
  ASSERT_THAT(p, IsOk());
  // The server would wait forever (no statement timeout here, as when it is stopped); the
  // pool's watchdog gives up on the bound and closes the connection.
  const absl::Time before = absl::Now();
  EXPECT_THAT(Exec(**p, "SET LOCAL statement_timeout = 0; SELECT pg_sleep(60)"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("did not answer within db_timeout 1s")));
  const absl::Duration took = absl::Now() - before;
  EXPECT_GE(took, absl::Seconds(1));
  EXPECT_LT(took, absl::Seconds(10));  // one bound (no retry), with a margin for a busy machine
  // The pool goes on with a new connection.
  EXPECT_THAT(Exec(**p, "SELECT 1"), IsOk());
}

TEST_F(ConnectionPoolTest, ReusesConnectionsUpToItsSize) {
  std::unique_ptr<ConnectionPool> p = NewPool(/*size=*/2);
  EXPECT_EQ(p->open_connections(), 0);  // Lazy.
  for (int i = 0; i < 5; ++i) ASSERT_THAT(Exec(*p, "SELECT 1"), IsOk());
  EXPECT_EQ(p->open_connections(), 1);

  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) EXPECT_THAT(Exec(*p, "SELECT 1"), IsOk());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(p->open_connections(), 2);
}

TEST_F(ConnectionPoolTest, ClosesTheConnectionAfterwardsWhenAsked) {
  std::unique_ptr<ConnectionPool> p = NewPool(/*size=*/2);
  ASSERT_THAT(Exec(*p, "CREATE TABLE blobs (b bytea)"), IsOk());
  EXPECT_EQ(p->open_connections(), 1);
  ASSERT_THAT(p->RunInTransaction(
                  "large insert",
                  [](pqxx::work& txn) {
                    const std::string blob(1 << 20, 'x');
                    txn.exec_params("INSERT INTO blobs VALUES ($1)",
                                    pqxx::binarystring(blob.data(), blob.size()));
                    return absl::OkStatus();
                  },
                  ConnectionPool::After::kClose),
              IsOk());
  EXPECT_EQ(p->open_connections(), 0);  // Committed, then closed, not pooled.
  EXPECT_THAT(Count(*p, "blobs"), IsOkAndHolds(1));
  EXPECT_EQ(p->open_connections(), 1);
}

TEST_F(ConnectionPoolTest, AcquireTimesOutWhenAllConnectionsAreInUse) {
  std::unique_ptr<ConnectionPool> p = NewPool(/*size=*/1);
  {
    absl::StatusOr<PooledConnection> held = p->Acquire();
    ASSERT_THAT(held, IsOk());
    EXPECT_THAT(p->Acquire(absl::Milliseconds(20)),
                StatusIs(absl::StatusCode::kDeadlineExceeded));
    // Moving the handle keeps the connection borrowed.
    PooledConnection moved = *std::move(held);
    EXPECT_THAT(p->Acquire(absl::Milliseconds(20)),
                StatusIs(absl::StatusCode::kDeadlineExceeded));
  }  // Returned here.
  EXPECT_THAT(p->Acquire(absl::Milliseconds(20)), IsOk());
  EXPECT_EQ(p->open_connections(), 1);
}

TEST_F(ConnectionPoolTest, RollsBackWhenTheFunctionFails) {
  ASSERT_THAT(Exec(pool(), "CREATE TABLE t (v int PRIMARY KEY)"), IsOk());
  absl::Status status = pool().RunInTransaction("insert", [](pqxx::work& txn) {
    txn.exec0("INSERT INTO t VALUES (1)");
    return absl::InvalidArgumentError("changed my mind");
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               "changed my mind"));
  EXPECT_EQ(*Count(pool(), "t"), 0);
}

TEST_F(ConnectionPoolTest, ConvertsSqlErrorsToStatusCodes) {
  ASSERT_THAT(Exec(pool(), "CREATE TABLE t (v int PRIMARY KEY CHECK (v > 0))"),
              IsOk());
  ASSERT_THAT(Exec(pool(), "INSERT INTO t VALUES (1)"), IsOk());
  EXPECT_THAT(Exec(pool(), "INSERT INTO t VALUES (1)"),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("SQLSTATE 23505")));
  EXPECT_THAT(Exec(pool(), "INSERT INTO t VALUES (-1)"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SQLSTATE 23514")));
  EXPECT_THAT(Exec(pool(), "SELECT 1 / 0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SQLSTATE 22012")));
  EXPECT_THAT(Exec(pool(), "SELEC 1"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("42601")));
  // The connection stays usable after SQL errors.
  EXPECT_THAT(Exec(pool(), "SELECT 1"), IsOk());
  EXPECT_EQ(pool().open_connections(), 1);
}

TEST_F(ConnectionPoolTest, WithTransactionReturnsTheValueAfterCommit) {
  absl::StatusOr<std::string> value = pool().WithTransaction(
      "value", [](pqxx::work& txn) -> absl::StatusOr<std::string> {
        return txn.exec1("SELECT 'hello'")[0].as<std::string>();
      });
  ASSERT_THAT(value, IsOk());
  EXPECT_EQ(*value, "hello");
}

// Terminates every other backend connected to this test's database.
absl::Status TerminateOtherBackends(ConnectionPool& admin) {
  return admin.RunInTransaction("terminate", [](pqxx::work& txn) {
    txn.exec(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()");
    return absl::OkStatus();
  });
}

TEST_F(ConnectionPoolTest, ReplacesIdleConnectionsTheServerClosed) {
  ASSERT_THAT(Exec(pool(), "CREATE TABLE t (v int)"), IsOk());
  std::unique_ptr<ConnectionPool> admin = NewPool(1);
  ASSERT_THAT(Exec(*admin, "SELECT 1"), IsOk());
  // The pool's idle connection dies (as when PostgreSQL restarts).
  ASSERT_THAT(TerminateOtherBackends(*admin), IsOk());

  EXPECT_THAT(Exec(pool(), "INSERT INTO t VALUES (1)"), IsOk());
  EXPECT_EQ(*Count(pool(), "t"), 1);
}

TEST_F(ConnectionPoolTest, RetriesOnceWhenTheConnectionBreaksBeforeCommit) {
  ASSERT_THAT(Exec(pool(), "CREATE TABLE t (v int)"), IsOk());
  int runs = 0;
  absl::Status status = pool().RunInTransaction("insert", [&](pqxx::work& txn) {
    ++runs;
    txn.exec0("INSERT INTO t VALUES (1)");
    if (runs == 1) {
      // The connection dies in the middle of the first attempt.
      txn.exec("SELECT pg_terminate_backend(pg_backend_pid())");
      txn.exec("SELECT 1");
    }
    return absl::OkStatus();
  });
  EXPECT_THAT(status, IsOk());
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(*Count(pool(), "t"), 1);  // The first attempt rolled back.
}

TEST_F(ConnectionPoolTest, NeverRetriesWhenTheConnectionBreaksDuringCommit) {
  // A deferred constraint trigger runs inside COMMIT; this one kills its own
  // backend, so the client loses the connection while COMMIT is in flight.
  ASSERT_THAT(Exec(pool(), R"sql(
      CREATE TABLE t (v int);
      CREATE FUNCTION die() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_terminate_backend(pg_backend_pid());
        RETURN NULL;
      END $$;
      CREATE CONSTRAINT TRIGGER die_at_commit AFTER INSERT ON t
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION die();
  )sql"),
              IsOk());
  int runs = 0;
  absl::Status status = pool().RunInTransaction("insert", [&](pqxx::work& txn) {
    ++runs;
    txn.exec0("INSERT INTO t VALUES (1)");
    return absl::OkStatus();
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(runs, 1);
  // The pool recovers: the next transaction gets a fresh connection.
  EXPECT_THAT(Count(pool(), "t"), IsOk());
}

TEST_F(ConnectionPoolTest, UnavailableWhilePostgresIsDownThenRecovers) {
  ASSERT_THAT(Exec(pool(), "CREATE TABLE t (v int)"), IsOk());
  ASSERT_THAT(Exec(pool(), "INSERT INTO t VALUES (1)"), IsOk());

  ASSERT_THAT(cluster().Stop(), IsOk());
  EXPECT_THAT(Exec(pool(), "INSERT INTO t VALUES (2)"),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Count(pool(), "t"), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(pool().Acquire(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(pool().open_connections(), 0);

  ASSERT_THAT(cluster().Start(), IsOk());
  // No restart of the pool: the next call reconnects.
  EXPECT_THAT(Exec(pool(), "INSERT INTO t VALUES (3)"), IsOk());
  EXPECT_EQ(*Count(pool(), "t"), 2);
}

// connection_pool.h: in_use_connections() counts the connections "handed out
// (or being opened) right now", not the idle ones that open_connections()
// also counts.
TEST_F(ConnectionPoolTest, CountsConnectionsInUseApartFromIdleOnes) {
  std::unique_ptr<ConnectionPool> p = NewPool(/*size=*/2);
  ASSERT_THAT(Exec(*p, "SELECT 1"), IsOk());
  EXPECT_EQ(p->open_connections(), 1);
  EXPECT_EQ(p->in_use_connections(), 0);
  {
    absl::StatusOr<PooledConnection> a = p->Acquire();
    ASSERT_THAT(a, IsOk());
    EXPECT_EQ(p->in_use_connections(), 1);
    absl::StatusOr<PooledConnection> b = p->Acquire();
    ASSERT_THAT(b, IsOk());
    EXPECT_EQ(p->in_use_connections(), 2);
    EXPECT_EQ(p->open_connections(), 2);
  }
  EXPECT_EQ(p->in_use_connections(), 0);
  EXPECT_EQ(p->open_connections(), 2);
}

// connection_pool.h: a PooledConnection "returns it when destroyed"; one
// move-assigned over returns the connection it held, so a pool of 2 has a
// connection to lend again.
TEST_F(ConnectionPoolTest, MoveAssigningOverAHandleReturnsItsConnection) {
  std::unique_ptr<ConnectionPool> p = NewPool(/*size=*/2);
  absl::StatusOr<PooledConnection> a = p->Acquire();
  ASSERT_THAT(a, IsOk());
  absl::StatusOr<PooledConnection> b = p->Acquire();
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT(p->Acquire(absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  *a = *std::move(b);
  EXPECT_EQ(p->in_use_connections(), 1);
  absl::StatusOr<PooledConnection> c = p->Acquire(absl::Milliseconds(20));
  ASSERT_THAT(c, IsOk());
  // Both remaining handles work.
  EXPECT_EQ(pqxx::nontransaction(**a).exec1("SELECT 1")[0].as<int>(), 1);
  EXPECT_EQ(pqxx::nontransaction(**c).exec1("SELECT 2")[0].as<int>(), 2);
}

// Opens `n` connections on `p` at once and returns them, so that `n` are idle.
void OpenIdleConnections(ConnectionPool& p, int n) {
  std::vector<PooledConnection> held;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<PooledConnection> connection = p.Acquire(absl::Seconds(10));
    ASSERT_THAT(connection, IsOk());
    held.push_back(*std::move(connection));
  }
  held.clear();
  EXPECT_EQ(p.open_connections(), n);
  EXPECT_EQ(p.in_use_connections(), 0);
}

// connection_pool.h: `url` is a libpq connection string that the pool passes on with its own
// settings added; the url's values reach the server as written, quotes and backslashes too.
TEST_F(ConnectionPoolTest, KeepsTheUrlsOwnValuesWithQuotesAndBackslashes) {
  ConnectionPool::Options options;
  options.url = url() + R"( application_name='a\\b\'c')";
  auto p = ConnectionPool::Create(options);
  ASSERT_THAT(p, IsOk());
  EXPECT_THAT(Show(**p, "application_name"), IsOkAndHolds(R"(a\b'c)"));
}

// connection_pool.h: db_timeout is also the longest one connection attempt may take. A server
// that accepts the TCP connection and never answers (the kernel completes the handshake from
// the listen backlog; nobody reads) costs UNAVAILABLE after the bound, 2 s here, which libpq's
// whole-second connect_timeout reaches after 1 to 2 s: well before twice the bound.
TEST_F(ConnectionPoolTest, AConnectionAttemptToASilentServerEndsAtTheBound) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);

  ConnectionPool::Options options;
  options.url = absl::StrCat("host=127.0.0.1 port=", ntohs(address.sin_port),
                             " dbname=verity user=verity sslmode=disable gssencmode=disable");
  options.db_timeout = absl::Seconds(2);
  auto p = ConnectionPool::Create(options);
  ASSERT_THAT(p, IsOk());
  const absl::Time before = absl::Now();
  EXPECT_THAT(Exec(**p, "SELECT 1"), StatusIs(absl::StatusCode::kUnavailable));
  const absl::Duration took = absl::Now() - before;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Milliseconds(2900));
  EXPECT_EQ((*p)->open_connections(), 0);
  close(listener);
}

// connection_pool.h: the watchdog closes the socket of an attempt that "runs longer than the
// bound": a statement the server would run for a minute ends UNAVAILABLE after the 2 s bound,
// well before twice the bound.
// Its idle connections are dropped too: a hung server would hang them as well.
TEST_F(ConnectionPoolTest, TheWatchdogEndsAHungAttemptAtTheBoundNotLater) {
  ConnectionPool::Options options;
  options.url = url();
  options.size = 3;
  options.db_timeout = absl::Seconds(2);
  auto p = ConnectionPool::Create(options);
  ASSERT_THAT(p, IsOk());
  OpenIdleConnections(**p, 3);  // Connected: only the statement is timed below.
  const absl::Time before = absl::Now();
  EXPECT_THAT(Exec(**p, "SET LOCAL statement_timeout = 0; SELECT pg_sleep(60)"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("db_timeout 2s")));
  const absl::Duration took = absl::Now() - before;
  EXPECT_GE(took, absl::Seconds(2));
  EXPECT_LT(took, absl::Milliseconds(3900));
  EXPECT_EQ((*p)->open_connections(), 0);
}

// connection_pool.h: COMMIT in flight when the bound passes (a deferred trigger sleeps inside
// it) leaves the outcome unknown: UNAVAILABLE saying so, and no retry.
TEST_F(ConnectionPoolTest, TheWatchdogFiringDuringCommitSaysTheOutcomeIsUnknown) {
  ASSERT_THAT(Exec(pool(), R"sql(
      CREATE TABLE t (v int);
      CREATE FUNCTION hang() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_sleep(60);
        RETURN NULL;
      END $$;
      CREATE CONSTRAINT TRIGGER hang_at_commit AFTER INSERT ON t
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hang();
  )sql"),
              IsOk());
  ConnectionPool::Options options;
  options.url = url();
  options.db_timeout = absl::Seconds(1);
  auto p = ConnectionPool::Create(options);
  ASSERT_THAT(p, IsOk());
  int runs = 0;
  const absl::Status status = (*p)->RunInTransaction("insert", [&](pqxx::work& txn) {
    ++runs;
    txn.exec0("SET LOCAL statement_timeout = 0");
    txn.exec0("INSERT INTO t VALUES (1)");
    return absl::OkStatus();
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable,
                               AllOf(HasSubstr("db_timeout 1s"), HasSubstr("during COMMIT"),
                                     HasSubstr("outcome unknown"))));
  EXPECT_EQ(runs, 1);
}

// connection_pool.h: a connection found broken before COMMIT (here the server reports it is
// shutting down, SQLSTATE 57P01, while the socket stays open) is thrown away together with every
// idle connection, and the transaction is retried once on a fresh connection.
TEST_F(ConnectionPoolTest, AShutdownErrorRetriesOnAFreshConnectionAndDropsTheIdleOnes) {
  ConnectionPool::Options options;
  options.url = url();
  options.size = 3;
  auto p = ConnectionPool::Create(options);
  ASSERT_THAT(p, IsOk());
  OpenIdleConnections(**p, 3);
  std::vector<int> backends;
  const absl::Status status = (*p)->RunInTransaction("test", [&](pqxx::work& txn) {
    backends.push_back(txn.exec1("SELECT pg_backend_pid()")[0].as<int>());
    if (backends.size() == 1) {
      txn.exec("DO $$ BEGIN RAISE EXCEPTION 'shutting down' USING ERRCODE = '57P01'; END $$");
    }
    return absl::OkStatus();
  });
  EXPECT_THAT(status, IsOk());
  ASSERT_EQ(backends.size(), 2u);
  EXPECT_NE(backends[0], backends[1]);
  // Only the fresh connection is left, back in the pool.
  EXPECT_EQ((*p)->open_connections(), 1);
}

// connection_pool.h, SetAfterCommitHookForTesting: the hook runs after each successful COMMIT
// (not after a transaction that failed), and a broken_connection it throws is a connection lost
// after the server committed: UNAVAILABLE, no retry, and the row is durable.
TEST_F(ConnectionPoolTest, TheAfterCommitHookRunsAfterEachCommitAndCanLoseTheConnection) {
  ASSERT_THAT(Exec(pool(), "CREATE TABLE t (v int)"), IsOk());
  int hook_runs = 0;
  pool().SetAfterCommitHookForTesting([&](pqxx::connection&) { ++hook_runs; });
  EXPECT_THAT(Exec(pool(), "INSERT INTO t VALUES (1)"), IsOk());
  EXPECT_EQ(hook_runs, 1);
  EXPECT_THAT(Exec(pool(), "INSERT INTO no_such_table VALUES (1)"),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(hook_runs, 1);

  pool().SetAfterCommitHookForTesting([&](pqxx::connection&) {
    ++hook_runs;
    throw pqxx::broken_connection("lost after commit");
  });
  int runs = 0;
  const absl::Status status = pool().RunInTransaction("insert", [&](pqxx::work& txn) {
    ++runs;
    txn.exec0("INSERT INTO t VALUES (2)");
    return absl::OkStatus();
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(hook_runs, 2);
  pool().SetAfterCommitHookForTesting(nullptr);
  EXPECT_THAT(Count(pool(), "t"), IsOkAndHolds(2));
}

// Relays one TCP connection on 127.0.0.1 to the test cluster's Unix socket, which is all the
// cluster listens on, so that the pool's TCP settings can be read off a real connection.
class TcpRelay {
 public:
  explicit TcpRelay(std::string unix_path) : unix_path_(std::move(unix_path)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(listener_, 1);
    socklen_t length = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Relay(); });
  }
  ~TcpRelay() {
    thread_.join();
    close(listener_);
  }
  int port() const { return port_; }

 private:
  void Relay() {
    const int tcp = accept(listener_, nullptr, nullptr);
    if (tcp < 0) return;
    const int local = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    unix_path_.copy(address.sun_path, sizeof(address.sun_path) - 1);
    if (connect(local, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      pollfd fds[2] = {{tcp, POLLIN, 0}, {local, POLLIN, 0}};
      char buffer[8192];
      bool open = true;
      while (open && poll(fds, 2, -1) > 0) {
        for (int i = 0; i < 2 && open; ++i) {
          if (fds[i].revents == 0) continue;
          const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
          open = n > 0 && write(fds[1 - i].fd, buffer, n) == n;
        }
      }
    }
    close(local);
    close(tcp);
  }

  std::string unix_path_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

int TcpOption(int socket, int level, int option) {
  int value = -1;
  socklen_t length = sizeof(value);
  EXPECT_EQ(getsockopt(socket, level, option, &value, &length), 0) << option;
  return value;
}

// connection_pool.h: connections are opened with TCP keepalives and tcp_user_timeout whose
// horizon is db_timeout: a silent peer is declared dead within the bound (keepalive idle +
// interval * count <= db_timeout), unacknowledged data after db_timeout.
TEST_F(ConnectionPoolTest, TcpConnectionsGiveUpOnASilentPeerWithinTheBound) {
  std::string socket_dir, port;
  {
    pqxx::connection direct(url());
    socket_dir = direct.hostname();
    port = direct.port();
  }
  auto relay = std::make_unique<TcpRelay>(absl::StrCat(socket_dir, "/.s.PGSQL.", port));
  ConnectionPool::Options options;
  options.url = absl::StrCat(url(), " host=127.0.0.1 port=", relay->port());
  options.db_timeout = absl::Seconds(30);
  auto p = ConnectionPool::Create(options);
  ASSERT_THAT(p, IsOk());
  {
    absl::StatusOr<PooledConnection> connection = (*p)->Acquire(absl::Seconds(10));
    ASSERT_THAT(connection, IsOk());
    const int sock = (*connection)->sock();
    EXPECT_EQ(TcpOption(sock, SOL_SOCKET, SO_KEEPALIVE), 1);
    const int idle = TcpOption(sock, IPPROTO_TCP, TCP_KEEPIDLE);
    const int interval = TcpOption(sock, IPPROTO_TCP, TCP_KEEPINTVL);
    const int count = TcpOption(sock, IPPROTO_TCP, TCP_KEEPCNT);
    EXPECT_GE(idle, 1);
    EXPECT_GE(interval, 1);
    EXPECT_GE(count, 1);
    EXPECT_LE(idle + interval * count, 30);
    EXPECT_EQ(TcpOption(sock, IPPROTO_TCP, TCP_USER_TIMEOUT), 30000);
  }
  p->reset();  // Closes the relayed connection, which ends the relay.
  relay.reset();
}

}  // namespace
}  // namespace storage
}  // namespace verity
