// TestPostgres: the private PostgreSQL cluster of a test suite that runs the server in-process —
// started in a fresh directory under /tmp (reachable by the unprivileged postgres user when the
// test runs as root); the destructor stops it (a failure to stop fails the test) and removes
// the directory.
#ifndef VERITY_TESTS_TEST_POSTGRES_H_
#define VERITY_TESTS_TEST_POSTGRES_H_

#include <memory>
#include <string>

#include "storage/embedded_postgres.h"

namespace verity::tests {

class TestPostgres {
 public:
  // A started cluster under /tmp/<prefix>-XXXXXX/pg, or nullptr after a test failure naming why.
  static std::unique_ptr<TestPostgres> Start(const std::string& prefix);
  ~TestPostgres();

  std::string url() const { return postgres_->connection_url(); }
  // The suite's directory (the cluster is in dir()/pg); tests may keep other files there.
  const std::string& dir() const { return dir_; }

 private:
  TestPostgres() = default;

  std::string dir_;
  std::unique_ptr<storage::EmbeddedPostgres> postgres_;
};

}  // namespace verity::tests

#endif  // VERITY_TESTS_TEST_POSTGRES_H_
