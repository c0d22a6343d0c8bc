// gRPC adapter for verity.v1.KeyService: creating, listing and revoking API keys
// (proto/verity/v1/keys.proto). Admin-only with a key valid for every project
// (server/auth/rpc_policy.cc). With authentication off the service still manages the keys, so that
// they can be made before a server is moved off loopback.
#ifndef VERITY_SERVER_RPC_KEY_SERVICE_H_
#define VERITY_SERVER_RPC_KEY_SERVICE_H_

#include "server/rpc/server_core.h"
#include "verity/v1/keys.grpc.pb.h"

namespace verity::server {

class KeyServiceImpl final : public v1::KeyService::Service {
 public:
  explicit KeyServiceImpl(ServerCore core) : core_(core) {}

  grpc::Status CreateKey(grpc::ServerContext*, const v1::CreateKeyRequest*,
                         v1::CreateKeyResponse*) override;
  grpc::Status ListKeys(grpc::ServerContext*, const v1::ListKeysRequest*,
                        v1::ListKeysResponse*) override;
  grpc::Status RevokeKey(grpc::ServerContext*, const v1::RevokeKeyRequest*,
                         v1::RevokeKeyResponse*) override;

 private:
  ServerCore core_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_KEY_SERVICE_H_
