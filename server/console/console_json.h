// JsonWriter: appends one JSON value to a string, for the web console's small responses.
// It writes what it is told in order and inserts the commas; the caller nests Begin/End
// calls correctly and names every member of an object with Key(). Strings are escaped per
// RFC 8259 (quote, backslash, control characters; other UTF-8 bytes pass through);
// non-finite numbers are written as null, which JSON has no other spelling for.
//
// Thread-compatible.
#ifndef VERITY_SERVER_CONSOLE_CONSOLE_JSON_H_
#define VERITY_SERVER_CONSOLE_CONSOLE_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace verity::server {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  const std::string& text() const { return out_; }

 private:
  // Writes the comma before a value or key that follows another in the same container.
  void Separate();

  std::string out_;
  // Per open container: whether it has an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

// `value` as a quoted JSON string.
std::string JsonQuote(absl::string_view value);

}  // namespace verity::server

#endif  // VERITY_SERVER_CONSOLE_CONSOLE_JSON_H_
