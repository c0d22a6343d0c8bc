#include "server/rpc/model_service.h"

#include "absl/strings/str_cat.h"
#include "models/auto_truth_model.h"
#include "models/calibrated_truth_model.h"
#include "server/api/grpc_status.h"
#include "server/api/proto_time.h"
#include "server/api/validation.h"
#include "server/observability/log.h"
#include "storage/fit_lock.h"
#include "storage/training_job_store.h"

namespace verity::server {
namespace {

void FillVersion(const storage::ModelVersionRecord& record, v1::ModelVersion* out) {
  out->set_version(record.version);
  out->set_method(MethodFromName(record.method));
  out->set_watermark(record.watermark);
  out->set_num_labels(record.num_labels);
  out->set_log_likelihood(record.log_likelihood);
  out->set_iterations(record.iterations);
  out->set_duration_ms(record.duration_ms);
  SetTimestamp(record.created_at, out->mutable_created_at());
}

// Whether a fit of the project runs outside this server: on another replica (it holds the
// project's fit lock) or on a training worker (the project's job is running under a live
// lease). A database that cannot answer counts as "no", logged: GetModelStatus still serves
// what this server knows.
bool FitRunsElsewhere(const ServerCore& core, const LiveProject& live) {
  const int64_t project_id = live.identity().project_id;
  if (core.fit_locks != nullptr) {
    absl::StatusOr<bool> held = core.fit_locks->IsHeld(project_id);
    if (held.ok() && *held) return true;
    if (!held.ok()) {
      LogEvent("model_status_fit_lock_unknown", {{"project", live.identity().name},
                                                 {"error", held.status().ToString()}});
    }
  }
  if (core.training_jobs_possible && core.storage->jobs != nullptr) {
    absl::StatusOr<bool> running = core.storage->jobs->HasRunningJob(project_id);
    if (running.ok()) return *running;
    LogEvent("model_status_training_job_unknown", {{"project", live.identity().name},
                                                   {"error", running.status().ToString()}});
  }
  return false;
}

}  // namespace

grpc::Status ModelServiceImpl::GetModelStatus(grpc::ServerContext* context,
                                              const v1::GetModelStatusRequest* request,
                                              v1::GetModelStatusResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  LiveProject& live = **project;
  v1::TruthMethod method = live.settings().model().method();
  response->set_method(method == v1::TRUTH_METHOD_UNSPECIFIED ? v1::TRUTH_METHOD_DAWID_SKENE
                                                              : method);
  std::shared_ptr<const ProjectSnapshot> snapshot = live.snapshot();
  if (snapshot->version_metadata != nullptr) {
    // The served version's metadata, kept with the snapshot: the status answers while the
    // database does not.
    FillVersion(*snapshot->version_metadata, response->mutable_current_version());
  }
  if (const auto* calibrated =
          dynamic_cast<const models::CalibratedTruthModel*>(snapshot->model.get());
      calibrated != nullptr && calibrated->fits_map()) {
    const models::PosteriorCalibration& c = calibrated->calibration();
    v1::PosteriorCalibration* out = response->mutable_calibration();
    out->set_kind(std::string(models::CalibrationMapKindName(c.kind)));
    out->set_temperature(c.temperature);
    out->set_source(std::string(models::CalibrationSourceName(c.source)));
    out->set_gold_items(c.gold_items);
    out->set_gold_ece_raw(c.gold_ece_raw);
    out->set_gold_ece(c.gold_ece);
  }
  // auto: which method the served version uses, and why.
  const models::TruthModel* served = snapshot->model.get();
  if (const auto* calibrated = dynamic_cast<const models::CalibratedTruthModel*>(served)) {
    served = &calibrated->inner();
  }
  if (const auto* automatic = dynamic_cast<const models::AutoTruthModel*>(served);
      automatic != nullptr && !automatic->choice().method.empty()) {
    response->set_chosen_method(automatic->choice().method);
    response->set_choice_reason(automatic->choice().reason);
  }
  ProjectCounts counts = live.Counts();
  response->set_num_labels(counts.num_labels);
  response->set_labels_since_version(counts.labels_since_version);
  response->set_training(counts.training || FitRunsElsewhere(core_, live));
  return grpc::Status::OK;
}

grpc::Status ModelServiceImpl::ListModelVersions(grpc::ServerContext* context,
                                                 const v1::ListModelVersionsRequest* request,
                                                 v1::ListModelVersionsResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  const int32_t limit = request->limit() == 0 ? 20 : request->limit();
  if (limit < 0 || limit > 1000) {
    return ToGrpcStatus(absl::InvalidArgumentError("limit: must be in [0, 1000]"));
  }
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  auto versions = core_.storage->versions->ListModelVersions((*project)->identity().project_id, limit);
  if (!versions.ok()) return ToGrpcStatus(versions.status());
  for (const storage::ModelVersionRecord& v : *versions) FillVersion(v, response->add_versions());
  return grpc::Status::OK;
}

grpc::Status ModelServiceImpl::TrainModel(grpc::ServerContext* context, const v1::TrainModelRequest* request,
                                          v1::TrainModelResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  absl::StatusOr<storage::ModelVersionRecord> version =
      core_.scheduler->RefitProjectNow(**project, [context] { return context->IsCancelled(); });
  if (!version.ok()) return ToGrpcStatus(version.status());
  FillVersion(*version, response->mutable_version());
  return grpc::Status::OK;
}

}  // namespace verity::server
