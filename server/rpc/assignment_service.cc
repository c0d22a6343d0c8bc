#include "server/rpc/assignment_service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/api/grpc_status.h"
#include "server/api/proto_time.h"
#include "server/api/validation.h"
#include "server/assignment/item_assigner.h"
#include "server/state/label_catch_up.h"

namespace verity::server {
namespace {

absl::Status ValidateK(int32_t k) {
  if (k < 1 || k > AssignmentServiceImpl::kMaxSuggestions) {
    return absl::InvalidArgumentError(
        absl::StrCat("k: ", k, " not in [1, ", AssignmentServiceImpl::kMaxSuggestions, "]"));
  }
  return absl::OkStatus();
}

// The annotator's index, registering an annotator the project has not seen yet, if the
// project's limits allow one more (RESOURCE_EXHAUSTED otherwise, as AddAnnotators). The check,
// the write and the registration hold the project's write order, as AddAnnotators does: new
// annotators asking at once are counted one after the other, and a replica follower's re-read
// cannot interleave.
absl::StatusOr<int32_t> EnsureAnnotator(ServerCore& core, LiveProject& project,
                                        const std::string& id) {
  if (std::optional<int32_t> index = project.FindAnnotator(id)) return *index;
  absl::MutexLock order(&project.write_order_mu());
  if (std::optional<int32_t> index = project.FindAnnotator(id)) return *index;  // Meanwhile.
  if (absl::Status s = core.CheckGrowth(project, {0, 1, 0}); !s.ok()) return s;
  storage::AnnotatorWrite write;
  write.external_id = id;
  int64_t change_seq = 0;
  auto indices =
      core.storage->items->UpsertAnnotators(project.identity().project_id, {write}, &change_seq);
  if (!indices.ok()) return indices.status();
  project.RegisterAnnotators({{(*indices)[0], id}});
  if (change_seq > 0) project.NoteOwnChange(change_seq);
  return (*indices)[0];
}

}  // namespace

absl::Status AssignmentServiceImpl::FollowOtherReplicas(LiveProject& project) {
  if (absl::Status s = CatchUpLabels(*core_.storage->annotations, project); !s.ok()) return s;
  return FollowClaimedLeases(project, *core_.storage->leases, absl::Now());
}

grpc::Status AssignmentServiceImpl::SuggestItems(grpc::ServerContext* context,
                                                 const v1::SuggestItemsRequest* request,
                                                 v1::SuggestItemsResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  if (absl::Status s = ValidateId("annotator", request->annotator()); !s.ok()) return ToGrpcStatus(s);
  if (absl::Status s = ValidateK(request->k()); !s.ok()) return ToGrpcStatus(s);
  if (request->candidate_items_size() > kMaxCandidates) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("candidate_items: at most ", kMaxCandidates, " ids")));
  }
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  LiveProject& live = **project;
  // Before the annotator is created: a refused call changes nothing. Checked against this
  // replica's copy of the project's leases, with several replicas after reading the ones the
  // others claimed (calls at once on two replicas may still pass it by their own k), and the
  // labels they acked (an item the annotator just labelled there is not offered again).
  if (core_.shared_leases) {
    if (absl::Status s = FollowOtherReplicas(live); !s.ok()) return ToGrpcStatus(s);
  }
  const int64_t outstanding = static_cast<int64_t>(live.leases().size(absl::Now()));
  if (outstanding + request->k() > max_leases_per_project_) {
    return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        "project ", live.identity().name, " holds ", outstanding, " outstanding leases; k = ",
        request->k(), " would pass the most a project may hold, ", max_leases_per_project_,
        " (--max_leases_per_project): retry once labels arrive or leases expire")));
  }
  auto annotator = EnsureAnnotator(core_, live, request->annotator());
  if (!annotator.ok()) return ToGrpcStatus(annotator.status());

  std::optional<std::vector<int32_t>> candidates;
  if (request->candidate_items_size() > 0) {
    candidates.emplace();
    candidates->reserve(request->candidate_items_size());
    for (const std::string& id : request->candidate_items()) {
      if (std::optional<int32_t> index = live.FindItem(id)) candidates->push_back(*index);
    }
    if (candidates->empty()) return grpc::Status::OK;  // None of them is known: nothing to do.
    // An id sent twice is one candidate (it would otherwise be suggested twice).
    std::sort(candidates->begin(), candidates->end());
    candidates->erase(std::unique(candidates->begin(), candidates->end()), candidates->end());
  }

  const AssignmentRules rules = AssignmentRules::FromSettings(live.settings().assignment());
  const absl::Time now = absl::Now();
  const absl::Time expires = now + rules.lease;
  // Rank and lease atomically within the project; with several replicas, across them.
  const uint64_t seed = absl::Uniform<uint64_t>(absl::BitGen());
  std::vector<ItemSuggestion> ranked;
  if (core_.shared_leases) {
    absl::StatusOr<std::vector<ItemSuggestion>> claimed =
        RankAndClaimItems(live, *core_.storage->leases, rules, *annotator, request->k(),
                          candidates, now, expires, seed);
    if (!claimed.ok()) return ToGrpcStatus(claimed.status());
    ranked = *std::move(claimed);
  } else {
    ranked = RankAndLeaseItems(live, rules, *annotator, request->k(), candidates, now, expires,
                               seed);
    std::vector<storage::LeaseRecord> leases;
    for (const ItemSuggestion& s : ranked) leases.push_back({s.item, *annotator, expires});
    core_.lease_persister->Enqueue(live.identity().project_id, std::move(leases));
  }
  for (const ItemSuggestion& s : ranked) {
    v1::ItemSuggestion* out = response->add_suggestions();
    std::vector<std::string> id = live.ItemIds(s.item, 1);
    out->set_item(id.empty() ? "" : id[0]);
    out->set_score(s.gain);
    out->set_p_correct(s.p_correct);
    SetTimestamp(expires, out->mutable_lease_expires_at());
  }
  return grpc::Status::OK;
}

