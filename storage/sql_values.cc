#include "storage/sql_values.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace verity {
namespace storage {
namespace {

void AppendQuotedElement(absl::string_view value, std::string* out) {
  out->push_back('"');
  for (char c : value) {
    if (c == '"' || c == '\\') out->push_back('\\');
    out->push_back(c);
  }
  out->push_back('"');
}

template <typename T>
std::string IntegerArrayLiteral(absl::Span<const T> values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, values[i]);
  }
  out.push_back('}');
  return out;
}

template <typename T>
std::string OptionalIntegerArrayLiteral(
    absl::Span<const std::optional<T>> values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    if (values[i].has_value()) {
      absl::StrAppend(&out, *values[i]);
    } else {
      out.append("NULL");
    }
  }
  out.push_back('}');
  return out;
}

void AppendFloat(float v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "Infinity" : "-Infinity");
  } else {
    // 9 significant digits round-trip any float.
    absl::StrAppendFormat(out, "%.9g", v);
  }
}

}  // namespace

std::string TimestampFromMicrosSql(absl::string_view micros_expr) {
  return absl::StrCat("(timestamptz 'epoch' + (", micros_expr,
                      ") * interval '1 microsecond')");
}

std::string MicrosFromTimestampSql(absl::string_view timestamp_expr) {
  // EXTRACT returns numeric in PostgreSQL 14+, so this is exact.
  return absl::StrCat("(extract(epoch from ", timestamp_expr,
                      ") * 1000000)::bigint");
}

int64_t TimeToMicros(absl::Time t) { return absl::ToUnixMicros(t); }

absl::Time MicrosToTime(int64_t micros) { return absl::FromUnixMicros(micros); }

std::string TextArrayLiteral(absl::Span<const std::string> values) {
  std::string out = "{";
  size_t total = 2;
  for (const std::string& v : values) total += v.size() + 3;
  out.reserve(total);
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendQuotedElement(values[i], &out);
  }
  out.push_back('}');
  return out;
}

std::string TextArrayLiteral(absl::Span<const absl::string_view> values) {
  std::string out = "{";
  size_t total = 2;
  for (absl::string_view v : values) total += v.size() + 3;
  out.reserve(total);
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendQuotedElement(values[i], &out);
  }
  out.push_back('}');
  return out;
}

std::string Int32ArrayLiteral(absl::Span<const int32_t> values) {
  return IntegerArrayLiteral(values);
}
std::string Int32ArrayLiteral(absl::Span<const std::optional<int32_t>> values) {
  return OptionalIntegerArrayLiteral(values);
}
std::string Int64ArrayLiteral(absl::Span<const int64_t> values) {
  return IntegerArrayLiteral(values);
}
std::string Int64ArrayLiteral(absl::Span<const std::optional<int64_t>> values) {
  return OptionalIntegerArrayLiteral(values);
}

std::string FloatArrayLiteral(absl::Span<const float> values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendFloat(values[i], &out);
  }
  out.push_back('}');
  return out;
}

std::string Float64ArrayLiteral(absl::Span<const std::optional<double>> values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    if (values[i].has_value()) {
      absl::StrAppend(&out, absl::StrFormat("%.17g", *values[i]));
    } else {
      out.append("NULL");
    }
  }
  out.push_back('}');
  return out;
}

std::string NestedFloatArrayLiteral(
    absl::Span<const std::optional<std::vector<float>>> values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    if (values[i].has_value()) {
      // The inner literal has no quotes or backslashes; quote it as a whole.
      out.push_back('"');
      out.append(FloatArrayLiteral(*values[i]));
      out.push_back('"');
    } else {
      out.append("NULL");
    }
  }
  out.push_back('}');
  return out;
}

absl::StatusOr<std::vector<float>> ParseFloatArray(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') {
    return absl::InternalError(
        absl::StrCat("malformed real[] value from PostgreSQL: ", text));
  }
  std::vector<float> out;
  absl::string_view body = text.substr(1, text.size() - 2);
  if (body.empty()) return out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == absl::string_view::npos) comma = body.size();
    absl::string_view element =
        absl::StripAsciiWhitespace(body.substr(start, comma - start));
    float value = 0;
    if (element == "NaN") {
      value = std::nanf("");
    } else if (element == "Infinity") {
      value = INFINITY;
    } else if (element == "-Infinity") {
      value = -INFINITY;
    } else if (!absl::SimpleAtof(element, &value)) {
      return absl::InternalError(absl::StrCat(
          "malformed element '", element, "' in real[] value from PostgreSQL"));
    }
    out.push_back(value);
    start = comma + 1;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseTextArray(absl::string_view text) {
  // PostgreSQL's array output (array_out): '{', the elements separated by ',', '}'. An element
  // is double-quoted, with '"' and '\\' escaped by a backslash, when it is empty, spells NULL
  // (any case), or holds a quote, backslash, brace, comma or white space; otherwise it is
  // written bare, and a bare NULL is a NULL element. (pqxx 6.4's array_parser also took a
  // single quote as quoting, so a bare element beginning with one was misread or aborted the
  // process.)
  auto malformed = [&text](absl::string_view why) {
    return absl::InternalError(absl::StrCat("malformed text[] value from PostgreSQL (", why,
                                            "): ", text.substr(0, 200)));
  };
  std::vector<std::string> out;
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') {
    return malformed("not one pair of braces");
  }
  const absl::string_view body = text.substr(1, text.size() - 2);
  if (body.empty()) return out;
  size_t at = 0;
  while (true) {
    std::string element;
    if (at < body.size() && body[at] == '"') {
      for (++at;; ++at) {
        if (at >= body.size()) return malformed("an unterminated quoted element");
        if (body[at] == '"') break;
        if (body[at] == '\\' && ++at >= body.size()) {
          return malformed("an escape at the end");
        }
        element.push_back(body[at]);
      }
      ++at;  // The closing quote.
    } else {
      const size_t end = std::min(body.find(',', at), body.size());
      element = std::string(body.substr(at, end - at));
      if (element.empty()) return malformed("an empty bare element");
      if (element.find_first_of("\"\\{}") != std::string::npos) {
        return malformed("a quote, backslash or brace in a bare element");
      }
      if (absl::EqualsIgnoreCase(element, "NULL")) {
        return absl::InternalError("unexpected NULL in text[] value");
      }
      at = end;
    }
    out.push_back(std::move(element));
    if (at == body.size()) return out;
    if (body[at] != ',') return malformed("no comma after an element");
    ++at;
  }
}

absl::Status ValidateExternalId(absl::string_view id, absl::string_view what) {
  if (id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must not be empty"));
  }
  if (id.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must not contain NUL bytes"));
  }
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace verity
