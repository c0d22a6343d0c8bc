// gRPC adapter for verity.v1.ProjectService (projects, items, annotators).
#ifndef VERITY_SERVER_RPC_PROJECT_SERVICE_H_
#define VERITY_SERVER_RPC_PROJECT_SERVICE_H_

#include "server/rpc/server_core.h"
#include "storage/project_store.h"
#include "verity/v1/projects.grpc.pb.h"

namespace verity::server {

class ProjectServiceImpl final : public v1::ProjectService::Service {
 public:
  // A ListProjects page ends once its projects pass this many bytes (projects.proto); one
  // project is at most about 33 KB (256 class names of 128 bytes), so a page stays below the
  // 4 MiB a gRPC client receives by default.
  static constexpr size_t kListProjectsPageBytes = size_t{1} << 20;

  explicit ProjectServiceImpl(ServerCore core) : core_(core) {}

  grpc::Status CreateProject(grpc::ServerContext*, const v1::CreateProjectRequest*,
                             v1::CreateProjectResponse*) override;
  grpc::Status GetProject(grpc::ServerContext*, const v1::GetProjectRequest*,
                          v1::GetProjectResponse*) override;
  grpc::Status ListProjects(grpc::ServerContext*, const v1::ListProjectsRequest*,
                            v1::ListProjectsResponse*) override;
  grpc::Status UpdateProjectSettings(grpc::ServerContext*, const v1::UpdateProjectSettingsRequest*,
                                     v1::UpdateProjectSettingsResponse*) override;
  grpc::Status AddItems(grpc::ServerContext*, const v1::AddItemsRequest*,
                        v1::AddItemsResponse*) override;
  grpc::Status AddAnnotators(grpc::ServerContext*, const v1::AddAnnotatorsRequest*,
                             v1::AddAnnotatorsResponse*) override;

 private:
  ServerCore core_;
};

// The v1 view of a live project (settings and counts included).
v1::Project ProjectToProto(const LiveProject& project);
// The same for a project not loaded: its stored record, and counts known from elsewhere.
v1::Project ProjectToProto(const storage::ProjectRecord& record, const ProjectCounts& counts);

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_PROJECT_SERVICE_H_
