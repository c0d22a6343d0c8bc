// Conversion of libpqxx exceptions into absl::Status: the one place where
// storage/ decides which status code a PostgreSQL failure maps to.
//
// No libpqxx (or other) exception may leave storage/. Every call into libpqxx
// is wrapped in a try block whose `catch (...)` calls
// StatusFromCurrentException(), or is run through CatchPqxx(). The mapping
// follows what the caller should do next:
//
//   broken connection, commit outcome unknown,
//   server shutting down (SQLSTATE 08***, 57P01-57P03),
//   too many connections (53300)                  -> UNAVAILABLE
//   unique violation (23505)                       -> ALREADY_EXISTS
//   other integrity violations (23***),
//   data exceptions (22***)                        -> INVALID_ARGUMENT
//   serialization failure (40001),
//   deadlock (40P01)                               -> ABORTED
//   statement timeout / cancel (57014)             -> DEADLINE_EXCEEDED
//   out of memory (std::bad_alloc)                 -> RESOURCE_EXHAUSTED
//   anything else                                  -> INTERNAL
//
// Messages carry the caller's context and, for SQL errors, the SQLSTATE.
// All functions are stateless and thread-safe.
#ifndef VERITY_STORAGE_PG_STATUS_H_
#define VERITY_STORAGE_PG_STATUS_H_

#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace verity {
namespace storage {

// Maps a SQLSTATE (five characters) to a status code as in the table above.
absl::StatusCode StatusCodeForSqlState(absl::string_view sqlstate);

// Must be called from inside a `catch` block. Classifies the exception being
// handled and returns a non-OK status whose message starts with `context`.
// Never throws.
absl::Status StatusFromCurrentException(absl::string_view context);

// Runs `fn` (returning absl::Status or absl::StatusOr<T>), converting any
// exception it throws with StatusFromCurrentException(context).
template <typename F>
auto CatchPqxx(absl::string_view context, F&& fn) -> decltype(fn()) {
  try {
    return std::forward<F>(fn)();
  } catch (...) {
    return StatusFromCurrentException(context);
  }
}

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_PG_STATUS_H_
