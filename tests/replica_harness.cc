#include "tests/replica_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/server_process.h"

namespace verity::tests {

void Replica::Prepare(grpc::ClientContext& context) const {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
}

std::unique_ptr<Replica> ConnectReplica(std::unique_ptr<server::VerityServer> server) {
  auto r = std::make_unique<Replica>();
  r->channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                   grpc::InsecureChannelCredentials());
  r->server = std::move(server);
  r->projects = v1::ProjectService::NewStub(r->channel);
  r->ingest = v1::IngestService::NewStub(r->channel);
  r->truth = v1::TruthService::NewStub(r->channel);
  r->assignment = v1::AssignmentService::NewStub(r->channel);
  r->model = v1::ModelService::NewStub(r->channel);
  r->keys = v1::KeyService::NewStub(r->channel);
  return r;
}

WorkerProcess::WorkerProcess(const std::string& url, const std::string& name,
                             const std::string& log, int lease_seconds) {
  const std::string binary = RunfilePath("server/training/verity_worker");
  const std::string url_flag = "--postgres_url=" + url, name_flag = "--name=" + name,
                    lease_flag = absl::StrCat("--lease_seconds=", lease_seconds);
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    execl(binary.c_str(), binary.c_str(), url_flag.c_str(), name_flag.c_str(), lease_flag.c_str(),
          "--poll_ms=100", "--device=cpu", static_cast<char*>(nullptr));
    _exit(127);
  }
}

void WorkerProcess::Signal(int sig) {
  if (pid_ <= 0) return;
  kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace verity::tests
