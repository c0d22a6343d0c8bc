// gRPC adapter for verity.v1.AssignmentService: SuggestItems (ranked and leased) and
// SuggestAnnotators (ranked), over the ranking in server/assignment/item_assigner.h.
#ifndef VERITY_SERVER_RPC_ASSIGNMENT_SERVICE_H_
#define VERITY_SERVER_RPC_ASSIGNMENT_SERVICE_H_

#include "server/rpc/server_core.h"
#include "verity/v1/assignment.grpc.pb.h"

namespace verity::server {

class AssignmentServiceImpl final : public v1::AssignmentService::Service {
 public:
  static constexpr int kMaxSuggestions = 1000;
  static constexpr int kMaxCandidates = 100000;  // SuggestItems' candidate_items.
  static constexpr int kMaxAnnotatorCandidates = 10000;  // SuggestAnnotators' candidates.
  // How many of the project's annotators SuggestAnnotators without candidates ranks at most:
  // scoring one builds its K x K confusion, so this keeps such a call within the work of the
  // largest explicit list at the most classes (10,000 x 256^2 cells): 10,000 annotators at
  // 256 classes, 2,560,000 at 16, and never fewer than 10,000.
  static int64_t MaxRankedAnnotators(int32_t num_classes);

  // SuggestItems refuses (RESOURCE_EXHAUSTED) a request whose k would take a project past
  // `max_leases_per_project` outstanding leases (> 0; --max_leases_per_project).
  AssignmentServiceImpl(ServerCore core, int64_t max_leases_per_project)
      : core_(core), max_leases_per_project_(max_leases_per_project) {}

  grpc::Status SuggestItems(grpc::ServerContext*, const v1::SuggestItemsRequest*,
                            v1::SuggestItemsResponse*) override;
  grpc::Status SuggestAnnotators(grpc::ServerContext*, const v1::SuggestAnnotatorsRequest*,
                                 v1::SuggestAnnotatorsResponse*) override;

 private:
  // With several replicas (core_.shared_leases): reads the labels other replicas committed to
  // `project` and the leases they claimed, so that a suggestion sees every label acked and
  // every lease granted anywhere before the call (assignment.proto: never an annotator who
  // already labelled the item, no item past max_labels_per_item). UNAVAILABLE when
  // PostgreSQL is unreachable.
  absl::Status FollowOtherReplicas(LiveProject& project);

  ServerCore core_;
  const int64_t max_leases_per_project_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_ASSIGNMENT_SERVICE_H_
