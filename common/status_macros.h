// Status propagation macros for absl::Status / absl::StatusOr.
//
// Debian's Abseil (20220623) ships neither ABSL_RETURN_IF_ERROR nor
// ABSL_ASSIGN_OR_RETURN, so Verity defines its own. Both are plain statement
// macros with no state; they are as thread-safe as the expressions they wrap.
//
//   VERITY_RETURN_IF_ERROR(expr);
//     Evaluates `expr` (an absl::Status) once; if it is not OK, returns it
//     from the enclosing function (which must return absl::Status or
//     absl::StatusOr<T>).
//
//   VERITY_ASSIGN_OR_RETURN(lhs, expr);
//     Evaluates `expr` (an absl::StatusOr<T>) once; if it is not OK, returns
//     its status; otherwise moves the value into `lhs`, which may be a
//     declaration (`auto x`, `std::vector<int> v`) or an existing lvalue.
//     `lhs` must not contain commas (use a type alias for such types), and
//     the macro expands to several statements: do not use it as the body of
//     an unbraced if/else.
#ifndef VERITY_COMMON_STATUS_MACROS_H_
#define VERITY_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define VERITY_RETURN_IF_ERROR(expr)                         \
  do {                                                       \
    ::absl::Status verity_status_macro_status_ = (expr);     \
    if (!verity_status_macro_status_.ok()) {                 \
      return verity_status_macro_status_;                    \
    }                                                        \
  } while (false)

#define VERITY_STATUS_MACROS_CONCAT_INNER_(a, b) a##b
#define VERITY_STATUS_MACROS_CONCAT_(a, b) \
  VERITY_STATUS_MACROS_CONCAT_INNER_(a, b)

#define VERITY_ASSIGN_OR_RETURN(lhs, expr)                                  \
  VERITY_ASSIGN_OR_RETURN_IMPL_(                                            \
      VERITY_STATUS_MACROS_CONCAT_(verity_statusor_, __LINE__), lhs, expr)

#define VERITY_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) {                                    \
    return std::move(statusor).status();                   \
  }                                                        \
  lhs = std::move(statusor).value()

#endif  // VERITY_COMMON_STATUS_MACROS_H_
