#include "storage/connection_pool.h"

#include <postgresql/libpq-fe.h>
#include <sys/socket.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pqxx/except"
#include "storage/pg_status.h"

namespace verity {
namespace storage {
namespace {

std::string QuoteConnValue(absl::string_view value) {
  std::string quoted = "'";
  for (char c : value) {
    if (c == '\\' || c == '\'') quoted += '\\';
    quoted += c;
  }
  return quoted + "'";
}

// `url` (keyword/value or URI) as a keyword/value string with the settings that bound waits on
// the server: libpq's connect_timeout, TCP keepalives and tcp_user_timeout (where this libpq
// knows it), each unless `url` sets it, and server-side statement, lock and
// idle-in-transaction timeouts, put before any `options` of `url` so that those win.
absl::StatusOr<std::string> ConnectionStringWithTimeouts(const std::string& url,
                                                         absl::Duration timeout) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), &error);
  if (parsed == nullptr) {
    const std::string message = error != nullptr ? error : "out of memory";
    PQfreemem(error);
    return absl::InvalidArgumentError(
        absl::StrCat("ConnectionPool: url is not a libpq connection string: ", message));
  }
  const int64_t ms = absl::ToInt64Milliseconds(timeout);
  const int64_t seconds = static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(timeout)));
  // Keepalives declare a silent peer dead after idle + interval * count <= the bound.
  const std::map<std::string, std::string> defaults = {
      {"connect_timeout", absl::StrCat(std::max<int64_t>(2, seconds))},  // libpq's minimum is 2
      {"keepalives", "1"},
      {"keepalives_idle", absl::StrCat(std::max<int64_t>(1, seconds / 2))},
      {"keepalives_interval", absl::StrCat(std::max<int64_t>(1, seconds / 6))},
      {"keepalives_count", "3"},
      {"tcp_user_timeout", absl::StrCat(ms)},
  };
  const std::string server_settings =
      absl::StrCat("-c statement_timeout=", ms, " -c lock_timeout=", ms,
                   " -c idle_in_transaction_session_timeout=", ms);
  std::string out;
  for (const PQconninfoOption* option = parsed; option->keyword != nullptr; ++option) {
    const std::string keyword = option->keyword;
    std::string value;
    if (option->val != nullptr) {
      value = option->val;
    } else if (auto it = defaults.find(keyword); it != defaults.end()) {
      value = it->second;
    }
    if (keyword == "options") {
      value = value.empty() ? server_settings : absl::StrCat(server_settings, " ", value);
    }
    if (option->val == nullptr && value.empty()) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", keyword, "=", QuoteConnValue(value));
  }
  PQconninfoFree(parsed);
  return out;
}

}  // namespace

PooledConnection::PooledConnection(PooledConnection&& other) noexcept
    : pool_(other.pool_),
      connection_(std::move(other.connection_)),
      broken_(other.broken_) {
  other.pool_ = nullptr;
}

PooledConnection& PooledConnection::operator=(
    PooledConnection&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    connection_ = std::move(other.connection_);
    broken_ = other.broken_;
    other.pool_ = nullptr;
  }
  return *this;
}

PooledConnection::~PooledConnection() { Release(); }

void PooledConnection::Release() {
  if (pool_ == nullptr) return;
  pool_->Return(std::move(connection_), broken_);
  pool_ = nullptr;
}

absl::StatusOr<std::unique_ptr<ConnectionPool>> ConnectionPool::Create(
    Options options) {
  if (options.url.empty()) {
    return absl::InvalidArgumentError("ConnectionPool: url is required");
  }
  if (options.size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConnectionPool: size must be at least 1, got ", options.size));
  }
  if (options.db_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConnectionPool: db_timeout must be at least 1s, got ",
                     absl::FormatDuration(options.db_timeout)));
  }
  absl::StatusOr<std::string> connection_string =
      ConnectionStringWithTimeouts(options.url, options.db_timeout);
  if (!connection_string.ok()) return connection_string.status();
  return std::unique_ptr<ConnectionPool>(
      new ConnectionPool(std::move(options), *std::move(connection_string)));
}

ConnectionPool::ConnectionPool(Options options, std::string connection_string)
    : options_(std::move(options)), connection_string_(std::move(connection_string)) {
  watchdog_ = std::thread([this] { WatchdogLoop(); });
}

ConnectionPool::~ConnectionPool() {
  {
    absl::MutexLock lock(&watch_mutex_);
    stopping_ = true;
    watch_added_.Signal();
  }
  watchdog_.join();
  absl::MutexLock lock(&mutex_);
  idle_.clear();
}

void ConnectionPool::StartWatch(Watch* watch) {
  absl::MutexLock lock(&watch_mutex_);
  watches_.push_back(watch);
  watch_added_.Signal();
}

bool ConnectionPool::EndWatch(Watch* watch) {
  absl::MutexLock lock(&watch_mutex_);
  watches_.erase(std::find(watches_.begin(), watches_.end(), watch));
  return watch->fired;
}

void ConnectionPool::WatchdogLoop() {
  absl::MutexLock lock(&watch_mutex_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    for (Watch* watch : watches_) {
      if (watch->fired) continue;
      if (watch->deadline <= now) {
        // Under watch_mutex_: the watch's owner cannot close the socket until EndWatch().
        shutdown(watch->socket, SHUT_RDWR);
        watch->fired = true;
      } else {
        next = std::min(next, watch->deadline);
      }
    }
    watch_added_.WaitWithDeadline(&watch_mutex_, next);
  }
}

