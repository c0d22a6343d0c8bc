// The client_time values AnnotationStore can write.
//
// annotations.client_time is a timestamptz written through COPY's text form
// with four-digit years and microseconds, so the store accepts exactly the
// instants in [0001-01-01T00:00:00, 9999-12-31T23:59:59.999999] UTC and
// refuses the rest with INVALID_ARGUMENT. The bound is the instant itself,
// not its microseconds: 9999-12-31T23:59:59.999999001 is refused, although
// truncating it would fit. Request validation (server/api/validation.h) and
// the request fuzzer check their bounds against this function.
//
// Header-only and dependency-free besides Abseil, so that the clang-built
// fuzzer can use it without linking storage/. Pure and thread-safe.
#ifndef VERITY_STORAGE_CLIENT_TIME_RANGE_H_
#define VERITY_STORAGE_CLIENT_TIME_RANGE_H_

#include <cstdint>

#include "absl/time/time.h"

namespace verity {
namespace storage {

// 0001-01-01T00:00:00Z in Unix seconds.
inline constexpr int64_t kMinClientTimeUnixSeconds = -62135596800;
// 9999-12-31T23:59:59.999999Z in Unix microseconds.
inline constexpr int64_t kMaxClientTimeUnixMicros = int64_t{253402300799} * 1000000 + 999999;

// True iff AnnotationStore::CommitAnnotations accepts `t` as a client_time.
inline bool ClientTimeInStoreRange(absl::Time t) {
  return t >= absl::FromUnixSeconds(kMinClientTimeUnixSeconds) &&
         t <= absl::FromUnixMicros(kMaxClientTimeUnixMicros);
}

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_CLIENT_TIME_RANGE_H_
