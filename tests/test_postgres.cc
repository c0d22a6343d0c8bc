#include "tests/test_postgres.h"

#include <utility>

#include <gtest/gtest.h>

#include "tests/server_process.h"

namespace verity::tests {

std::unique_ptr<TestPostgres> TestPostgres::Start(const std::string& prefix) {
  std::unique_ptr<TestPostgres> pg(new TestPostgres());
  pg->dir_ = MakeTempDir(prefix);
  storage::EmbeddedPostgres::Options options;
  options.data_dir = pg->dir_ + "/pg";
  auto started = storage::EmbeddedPostgres::Start(options);
  if (!started.ok()) {
    ADD_FAILURE() << "PostgreSQL did not start: " << started.status();
    return nullptr;  // the destructor removes the directory
  }
  pg->postgres_ = std::move(*started);
  return pg;
}

TestPostgres::~TestPostgres() {
  if (postgres_ != nullptr) EXPECT_TRUE(postgres_->Stop().ok());
  postgres_.reset();
  RemoveTree(dir_);
}

}  // namespace verity::tests
