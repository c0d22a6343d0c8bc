// ServerCore: the objects every RPC handler works through. Handlers own nothing; they
// validate, convert proto to domain types, call into the core and convert back.
#ifndef VERITY_SERVER_RPC_SERVER_CORE_H_
#define VERITY_SERVER_RPC_SERVER_CORE_H_

#include "absl/status/status.h"
#include "server/api/project_quota.h"
#include "server/assignment/lease_persister.h"
#include "server/auth/auth_interceptor.h"
#include "server/auth/key_ring.h"
#include "server/ingest/ingest_pipeline.h"
#include "server/state/project_registry.h"
#include "server/state/storage_handles.h"
#include "server/training/training_scheduler.h"
#include "storage/fit_lock.h"

namespace verity::server {

struct ServerCore {
  StorageHandles* storage;
  ProjectRegistry* registry;
  IngestPipeline* ingest;
  TrainingScheduler* scheduler;
  LeasePersister* lease_persister;
  // The authorization interceptor's decisions: every handler starts with auth->Admit(), and
  // handlers of large answers reserve their bytes (auth->ReserveAnswerBytes) before building.
  CallAuthorizations* auth;
  KeyRing* keys;
  // Per-project limits where a project's settings leave them 0 (server flags).
  ProjectQuota quota_defaults;
  // Several replicas share the database (VerityServer::Options::follow_replicas): leases are
  // claimed in PostgreSQL at once (RankAndClaimItems) instead of written behind the request.
  bool shared_leases = false;
  // Null unless the replicas share the database: the fit locks, through which GetModelStatus
  // sees a fit running on another replica.
  storage::FitLocks* fit_locks = nullptr;
  // Whether a training worker may be fitting a project: this server enqueues training jobs
  // (--trainer=workers), or other servers share the database (one of them may). Only then does
  // GetModelStatus ask the training jobs; a single in-process replica's status reads nothing
  // from the database.
  bool training_jobs_possible = false;

  // OK when `added` keeps `live` within its limits (settings.limits, else quota_defaults);
  // otherwise RESOURCE_EXHAUSTED naming the limit. Every handler that adds items or annotators
  // outside ingest (which checks whole batches) asks first.
  absl::Status CheckGrowth(const LiveProject& live, const ProjectGrowth& added) const {
    const ProjectCounts counts = live.Counts();
    return CheckProjectQuota(EffectiveQuota(live.settings(), quota_defaults),
                             {counts.num_items, counts.num_annotators, counts.num_labels}, added,
                             DenseConfusionCellsPerAnnotator(live.settings().model().method(),
                                                             live.num_classes()),
                             live.identity().item_feature_dim,
                             live.identity().annotator_feature_dim);
  }
};

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_SERVER_CORE_H_
