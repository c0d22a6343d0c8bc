#include "storage/connection_pool.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pqxx/except"
#include "storage/pg_status.h"

namespace verity {
namespace storage {

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
  return std::unique_ptr<ConnectionPool>(new ConnectionPool(std::move(options)));
}

ConnectionPool::~ConnectionPool() {
  absl::MutexLock lock(&mutex_);
  idle_.clear();
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
  absl::Status status = CatchPqxx("connecting to PostgreSQL", [&]() {
    opened = std::make_unique<pqxx::connection>(options_.url);
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
    bool commit_sent = false;
    try {
      pqxx::work txn(**connection);
      status = fn(txn);
      // On error, leaving the scope rolls back (the destructor never throws).
      if (!status.ok()) return status;
      commit_sent = true;
      txn.commit();
      std::shared_ptr<const AfterCommitHook> hook;
      {
        absl::MutexLock lock(&mutex_);
        hook = after_commit_hook_;
      }
      if (hook != nullptr) (*hook)(**connection);
      return absl::OkStatus();
    } catch (...) {
      status = StatusFromCurrentException(what);
    }
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
