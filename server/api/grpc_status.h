// The one place where absl::Status becomes grpc::Status (ARCHITECTURE.md: server/ converts in
// one place). Codes map one to one; the message is kept.
#ifndef VERITY_SERVER_API_GRPC_STATUS_H_
#define VERITY_SERVER_API_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace verity::server {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace verity::server

#endif  // VERITY_SERVER_API_GRPC_STATUS_H_