int ConnectionPool::in_use_connections() const {
  absl::MutexLock lock(&mutex_);
  return in_use_;
}

int ConnectionPool::open_connections() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int>(idle_.size()) + in_use_;
}

absl::StatusOr<PooledConnection> ConnectionPool::Acquire(
    absl::Duration timeout) {
  return AcquireImpl(timeout, /*fresh=*/false);
}

absl::StatusOr<PooledConnection> ConnectionPool::AcquireImpl(
    absl::Duration timeout, bool fresh) {
  std::unique_ptr<pqxx::connection> reused;
  std::unique_ptr<pqxx::connection> stale;  // Closed outside the lock.
  {
    absl::MutexLock lock(&mutex_);
    auto slot_available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return !idle_.empty() ||
             in_use_ + static_cast<int>(idle_.size()) < options_.size;
    };
    if (!mutex_.AwaitWithTimeout(absl::Condition(&slot_available), timeout)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "all ", options_.size,
          " PostgreSQL connections stayed in use for ",
          absl::FormatDuration(timeout)));
    }
    if (!idle_.empty()) {
      if (fresh) {
        stale = std::move(idle_.back());
      } else {
        reused = std::move(idle_.back());
      }
      idle_.pop_back();
    }
    ++in_use_;
  }
  stale.reset();
  if (reused != nullptr) return PooledConnection(this, std::move(reused));

  // Open a new connection outside the lock: it may take a while.
  std::unique_ptr<pqxx::connection> opened;
  absl::Status status = CatchPqxx(
      absl::StrCat("connecting to PostgreSQL (db_timeout ",
                   absl::FormatDuration(options_.db_timeout), ")"),
      [&]() {
    opened = std::make_unique<pqxx::connection>(connection_string_);
    return absl::OkStatus();
  });
  if (!status.ok()) {
    absl::MutexLock lock(&mutex_);
    --in_use_;
    // Whatever the exception, failing to connect is a "try again later".
    if (status.code() != absl::StatusCode::kUnavailable) {
      status = absl::UnavailableError(status.message());
    }
    return status;
  }
  return PooledConnection(this, std::move(opened));
}

void ConnectionPool::Return(std::unique_ptr<pqxx::connection> connection,
                            bool broken) {
  if (connection != nullptr && (broken || !connection->is_open())) {
    connection.reset();  // Close outside the lock.
  }
  absl::MutexLock lock(&mutex_);
  --in_use_;
  if (connection != nullptr) idle_.push_back(std::move(connection));
}

void ConnectionPool::DiscardIdle() {
  std::vector<std::unique_ptr<pqxx::connection>> discarded;
  {
    absl::MutexLock lock(&mutex_);
    discarded.swap(idle_);
  }
}

void ConnectionPool::SetAfterCommitHookForTesting(AfterCommitHook hook) {
  absl::MutexLock lock(&mutex_);
  after_commit_hook_ =
      hook ? std::make_shared<const AfterCommitHook>(std::move(hook)) : nullptr;
}

absl::Status ConnectionPool::RunInTransaction(
    absl::string_view what,
    const std::function<absl::Status(pqxx::work&)>& fn, After after) {
  constexpr int kAttempts = 2;
  absl::Status status;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    absl::StatusOr<PooledConnection> connection =
        AcquireImpl(options_.acquire_timeout, /*fresh=*/attempt > 0);
    if (!connection.ok()) {
      return absl::Status(connection.status().code(),
                          absl::StrCat(what, ": ", connection.status().message()));
    }
    // Closed rather than pooled once released (see After::kClose).
    if (after == After::kClose) connection->MarkBroken();
    Watch watch;
    watch.socket = (*connection)->sock();
    watch.deadline = absl::Now() + options_.db_timeout;
    bool commit_sent = false;
    bool threw = false;
    StartWatch(&watch);
    try {
      pqxx::work txn(**connection);
      status = fn(txn);
      // On error, leaving the scope rolls back (the destructor never throws).
      if (status.ok()) {
        commit_sent = true;
        txn.commit();
        std::shared_ptr<const AfterCommitHook> hook;
        {
          absl::MutexLock lock(&mutex_);
          hook = after_commit_hook_;
        }
        if (hook != nullptr) (*hook)(**connection);
      }
    } catch (...) {
      threw = true;
      status = StatusFromCurrentException(what);
    }
    if (EndWatch(&watch)) {
      // The watchdog shut the socket down: the connection is done either way.
      connection->MarkBroken();
      // Finished (committed, or `fn` failed) just as the watchdog fired.
      if (!threw) return status;
      // The server hangs rather than restarted: its idle connections would hang too, and a
      // retry would only double the wait.
      DiscardIdle();
      return absl::UnavailableError(absl::StrCat(
          what, ": PostgreSQL did not answer within db_timeout ",
          absl::FormatDuration(options_.db_timeout), "; the connection was closed",
          commit_sent ? " during COMMIT (outcome unknown)" : ""));
    }
    if (!threw) return status;
    const bool broken = status.code() == absl::StatusCode::kUnavailable ||
                        !(*connection)->is_open();
    if (!broken) return status;
    connection->MarkBroken();
    // The usual cause is a PostgreSQL restart: the idle connections are dead
    // too.
    DiscardIdle();
    if (commit_sent) {
      // COMMIT may or may not have taken effect; never replay it.
      if (status.code() != absl::StatusCode::kUnavailable) {
        return absl::UnavailableError(absl::StrCat(
            status.message(), " (connection lost during COMMIT; outcome unknown)"));
      }
      return status;
    }
  }
  return status;
}

}  // namespace storage
}  // namespace verity
