// RpcPolicy: which role each RPC needs and which project it touches — the access table the
// authorization interceptor (server/auth/auth_interceptor.h) applies to every call.
//
// Every method of every verity.v1 service has an entry (rpc_policy_test checks this against
// the compiled protos, so a new RPC without a policy fails the build's tests). The standard
// health service and server reflection are open: load balancers and grpcurl must reach them
// without a key, and they reveal nothing that is not in the published .proto files.
//
// Thread-safety: the table is immutable.
#ifndef VERITY_SERVER_AUTH_RPC_POLICY_H_
#define VERITY_SERVER_AUTH_RPC_POLICY_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/auth/api_keys.h"

namespace verity::server {

enum class ProjectScope {
  // The request names one project (`project`, or `project.name` for CreateProject); the key
  // must be valid for it.
  kNamedInRequest,
  // The call names no project; the handler shows only the key's projects (ListProjects).
  kFilteredByHandler,
  // The call concerns the whole server (API keys): the key must be valid for every project.
  kEveryProject,
};

struct RpcPolicy {
  Role role;
  ProjectScope scope;
  // For kNamedInRequest: the project named by a received request message of this method
  // (the pointer is the method's own request type, as gRPC hands it to interceptors).
  std::string (*project)(const void* request) = nullptr;
};

// The policy of a full method name ("/verity.v1.TruthService/GetPosteriors"); nullptr for a
// method not in the table.
const RpcPolicy* FindRpcPolicy(absl::string_view method);

// Health checks and reflection: no key needed.
bool IsOpenMethod(absl::string_view method);

// Every method name in the table (for tests).
std::vector<std::string> PolicyMethodNames();

}  // namespace verity::server

#endif  // VERITY_SERVER_AUTH_RPC_POLICY_H_
