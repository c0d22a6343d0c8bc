#include "models/csv.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verity::models {

absl::Status ForEachCsvRecord(
    std::string_view text,
    absl::FunctionRef<absl::Status(int64_t line,
                                   absl::Span<const std::string> fields)>
        on_record) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);

  std::vector<std::string> fields;
  size_t num_fields = 0;
  auto next_field = [&]() -> std::string& {
    if (num_fields == fields.size()) fields.emplace_back();
    std::string& f = fields[num_fields++];
    f.clear();
    return f;
  };

  int64_t line = 1;
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    // Skip blank lines.
    if (text[pos] == '\n') {
      ++pos;
      ++line;
      continue;
    }
    if (text[pos] == '\r' && pos + 1 < n && text[pos + 1] == '\n') {
      pos += 2;
      ++line;
      continue;
    }
    const int64_t record_line = line;
    num_fields = 0;
    bool end_of_record = false;
    while (!end_of_record) {
      std::string& field = next_field();
      if (pos < n && text[pos] == '"') {
        ++pos;
        while (true) {
          if (pos >= n) {
            return absl::InvalidArgumentError(absl::StrCat(
                "line ", record_line, ": quoted field is not terminated"));
          }
          const char c = text[pos];
          if (c == '"') {
            if (pos + 1 < n && text[pos + 1] == '"') {
              field.push_back('"');
              pos += 2;
              continue;
            }
            ++pos;
            break;
          }
          if (c == '\n') ++line;
          field.push_back(c);
          ++pos;
        }
        // After the closing quote: a separator or the end of the record.
        if (pos >= n) {
          end_of_record = true;
        } else if (text[pos] == ',') {
          ++pos;
        } else if (text[pos] == '\n') {
          ++pos;
          ++line;
          end_of_record = true;
        } else if (text[pos] == '\r' && pos + 1 < n && text[pos + 1] == '\n') {
          pos += 2;
          ++line;
          end_of_record = true;
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line,
                           ": unexpected character after a closing quote"));
        }
        continue;
      }
      // Unquoted field.
      const size_t start = pos;
      while (pos < n && text[pos] != ',' && text[pos] != '\n' &&
             !(text[pos] == '\r' && pos + 1 < n && text[pos + 1] == '\n')) {
        if (text[pos] == '"') {
          return absl::InvalidArgumentError(absl::StrCat(
              "line ", line, ": quote inside an unquoted field"));
        }
        ++pos;
      }
      field.assign(text.data() + start, pos - start);
      if (pos >= n) {
        end_of_record = true;
      } else if (text[pos] == ',') {
        ++pos;
      } else if (text[pos] == '\n') {
        ++pos;
        ++line;
        end_of_record = true;
      } else {  // "\r\n"
        pos += 2;
        ++line;
        end_of_record = true;
      }
    }
    absl::Status s =
        on_record(record_line, absl::MakeConstSpan(fields.data(), num_fields));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace verity::models
