#include "client/csv_input.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/utf8.h"
#include "models/csv.h"

namespace verity::client {
namespace {

// Prefixes a parser error ("line 3: ...") with the file name.
absl::Status InFile(absl::string_view file_name, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(file_name, ": ", status.message()));
}

// An error inside a parse; InFile adds the file name when the parse returns.
absl::Status LineError(int64_t line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", message));
}

// A LineError unless `id` is a non-empty id of UTF-8 text: protobuf string fields carry UTF-8
// only (the server could not even read the request), so a file saved in another encoding is
// refused here, naming the line, before anything is sent. `entity` is "item" or "annotator".
absl::Status CheckId(int64_t line, absl::string_view entity, const std::string& id) {
  if (id.empty()) return LineError(line, absl::StrCat("empty ", entity, " id"));
  if (const std::optional<size_t> bad = FirstInvalidUtf8Offset(id); bad.has_value()) {
    return LineError(
        line, absl::StrCat(entity, " id is not UTF-8 text (byte 0x",
                           absl::Hex(static_cast<unsigned char>(id[*bad])), " at offset ", *bad,
                           "); save the file as UTF-8"));
  }
  return absl::OkStatus();
}

// The position of every column of a header, by name.
struct Header {
  absl::flat_hash_map<std::string, int> column;
  int num_fields = 0;

  std::optional<int> Find(absl::string_view name) const {
    auto it = column.find(name);
    if (it == column.end()) return std::nullopt;
    return it->second;
  }
};

absl::StatusOr<Header> ReadHeader(absl::Span<const std::string> fields,
                                  int64_t line) {
  Header header;
  header.num_fields = static_cast<int>(fields.size());
  for (int i = 0; i < header.num_fields; ++i) {
    if (!header.column.emplace(fields[i], i).second) {
      return LineError(
          line, absl::StrCat("column \"", fields[i], "\" appears twice"));
    }
  }
  return header;
}

absl::Status CheckFieldCount(const Header& header,
                             absl::Span<const std::string> fields,
                             int64_t line) {
  if (static_cast<int>(fields.size()) == header.num_fields) {
    return absl::OkStatus();
  }
  return LineError(
      line, absl::StrCat("expected ", header.num_fields,
                         " fields as in the header, got ", fields.size()));
}

// Parses "f<j>" with j a decimal integer without sign or leading zeros.
std::optional<int> FeatureColumnIndex(absl::string_view name) {
  if (name.size() < 2 || name[0] != 'f') return std::nullopt;
  absl::string_view digits = name.substr(1);
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return std::nullopt;
    }
  }
  int index = 0;
  if (!absl::SimpleAtoi(digits, &index)) return std::nullopt;
  return index;
}

bool NeedsQuoting(absl::string_view field) {
  return field.find_first_of(",\"\r\n") != absl::string_view::npos;
}

// An entities CSV (items or annotators): an id column named after the entity
// (or "id"), optional named columns, and optional feature columns f0 to
// f<D-1>.
struct EntityCsvSpec {
  // "item" or "annotator": the id column's name and the word in messages.
  std::string entity;
  // The other columns a file may have, each with its accepted names.
  std::vector<std::vector<std::string>> optional_columns;
  // A header to show when the file is empty.
  std::string example_header;
};

