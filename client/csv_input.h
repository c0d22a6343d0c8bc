// Input files of the `verity` CLI: class lists, label CSVs, item CSVs, gold
// CSVs, and the CSV writer used for output.
//
// Every CSV is parsed with the RFC 4180 parser of models/csv.h and must start
// with a header naming its columns (in any order). Labels are written as class
// NAMES of the project (a LabelParser maps them to indices); an integer that is
// not a class name is taken as a class index. Ids and class names must be UTF-8
// text (protobuf strings carry nothing else): a file saved in another encoding
// is refused before anything is sent. Errors are INVALID_ARGUMENT and
// begin with "<file>: line <n>: ", naming the file as the caller gave it and
// the 1-based line of the offending record.
//
// Thread safety: LabelParser is immutable after construction; every function
// here is pure and safe from any thread.

#ifndef VERITY_CLIENT_CSV_INPUT_H_
#define VERITY_CLIENT_CSV_INPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/projects.pb.h"

namespace verity::client {

// Maps label text to a class index of one project.
class LabelParser {
 public:
  // `class_names` in the project's order (index = position).
  explicit LabelParser(std::vector<std::string> class_names);

  // The index of the class named `text`; failing that, `text` read as a
  // decimal integer in [0, num_classes). Anything else is INVALID_ARGUMENT:
  // `label "x" is neither a class name (a, b, c) nor a class index in [0, 3)`.
  absl::StatusOr<int32_t> Parse(absl::string_view text) const;

  int32_t num_classes() const {
    return static_cast<int32_t>(class_names_.size());
  }
  const std::vector<std::string>& class_names() const { return class_names_; }

 private:
  std::vector<std::string> class_names_;
  absl::flat_hash_map<std::string, int32_t> index_of_;
};

// A class list: the comma-separated value of --classes, or the text of a
// classes file (one name per line; "\r\n" line ends and blank lines are
// ignored, and so is a UTF-8 byte-order mark at its start). Surrounding spaces
// are kept: a class name is exactly its text.
// INVALID_ARGUMENT for an empty name in a comma list or fewer than two names;
// the server checks the remaining rules (uniqueness, length).
absl::StatusOr<std::vector<std::string>> ParseClassList(absl::string_view text);
absl::StatusOr<std::vector<std::string>> ParseClassesFile(
    absl::string_view text, absl::string_view file_name);

// The rows of a labels CSV (header with columns item, annotator, label).
struct AnnotationRows {
  std::vector<v1::Annotation> annotations;
  std::vector<int64_t> lines;  // lines[i]: the CSV line of annotations[i].
};

// Parses a labels CSV in the format of shared/datasets/*/labels.csv. Every
// row needs a non-empty item and annotator and a label `labels` accepts;
// unknown or repeated columns, a missing column and a row with the wrong
// number of fields are INVALID_ARGUMENT.
absl::StatusOr<AnnotationRows> ParseAnnotationsCsv(absl::string_view text,
                                                   absl::string_view file_name,
                                                   const LabelParser& labels);

// The rows of an items CSV.
struct ItemRows {
  std::vector<v1::Item> items;
  std::vector<int64_t> lines;  // lines[i]: the CSV line of items[i].
  int32_t feature_dim = 0;     // Number of f<j> columns.
};

// Parses an items CSV: an id column named `item` (or `id`), an optional gold
// column named `gold` (or `label`) holding a label `labels` accepts (an empty
// cell means no gold label), an optional `priority` column (a finite number;
// empty leaves the item's priority unchanged), and optional feature columns
// f0, f1, ..., f<D-1> (all D of them, in any order). A row gives either every
// feature or none (all cells empty). Features must be finite floats. Also reads
// the datasets' gold.csv (item,label) and features.csv (item,f0,...).
// INVALID_ARGUMENT for an unknown column, a gap in the f<j> columns, an empty
// or repeated item id, a bad label or a bad feature.
absl::StatusOr<ItemRows> ParseItemsCsv(absl::string_view text,
                                       absl::string_view file_name,
                                       const LabelParser& labels);

// The rows of an annotators CSV.
struct AnnotatorRows {
  std::vector<v1::Annotator> annotators;
  std::vector<int64_t> lines;  // lines[i]: the CSV line of annotators[i].
  int32_t feature_dim = 0;     // Number of f<j> columns.
};

// Parses an annotators CSV: an id column named `annotator` (or `id`) and
// optional feature columns f0, ..., f<D-1> with the rules of ParseItemsCsv.
absl::StatusOr<AnnotatorRows> ParseAnnotatorsCsv(absl::string_view text,
                                                 absl::string_view file_name);

// `items` with the gold labels of `gold` merged in: an item of both gets the
// gold label of `gold` (INVALID_ARGUMENT, naming the line of `gold_file_name`,
// if `items` already gives it a different one); items only in `gold` are
// appended in `gold`'s order, without features.
absl::StatusOr<ItemRows> MergeGold(ItemRows items, const ItemRows& gold,
                                   absl::string_view gold_file_name);

// One CSV record (without line end), quoting fields that contain a comma, a
// quote, a carriage return or a line feed (RFC 4180).
std::string FormatCsvRecord(absl::Span<const std::string> fields);

// `text` as a CSV cell a spreadsheet will show as text: a cell that starts
// with =, +, -, @, a tab or a carriage return (which Excel, LibreOffice and
// Google Sheets would run as a formula, e.g. =HYPERLINK(...)) gets a leading
// single quote, as spreadsheet-safe exports do, and so does a cell that starts
// with a quote, so that removing one leading quote from every cell that has
// one gives back the text ("=1+1" -> "'=1+1", "'=1+1" -> "''=1+1"). A signed
// number ("-1", "+2.5e3"), which spreadsheets read as a number, and any other
// text are unchanged. The CLI applies it to the free-text cells it writes (item
// ids, class names).
std::string SpreadsheetSafeCell(std::string text);

}  // namespace verity::client

#endif  // VERITY_CLIENT_CSV_INPUT_H_
