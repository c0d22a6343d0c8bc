#include "server/auth/rpc_policy.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "verity/v1/assignment.pb.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/keys.pb.h"
#include "verity/v1/models.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::server {
namespace {

template <typename Request>
std::string ProjectField(const void* request) {
  return static_cast<const Request*>(request)->project();
}

std::string NewProjectName(const void* request) {
  return static_cast<const v1::CreateProjectRequest*>(request)->project().name();
}

template <typename Request>
RpcPolicy Named(Role role) {
  return RpcPolicy{role, ProjectScope::kNamedInRequest, &ProjectField<Request>};
}

using PolicyTable = absl::flat_hash_map<std::string, RpcPolicy>;

const PolicyTable& Table() {
  static const PolicyTable* const kTable = new PolicyTable{
      // Projects.
      {"/verity.v1.ProjectService/CreateProject",
       RpcPolicy{Role::kAdmin, ProjectScope::kNamedInRequest, &NewProjectName}},
      {"/verity.v1.ProjectService/GetProject", Named<v1::GetProjectRequest>(Role::kReader)},
      {"/verity.v1.ProjectService/ListProjects",
       RpcPolicy{Role::kReader, ProjectScope::kFilteredByHandler}},
      {"/verity.v1.ProjectService/UpdateProjectSettings",
       Named<v1::UpdateProjectSettingsRequest>(Role::kAdmin)},
      {"/verity.v1.ProjectService/AddItems", Named<v1::AddItemsRequest>(Role::kWriter)},
      {"/verity.v1.ProjectService/AddAnnotators", Named<v1::AddAnnotatorsRequest>(Role::kWriter)},
      // Ingest: every batch names its project or continues the stream's previous one.
      {"/verity.v1.IngestService/SubmitAnnotations", Named<v1::AnnotationBatch>(Role::kWriter)},
      // Truth.
      {"/verity.v1.TruthService/GetPosteriors", Named<v1::GetPosteriorsRequest>(Role::kReader)},
      {"/verity.v1.TruthService/ListPosteriors", Named<v1::ListPosteriorsRequest>(Role::kReader)},
      {"/verity.v1.TruthService/GetAnnotatorProfiles",
       Named<v1::GetAnnotatorProfilesRequest>(Role::kReader)},
      // Models.
      {"/verity.v1.ModelService/GetModelStatus", Named<v1::GetModelStatusRequest>(Role::kReader)},
      {"/verity.v1.ModelService/ListModelVersions",
       Named<v1::ListModelVersionsRequest>(Role::kReader)},
      {"/verity.v1.ModelService/TrainModel", Named<v1::TrainModelRequest>(Role::kWriter)},
      // Assignment: SuggestItems leases the items it returns, a write.
      {"/verity.v1.AssignmentService/SuggestItems", Named<v1::SuggestItemsRequest>(Role::kWriter)},
      {"/verity.v1.AssignmentService/SuggestAnnotators",
       Named<v1::SuggestAnnotatorsRequest>(Role::kReader)},
      // Keys.
      {"/verity.v1.KeyService/CreateKey", RpcPolicy{Role::kAdmin, ProjectScope::kEveryProject}},
      {"/verity.v1.KeyService/ListKeys", RpcPolicy{Role::kAdmin, ProjectScope::kEveryProject}},
      {"/verity.v1.KeyService/RevokeKey", RpcPolicy{Role::kAdmin, ProjectScope::kEveryProject}},
  };
  return *kTable;
}

}  // namespace

const RpcPolicy* FindRpcPolicy(absl::string_view method) {
  const PolicyTable& table = Table();
  auto it = table.find(method);
  return it == table.end() ? nullptr : &it->second;
}

bool IsOpenMethod(absl::string_view method) {
  return absl::StartsWith(method, "/grpc.health.v1.Health/") ||
         absl::StartsWith(method, "/grpc.reflection.v1alpha.ServerReflection/") ||
         absl::StartsWith(method, "/grpc.reflection.v1.ServerReflection/");
}

std::vector<std::string> PolicyMethodNames() {
  std::vector<std::string> names;
  for (const auto& [name, policy] : Table()) names.push_back(name);
  return names;
}

}  // namespace verity::server
