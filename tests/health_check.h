// grpc.health.v1.Health/Check through a generic stub: the repository has no generated health
// stubs (the request is field 1, the service name; the response field 1, the status, absent
// when 0).
#ifndef VERITY_TESTS_HEALTH_CHECK_H_
#define VERITY_TESTS_HEALTH_CHECK_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace verity::testing {

enum class Health { kUnknown = 0, kServing = 1, kNotServing = 2 };

// The health of `service` ("" = the server as a whole), with a 5 s deadline. The call's own
// error as a status: NOT_FOUND for a name the server does not know.
absl::StatusOr<Health> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                   const std::string& service);

}  // namespace verity::testing

#endif  // VERITY_TESTS_HEALTH_CHECK_H_
