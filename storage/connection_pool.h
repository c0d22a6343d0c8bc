// ConnectionPool: a small, thread-safe pool of libpqxx connections to one
// PostgreSQL database, and the transaction runner every store uses.
//
// Connections are opened lazily, on the first Acquire() that finds no idle
// connection while fewer than `size` are open, so creating a pool never
// fails because the database is down. A connection found broken is thrown
// away (together with every idle connection, which is probably stale too:
// the usual cause is a PostgreSQL restart) and a new one is opened on a later
// Acquire(), so work resumes by itself once PostgreSQL is back.
//
// RunInTransaction()/WithTransaction() run a function inside one READ
// COMMITTED transaction, commit it, and turn every libpqxx exception into an
// absl::Status (see storage/pg_status.h). If the connection breaks before
// COMMIT was sent, the transaction certainly did not commit and is retried
// once on a fresh connection. If it breaks while COMMIT is in flight the
// outcome is unknown: nothing is retried and UNAVAILABLE is returned (callers
// whose writes are idempotent may retry themselves).
//
// Every database wait is bounded by Options::db_timeout, so that a hung PostgreSQL (a network
// partition, a stopped server) cannot block a caller for good: connections are opened with
// libpq's connect_timeout, TCP keepalives and tcp_user_timeout, and run with statement_timeout,
// lock_timeout and idle_in_transaction_session_timeout set to the bound. Those cannot see a
// server that is stopped but whose sockets stay open (on loopback the kernel keeps
// acknowledging), so a watchdog thread also closes the socket of any transaction attempt that
// runs longer than the bound; the caller gets UNAVAILABLE naming the bound, and such an attempt
// is not retried.
//
// Thread-safety: all methods are thread-safe. A PooledConnection (and the
// pqxx::connection it holds) must be used by one thread at a time, and must
// be returned (destroyed) before the pool is destroyed.
#ifndef VERITY_STORAGE_CONNECTION_POOL_H_
#define VERITY_STORAGE_CONNECTION_POOL_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pqxx/connection"
#include "pqxx/transaction"

namespace verity {
namespace storage {

class ConnectionPool;

// A connection borrowed from a ConnectionPool; returns it when destroyed.
// Move-only.
class PooledConnection {
 public:
  PooledConnection(PooledConnection&& other) noexcept;
  PooledConnection& operator=(PooledConnection&& other) noexcept;
  PooledConnection(const PooledConnection&) = delete;
  PooledConnection& operator=(const PooledConnection&) = delete;
  ~PooledConnection();

  pqxx::connection& operator*() const { return *connection_; }
  pqxx::connection* operator->() const { return connection_.get(); }
  pqxx::connection* get() const { return connection_.get(); }

  // Discards the connection instead of returning it to the pool (call after
  // a libpqxx error that may have left it unusable, or to free its buffers).
  void MarkBroken() { broken_ = true; }

 private:
  friend class ConnectionPool;
  PooledConnection(ConnectionPool* pool,
                   std::unique_ptr<pqxx::connection> connection)
      : pool_(pool), connection_(std::move(connection)) {}
  void Release();

  ConnectionPool* pool_ = nullptr;
  std::unique_ptr<pqxx::connection> connection_;
  bool broken_ = false;
};

class ConnectionPool {
 public:
  struct Options {
    // Required. libpq connection string (keyword/value or URI), e.g.
    // EmbeddedPostgres::connection_url().
    std::string url;
    // Maximum number of open connections. Default 4.
    int size = 4;
    // How long Acquire() without an explicit timeout, RunInTransaction() and
    // WithTransaction() wait for a free connection. Default 10 s.
    absl::Duration acquire_timeout = absl::Seconds(10);
    // The longest one transaction attempt (from BEGIN to the end of COMMIT), one statement or
    // one connection attempt may take before it is abandoned as UNAVAILABLE; also the TCP
    // keepalive and tcp_user_timeout horizon. Bounds waits on a hung database; long enough
    // for the largest legitimate transaction (a project's labels read at load). Default 30 s.
    absl::Duration db_timeout = absl::Seconds(30);
  };

  // Returns INVALID_ARGUMENT for an empty url, size < 1 or db_timeout < 1 s. Does not
  // connect.
  static absl::StatusOr<std::unique_ptr<ConnectionPool>> Create(
      Options options);

  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;
  ~ConnectionPool();

  // Borrows a connection, opening one if none is idle and fewer than `size`
  // are open. Returns DEADLINE_EXCEEDED if all `size` connections stay in use
  // for `timeout`, UNAVAILABLE if a new connection cannot be opened (the
  // database is down or unreachable).
  absl::StatusOr<PooledConnection> Acquire(absl::Duration timeout);
  absl::StatusOr<PooledConnection> Acquire() {
    return Acquire(options_.acquire_timeout);
  }

