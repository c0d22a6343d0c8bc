#include "server/auth/key_metadata_processor.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "server/auth/rpc_policy.h"

namespace verity::server {
namespace {

absl::string_view View(const grpc::string_ref& s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

grpc::Status ApiKeyMetadataProcessor::Process(const InputMetadata& auth_metadata,
                                              grpc::AuthContext* /*context*/,
                                              OutputMetadata* /*consumed_auth_metadata*/,
                                              OutputMetadata* /*response_metadata*/) {
  auto authorization = auth_metadata.find("authorization");
  if (authorization == auth_metadata.end()) {
    auto path = auth_metadata.find(":path");
    if (path != auth_metadata.end() && IsOpenMethod(View(path->second))) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "no API key: send \"authorization: Bearer <key>\"");
  }
  absl::string_view key = View(authorization->second);
  if (!absl::ConsumePrefix(&key, "Bearer ")) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization must be \"Bearer <key>\"");
  }
  absl::StatusOr<std::shared_ptr<const Principal>> who = keys_.Authenticate(key);
  if (!who.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(who.status().code()),
                        std::string(who.status().message()));
  }
  return grpc::Status::OK;
}

}  // namespace verity::server
