// absl::Time into google.protobuf.Timestamp, for every time a response carries.
#ifndef VERITY_SERVER_API_PROTO_TIME_H_
#define VERITY_SERVER_API_PROTO_TIME_H_

#include <google/protobuf/timestamp.pb.h>

#include "absl/time/time.h"

namespace verity::server {

// Whole seconds and nanoseconds, to the nanosecond (not rounded to the second: a lease
// reported a second early sends a client back before its slot is free).
void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out);

}  // namespace verity::server

#endif  // VERITY_SERVER_API_PROTO_TIME_H_
