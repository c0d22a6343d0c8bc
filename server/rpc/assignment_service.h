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

  // SuggestItems refuses (RESOURCE_EXHAUSTED) a request whose k would take a project past
  // `max_leases_per_project` outstanding leases (> 0; --max_leases_per_project).
  AssignmentServiceImpl(ServerCore core, int64_t max_leases_per_project)
      : core_(core), max_leases_per_project_(max_leases_per_project) {}

  grpc::Status SuggestItems(grpc::ServerContext*, const v1::SuggestItemsRequest*,
                            v1::SuggestItemsResponse*) override;
  grpc::Status SuggestAnnotators(grpc::ServerContext*, const v1::SuggestAnnotatorsRequest*,
                                 v1::SuggestAnnotatorsResponse*) override;

 private:
  ServerCore core_;
  const int64_t max_leases_per_project_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_ASSIGNMENT_SERVICE_H_
