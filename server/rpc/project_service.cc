#include "server/rpc/project_service.h"

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/api/grpc_status.h"
#include "server/api/proto_time.h"
#include "server/api/validation.h"

namespace verity::server {

v1::Project ProjectToProto(const LiveProject& project) {
  const LiveProject::Identity& id = project.identity();
  v1::Project out;
  out.set_name(id.name);
  for (const std::string& c : id.classes) out.add_classes(c);
  out.set_item_feature_dim(id.item_feature_dim);
  out.set_annotator_feature_dim(id.annotator_feature_dim);
  *out.mutable_settings() = project.settings();
  SetTimestamp(id.created_at, out.mutable_created_at());
  ProjectCounts counts = project.Counts();
  out.set_num_items(counts.num_items);
  out.set_num_annotators(counts.num_annotators);
  out.set_num_labels(counts.num_labels);
  out.set_num_revisions(counts.num_revisions);
  return out;
}

v1::Project ProjectToProto(const storage::ProjectRecord& record, const ProjectCounts& counts) {
  v1::Project out;
  out.set_name(record.name);
  for (const std::string& c : record.classes) out.add_classes(c);
  out.set_item_feature_dim(record.item_feature_dim);
  out.set_annotator_feature_dim(record.annotator_feature_dim);
  out.mutable_settings()->ParseFromString(record.settings);
  SetTimestamp(record.created_at, out.mutable_created_at());
  out.set_num_items(counts.num_items);
  out.set_num_annotators(counts.num_annotators);
  out.set_num_labels(counts.num_labels);
  out.set_num_revisions(counts.num_revisions);
  return out;
}

grpc::Status ProjectServiceImpl::CreateProject(grpc::ServerContext* context,
                                               const v1::CreateProjectRequest* request,
                                               v1::CreateProjectResponse* response) {
  auto admitted = core_.auth->Admit(context);
  if (!admitted.ok()) return ToGrpcStatus(admitted.status());
  if (absl::Status s = ValidateNewProject(request->project()); !s.ok()) return ToGrpcStatus(s);
  if (!(*admitted)->AllProjects()) {
    if (absl::Status s = CheckLimitsNotRaised(
            EffectiveQuota(request->project().settings(), core_.quota_defaults),
            core_.quota_defaults, &request->project().settings().limits());
        !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  auto project = core_.registry->Create(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  *response->mutable_project() = ProjectToProto(**project);
  return grpc::Status::OK;
}

grpc::Status ProjectServiceImpl::GetProject(grpc::ServerContext* context,
                                            const v1::GetProjectRequest* request,
                                            v1::GetProjectResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  *response->mutable_project() = ProjectToProto(**project);
  return grpc::Status::OK;
}

grpc::Status ProjectServiceImpl::ListProjects(grpc::ServerContext* context,
                                              const v1::ListProjectsRequest* request,
                                              v1::ListProjectsResponse* response) {
  auto admitted = core_.auth->Admit(context);
  if (!admitted.ok()) return ToGrpcStatus(admitted.status());
  // The token: the id of the last project of the previous page (records come by id).
  absl::StatusOr<int64_t> token =
      ParsePageToken(request->page_token(), std::numeric_limits<int64_t>::max());
  if (!token.ok()) return ToGrpcStatus(token.status());
  int64_t after_id = *token;
  auto records = core_.storage->projects->ListProjects();
  if (!records.ok()) return ToGrpcStatus(records.status());
  for (const storage::ProjectRecord& record : *records) {
    if (record.project_id <= after_id) continue;
    if (!(*admitted)->MayTouch(record.name)) continue;  // Only the key's projects.
    if (response->ByteSizeLong() >= kListProjectsPageBytes) {
      response->set_next_page_token(absl::StrCat(after_id));
      break;
    }
    after_id = record.project_id;
    // Listing is not a use and loads nothing: a loaded project is listed without marking it
    // used (Get would, and a health check listing every few seconds would then keep every
    // project loaded); one the memory budget unloaded from its stored record and its counts
    // when unloaded (loading it here would undo the budget at every listing); any other (one
    // this server never loaded: created on another replica) from its stored record and counts,
    // so that one reader's listing cannot make a server load a thousand projects.
    if (std::shared_ptr<LiveProject> loaded = core_.registry->IfLoaded(record.name)) {
      *response->add_projects() = ProjectToProto(*loaded);
      continue;
    }
    if (std::optional<ProjectCounts> counts = core_.registry->CountsIfUnloaded(record.name)) {
      *response->add_projects() = ProjectToProto(record, *counts);
      continue;
    }
    // A project that cannot be loaded, or is being loaded, is left out rather than failing the
    // whole list (and the health checks that list projects); GetProject on it says why.
    if (core_.registry->LoadingOrFailed(record.name)) continue;
    if (v1::ProjectSettings settings; !settings.ParseFromString(record.settings)) continue;
    absl::StatusOr<ProjectCounts> counts = core_.registry->StoredCounts(record, absl::Now());
    // A project deleted since the listing is left out.
    if (absl::IsNotFound(counts.status())) continue;
    if (!counts.ok()) return ToGrpcStatus(counts.status());
    *response->add_projects() = ProjectToProto(record, *counts);
  }
  return grpc::Status::OK;
}

grpc::Status ProjectServiceImpl::UpdateProjectSettings(
    grpc::ServerContext* context, const v1::UpdateProjectSettingsRequest* request,
    v1::UpdateProjectSettingsResponse* response) {
  auto admitted = core_.auth->Admit(context);
  if (!admitted.ok()) return ToGrpcStatus(admitted.status());
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  if (absl::Status s = ValidateSettings(request->settings()); !s.ok()) return ToGrpcStatus(s);
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  if (absl::Status s = ValidateMethodForClasses(request->settings(), (*project)->num_classes());
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  if (absl::Status s = CheckMethodFitsQuota(
          EffectiveQuota(request->settings(), core_.quota_defaults),
          request->settings().model().method(), (*project)->num_classes(),
          (*project)->Counts().num_annotators);
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  // A key scoped to projects may keep or lower the limits, not raise them; checked against the
  // stored settings in the update's transaction (ProjectRegistry::UpdateSettings).
  std::function<absl::Status(const v1::ProjectSettings&)> admit;
  if (!(*admitted)->AllProjects()) {
    admit = [&](const v1::ProjectSettings& current) {
      return CheckLimitsNotRaised(EffectiveQuota(request->settings(), core_.quota_defaults),
                                  EffectiveQuota(current, core_.quota_defaults),
                                  &request->settings().limits());
    };
  }
  if (absl::Status s = core_.registry->UpdateSettings(**project, request->settings(), admit);
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  *response->mutable_project() = ProjectToProto(**project);
  return grpc::Status::OK;
}

grpc::Status ProjectServiceImpl::AddItems(grpc::ServerContext* context, const v1::AddItemsRequest* request,
                                          v1::AddItemsResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  if (request->items_size() > ApiLimits::kMaxItemsPerCall) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "items: ", request->items_size(), " items; the limit is ", ApiLimits::kMaxItemsPerCall)));
  }
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  LiveProject& live = **project;
  std::vector<storage::ItemWrite> writes;
  writes.reserve(request->items_size());
  for (int i = 0; i < request->items_size(); ++i) {
    const v1::Item& item = request->items(i);
    const std::string field = absl::StrCat("items[", i, "]");
    if (absl::Status s = ValidateId(field + ".id", item.id()); !s.ok()) return ToGrpcStatus(s);
    if (absl::Status s = ValidateFeatures(field + ".features", item.features(),
                                          live.identity().item_feature_dim);
        !s.ok()) {
      return ToGrpcStatus(s);
    }
    if (item.has_gold_label() &&
        (item.gold_label() < 0 || item.gold_label() >= live.num_classes())) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat(field, ".gold_label: ", item.gold_label(), " out of range [0, ",
                       live.num_classes(), ")")));
    }
    storage::ItemWrite w;
    w.external_id = item.id();
    if (item.features_size() > 0) w.features.emplace(item.features().begin(), item.features().end());
    if (item.has_gold_label()) w.gold_label = item.gold_label();
    if (item.has_priority()) {
      if (!std::isfinite(item.priority())) {
        return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(field, ".priority: not finite")));
      }
      w.priority = item.priority();
    }
    writes.push_back(std::move(w));
  }
  // Counted under the project's write order (AddItems runs it there): calls at once are held to
  // the limits one after the other.
  // added: the distinct new ids (an id given twice is added by its first entry and updated by
  // its second); updated: every other entry.
  int32_t added = 0;
  auto admit = [&]() -> absl::Status {
    absl::flat_hash_set<absl::string_view> new_ids;
    for (const v1::Item& item : request->items()) {
      if (!live.FindItem(item.id()).has_value()) new_ids.insert(item.id());
    }
    added = static_cast<int32_t>(new_ids.size());
    return core_.CheckGrowth(live, {static_cast<int64_t>(new_ids.size()), 0, 0});
  };
  auto indices = core_.registry->AddItems(live, std::move(writes), admit);
  if (!indices.ok()) return ToGrpcStatus(indices.status());
  response->set_added(added);
  response->set_updated(request->items_size() - added);
  return grpc::Status::OK;
}

