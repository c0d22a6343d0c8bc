#include "bench/bench_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"

namespace verity::bench {

void CheckOrDie(const grpc::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, status.error_message().c_str());
  std::exit(1);
}

std::unique_ptr<BenchServer> BenchServer::StartOrDie(const std::string& name) {
  std::string dir_template = absl::StrCat("/tmp/verity-", name, "-XXXXXX");
  if (mkdtemp(dir_template.data()) == nullptr) {
    std::perror("mkdtemp");
    std::exit(1);
  }
  // The postgres OS user (when running as root) must be able to traverse it.
  chmod(dir_template.c_str(), 0755);
  std::unique_ptr<BenchServer> bench(new BenchServer());
  storage::EmbeddedPostgres::Options pg_options;
  pg_options.data_dir = dir_template + "/pg";
  auto pg = storage::EmbeddedPostgres::Start(pg_options);
  if (!pg.ok()) {
    std::fprintf(stderr, "PostgreSQL: %s\n", pg.status().ToString().c_str());
    std::exit(1);
  }
  bench->postgres_ = std::move(*pg);
  bench->pgdata_ = pg_options.data_dir + "/pgdata";
  server::VerityServer::Options options;
  options.listen = "localhost:0";
  options.postgres_url = bench->postgres_->connection_url();
  options.training.run_in_background = false;
  auto server = server::VerityServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    std::exit(1);
  }
  bench->server_ = std::move(*server);
  bench->channel_ = grpc::CreateChannel(absl::StrCat("localhost:", bench->server_->port()),
                                        grpc::InsecureChannelCredentials());
  return bench;
}

void BenchServer::CreateProjectOrDie(const std::string& project, int num_classes) {
  auto stub = v1::ProjectService::NewStub(channel_);
  grpc::ClientContext context;
  v1::CreateProjectRequest request;
  request.mutable_project()->set_name(project);
  for (int c = 0; c < num_classes; ++c) request.mutable_project()->add_classes(absl::StrCat("c", c));
  v1::CreateProjectResponse response;
  CheckOrDie(stub->CreateProject(&context, request, &response), "CreateProject");
}

std::shared_ptr<grpc::Channel> BenchServer::StartReplicaOrDie() {
  server::VerityServer::Options options;
  options.listen = "localhost:0";
  options.postgres_url = postgres_->connection_url();
  options.training.run_in_background = false;
  auto replica = server::VerityServer::Start(options);
  if (!replica.ok()) {
    std::fprintf(stderr, "replica: %s\n", replica.status().ToString().c_str());
    std::exit(1);
  }
  replicas_.push_back(std::move(*replica));
  return grpc::CreateChannel(absl::StrCat("localhost:", replicas_.back()->port()),
                             grpc::InsecureChannelCredentials());
}

void BenchServer::SubmitOrDie(const std::string& project, const std::vector<BenchLabel>& labels,
                              int batch_size) {
  SubmitOrDie(channel_, project, labels, batch_size);
}

void BenchServer::SubmitOrDie(const std::shared_ptr<grpc::Channel>& channel,
                              const std::string& project, const std::vector<BenchLabel>& labels,
                              int batch_size) {
  auto stub = v1::IngestService::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->SubmitAnnotations(&context);
  v1::AnnotationBatch batch;
  uint64_t batches = 0;
  auto flush = [&] {
    batch.set_project(project);
    batch.set_batch_id(++batches);
    stream->Write(batch);
    batch.Clear();
  };
  for (const BenchLabel& l : labels) {
    v1::Annotation* a = batch.add_annotations();
    a->set_item(l.item);
    a->set_annotator(l.annotator);
    a->set_label(l.label);
    if (batch.annotations_size() == batch_size) flush();
  }
  if (batch.annotations_size() > 0) flush();
  stream->WritesDone();
  v1::BatchAck ack;
  while (stream->Read(&ack)) {
    if (ack.error_code() != 0) {
      std::fprintf(stderr, "ingest: %s\n", ack.error_message().c_str());
      std::exit(1);
    }
  }
  CheckOrDie(stream->Finish(), "SubmitAnnotations");
}

std::string SharePriorityWithPostmaster(const std::string& postmaster_pid) {
  std::ifstream self("/proc/self/autogroup");
  std::string group, nice_word;
  int nice = 0;
  if (postmaster_pid.empty() || !(self >> group >> nice_word >> nice)) {
    return "PostgreSQL autogroup: unchanged (no postmaster.pid or no /proc/self/autogroup)";
  }
  std::ofstream target("/proc/" + postmaster_pid + "/autogroup");
  target << nice << std::flush;
  if (!target) {
    return absl::StrCat("PostgreSQL autogroup: unchanged (could not set nice ", nice,
                        " for postmaster ", postmaster_pid, ")");
  }
  return absl::StrCat("PostgreSQL autogroup: nice ", nice, " (as this process)");
}

std::string BenchServer::SharePriorityWithPostgres() {
  std::ifstream pid_file(pgdata_ + "/postmaster.pid");
  std::string pid;
  std::getline(pid_file, pid);
  return SharePriorityWithPostmaster(pid);
}

}  // namespace verity::bench
