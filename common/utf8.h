// Well-formed UTF-8 (RFC 3629, section 4): no overlong forms, no surrogates (U+D800-U+DFFF),
// nothing past U+10FFFF. Shared by the server's id validation and the CLI, which checks the ids
// of its input files before they go into protobuf string fields (which must hold UTF-8).
#ifndef VERITY_COMMON_UTF8_H_
#define VERITY_COMMON_UTF8_H_

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace verity {

// The length (1 to 4) of the well-formed UTF-8 sequence `text` starts with, or 0 if it does not
// start with one (or is empty).
size_t Utf8SequenceLength(absl::string_view text);

// The byte offset of the first byte of `text` that does not begin a well-formed UTF-8 sequence,
// or nullopt when all of `text` is well-formed UTF-8.
std::optional<size_t> FirstInvalidUtf8Offset(absl::string_view text);

}  // namespace verity

#endif  // VERITY_COMMON_UTF8_H_