grpc::Status ProjectServiceImpl::AddAnnotators(grpc::ServerContext* context,
                                               const v1::AddAnnotatorsRequest* request,
                                               v1::AddAnnotatorsResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  if (request->annotators_size() > ApiLimits::kMaxItemsPerCall) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "annotators: ", request->annotators_size(), " annotators; the limit is ",
        ApiLimits::kMaxItemsPerCall)));
  }
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  LiveProject& live = **project;
  std::vector<storage::AnnotatorWrite> writes;
  for (int i = 0; i < request->annotators_size(); ++i) {
    const v1::Annotator& a = request->annotators(i);
    const std::string field = absl::StrCat("annotators[", i, "]");
    if (absl::Status s = ValidateId(field + ".id", a.id()); !s.ok()) return ToGrpcStatus(s);
    if (absl::Status s = ValidateFeatures(field + ".features", a.features(),
                                          live.identity().annotator_feature_dim);
        !s.ok()) {
      return ToGrpcStatus(s);
    }
    storage::AnnotatorWrite w;
    w.external_id = a.id();
    if (a.features_size() > 0) w.features.emplace(a.features().begin(), a.features().end());
    writes.push_back(std::move(w));
  }
  // Held across the check, the write and the memory update, as ProjectRegistry's writers do:
  // calls at once are counted against the limits one after the other, and a replica
  // follower's re-read cannot interleave (LiveProject::ApplyStoredEntities).
  absl::MutexLock order(&live.write_order_mu());
  core_.registry->FollowStoredChanges(live);
  // added and updated as AddItems counts them.
  absl::flat_hash_set<absl::string_view> new_ids;
  for (const v1::Annotator& a : request->annotators()) {
    if (!live.FindAnnotator(a.id()).has_value()) new_ids.insert(a.id());
  }
  const int32_t added = static_cast<int32_t>(new_ids.size());
  if (absl::Status s = core_.CheckGrowth(live, {0, static_cast<int64_t>(new_ids.size()), 0});
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  int64_t change_seq = 0;
  auto indices =
      core_.storage->items->UpsertAnnotators(live.identity().project_id, writes, &change_seq);
  if (!indices.ok()) return ToGrpcStatus(indices.status());
  std::vector<std::pair<int32_t, std::string>> registered;
  registered.reserve(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) registered.emplace_back((*indices)[i], writes[i].external_id);
  live.RegisterAnnotators(registered);
  for (size_t i = 0; i < writes.size(); ++i) {
    if (writes[i].features.has_value()) live.SetAnnotatorFeatures((*indices)[i], *writes[i].features);
  }
  if (change_seq > 0) live.NoteOwnChange(change_seq);
  response->set_added(added);
  response->set_updated(request->annotators_size() - added);
  return grpc::Status::OK;
}

}  // namespace verity::server