// Reads the header and calls on_row(line, id, features, cells) for every
// record: features empty when the row has none, cells[c] the cell of
// optional column c or null when the file lacks the column. Sets
// `feature_dim` to the number of f<j> columns. Errors are LineErrors; an empty
// file is INVALID_ARGUMENT without a line.
template <typename OnRow>
absl::Status ForEachEntityRow(absl::string_view text, const EntityCsvSpec& spec,
                              int32_t& feature_dim, OnRow on_row) {
  // Accepted names of every named column: the id column first.
  std::vector<std::vector<std::string>> named = {{spec.entity, "id"}};
  named.insert(named.end(), spec.optional_columns.begin(),
               spec.optional_columns.end());
  std::optional<Header> header;
  // named_columns[c]: the position of named column c, or -1.
  std::vector<int> named_columns(named.size(), -1);
  // feature_columns[j]: the position of f<j>.
  std::vector<int> feature_columns;
  absl::flat_hash_map<std::string, int64_t> line_of_id;
  std::vector<const std::string*> cells(spec.optional_columns.size());
  absl::Status status = models::ForEachCsvRecord(
      std::string_view(text.data(), text.size()),
      [&](int64_t line, absl::Span<const std::string> fields) -> absl::Status {
        if (!header.has_value()) {
          absl::StatusOr<Header> read = ReadHeader(fields, line);
          if (!read.ok()) return read.status();
          header = *std::move(read);
          absl::flat_hash_map<int, int> feature_column_of;
          for (const auto& [name, column] : header->column) {
            bool known = false;
            for (size_t c = 0; c < named.size() && !known; ++c) {
              if (std::find(named[c].begin(), named[c].end(), name) ==
                  named[c].end()) {
                continue;
              }
              known = true;
              if (named_columns[c] >= 0) {
                return LineError(
                    line, absl::StrCat("both \"", named[c][0], "\" and \"",
                                       named[c][1], "\" columns; keep one"));
              }
              named_columns[c] = column;
            }
            if (known) continue;
            if (std::optional<int> j = FeatureColumnIndex(name)) {
              feature_column_of[*j] = column;
              continue;
            }
            std::vector<std::string> expected;
            for (const auto& names : named) {
              expected.push_back(absl::StrJoin(names, " or "));
            }
            return LineError(
                line,
                absl::StrCat("unknown column \"", name, "\" (expected ",
                             absl::StrJoin(expected, ", "), ", f0, f1, ...)"));
          }
          if (named_columns[0] < 0) {
            return LineError(
                line, absl::StrCat("the header must name an \"", spec.entity,
                                   "\" (or \"id\") column"));
          }
          const int dim = static_cast<int>(feature_column_of.size());
          for (int j = 0; j < dim; ++j) {
            auto it = feature_column_of.find(j);
            if (it == feature_column_of.end()) {
              return LineError(
                  line, absl::StrCat(dim, " feature columns but no column f", j,
                                     " (expected f0 to f", dim - 1, ")"));
            }
            feature_columns.push_back(it->second);
          }
          feature_dim = dim;
          return absl::OkStatus();
        }
        absl::Status count = CheckFieldCount(*header, fields, line);
        if (!count.ok()) return count;
        const std::string& id = fields[named_columns[0]];
        if (absl::Status valid = CheckId(line, spec.entity, id); !valid.ok()) return valid;
        auto [it, inserted] = line_of_id.emplace(id, line);
        if (!inserted) {
          return LineError(
              line, absl::StrCat(spec.entity, " \"", id,
                                 "\" already listed on line ", it->second));
        }
        int empty_features = 0;
        for (int column : feature_columns) {
          if (fields[column].empty()) ++empty_features;
        }
        if (empty_features > 0 &&
            empty_features < static_cast<int>(feature_columns.size())) {
          return LineError(
              line, absl::StrCat(empty_features, " of ", feature_columns.size(),
                                 " features are empty (give all or none)"));
        }
        std::vector<float> features;
        if (empty_features == 0) {
          features.reserve(feature_columns.size());
          for (size_t j = 0; j < feature_columns.size(); ++j) {
            const std::string& cell = fields[feature_columns[j]];
            float value = 0;
            if (!absl::SimpleAtof(cell, &value) || !std::isfinite(value)) {
              return LineError(line, absl::StrCat("feature f", j, " \"", cell,
                                                  "\" is not a finite number"));
            }
            features.push_back(value);
          }
        }
        for (size_t c = 0; c < cells.size(); ++c) {
          const int column = named_columns[c + 1];
          cells[c] = column >= 0 ? &fields[column] : nullptr;
        }
        return on_row(line, id, std::move(features), cells);
      });
  if (!status.ok()) return status;
  if (!header.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty file (expected a header line such as ",
                     spec.example_header, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

LabelParser::LabelParser(std::vector<std::string> class_names)
    : class_names_(std::move(class_names)) {
  for (int32_t i = 0; i < static_cast<int32_t>(class_names_.size()); ++i) {
    index_of_.emplace(class_names_[i], i);
  }
}

absl::StatusOr<int32_t> LabelParser::Parse(absl::string_view text) const {
  auto it = index_of_.find(text);
  if (it != index_of_.end()) return it->second;
  int32_t index = 0;
  const bool all_digits =
      !text.empty() && text.find_first_not_of("0123456789") == text.npos;
  if (all_digits && absl::SimpleAtoi(text, &index) && index < num_classes()) {
    return index;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("label \"", text, "\" is neither a class name (",
                   absl::StrJoin(class_names_, ", "),
                   ") nor a class index in [0, ", num_classes(), ")"));
}

absl::StatusOr<std::vector<std::string>> ParseClassList(
    absl::string_view text) {
  std::vector<std::string> names = absl::StrSplit(text, ',');
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("class ", i + 1, " of \"", text, "\" is empty"));
    }
  }
  if (names.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a project needs at least two classes, got \"", text, "\""));
  }
  return names;
}