  // Runs `fn` in one READ COMMITTED transaction and commits it if `fn`
  // returns OK; otherwise rolls back and returns `fn`'s status. `fn` should
  // let libpqxx exceptions propagate: they are converted here (messages are
  // prefixed with `what`, e.g. "committing annotations"). `fn` may run twice
  // (see the retry rule above), so it must (re)assign its outputs on every
  // run rather than append to them. Returns OK only after COMMIT succeeded.
  //
  // `after`: kClose closes the connection when the transaction is done instead
  // of returning it to the pool. For transactions that send one very large
  // statement: libpq grows its send buffer to the largest message sent and
  // never shrinks it, so a pooled connection would keep that memory.
  enum class After { kReturnToPool, kClose };
  absl::Status RunInTransaction(
      absl::string_view what,
      const std::function<absl::Status(pqxx::work&)>& fn,
      After after = After::kReturnToPool);

  // As RunInTransaction, for an `fn` returning absl::StatusOr<T>; the value
  // of the last run is returned after a successful COMMIT.
  template <typename F>
  auto WithTransaction(absl::string_view what, F&& fn,
                       After after = After::kReturnToPool)
      -> std::invoke_result_t<F&, pqxx::work&>;

  const Options& options() const { return options_; }

  // Number of connections currently open (idle or in use); for tests and
  // metrics.
  int open_connections() const;
  // Connections handed out (or being opened) right now; for metrics.
  int in_use_connections() const;

  // Test-only fault injection. `hook` (empty: none) runs with the connection
  // right after each successful COMMIT of RunInTransaction/WithTransaction,
  // and whatever it throws is handled as if COMMIT had thrown it: throwing
  // pqxx::broken_connection models a connection lost after the server
  // committed, so the caller gets UNAVAILABLE (outcome unknown) although the
  // transaction is durable. May be set at any time; a transaction uses the
  // hook set when its COMMIT returned.
  using AfterCommitHook = std::function<void(pqxx::connection&)>;
  void SetAfterCommitHookForTesting(AfterCommitHook hook);

 private:
  friend class PooledConnection;

  // A transaction attempt under the watchdog: its connection's socket and deadline.
  struct Watch {
    int socket = -1;
    absl::Time deadline;
    bool fired = false;  // The watchdog shut the socket down.
  };

  ConnectionPool(Options options, std::string connection_string);

  // `fresh`: never hand out an idle connection (it may be stale).
  absl::StatusOr<PooledConnection> AcquireImpl(absl::Duration timeout,
                                               bool fresh);
  void Return(std::unique_ptr<pqxx::connection> connection, bool broken);
  void DiscardIdle();
  void StartWatch(Watch* watch) ABSL_LOCKS_EXCLUDED(watch_mutex_);
  // Returns whether the watchdog fired on it.
  bool EndWatch(Watch* watch) ABSL_LOCKS_EXCLUDED(watch_mutex_);
  // The watchdog thread: shuts down (shutdown(2), which wakes a thread blocked on the socket;
  // the descriptor stays valid until libpq closes it) the socket of every watch past its
  // deadline.
  void WatchdogLoop() ABSL_LOCKS_EXCLUDED(watch_mutex_);

  const Options options_;
  // options_.url with the timeouts above added (what connections are opened with).
  const std::string connection_string_;
  mutable absl::Mutex mutex_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_ ABSL_GUARDED_BY(mutex_);
  // Connections handed out or being opened; idle_.size() + in_use_ <= size.
  int in_use_ ABSL_GUARDED_BY(mutex_) = 0;
  std::shared_ptr<const AfterCommitHook> after_commit_hook_
      ABSL_GUARDED_BY(mutex_);  // Null: none (the normal case).

  absl::Mutex watch_mutex_;
  absl::CondVar watch_added_;
  std::vector<Watch*> watches_ ABSL_GUARDED_BY(watch_mutex_);
  bool stopping_ ABSL_GUARDED_BY(watch_mutex_) = false;
  std::thread watchdog_;
};

template <typename F>
auto ConnectionPool::WithTransaction(absl::string_view what, F&& fn,
                                     After after)
    -> std::invoke_result_t<F&, pqxx::work&> {
  using Result = std::invoke_result_t<F&, pqxx::work&>;
  std::optional<Result> result;
  absl::Status status = RunInTransaction(
      what,
      [&](pqxx::work& txn) -> absl::Status {
        result.emplace(fn(txn));
        return result->status();
      },
      after);
  if (!status.ok()) return status;
  return std::move(*result);
}

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_CONNECTION_POOL_H_
