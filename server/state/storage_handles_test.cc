// StorageHandles::Open (storage_handles.h) against a real PostgreSQL: one pool built with the
// size and db_timeout given, every store over it, the schema applied; UNAVAILABLE when
// PostgreSQL cannot be reached.
#include "server/state/storage_handles.h"

#include <gtest/gtest.h>

#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

using ::verity::testing::StatusIs;

class StorageHandlesTest : public storage::testing::PostgresTest {};

TEST_F(StorageHandlesTest, OpensEveryStoreOverOnePoolOfTheGivenSizeAndTimeout) {
  auto handles = StorageHandles::Open(url(), 3, absl::Seconds(7));
  ASSERT_TRUE(handles.ok()) << handles.status();
  StorageHandles& h = **handles;
  ASSERT_NE(h.pool, nullptr);
  EXPECT_EQ(h.pool->options().url, url());
  EXPECT_EQ(h.pool->options().size, 3);
  EXPECT_EQ(h.pool->options().db_timeout, absl::Seconds(7));
  EXPECT_NE(h.projects, nullptr);
  EXPECT_NE(h.items, nullptr);
  EXPECT_NE(h.annotations, nullptr);
  EXPECT_NE(h.versions, nullptr);
  EXPECT_NE(h.leases, nullptr);
  EXPECT_NE(h.jobs, nullptr);
  EXPECT_NE(h.api_keys, nullptr);
  // The schema is in place: a fresh database lists no projects rather than failing.
  auto projects = h.projects->ListProjects();
  ASSERT_TRUE(projects.ok()) << projects.status();
  EXPECT_TRUE(projects->empty());
}

// storage_handles.h: Open "applies the schema migrations": on a database created empty the
// stores work at once.
TEST_F(StorageHandlesTest, AppliesTheSchemaToAnEmptyDatabase) {
  auto empty_url = cluster().CreateDatabase(/*migrate=*/false);
  ASSERT_TRUE(empty_url.ok()) << empty_url.status();
  {
    auto handles = StorageHandles::Open(*empty_url, 2, absl::Seconds(10));
    ASSERT_TRUE(handles.ok()) << handles.status();
    auto projects = (*handles)->projects->ListProjects();
    ASSERT_TRUE(projects.ok()) << projects.status();
    EXPECT_TRUE(projects->empty());
  }
  EXPECT_TRUE(cluster().DropDatabase(*empty_url).ok());
}

// storage_handles.h: db_timeout defaults to storage::ConnectionPool::Options's (30 s).
TEST_F(StorageHandlesTest, TheDefaultDbTimeoutIsThePoolsDefault) {
  auto handles = StorageHandles::Open(url(), 2);
  ASSERT_TRUE(handles.ok()) << handles.status();
  EXPECT_EQ((*handles)->pool->options().db_timeout, absl::Seconds(30));
  EXPECT_EQ((*handles)->pool->options().size, 2);
}

// storage_handles.h: "UNAVAILABLE if PostgreSQL cannot be reached" (here: no server listens in
// a socket directory that does not exist).
TEST(StorageHandlesOpenTest, AnUnreachableDatabaseIsUnavailable) {
  auto handles = StorageHandles::Open("postgresql:///verity?host=/nonexistent-verity-socket-dir", 1,
                                      absl::Seconds(2));
  EXPECT_THAT(handles.status(), StatusIs(absl::StatusCode::kUnavailable));
}

// ConnectionPool::Create refuses a pool of size < 1 as INVALID_ARGUMENT before connecting;
// Open passes that refusal on rather than hiding it as another code.
TEST(StorageHandlesOpenTest, APoolOfNoConnectionsIsInvalidArgument) {
  auto handles = StorageHandles::Open("postgresql:///verity", 0, absl::Seconds(2));
  EXPECT_THAT(handles.status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace verity::server
