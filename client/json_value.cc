#include "client/json_value.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace verity::client {
namespace {

void AppendQuoted(absl::string_view value, std::string& out) {
  out.push_back('"');
  for (char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace

JsonValue JsonValue::Object() {
  JsonValue value;
  value.kind_ = Kind::kObject;
  return value;
}

JsonValue JsonValue::Array() {
  JsonValue value;
  value.kind_ = Kind::kArray;
  return value;
}

JsonValue& JsonValue::Set(absl::string_view key, JsonValue value) {
  members_.emplace_back(std::string(key), std::move(value));
  return *this;
}

JsonValue& JsonValue::Append(JsonValue value) {
  elements_.push_back(std::move(value));
  return *this;
}

std::string JsonValue::Serialize() const {
  std::string out;
  AppendTo(out);
  return out;
}

void JsonValue::AppendTo(std::string& out) const {
  switch (kind_) {
    case Kind::kNull:
      out += "null";
      return;
    case Kind::kBool:
      out += bool_ ? "true" : "false";
      return;
    case Kind::kInt:
      absl::StrAppend(&out, int_);
      return;
    case Kind::kDouble:
      out += FormatShortestDouble(double_);
      return;
    case Kind::kString:
      AppendQuoted(string_, out);
      return;
    case Kind::kArray:
      out.push_back('[');
      for (size_t i = 0; i < elements_.size(); ++i) {
        if (i > 0) out.push_back(',');
        elements_[i].AppendTo(out);
      }
      out.push_back(']');
      return;
    case Kind::kObject:
      out.push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) out.push_back(',');
        AppendQuoted(members_[i].first, out);
        out.push_back(':');
        members_[i].second.AppendTo(out);
      }
      out.push_back('}');
      return;
  }
}

std::string JsonQuote(absl::string_view value) {
  std::string out;
  AppendQuoted(value, out);
  return out;
}

std::string FormatShortestDouble(double value) {
  if (!std::isfinite(value)) return "null";
  // 0.0 and -0.0 both print as "0": a negative zero means nothing here.
  if (value == 0) return "0";
  char buffer[64];
  const std::to_chars_result result =
      std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

void JsonArrayWriter::Add(const JsonValue& element) {
  out_ << (started_ ? ",\n" : "[\n") << element.Serialize();
  started_ = true;
}

void JsonArrayWriter::Finish() {
  out_ << (started_ ? "\n]\n" : "[]\n");
  started_ = true;
}

}  // namespace verity::client
