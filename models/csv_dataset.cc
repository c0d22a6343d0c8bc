#include "models/csv_dataset.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "models/csv.h"

namespace verity::models {
namespace {

// The whole file as a string; NOT_FOUND if it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    const std::string message = absl::StrCat(path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    if (err == EACCES) return absl::PermissionDeniedError(message);
    return absl::UnknownError(message);
  }
  std::string contents;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) {
    contents.append(buffer, n);
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::UnknownError(absl::StrCat(path, ": read error"));
  return contents;
}

absl::Status ErrorAt(const std::string& path, int64_t line, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", message));
}

// ForEachCsvRecord over the text of the file `path`. The callbacks name the file in their
// errors (ErrorAt); the parser's own, for malformed CSV ("line 3: quote inside an unquoted
// field"), get the path put in front here.
absl::Status ForEachRecordOfFile(
    const std::string& path, std::string_view text,
    absl::FunctionRef<absl::Status(int64_t, absl::Span<const std::string>)> on_record) {
  bool record_refused = false;
  absl::Status s = ForEachCsvRecord(text, [&](int64_t line, absl::Span<const std::string> fields) {
    absl::Status accepted = on_record(line, fields);
    record_refused = !accepted.ok();
    return accepted;
  });
  if (s.ok() || record_refused) return s;
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

absl::Status CheckHeader(const std::string& path, int64_t line,
                         absl::Span<const std::string> fields,
                         const std::vector<std::string>& want) {
  if (std::vector<std::string>(fields.begin(), fields.end()) != want) {
    return ErrorAt(path, line,
                   absl::StrCat("header is \"", absl::StrJoin(fields, ","),
                                "\"; want \"", absl::StrJoin(want, ","), "\""));
  }
  return absl::OkStatus();
}

int32_t InternId(const std::string& id, std::vector<std::string>& ids,
                 absl::flat_hash_map<std::string, int32_t>& index) {
  auto [it, inserted] =
      index.try_emplace(id, static_cast<int32_t>(ids.size()));
  if (inserted) ids.push_back(id);
  return it->second;
}

}  // namespace

absl::StatusOr<AnnotationMatrix> CsvDataset::ToMatrix() const {
  return AnnotationMatrix::Build(num_items(), num_annotators(), num_classes(),
                                 annotations);
}

absl::StatusOr<CsvDataset> ReadCsvDataset(std::string_view directory) {
  CsvDataset ds;
  const std::string dir(directory);

  // classes.txt
  const std::string classes_path = absl::StrCat(dir, "/classes.txt");
  absl::StatusOr<std::string> classes_text = ReadFile(classes_path);
  if (!classes_text.ok()) return classes_text.status();
  absl::flat_hash_map<std::string, int32_t> class_index;
  {
    // (absl::string_view: Debian's Abseil does not alias std::string_view.)
    absl::string_view text = *classes_text;
    // A UTF-8 byte-order mark is not part of the first name (csv.h skips it too).
    absl::ConsumePrefix(&text, "\xEF\xBB\xBF");
    std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
    // A final line break does not start another class.
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    for (size_t i = 0; i < lines.size(); ++i) {
      absl::string_view name = lines[i];
      if (!name.empty() && name.back() == '\r') name.remove_suffix(1);
      if (name.empty()) {
        return ErrorAt(classes_path, static_cast<int64_t>(i) + 1,
                       "empty class name");
      }
      if (!class_index.try_emplace(std::string(name), ds.num_classes())
               .second) {
        return ErrorAt(classes_path, static_cast<int64_t>(i) + 1,
                       absl::StrCat("duplicate class name \"", name, "\""));
      }
      ds.class_names.emplace_back(name);
    }
  }
  if (ds.num_classes() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        classes_path, ": need at least 2 classes, found ", ds.num_classes()));
  }

  auto parse_class = [&](const std::string& path, int64_t line,
                         const std::string& name) -> absl::StatusOr<int32_t> {
    auto it = class_index.find(name);
    if (it == class_index.end()) {
      return ErrorAt(path, line,
                     absl::StrCat("label \"", name,
                                  "\" is not a class of classes.txt"));
    }
    return it->second;
  };

  // labels.csv
  const std::string labels_path = absl::StrCat(dir, "/labels.csv");
  absl::StatusOr<std::string> labels_text = ReadFile(labels_path);
  if (!labels_text.ok()) return labels_text.status();
  absl::flat_hash_set<std::pair<int32_t, int32_t>> seen_pairs;
  bool header = true;
  absl::Status s = ForEachRecordOfFile(
      labels_path, *labels_text,
      [&](int64_t line, absl::Span<const std::string> f) -> absl::Status {
        if (header) {
          header = false;
          return CheckHeader(labels_path, line, f,
                             {"item", "annotator", "label"});
        }
        if (f.size() != 3) {
          return ErrorAt(labels_path, line,
                         absl::StrCat("expected 3 fields, found ", f.size()));
        }
        if (f[0].empty()) return ErrorAt(labels_path, line, "empty item id");
        if (f[1].empty()) {
          return ErrorAt(labels_path, line, "empty annotator id");
        }
        absl::StatusOr<int32_t> label = parse_class(labels_path, line, f[2]);
        if (!label.ok()) return label.status();
        const int32_t item = InternId(f[0], ds.item_ids, ds.item_index);
        const int32_t annotator =
            InternId(f[1], ds.annotator_ids, ds.annotator_index);
        if (!seen_pairs.emplace(item, annotator).second) {
          return ErrorAt(labels_path, line,
                         absl::StrCat("second label of item \"", f[0],
                                      "\" by annotator \"", f[1], "\""));
        }
        ds.annotations.push_back(Annotation{item, annotator, *label});
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  if (header) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_path, ": empty file, want a header"));
  }

  // gold.csv (optional)
  const std::string gold_path = absl::StrCat(dir, "/gold.csv");
  absl::StatusOr<std::string> gold_text = ReadFile(gold_path);
  std::vector<std::pair<int32_t, int32_t>> gold_pairs;
  if (gold_text.ok()) {
    absl::flat_hash_set<int32_t> gold_items;
    header = true;
    s = ForEachRecordOfFile(
        gold_path, *gold_text,
        [&](int64_t line, absl::Span<const std::string> f) -> absl::Status {
          if (header) {
            header = false;
            return CheckHeader(gold_path, line, f, {"item", "label"});
          }
          if (f.size() != 2) {
            return ErrorAt(gold_path, line,
                           absl::StrCat("expected 2 fields, found ", f.size()));
          }
          if (f[0].empty()) return ErrorAt(gold_path, line, "empty item id");
          absl::StatusOr<int32_t> label = parse_class(gold_path, line, f[1]);
          if (!label.ok()) return label.status();
          const int32_t item = InternId(f[0], ds.item_ids, ds.item_index);
          if (!gold_items.insert(item).second) {
            return ErrorAt(gold_path, line,
                           absl::StrCat("item \"", f[0], "\" listed twice"));
          }
          gold_pairs.emplace_back(item, *label);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
  } else if (!absl::IsNotFound(gold_text.status())) {
    return gold_text.status();
  }
  ds.gold.assign(ds.item_ids.size(), -1);
  for (const auto& [item, label] : gold_pairs) ds.gold[item] = label;
  return ds;
}

}  // namespace verity::models