absl::StatusOr<std::vector<std::string>> ParseClassesFile(
    absl::string_view text, absl::string_view file_name) {
  std::vector<std::string> names;
  // A UTF-8 byte-order mark is not part of the first name (models/csv.h skips it in CSV files).
  absl::ConsumePrefix(&text, "\xEF\xBB\xBF");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (const std::optional<size_t> bad = FirstInvalidUtf8Offset(line); bad.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_name, ": class ", names.size() + 1, " is not UTF-8 text (byte 0x",
                       absl::Hex(static_cast<unsigned char>(line[*bad])), " at offset ", *bad,
                       "); save the file as UTF-8"));
    }
    names.emplace_back(line);
  }
  if (names.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": a project needs at least two classes, got ",
                     names.size()));
  }
  return names;
}

absl::StatusOr<AnnotationRows> ParseAnnotationsCsv(absl::string_view text,
                                                   absl::string_view file_name,
                                                   const LabelParser& labels) {
  AnnotationRows rows;
  std::optional<Header> header;
  int item_column = -1, annotator_column = -1, label_column = -1;
  absl::Status status = models::ForEachCsvRecord(
      std::string_view(text.data(), text.size()),
      [&](int64_t line, absl::Span<const std::string> fields) -> absl::Status {
        if (!header.has_value()) {
          absl::StatusOr<Header> read = ReadHeader(fields, line);
          if (!read.ok()) return read.status();
          header = *std::move(read);
          for (const auto& [name, column] : header->column) {
            if (name == "item") {
              item_column = column;
            } else if (name == "annotator") {
              annotator_column = column;
            } else if (name == "label") {
              label_column = column;
            } else {
              return LineError(
                  line, absl::StrCat("unknown column \"", name,
                                     "\" (expected item, annotator, label)"));
            }
          }
          if (item_column < 0 || annotator_column < 0 || label_column < 0) {
            return LineError(
                line,
                "the header must name the columns item, annotator, label");
          }
          return absl::OkStatus();
        }
        absl::Status count = CheckFieldCount(*header, fields, line);
        if (!count.ok()) return count;
        const std::string& item = fields[item_column];
        const std::string& annotator = fields[annotator_column];
        if (absl::Status valid = CheckId(line, "item", item); !valid.ok()) return valid;
        if (absl::Status valid = CheckId(line, "annotator", annotator); !valid.ok()) return valid;
        absl::StatusOr<int32_t> label = labels.Parse(fields[label_column]);
        if (!label.ok()) {
          return LineError(line, label.status().message());
        }
        v1::Annotation& annotation = rows.annotations.emplace_back();
        annotation.set_item(item);
        annotation.set_annotator(annotator);
        annotation.set_label(*label);
        rows.lines.push_back(line);
        return absl::OkStatus();
      });
  if (!status.ok()) return InFile(file_name, status);
  if (!header.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name,
                     ": empty file (expected a header line "
                     "item,annotator,label)"));
  }
  return rows;
}

