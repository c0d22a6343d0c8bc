// Conversions between C++ values and the PostgreSQL text forms that storage/
// passes as statement parameters.
//
// Set-based statements receive whole columns as one array parameter
// (`unnest($1::text[], $2::int[])`), so these helpers build array literals in
// PostgreSQL's text array syntax and parse `real[]` results. Times cross the
// boundary as microseconds since the Unix epoch (`bigint`), which is exactly
// PostgreSQL's timestamptz resolution. All functions are pure and thread-safe.
#ifndef VERITY_STORAGE_SQL_VALUES_H_
#define VERITY_STORAGE_SQL_VALUES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace verity {
namespace storage {

// SQL expression turning a bigint parameter or column of epoch microseconds
// into a timestamptz, e.g. TimestampFromMicrosSql("$3"). NULL stays NULL.
std::string TimestampFromMicrosSql(absl::string_view micros_expr);
// SQL expression turning a timestamptz column into epoch microseconds.
std::string MicrosFromTimestampSql(absl::string_view timestamp_expr);

// absl::Time <-> epoch microseconds (truncating toward negative infinity).
int64_t TimeToMicros(absl::Time t);
absl::Time MicrosToTime(int64_t micros);

// Array literals: "{...}" with every element quoted/escaped as needed.
// std::nullopt elements become NULL.
std::string TextArrayLiteral(absl::Span<const std::string> values);
std::string TextArrayLiteral(absl::Span<const absl::string_view> values);
std::string Int32ArrayLiteral(absl::Span<const int32_t> values);
std::string Int32ArrayLiteral(absl::Span<const std::optional<int32_t>> values);
std::string Int64ArrayLiteral(absl::Span<const int64_t> values);
std::string Int64ArrayLiteral(absl::Span<const std::optional<int64_t>> values);
// A `real[]` literal with round-trip precision; NaN and infinities use
// PostgreSQL's spellings.
std::string FloatArrayLiteral(absl::Span<const float> values);
// double precision[]; nullopt entries become NULL (finite values only).
std::string Float64ArrayLiteral(absl::Span<const std::optional<double>> values);
// A `text[]` literal whose elements are themselves `real[]` literals (NULL for
// nullopt); SQL casts each element back with `::real[]`. This passes ragged or
// partially-NULL feature vectors for many rows in one parameter.
std::string NestedFloatArrayLiteral(
    absl::Span<const std::optional<std::vector<float>>> values);

// Parses a one-dimensional `real[]` value in text form (e.g. "{1,2.5,NaN}").
// Returns INTERNAL on malformed input or NULL elements.
absl::StatusOr<std::vector<float>> ParseFloatArray(absl::string_view text);

// Parses a one-dimensional `text[]` value in text form (e.g. the `classes`
// column) as PostgreSQL writes it: elements double-quoted, with backslash
// escapes, only where needed, else bare (a single quote is then an ordinary
// character). Returns INTERNAL on malformed input or NULL elements.
absl::StatusOr<std::vector<std::string>> ParseTextArray(absl::string_view text);

// Checks an external (client-chosen) id: non-empty, no NUL byte (which libpq
// text parameters cannot carry). `what` names the field in the error.
// Returns INVALID_ARGUMENT otherwise.
absl::Status ValidateExternalId(absl::string_view id, absl::string_view what);

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_SQL_VALUES_H_
