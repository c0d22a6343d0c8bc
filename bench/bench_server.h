// BenchServer: what the server-level benchmarks share: an embedded PostgreSQL in a fresh
// /tmp directory, an in-process Verity server on loopback over it (no background trainer, so
// the benchmark decides when fits run), a channel to it, and helpers to create a project
// and stream labels in.
//
// Every helper exits the process with a message on error: these are benchmark binaries.
#ifndef VERITY_BENCH_BENCH_SERVER_H_
#define VERITY_BENCH_BENCH_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "server/verity_server.h"
#include "storage/embedded_postgres.h"

namespace verity::bench {

// Gives the autogroup of the postmaster `postmaster_pid` (its backends inherit it) this
// process's autogroup nice (see BenchServer::SharePriorityWithPostgres); returns a line saying
// what was done. An empty pid changes nothing.
std::string SharePriorityWithPostmaster(const std::string& postmaster_pid);

// One label to submit, by string ids.
struct BenchLabel {
  std::string item;
  std::string annotator;
  int32_t label;
};

class BenchServer {
 public:
  // Starts PostgreSQL under /tmp/verity-<name>-XXXXXX and the server on localhost:0.
  static std::unique_ptr<BenchServer> StartOrDie(const std::string& name);

  server::VerityServer& server() { return *server_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }

  // Creates `project` with classes c0..c{num_classes-1}.
  void CreateProjectOrDie(const std::string& project, int num_classes);
  // Streams `labels` on one SubmitAnnotations stream in batches of `batch_size` and waits for
  // every ack.
  void SubmitOrDie(const std::string& project, const std::vector<BenchLabel>& labels,
                   int batch_size = 5000);
  // The same through `channel` (another replica's).
  static void SubmitOrDie(const std::shared_ptr<grpc::Channel>& channel,
                          const std::string& project, const std::vector<BenchLabel>& labels,
                          int batch_size = 5000);

  // Starts one more server replica over the same database (following the others, as
  // --follow_replicas does) and returns a channel to it. It stops with the BenchServer.
  std::shared_ptr<grpc::Channel> StartReplicaOrDie();

  // pg_ctl starts the postmaster in a session, hence a scheduler autogroup, of its own at
  // nice 0. Under /tmp/prio_run.sh (autogroup nice -20) on a machine shared with other -20
  // sessions, PostgreSQL then gets a small share of the CPU and the database side of a
  // benchmark measures the scheduler. Gives the postmaster's autogroup (its backends inherit
  // it) this process's autogroup nice; returns a line saying what was done.
  std::string SharePriorityWithPostgres();

 private:
  BenchServer() = default;

  std::string pgdata_;
  std::unique_ptr<storage::EmbeddedPostgres> postgres_;
  std::unique_ptr<server::VerityServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::vector<std::unique_ptr<server::VerityServer>> replicas_;
};

// Exits with `what` and the status message when `status` is not OK.
void CheckOrDie(const grpc::Status& status, const char* what);

}  // namespace verity::bench

#endif  // VERITY_BENCH_BENCH_SERVER_H_
