// CsvDataset: a crowdsourcing dataset read from a folder in the format of
// shared/datasets (see its README.md), mapped to dense ids.
//
// The folder holds classes.txt (one class name per line; class index = line
// number, 0-based), labels.csv (header item,annotator,label; label is a class
// name) and, optionally, gold.csv (header item,label). Items are numbered in
// order of first appearance in labels.csv, then in gold.csv (gold items
// without labels get indices after all labelled items); annotators in order of
// first appearance in labels.csv. The CSV files are parsed with the RFC 4180
// parser of csv.h; classes.txt is split at line breaks ("\r\n" too), and a
// UTF-8 byte-order mark at its start is skipped, as csv.h skips one.
// features.csv and splits.csv are not read.
//
// Thread safety: ReadCsvDataset is safe from any thread; a CsvDataset is a
// plain value.

#ifndef VERITY_MODELS_CSV_DATASET_H_
#define VERITY_MODELS_CSV_DATASET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "models/annotation_matrix.h"

namespace verity::models {

struct CsvDataset {
  std::vector<std::string> class_names;
  std::vector<std::string> item_ids;       // dense item index → dataset id
  std::vector<std::string> annotator_ids;  // dense annotator index → id
  absl::flat_hash_map<std::string, int32_t> item_index;
  absl::flat_hash_map<std::string, int32_t> annotator_index;
  // The rows of labels.csv, in file order, over dense ids.
  std::vector<Annotation> annotations;
  // Per item: the gold class index, or -1.
  std::vector<int32_t> gold;

  int32_t num_classes() const {
    return static_cast<int32_t>(class_names.size());
  }
  int32_t num_items() const { return static_cast<int32_t>(item_ids.size()); }
  int32_t num_annotators() const {
    return static_cast<int32_t>(annotator_ids.size());
  }

  // The annotations as an AnnotationMatrix over all items and annotators.
  absl::StatusOr<AnnotationMatrix> ToMatrix() const;
};

// Reads the dataset in `directory`. Returns NOT_FOUND if classes.txt or
// labels.csv is missing (a missing gold.csv means no gold), and
// INVALID_ARGUMENT, naming the file and line, for malformed CSV, a wrong
// header, a wrong number of fields, an empty id, a label that is not a class
// name, fewer than two or duplicate class names, a repeated (item,
// annotator) pair, or an item listed twice in gold.csv.
absl::StatusOr<CsvDataset> ReadCsvDataset(std::string_view directory);

}  // namespace verity::models

#endif  // VERITY_MODELS_CSV_DATASET_H_
