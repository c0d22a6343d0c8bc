// FrozenPostgres: freezes a PostgreSQL cluster with SIGSTOP, for tests of a database that hangs
// without refusing connections (a network partition, a stopped host).
//
// Thread-safety: not thread-safe; one test thread owns it.
#ifndef VERITY_TESTS_FROZEN_POSTGRES_H_
#define VERITY_TESTS_FROZEN_POSTGRES_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace verity::tests {

// Stops the cluster whose data directory is `pgdata` — the postmaster first, so that it forks
// no new backend, then every child of it — and thaws it with SIGCONT on Thaw() or destruction.
// A frozen server keeps its sockets open: connections and queries are accepted by the kernel
// and never answered.
class FrozenPostgres {
 public:
  explicit FrozenPostgres(const std::string& pgdata);
  ~FrozenPostgres() { Thaw(); }
  FrozenPostgres(const FrozenPostgres&) = delete;
  FrozenPostgres& operator=(const FrozenPostgres&) = delete;

  // The postmaster and its backends and auxiliary processes (0 if the postmaster was not
  // found).
  int processes() const { return static_cast<int>(stopped_.size()); }
  void Thaw();

 private:
  std::vector<pid_t> stopped_;
};

}  // namespace verity::tests

#endif  // VERITY_TESTS_FROZEN_POSTGRES_H_
