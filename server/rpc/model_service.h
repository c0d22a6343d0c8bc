// gRPC adapter for verity.v1.ModelService: model status and versions. TrainModel (explicit
// training control) is not built yet and answers UNIMPLEMENTED.
#ifndef VERITY_SERVER_RPC_MODEL_SERVICE_H_
#define VERITY_SERVER_RPC_MODEL_SERVICE_H_

#include "server/rpc/server_core.h"
#include "verity/v1/models.grpc.pb.h"

namespace verity::server {

class ModelServiceImpl final : public v1::ModelService::Service {
 public:
  explicit ModelServiceImpl(ServerCore core) : core_(core) {}

  grpc::Status GetModelStatus(grpc::ServerContext*, const v1::GetModelStatusRequest*,
                              v1::GetModelStatusResponse*) override;
  grpc::Status ListModelVersions(grpc::ServerContext*, const v1::ListModelVersionsRequest*,
                                 v1::ListModelVersionsResponse*) override;
  grpc::Status TrainModel(grpc::ServerContext*, const v1::TrainModelRequest*,
                          v1::TrainModelResponse*) override;

 private:
  ServerCore core_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_MODEL_SERVICE_H_
