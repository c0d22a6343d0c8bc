#include "server/api/proto_time.h"

#include <cstdint>

namespace verity::server {

void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t seconds = absl::ToUnixSeconds(t);  // Rounds down, so the nanos are >= 0.
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(seconds))));
}

}  // namespace verity::server
