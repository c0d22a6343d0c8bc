// Test fixture: a throwaway PostgreSQL cluster per test binary and a fresh,
// migrated database per test. Real PostgreSQL, never a mock.
//
// TestCluster::Get() starts an EmbeddedPostgres on first use, in a fresh
// /tmp/verity-pg-test-XXXXXX directory (not $TEST_TMPDIR: see temp_dir.h),
// tuned for speed over crash safety (fsync off). A gtest Environment
// registered by this library stops the cluster and removes the directory
// when the test program ends. It works when tests run as root (the cluster
// then runs as the `postgres` OS user) and as an ordinary user.
//
// Derive test fixtures from PostgresTest to get a new database (test_<n>,
// with Verity's schema) and a ConnectionPool on it in every test; the
// database is dropped after the test.
//
// Thread-safety: TestCluster methods are thread-safe except Stop()/Start(),
// which tests call from their main thread while no other thread uses the
// cluster's processes.
#ifndef VERITY_STORAGE_TESTING_POSTGRES_FIXTURE_H_
#define VERITY_STORAGE_TESTING_POSTGRES_FIXTURE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "storage/connection_pool.h"
#include "storage/embedded_postgres.h"
#include "storage/testing/temp_dir.h"

namespace verity {
namespace storage {
namespace testing {

class TestCluster {
 public:
  // The test binary's cluster, started on the first call. Returns the start
  // error (again) on every call if it could not be started.
  static absl::StatusOr<TestCluster*> Get();

  // Creates a new, empty database with a unique name and returns its
  // connection URL; applies Verity's schema migrations if `migrate`.
  absl::StatusOr<std::string> CreateDatabase(bool migrate = true);

  // Drops a database made by CreateDatabase (identified by its URL),
  // terminating its remaining connections.
  absl::Status DropDatabase(const std::string& url);

  // Stops / restarts PostgreSQL on the same data directory, keeping every
  // database and URL, to simulate an outage.
  absl::Status Stop();
  absl::Status Start();

  const std::string& data_dir() const { return data_dir_; }

  // Stops the cluster and removes its directory; called at program end.
  void Shutdown();

 private:
  TestCluster(TempDir dir, std::string data_dir,
              std::unique_ptr<EmbeddedPostgres> postgres);
  static EmbeddedPostgres::Options ClusterOptions(const std::string& data_dir);
  std::string AdminUrl() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  TempDir dir_;
  const std::string data_dir_;
  std::unique_ptr<EmbeddedPostgres> postgres_ ABSL_GUARDED_BY(mutex_);
  std::string socket_dir_ ABSL_GUARDED_BY(mutex_);
  int next_database_ ABSL_GUARDED_BY(mutex_) = 0;
};

// gtest fixture: a fresh migrated database and a pool (size 4) per test.
class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  TestCluster& cluster() { return *cluster_; }
  ConnectionPool& pool() { return *pool_; }
  const std::string& url() const { return url_; }

  // Another pool on this test's database.
  std::unique_ptr<ConnectionPool> NewPool(int size = 4);

 private:
  TestCluster* cluster_ = nullptr;
  std::string url_;
  std::unique_ptr<ConnectionPool> pool_;
};

}  // namespace testing
}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_TESTING_POSTGRES_FIXTURE_H_
