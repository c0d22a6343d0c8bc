#include "server/verity_server.h"

#include <chrono>
#include <utility>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "server/assignment_service.h"
#include "server/ingest_service.h"
#include "server/log.h"
#include "server/model_service.h"
#include "server/project_service.h"
#include "server/truth_service.h"
#include "server/validation.h"

namespace verity::server {

absl::StatusOr<std::unique_ptr<VerityServer>> VerityServer::Start(Options options) {
  std::unique_ptr<VerityServer> server(new VerityServer());
  auto storage = StorageHandles::Open(options.postgres_url, options.pool_size);
  if (!storage.ok()) return storage.status();
  server->storage_ = std::move(*storage);
  server->registry_ = std::make_unique<ProjectRegistry>(*server->storage_);
  if (absl::Status s = server->registry_->LoadAll(); !s.ok()) return s;
  server->ingest_ = std::make_unique<IngestPipeline>(*server->storage_->annotations, options.ingest);
  server->scheduler_ = std::make_unique<TrainingScheduler>(
      *server->registry_, *server->storage_->versions, options.training);
  server->lease_persister_ = std::make_unique<LeasePersister>(*server->storage_->leases,
                                                              LeasePersister::Options());
  server->core_ = ServerCore{server->storage_.get(), server->registry_.get(),
                             server->ingest_.get(), server->scheduler_.get(),
                             server->lease_persister_.get()};

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &server->port_);
  builder.SetMaxReceiveMessageSize(ApiLimits::kMaxMessageBytes);
  builder.SetMaxSendMessageSize(ApiLimits::kMaxMessageBytes);
  server->services_.push_back(std::make_unique<ProjectServiceImpl>(server->core_));
  server->services_.push_back(std::make_unique<IngestServiceImpl>(server->core_));
  server->services_.push_back(std::make_unique<TruthServiceImpl>(server->core_));
  server->services_.push_back(std::make_unique<ModelServiceImpl>(server->core_));
  server->services_.push_back(std::make_unique<AssignmentServiceImpl>(server->core_));
  for (auto& service : server->services_) builder.RegisterService(service.get());
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               " (address in use or invalid?)"));
  }
  return server;
}

void VerityServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
  }
  if (ingest_ != nullptr) ingest_->Shutdown();
  if (scheduler_ != nullptr) scheduler_->Stop();
  if (lease_persister_ != nullptr) lease_persister_->Shutdown();
}

VerityServer::~VerityServer() { Shutdown(); }

}  // namespace verity::server
