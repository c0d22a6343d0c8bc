// VerityServer: the whole service in one object — storage, live projects, group-commit ingest,
// background training and the gRPC server with every v1 service, the standard health service
// and server reflection. The process main (server/main.cc) and the end-to-end tests both run
// it; tests use port 0 and read port().
//
// Thread-safety: Shutdown() may be called from any thread, once.
#ifndef VERITY_SERVER_VERITY_SERVER_H_
#define VERITY_SERVER_VERITY_SERVER_H_

#include <memory>
#include <string>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/ingest_pipeline.h"
#include "server/server_core.h"
#include "server/training_scheduler.h"

namespace verity::server {

class VerityServer {
 public:
  struct Options {
    // host:port to listen on; port 0 picks a free port (see port()).
    std::string listen = "localhost:50051";
    // libpq connection string of the database (required here; main.cc starts an embedded
    // PostgreSQL when the user gives none).
    std::string postgres_url;
    // PostgreSQL connections shared by ingest, queries and training.
    int pool_size = 8;
    IngestPipeline::Options ingest;
    TrainingScheduler::Options training;
  };

  // Connects, migrates, restores every project, then starts serving. UNAVAILABLE if the
  // database cannot be reached or the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<VerityServer>> Start(Options options);
  ~VerityServer();

  int port() const { return port_; }
  ServerCore core() { return core_; }

  // Stops accepting calls, lets in-flight calls finish for up to `grace` (streams are
  // cancelled after that), commits and acks everything queued, and stops the trainer.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

 private:
  VerityServer() = default;

  std::unique_ptr<StorageHandles> storage_;
  std::unique_ptr<ProjectRegistry> registry_;
  std::unique_ptr<IngestPipeline> ingest_;
  std::unique_ptr<TrainingScheduler> scheduler_;
  std::unique_ptr<LeasePersister> lease_persister_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> grpc_server_;
  ServerCore core_{};
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_VERITY_SERVER_H_
