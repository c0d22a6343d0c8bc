#include "storage/testing/postgres_fixture.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pqxx/connection"
#include "pqxx/nontransaction"
#include "storage/pg_status.h"
#include "storage/schema_migrations.h"

namespace verity {
namespace storage {
namespace testing {
namespace {

absl::Mutex g_cluster_mutex;
// Owned; deleted by the environment at program end.
TestCluster* g_cluster ABSL_GUARDED_BY(g_cluster_mutex) = nullptr;
absl::Status* g_cluster_error ABSL_GUARDED_BY(g_cluster_mutex) = nullptr;

class ClusterEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    absl::MutexLock lock(&g_cluster_mutex);
    if (g_cluster != nullptr) g_cluster->Shutdown();
  }
};

[[maybe_unused]] ::testing::Environment* const g_environment =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

// Database name from a URL made by TestCluster::ConnectionUrl.
std::string DatabaseOf(const std::string& url) {
  const std::string key = "dbname='";
  const size_t start = url.find(key);
  if (start == std::string::npos) return "";
  const size_t begin = start + key.size();
  return url.substr(begin, url.find('\'', begin) - begin);
}

}  // namespace

TestCluster::TestCluster(TempDir dir, std::string data_dir,
                         std::unique_ptr<EmbeddedPostgres> postgres)
    : dir_(std::move(dir)),
      data_dir_(std::move(data_dir)),
      postgres_(std::move(postgres)) {
  socket_dir_ = postgres_->socket_dir();
}

EmbeddedPostgres::Options TestCluster::ClusterOptions(
    const std::string& data_dir) {
  EmbeddedPostgres::Options options;
  options.data_dir = data_dir;
  options.durable = false;  // Tests do not survive OS crashes anyway.
  options.shared_buffers = "16MB";
  options.max_connections = 60;
  return options;
}

absl::StatusOr<TestCluster*> TestCluster::Get() {
  absl::MutexLock lock(&g_cluster_mutex);
  if (g_cluster != nullptr) return g_cluster;
  if (g_cluster_error != nullptr) return *g_cluster_error;
  absl::StatusOr<TempDir> dir = TempDir::Create("verity-pg-test-");
  absl::Status status = dir.status();
  if (status.ok()) {
    const std::string data_dir = dir->path() + "/data";
    absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> postgres =
        EmbeddedPostgres::Start(ClusterOptions(data_dir));
    if (postgres.ok()) {
      g_cluster = new TestCluster(*std::move(dir), data_dir,
                                  *std::move(postgres));
      return g_cluster;
    }
    status = postgres.status();
  }
  g_cluster_error = new absl::Status(status);
  return status;
}

std::string TestCluster::AdminUrl() const {
  return postgres_->ConnectionUrl("postgres");
}

absl::StatusOr<std::string> TestCluster::CreateDatabase(bool migrate) {
  std::string name, url;
  {
    absl::MutexLock lock(&mutex_);
    if (postgres_ == nullptr) {
      return absl::FailedPreconditionError("test cluster is stopped");
    }
    name = absl::StrCat("test_", next_database_++);
    url = postgres_->ConnectionUrl(name);
    const std::string admin_url = AdminUrl();
    VERITY_RETURN_IF_ERROR(
        CatchPqxx("creating test database", [&]() -> absl::Status {
          pqxx::connection conn(admin_url);
          pqxx::nontransaction txn(conn);
          txn.exec0(absl::StrCat("CREATE DATABASE ", name));
          return absl::OkStatus();
        }));
  }
  if (migrate) {
    ConnectionPool::Options options;
    options.url = url;
    options.size = 1;
    VERITY_ASSIGN_OR_RETURN(std::unique_ptr<ConnectionPool> pool,
                            ConnectionPool::Create(options));
    VERITY_RETURN_IF_ERROR(ApplySchemaMigrations(*pool).status());
  }
  return url;
}

absl::Status TestCluster::DropDatabase(const std::string& url) {
  const std::string name = DatabaseOf(url);
  if (name.rfind("test_", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a test database URL: ", url));
  }
  absl::MutexLock lock(&mutex_);
  if (postgres_ == nullptr) return absl::OkStatus();
  const std::string admin_url = AdminUrl();
  return CatchPqxx("dropping test database", [&]() -> absl::Status {
    pqxx::connection conn(admin_url);
    pqxx::nontransaction txn(conn);
    txn.exec0(absl::StrCat("DROP DATABASE IF EXISTS ", name, " WITH (FORCE)"));
    return absl::OkStatus();
  });
}

absl::Status TestCluster::Stop() {
  absl::MutexLock lock(&mutex_);
  if (postgres_ == nullptr) return absl::OkStatus();
  absl::Status status = postgres_->Stop();
  postgres_.reset();
  return status;
}

absl::Status TestCluster::Start() {
  absl::MutexLock lock(&mutex_);
  if (postgres_ != nullptr) return absl::OkStatus();
  VERITY_ASSIGN_OR_RETURN(postgres_,
                          EmbeddedPostgres::Start(ClusterOptions(data_dir_)));
  if (postgres_->socket_dir() != socket_dir_) {
    return absl::InternalError("restarted cluster moved its socket directory");
  }
  return absl::OkStatus();
}

void TestCluster::Shutdown() {
  {
    absl::MutexLock lock(&mutex_);
    if (postgres_ != nullptr) {
      absl::Status status = postgres_->Stop();
      if (!status.ok()) {
        std::fprintf(stderr, "stopping the test cluster: %s\n",
                     status.ToString().c_str());
      }
      postgres_.reset();
    }
  }
  absl::Status removed = RemoveRecursively(dir_.path());
  if (!removed.ok()) {
    std::fprintf(stderr, "%s\n", removed.ToString().c_str());
  }
}

void PostgresTest::SetUp() {
  absl::StatusOr<TestCluster*> cluster = TestCluster::Get();
  ASSERT_TRUE(cluster.ok()) << "cannot start PostgreSQL: " << cluster.status();
  cluster_ = *cluster;
  absl::StatusOr<std::string> url = cluster_->CreateDatabase();
  ASSERT_TRUE(url.ok()) << url.status();
  url_ = *url;
  pool_ = NewPool();
  ASSERT_NE(pool_, nullptr);
}

void PostgresTest::TearDown() {
  pool_.reset();
  if (cluster_ != nullptr && !url_.empty()) {
    absl::Status status = cluster_->DropDatabase(url_);
    EXPECT_TRUE(status.ok()) << status;
  }
}

std::unique_ptr<ConnectionPool> PostgresTest::NewPool(int size) {
  ConnectionPool::Options options;
  options.url = url_;
  options.size = size;
  absl::StatusOr<std::unique_ptr<ConnectionPool>> pool =
      ConnectionPool::Create(options);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

}  // namespace testing
}  // namespace storage
}  // namespace verity
