// gRPC adapter for verity.v1.AssignmentService. Assignment is not built yet: both RPCs answer
// UNIMPLEMENTED with a message saying so.
#ifndef VERITY_SERVER_ASSIGNMENT_SERVICE_H_
#define VERITY_SERVER_ASSIGNMENT_SERVICE_H_

#include "verity/v1/assignment.grpc.pb.h"

namespace verity::server {

class AssignmentServiceImpl final : public v1::AssignmentService::Service {
 public:
  grpc::Status SuggestItems(grpc::ServerContext*, const v1::SuggestItemsRequest*,
                            v1::SuggestItemsResponse*) override {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "SuggestItems (assignment) is not built yet in this release");
  }
  grpc::Status SuggestAnnotators(grpc::ServerContext*, const v1::SuggestAnnotatorsRequest*,
                                 v1::SuggestAnnotatorsResponse*) override {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "SuggestAnnotators (assignment) is not built yet in this release");
  }
};

}  // namespace verity::server

#endif  // VERITY_SERVER_ASSIGNMENT_SERVICE_H_
