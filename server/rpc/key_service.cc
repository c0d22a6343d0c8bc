#include "server/rpc/key_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/api/grpc_status.h"
#include "server/api/proto_time.h"
#include "server/auth/auth_interceptor.h"

namespace verity::server {
namespace {

constexpr int kMaxKeyProjects = 1000;

absl::StatusOr<Role> RoleFromProto(v1::Role role) {
  switch (role) {
    case v1::ROLE_READER: return Role::kReader;
    case v1::ROLE_WRITER: return Role::kWriter;
    case v1::ROLE_ADMIN: return Role::kAdmin;
    default:
      return absl::InvalidArgumentError("role: required (ROLE_READER, ROLE_WRITER or ROLE_ADMIN)");
  }
}

v1::Role RoleToProto(const std::string& name) {
  absl::StatusOr<Role> role = ParseRole(name);
  if (!role.ok()) return v1::ROLE_UNSPECIFIED;
  switch (*role) {
    case Role::kReader: return v1::ROLE_READER;
    case Role::kWriter: return v1::ROLE_WRITER;
    case Role::kAdmin: return v1::ROLE_ADMIN;
  }
  return v1::ROLE_UNSPECIFIED;
}

void KeyToProto(const storage::ApiKeyRecord& record, v1::ApiKey* out) {
  out->set_key_id(record.key_id);
  out->set_name(record.name);
  out->set_role(RoleToProto(record.role));
  for (const std::string& p : record.projects) out->add_projects(p);
  SetTimestamp(record.created_at, out->mutable_created_at());
  if (record.revoked_at.has_value()) SetTimestamp(*record.revoked_at, out->mutable_revoked_at());
  out->set_created_by(record.created_by);
}

absl::Status Unavailable() {
  return absl::FailedPreconditionError("API keys are not available on this server");
}

}  // namespace

grpc::Status KeyServiceImpl::CreateKey(grpc::ServerContext* context,
                                       const v1::CreateKeyRequest* request,
                                       v1::CreateKeyResponse* response) {
  auto caller = core_.auth->Admit(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (core_.keys == nullptr) return ToGrpcStatus(Unavailable());
  absl::StatusOr<Role> role = RoleFromProto(request->role());
  if (!role.ok()) return ToGrpcStatus(role.status());
  if (request->projects_size() > kMaxKeyProjects) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("projects: at most ", kMaxKeyProjects, " per key")));
  }
  std::vector<std::string> projects(request->projects().begin(), request->projects().end());
  auto created = core_.keys->Create(request->name(), *role, std::move(projects),
                                    (*caller)->key_id);
  if (!created.ok()) return ToGrpcStatus(created.status());
  KeyToProto(created->record, response->mutable_key());
  response->set_secret_key(created->text);
  return grpc::Status::OK;
}

grpc::Status KeyServiceImpl::ListKeys(grpc::ServerContext* context,
                                      const v1::ListKeysRequest* request,
                                      v1::ListKeysResponse* response) {
  if (auto caller = core_.auth->Admit(context); !caller.ok()) {
    return ToGrpcStatus(caller.status());
  }
  if (core_.keys == nullptr) return ToGrpcStatus(Unavailable());
  auto keys = core_.keys->List(request->include_revoked());
  if (!keys.ok()) return ToGrpcStatus(keys.status());
  for (const storage::ApiKeyRecord& key : *keys) KeyToProto(key, response->add_keys());
  return grpc::Status::OK;
}

grpc::Status KeyServiceImpl::RevokeKey(grpc::ServerContext* context,
                                       const v1::RevokeKeyRequest* request,
                                       v1::RevokeKeyResponse* response) {
  if (auto caller = core_.auth->Admit(context); !caller.ok()) {
    return ToGrpcStatus(caller.status());
  }
  if (core_.keys == nullptr) return ToGrpcStatus(Unavailable());
  if (request->key_id().empty() || request->key_id().size() > 64) {
    return ToGrpcStatus(absl::InvalidArgumentError("key_id: required, at most 64 characters"));
  }
  auto revoked = core_.keys->Revoke(request->key_id());
  if (!revoked.ok()) return ToGrpcStatus(revoked.status());
  KeyToProto(*revoked, response->mutable_key());
  return grpc::Status::OK;
}

}  // namespace verity::server
