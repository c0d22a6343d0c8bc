// JsonValue: a JSON document built in memory and serialized compactly, for
// the CLI's machine-readable output (`--output=json`, `export
// --format=jsonl`). Object members keep their insertion order, so output is
// stable and reads in the order the code builds it.
//
// Only what the CLI writes is supported: no parsing. Doubles are written in
// their shortest form that reads back to the same double; NaN and infinities,
// which JSON cannot represent, are written as null. Strings are expected to
// be UTF-8 and are written with the escapes JSON requires (quote, backslash,
// control characters); other bytes are copied as they are.
//
// Thread safety: a JsonValue is a plain value; const methods may be called
// concurrently.

#ifndef VERITY_CLIENT_JSON_VALUE_H_
#define VERITY_CLIENT_JSON_VALUE_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace verity::client {

class JsonValue {
 public:
  // null.
  JsonValue() = default;
  JsonValue(bool value) : kind_(Kind::kBool), bool_(value) {}  // NOLINT
  // Any integer type but bool (an int32_t must not pick the bool or double
  // constructor).
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>,
                             int> = 0>
  JsonValue(T value)  // NOLINT
      : kind_(Kind::kInt), int_(static_cast<int64_t>(value)) {}
  JsonValue(double value) : kind_(Kind::kDouble), double_(value) {}  // NOLINT
  JsonValue(absl::string_view value)                                 // NOLINT
      : kind_(Kind::kString), string_(value) {}
  JsonValue(const char* value)  // NOLINT
      : JsonValue(absl::string_view(value)) {}
  JsonValue(const std::string& value)  // NOLINT
      : JsonValue(absl::string_view(value)) {}

  static JsonValue Object();
  static JsonValue Array();

  // Appends the member `key`: `value` to an object (the caller keeps keys
  // unique). Returns *this for chaining. Must be called on an object.
  JsonValue& Set(absl::string_view key, JsonValue value);
  // Appends `value` to an array. Returns *this. Must be called on an array.
  JsonValue& Append(JsonValue value);

  // Compact JSON text without spaces or a trailing newline.
  std::string Serialize() const;
  void AppendTo(std::string& out) const;

 private:
  enum class Kind { kNull, kBool, kInt, kDouble, kString, kArray, kObject };

  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  std::vector<JsonValue> elements_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

// `value` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view value);

// `value` in its shortest decimal form that reads back exactly ("0.5",
// "0.30000000000000004", "1e-07", "3"); "null" when it is not finite. Also
// the number format of the CLI's exported CSV.
std::string FormatShortestDouble(double value);

// Writes a JSON array one element per line, as its elements become known, so
// a long listing streams instead of being held in memory:
//   [
//   {...},
//   {...}
//   ]
// An empty array is written "[]". Finish writes the closing bracket and a
// newline; nothing is written before the first Add or Finish, so a command
// that fails before its first element leaves its output empty.
class JsonArrayWriter {
 public:
  explicit JsonArrayWriter(std::ostream& out) : out_(out) {}
  void Add(const JsonValue& element);
  void Finish();

 private:
  std::ostream& out_;
  bool started_ = false;
};

}  // namespace verity::client

#endif  // VERITY_CLIENT_JSON_VALUE_H_
