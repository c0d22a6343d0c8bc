#include "client/csv_input.h"

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
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
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
        if (item.empty()) return LineError(line, "empty item id");
        if (annotator.empty()) {
          return LineError(line, "empty annotator id");
        }
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
  ItemRows rows;
  std::optional<Header> header;
  int id_column = -1, gold_column = -1;
  // feature_columns[j]: the column of f<j>.
  std::vector<int> feature_columns;
  absl::flat_hash_map<std::string, int64_t> line_of_item;
  absl::Status status = models::ForEachCsvRecord(
      std::string_view(text.data(), text.size()),
      [&](int64_t line, absl::Span<const std::string> fields) -> absl::Status {
        if (!header.has_value()) {
          absl::StatusOr<Header> read = ReadHeader(fields, line);
          if (!read.ok()) return read.status();
          header = *std::move(read);
          absl::flat_hash_map<int, int> feature_column_of;
          for (const auto& [name, column] : header->column) {
            const bool is_id = name == "item" || name == "id";
            const bool is_gold = name == "gold" || name == "label";
            if ((is_id && id_column >= 0) || (is_gold && gold_column >= 0)) {
              return LineError(
                  line, is_id
                            ? "both \"item\" and \"id\" columns; keep one"
                            : "both \"gold\" and \"label\" columns; keep one");
            }
            if (is_id) {
              id_column = column;
            } else if (is_gold) {
              gold_column = column;
            } else if (std::optional<int> j = FeatureColumnIndex(name)) {
              feature_column_of[*j] = column;
            } else {
              return LineError(
                  line, absl::StrCat("unknown column \"", name,
                                     "\" (expected item or id, gold or label, "
                                     "f0, f1, ...)"));
            }
          }
          if (id_column < 0) {
            return LineError(line,
                             "the header must name an \"item\" (or \"id\") "
                             "column");
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
          rows.feature_dim = dim;
          return absl::OkStatus();
        }
        absl::Status count = CheckFieldCount(*header, fields, line);
        if (!count.ok()) return count;
        const std::string& id = fields[id_column];
        if (id.empty()) return LineError(line, "empty item id");
        auto [it, inserted] = line_of_item.emplace(id, line);
        if (!inserted) {
          return LineError(
              line, absl::StrCat("item \"", id, "\" already listed on line ",
                                 it->second));
        }
        v1::Item& item = rows.items.emplace_back();
        item.set_id(id);
        if (gold_column >= 0 && !fields[gold_column].empty()) {
          absl::StatusOr<int32_t> gold = labels.Parse(fields[gold_column]);
          if (!gold.ok()) {
            return LineError(line, gold.status().message());
          }
          item.set_gold_label(*gold);
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
        if (empty_features == 0) {
          item.mutable_features()->Reserve(feature_columns.size());
          for (size_t j = 0; j < feature_columns.size(); ++j) {
            const std::string& cell = fields[feature_columns[j]];
            float value = 0;
            if (!absl::SimpleAtof(cell, &value) || !std::isfinite(value)) {
              return LineError(line, absl::StrCat("feature f", j, " \"", cell,
                                                  "\" is not a finite number"));
            }
            item.add_features(value);
          }
        }
        rows.lines.push_back(line);
        return absl::OkStatus();
      });
  if (!status.ok()) return InFile(file_name, status);
  if (!header.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file_name, ": empty file (expected a header line such as item,gold)"));
  }
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

}  // namespace verity::client
