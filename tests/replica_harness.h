// What the tests of several server replicas and training workers share: an in-process replica
// with the stubs of a channel to it, and a verity_worker child process.
#ifndef VERITY_TESTS_REPLICA_HARNESS_H_
#define VERITY_TESTS_REPLICA_HARNESS_H_

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <string>

#include "server/verity_server.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {

// One replica (an in-process VerityServer) and the stubs of a channel to its port.
struct Replica {
  std::unique_ptr<server::VerityServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::ProjectService::Stub> projects;
  std::unique_ptr<v1::IngestService::Stub> ingest;
  std::unique_ptr<v1::TruthService::Stub> truth;
  std::unique_ptr<v1::AssignmentService::Stub> assignment;
  std::unique_ptr<v1::ModelService::Stub> model;
  std::unique_ptr<v1::KeyService::Stub> keys;
  std::string api_key;  // Sent with every call Prepare()s when not empty.

  // A deadline 60 s away, and the API key.
  void Prepare(grpc::ClientContext& context) const;
};

// `server` (started) with a channel to 127.0.0.1:its port and a stub of every service.
std::unique_ptr<Replica> ConnectReplica(std::unique_ptr<server::VerityServer> server);

// A verity_worker child process over `url` (runfile server/training/verity_worker, on the
// CPU, polling every 100 ms, job leases of `lease_seconds`), its stderr in `log`. The
// destructor kills it (SIGKILL) and reaps it.
class WorkerProcess {
 public:
  WorkerProcess(const std::string& url, const std::string& name, const std::string& log,
                int lease_seconds);
  ~WorkerProcess() { Signal(SIGKILL); }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  // Sends `sig` and reaps the process (once).
  void Signal(int sig);

 private:
  pid_t pid_ = -1;
};

}  // namespace verity::tests

#endif  // VERITY_TESTS_REPLICA_HARNESS_H_
