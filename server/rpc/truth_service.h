// gRPC adapter for verity.v1.TruthService: posteriors and annotator profiles, read from the
// project's current immutable snapshot (never blocking ingest or training).
#ifndef VERITY_SERVER_RPC_TRUTH_SERVICE_H_
#define VERITY_SERVER_RPC_TRUTH_SERVICE_H_

#include "server/rpc/server_core.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::server {

class TruthServiceImpl final : public v1::TruthService::Service {
 public:
  explicit TruthServiceImpl(ServerCore core) : core_(core) {}

  grpc::Status GetPosteriors(grpc::ServerContext*, const v1::GetPosteriorsRequest*,
                             v1::GetPosteriorsResponse*) override;
  grpc::Status ListPosteriors(grpc::ServerContext*, const v1::ListPosteriorsRequest*,
                              v1::ListPosteriorsResponse*) override;
  grpc::Status GetAnnotatorProfiles(grpc::ServerContext*, const v1::GetAnnotatorProfilesRequest*,
                                    v1::GetAnnotatorProfilesResponse*) override;

 private:
  ServerCore core_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_TRUTH_SERVICE_H_