absl::StatusOr<ItemRows> ParseItemsCsv(absl::string_view text,
                                       absl::string_view file_name,
                                       const LabelParser& labels) {
  static const auto* const kSpec =
      new EntityCsvSpec{"item", {{"gold", "label"}, {"priority"}}, "item,gold"};
  ItemRows rows;
  absl::Status status = ForEachEntityRow(
      text, *kSpec, rows.feature_dim,
      [&](int64_t line, const std::string& id, std::vector<float> features,
          absl::Span<const std::string* const> cells) -> absl::Status {
        v1::Item& item = rows.items.emplace_back();
        item.set_id(id);
        item.mutable_features()->Add(features.begin(), features.end());
        const std::string* gold = cells[0];
        if (gold != nullptr && !gold->empty()) {
          absl::StatusOr<int32_t> label = labels.Parse(*gold);
          if (!label.ok()) return LineError(line, label.status().message());
          item.set_gold_label(*label);
        }
        const std::string* priority = cells[1];
        if (priority != nullptr && !priority->empty()) {
          double value = 0;
          if (!absl::SimpleAtod(*priority, &value) || !std::isfinite(value)) {
            return LineError(line, absl::StrCat("priority \"", *priority,
                                                "\" is not a finite number"));
          }
          item.set_priority(value);
        }
        rows.lines.push_back(line);
        return absl::OkStatus();
      });
  if (!status.ok()) return InFile(file_name, status);
  return rows;
}

absl::StatusOr<AnnotatorRows> ParseAnnotatorsCsv(absl::string_view text,
                                                 absl::string_view file_name) {
  static const auto* const kSpec =
      new EntityCsvSpec{"annotator", {}, "annotator,f0,f1"};
  AnnotatorRows rows;
  absl::Status status = ForEachEntityRow(
      text, *kSpec, rows.feature_dim,
      [&](int64_t line, const std::string& id, std::vector<float> features,
          absl::Span<const std::string* const>) -> absl::Status {
        v1::Annotator& annotator = rows.annotators.emplace_back();
        annotator.set_id(id);
        annotator.mutable_features()->Add(features.begin(), features.end());
        rows.lines.push_back(line);
        return absl::OkStatus();
      });
  if (!status.ok()) return InFile(file_name, status);
  return rows;
}

absl::StatusOr<ItemRows> MergeGold(ItemRows items, const ItemRows& gold,
                                   absl::string_view gold_file_name) {
  absl::flat_hash_map<absl::string_view, size_t> position;
  position.reserve(items.items.size());
  for (size_t i = 0; i < items.items.size(); ++i) {
    position.emplace(items.items[i].id(), i);
  }
  std::vector<size_t> appended;
  for (size_t g = 0; g < gold.items.size(); ++g) {
    const v1::Item& gold_item = gold.items[g];
    if (!gold_item.has_gold_label()) continue;
    auto it = position.find(gold_item.id());
    if (it == position.end()) {
      appended.push_back(g);
      continue;
    }
    v1::Item& item = items.items[it->second];
    if (item.has_gold_label() && item.gold_label() != gold_item.gold_label()) {
      return InFile(
          gold_file_name,
          LineError(
              gold.lines[g],
              absl::StrCat("gold label ", gold_item.gold_label(), " of item \"",
                           gold_item.id(), "\" contradicts gold label ",
                           item.gold_label(), " of the items file")));
    }
    item.set_gold_label(gold_item.gold_label());
  }
  // Appending invalidates the string_views in `position`; it is not used
  // past this point.
  for (size_t g : appended) {
    v1::Item& item = items.items.emplace_back();
    item.set_id(gold.items[g].id());
    item.set_gold_label(gold.items[g].gold_label());
    items.lines.push_back(gold.lines[g]);
  }
  return items;
}

std::string FormatCsvRecord(absl::Span<const std::string> fields) {
  std::string record;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) record.push_back(',');
    const std::string& field = fields[i];
    if (!NeedsQuoting(field)) {
      record += field;
      continue;
    }
    record.push_back('"');
    for (char c : field) {
      if (c == '"') record.push_back('"');
      record.push_back(c);
    }
    record.push_back('"');
  }
  return record;
}

namespace {

// A decimal number as spreadsheets read one: [+-] digits [. digits] [e [+-] digits], or with
// the digits after the point only (".5").
bool IsPlainNumber(absl::string_view text) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i > start;
  };
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  bool mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa = digits() || mantissa;
  }
  if (!mantissa) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == text.size();
}

}  // namespace

std::string SpreadsheetSafeCell(std::string text) {
  if (text.empty()) return text;
  const bool signed_number = (text[0] == '+' || text[0] == '-') && IsPlainNumber(text);
  if (!signed_number && absl::string_view("=+-@\t\r'").find(text[0]) != absl::string_view::npos) {
    text.insert(text.begin(), '\'');
  }
  return text;
}

}  // namespace verity::client