int64_t AssignmentServiceImpl::MaxRankedAnnotators(int32_t num_classes) {
  const int64_t max_cells = int64_t{kMaxAnnotatorCandidates} * ApiLimits::kMaxClasses *
                            ApiLimits::kMaxClasses;
  const int64_t per_annotator = std::max<int64_t>(1, int64_t{num_classes} * num_classes);
  return std::max<int64_t>(kMaxAnnotatorCandidates, max_cells / per_annotator);
}

grpc::Status AssignmentServiceImpl::SuggestAnnotators(grpc::ServerContext* context,
                                                      const v1::SuggestAnnotatorsRequest* request,
                                                      v1::SuggestAnnotatorsResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  if (absl::Status s = ValidateId("item", request->item()); !s.ok()) return ToGrpcStatus(s);
  if (absl::Status s = ValidateK(request->k()); !s.ok()) return ToGrpcStatus(s);
  if (request->candidates_size() > kMaxAnnotatorCandidates) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("candidates: at most ", kMaxAnnotatorCandidates, " ids, got ",
                     request->candidates_size())));
  }
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  LiveProject& live = **project;
  std::optional<int32_t> item = live.FindItem(request->item());
  if (!item.has_value()) {
    return ToGrpcStatus(absl::NotFoundError(absl::StrCat(
        "item \"", request->item().substr(0, ApiLimits::kMaxIdBytes), "\" not found in project ",
        request->project())));
  }
  std::vector<std::string> ids;
  std::vector<int32_t> indices;
  if (request->candidates_size() > 0) {
    absl::flat_hash_set<absl::string_view> seen;
    for (int i = 0; i < request->candidates_size(); ++i) {
      const std::string& id = request->candidates(i);
      if (absl::Status s = ValidateId(absl::StrCat("candidates[", i, "]"), id); !s.ok()) {
        return ToGrpcStatus(s);
      }
      if (!seen.insert(id).second) continue;  // Each candidate is suggested at most once.
      ids.push_back(id);
      indices.push_back(live.FindAnnotator(id).value_or(-1));
    }
  } else {
    const int64_t annotators = live.Counts().num_annotators;
    if (const int64_t most = MaxRankedAnnotators(live.num_classes()); annotators > most) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "candidates: required when the project has more than ", most, " annotators at ",
          live.num_classes(), " classes (it has ", annotators, "); pass at most ",
          kMaxAnnotatorCandidates, " ids")));
    }
    ids = live.AnnotatorIds();
    for (size_t a = 0; a < ids.size(); ++a) indices.push_back(static_cast<int32_t>(a));
  }
  // With several replicas, the leases the others claimed are never suggested again either, nor
  // an annotator whose label on the item another replica acked before this call.
  if (core_.shared_leases) {
    if (absl::Status s = FollowOtherReplicas(live); !s.ok()) return ToGrpcStatus(s);
  }
  std::shared_ptr<const ProjectSnapshot> snapshot = live.snapshot();
  for (const AnnotatorSuggestion& s :
       RankAnnotatorsForItem(live, *snapshot, *item, request->k(), indices, absl::Now())) {
    v1::AnnotatorSuggestion* out = response->add_suggestions();
    out->set_annotator(ids[s.candidate]);
    out->set_score(s.gain);
    out->set_p_correct(s.p_correct);
  }
  return grpc::Status::OK;
}

}  // namespace verity::server
