// ApiKeyMetadataProcessor: refuses a call without a valid API key when its initial metadata
// arrives, on TLS connections, before gRPC reads the call's message. The interceptor
// (auth_interceptor.h) still decides role and project per call; this only stops callers
// without a key from making the server read (and hold) up to 16 MiB per call.
//
// Open methods (health, reflection) pass without a key.
//
// Thread-safety: Process may run on several threads at once.
#ifndef VERITY_SERVER_AUTH_KEY_METADATA_PROCESSOR_H_
#define VERITY_SERVER_AUTH_KEY_METADATA_PROCESSOR_H_

#include <grpcpp/security/auth_metadata_processor.h>

#include "server/auth/key_ring.h"

namespace verity::server {

class ApiKeyMetadataProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // `keys` must outlive the processor.
  explicit ApiKeyMetadataProcessor(KeyRing& keys) : keys_(keys) {}

  // Authenticate may refresh the ring from PostgreSQL: not on gRPC's own threads.
  bool IsBlocking() const override { return true; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  KeyRing& keys_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_AUTH_KEY_METADATA_PROCESSOR_H_
