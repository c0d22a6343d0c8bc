#include "storage/sql_values.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pqxx/array"
#include "storage/pg_status.h"

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

absl::StatusOr<std::vector<std::string>> ParseTextArray(
    absl::string_view text) {
  const std::string input(text);  // array_parser needs a NUL-terminated copy.
  std::vector<std::string> out;
  return CatchPqxx("parsing a text[] value", [&]() -> absl::StatusOr<std::vector<std::string>> {
    // MONOBYTE scanning is safe for UTF-8: multi-byte sequences never contain
    // ASCII quote, backslash, comma or brace bytes.
    pqxx::array_parser parser(input.c_str());
    int depth = 0;
    while (true) {
      auto [juncture, value] = parser.get_next();
      switch (juncture) {
        case pqxx::array_parser::row_start:
          if (++depth > 1) {
            return absl::InternalError("unexpected nested text[] value");
          }
          break;
        case pqxx::array_parser::row_end:
          --depth;
          break;
        case pqxx::array_parser::null_value:
          return absl::InternalError("unexpected NULL in text[] value");
        case pqxx::array_parser::string_value:
          out.push_back(std::move(value));
          break;
        case pqxx::array_parser::done:
          return std::move(out);
      }
    }
  });
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
