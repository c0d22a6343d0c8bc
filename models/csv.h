// ForEachCsvRecord: a streaming RFC 4180 CSV parser.
//
// Records end with "\n" or "\r\n"; fields are separated by commas; a field
// that starts with a double quote is quoted: it runs to the matching closing
// quote, may contain commas, line breaks and doubled quotes ("" stands for
// one "), and must be followed by a comma or the end of the record. A quote
// inside an unquoted field, text after a closing quote, or an unterminated
// quoted field is INVALID_ARGUMENT naming the line. Blank lines (no
// characters at all) are skipped, a UTF-8 byte-order mark at the start is
// ignored, and the last record need not end with a line break.
//
// The parser reuses one field buffer for all records, so parsing allocates
// only when a record is longer than every record before it.
//
// Thread safety: a pure function; safe from any thread.

#ifndef VERITY_MODELS_CSV_H_
#define VERITY_MODELS_CSV_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace verity::models {

// Calls `on_record(line, fields)` for every record of `text` in order, where
// `line` is the 1-based line on which the record starts. Stops at, and
// returns, the first non-OK status of `on_record` or of parsing.
absl::Status ForEachCsvRecord(
    std::string_view text,
    absl::FunctionRef<absl::Status(int64_t line,
                                   absl::Span<const std::string> fields)>
        on_record);

}  // namespace verity::models

#endif  // VERITY_MODELS_CSV_H_
