#include "models/confusion_parameters.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verity::models {
namespace {

// Written where the dense layout of earlier builds had the annotator count
// (which it never allowed above INT32_MAX - 1): the sparse layout follows.
constexpr uint32_t kSparseLayout = 0xFFFFFFFFu;

bool EntryLess(const AnnotationMatrix::Entry& a,
               const AnnotationMatrix::Entry& b) {
  return a.other != b.other ? a.other < b.other : a.label < b.label;
}

// Reads n doubles that must form a probability distribution (finite, > 0,
// summing to 1 within rounding).
absl::Status ReadDistribution(ByteReader& reader, size_t n, const char* what,
                              double* out, size_t stride) {
  double sum = 0.0;
  for (size_t j = 0; j < n; ++j) {
    absl::StatusOr<double> v = reader.ReadF64();
    if (!v.ok()) return v.status();
    if (!std::isfinite(*v) || !(*v > 0.0) || *v > 1.0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "serialized model is corrupt: ", what, " holds probability ", *v));
    }
    out[j * stride] = *v;
    sum += *v;
  }
  if (std::abs(sum - 1.0) > 1e-9 * static_cast<double>(n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is corrupt: ", what, " sums to ", sum));
  }
  return absl::OkStatus();
}

}  // namespace

ConfusionParameters::ConfusionParameters(int32_t num_classes)
    : num_classes_(num_classes),
      prior_(num_classes, 1.0 / num_classes),
      population_(static_cast<size_t>(num_classes) * num_classes,
                  1.0 / num_classes),
      untouched_numerator_(population_) {
  RecomputeLogs();
}

void ConfusionParameters::RecomputeLogs() {
  auto logs = [](const std::vector<double>& from, std::vector<double>& to) {
    to.resize(from.size());
    for (size_t i = 0; i < from.size(); ++i) to[i] = std::log(from[i]);
  };
  logs(prior_, log_prior_);
  logs(population_, log_population_);
  logs(untouched_numerator_, log_untouched_numerator_);
  logs(row_denominator_, log_row_denominator_);
  logs(columns_, log_columns_);
}

int32_t ConfusionParameters::AddRow(int32_t annotator,
                                    const double* denominator) {
  const size_t k = static_cast<size_t>(num_classes_);
  const int32_t row = static_cast<int32_t>(row_annotator_.size());
  row_of_[annotator] = row;
  row_annotator_.push_back(annotator);
  row_denominator_.insert(row_denominator_.end(), denominator, denominator + k);
  return row;
}

void ConfusionParameters::AddColumn(int32_t label, const double* column) {
  const size_t k = static_cast<size_t>(num_classes_);
  const size_t annotator = static_cast<size_t>(row_annotator_.back());
  column_of_[annotator * k + label] = static_cast<int32_t>(columns_.size() / k);
  columns_.insert(columns_.end(), column, column + k);
}

double ConfusionParameters::LogCell(int32_t annotator, int32_t label,
                                    int32_t true_class) const {
  const size_t k = static_cast<size_t>(num_classes_);
  const int32_t row = RowOf(annotator);
  if (row < 0) return log_population_[label * k + true_class];
  const int32_t column = column_of_[static_cast<size_t>(annotator) * k + label];
  if (column >= 0) return log_columns_[column * k + true_class];
  return log_untouched_numerator_[label * k + true_class] -
         log_row_denominator_[row * k + true_class];
}

std::vector<double> ConfusionParameters::Confusion(int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  std::vector<double> rows(k * k);
  const int32_t row = RowOf(annotator);
  for (size_t label = 0; label < k; ++label) {
    const int32_t column =
        row < 0 ? -1 : column_of_[static_cast<size_t>(annotator) * k + label];
    for (size_t c = 0; c < k; ++c) {
      double p;
      if (row < 0) {
        p = population_[label * k + c];
      } else if (column >= 0) {
        p = columns_[column * k + c];
      } else {
        p = untouched_numerator_[label * k + c] / row_denominator_[row * k + c];
      }
      rows[c * k + label] = p;
    }
  }
  return rows;
}

std::vector<double> ConfusionParameters::ConfusionDiagonal(
    int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  std::vector<double> diagonal(k);
  const int32_t row = RowOf(annotator);
  for (size_t c = 0; c < k; ++c) {
    if (row < 0) {
      diagonal[c] = population_[c * k + c];
      continue;
    }
    const int32_t column = column_of_[static_cast<size_t>(annotator) * k + c];
    diagonal[c] = column >= 0 ? columns_[column * k + c]
                              : untouched_numerator_[c * k + c] /
                                    row_denominator_[row * k + c];
  }
  return diagonal;
}

void ConfusionParameters::ResizeAnnotators(int32_t num_annotators) {
  const size_t k = static_cast<size_t>(num_classes_);
  if (num_annotators < num_annotators_) {
    // Drop the rows and columns of the annotators cut off: rows are in
    // annotator order, and so are columns, so they are the last ones.
    size_t rows = row_annotator_.size();
    while (rows > 0 && row_annotator_[rows - 1] >= num_annotators) --rows;
    size_t columns = 0;
    for (size_t i = 0; i < static_cast<size_t>(num_annotators) * k; ++i) {
      if (column_of_[i] >= 0) {
        columns = std::max(columns, static_cast<size_t>(column_of_[i]) + 1);
      }
    }
    row_annotator_.resize(rows);
    row_denominator_.resize(rows * k);
    log_row_denominator_.resize(rows * k);
    columns_.resize(columns * k);
    log_columns_.resize(columns * k);
  }
  row_of_.resize(num_annotators, -1);
  column_of_.resize(static_cast<size_t>(num_annotators) * k, -1);
  num_annotators_ = num_annotators;
}

double ConfusionParameters::Posterior(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    absl::Span<double> out) const {
  const size_t k = static_cast<size_t>(num_classes_);
  if (gold_label >= 0) {
    double ll = log_prior_[gold_label];
    for (const AnnotationMatrix::Entry& e : labels) {
      ll += LogCell(e.other, e.label, gold_label);
    }
    std::fill(out.begin(), out.end(), 0.0);
    out[gold_label] = 1.0;
    return ll;
  }
  double* scores = out.data();
  std::copy_n(log_prior_.data(), k, scores);
  for (const AnnotationMatrix::Entry& e : labels) {
    AddLogColumn(e.other, e.label, scores);
  }
  const double max_score = *std::max_element(scores, scores + k);
  double sum = 0.0;
  for (size_t c = 0; c < k; ++c) {
    scores[c] = std::exp(scores[c] - max_score);
    sum += scores[c];
  }
  const double inv_sum = 1.0 / sum;
  for (size_t c = 0; c < k; ++c) scores[c] *= inv_sum;
  return max_score + std::log(sum);
}

void ConfusionParameters::Serialize(ByteWriter& writer) const {
  const size_t k = static_cast<size_t>(num_classes_);
  writer.WriteU32(static_cast<uint32_t>(num_classes_));
  writer.WriteU32(kSparseLayout);
  writer.WriteU32(static_cast<uint32_t>(num_annotators_));
  for (double p : prior_) writer.WriteF64(p);
  // Row-major (row = true class): the natural reading order, independent of
  // the in-memory layout.
  auto write_matrix = [&](const std::vector<double>& label_major) {
    for (size_t c = 0; c < k; ++c) {
      for (size_t label = 0; label < k; ++label) {
        writer.WriteF64(label_major[label * k + c]);
      }
    }
  };
  write_matrix(population_);
  write_matrix(untouched_numerator_);
  // Which annotators have a confusion of their own (one byte each), then
  // for each of them, in increasing order, its row denominators and its
  // columns as (label, K probabilities).
  std::string own(static_cast<size_t>(num_annotators_), '\0');
  for (int32_t a : row_annotator_) own[a] = 1;
  writer.WriteString(own);
  for (size_t row = 0; row < row_annotator_.size(); ++row) {
    const size_t annotator = static_cast<size_t>(row_annotator_[row]);
    for (size_t c = 0; c < k; ++c) writer.WriteF64(row_denominator_[row * k + c]);
    uint32_t columns = 0;
    for (size_t label = 0; label < k; ++label) {
      columns += column_of_[annotator * k + label] >= 0 ? 1 : 0;
    }
    writer.WriteU32(columns);
    for (size_t label = 0; label < k; ++label) {
      const int32_t column = column_of_[annotator * k + label];
      if (column < 0) continue;
      writer.WriteU32(static_cast<uint32_t>(label));
      for (size_t c = 0; c < k; ++c) writer.WriteF64(columns_[column * k + c]);
    }
  }
}

absl::StatusOr<ConfusionParameters> ConfusionParameters::Parse(
    ByteReader& reader, int32_t num_classes) {
  if (absl::Status s = ReadClassCount(reader, num_classes); !s.ok()) return s;
  absl::StatusOr<uint32_t> second = reader.ReadU32();
  if (!second.ok()) return second.status();
  if (*second == kSparseLayout) return ParseSparse(reader, num_classes);
  return ParseDense(reader, num_classes, *second);
}

absl::StatusOr<ConfusionParameters> ConfusionParameters::ParseDense(
    ByteReader& reader, int32_t num_classes, uint32_t num_annotators) {
  const size_t k = static_cast<size_t>(num_classes);
  // Check the size before allocating, so a corrupt count cannot make us
  // allocate gigabytes.
  const uint64_t want_bytes =
      8 * (k + (static_cast<uint64_t>(num_annotators) + 1) * k * k);
  if (num_annotators > static_cast<uint32_t>(INT32_MAX - 1) ||
      reader.remaining() < want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is truncated: ", num_annotators, " annotators need ",
        want_bytes, " bytes, have ", reader.remaining()));
  }
  ConfusionParameters params(num_classes);
  params.ResizeAnnotators(static_cast<int32_t>(num_annotators));
  absl::Status s =
      ReadDistribution(reader, k, "the class prior", params.prior_.data(), 1);
  if (!s.ok()) return s;
  // Each annotator keeps every column; the numerators of the columns it does
  // not keep are never used, so they stay those of the constructor.
  std::vector<double> block(k * k);
  const std::vector<double> unit_denominator(k, 1.0);
  for (size_t slot = 0; slot <= num_annotators; ++slot) {
    for (size_t c = 0; c < k; ++c) {
      // Row c is stored contiguously; the block is label-major.
      s = ReadDistribution(reader, k,
                           slot == 0 ? "the population confusion"
                                     : "an annotator confusion",
                           block.data() + c, k);
      if (!s.ok()) return s;
    }
    if (slot == 0) {
      params.population_ = block;
      continue;
    }
    params.AddRow(static_cast<int32_t>(slot - 1), unit_denominator.data());
    for (size_t label = 0; label < k; ++label) {
      params.AddColumn(static_cast<int32_t>(label), block.data() + label * k);
    }
  }
  params.RecomputeLogs();
  return params;
}

absl::StatusOr<ConfusionParameters> ConfusionParameters::ParseSparse(
    ByteReader& reader, int32_t num_classes) {
  const size_t k = static_cast<size_t>(num_classes);
  absl::StatusOr<uint32_t> a32 = reader.ReadU32();
  if (!a32.ok()) return a32.status();
  if (*a32 > static_cast<uint32_t>(INT32_MAX - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is corrupt: ", *a32, " annotators"));
  }
  ConfusionParameters params(num_classes);
  absl::Status s =
      ReadDistribution(reader, k, "the class prior", params.prior_.data(), 1);
  if (!s.ok()) return s;
  for (size_t c = 0; c < k; ++c) {
    s = ReadDistribution(reader, k, "the population confusion",
                         params.population_.data() + c, k);
    if (!s.ok()) return s;
  }
  std::vector<double> numerator_row_sum(k, 0.0);
  for (size_t c = 0; c < k; ++c) {
    for (size_t label = 0; label < k; ++label) {
      absl::StatusOr<double> v = reader.ReadF64();
      if (!v.ok()) return v.status();
      if (!std::isfinite(*v) || !(*v > 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "serialized model is corrupt: a smoothing numerator is ", *v));
      }
      params.untouched_numerator_[label * k + c] = *v;
      numerator_row_sum[c] += *v;
    }
  }
  // One byte per annotator is read before the annotator index (4 (K + 1)
  // bytes per annotator) is allocated, so a forged count cannot make us
  // allocate more than a small multiple of the blob's size.
  absl::StatusOr<std::string_view> own = reader.ReadString();
  if (!own.ok()) return own.status();
  if (own->size() != *a32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is corrupt: ", own->size(),
        " annotator flags for ", *a32, " annotators"));
  }
  params.ResizeAnnotators(static_cast<int32_t>(*a32));
  std::vector<double> denominator(k);
  std::vector<double> column(k);
  std::vector<double> row_sum(k);
  for (uint32_t annotator = 0; annotator < *a32; ++annotator) {
    if ((*own)[annotator] == 0) continue;
    if ((*own)[annotator] != 1) {
      return absl::InvalidArgumentError(
          "serialized model is corrupt: an annotator flag is neither 0 nor 1");
    }
    for (size_t c = 0; c < k; ++c) {
      absl::StatusOr<double> v = reader.ReadF64();
      if (!v.ok()) return v.status();
      if (!std::isfinite(*v) || !(*v > 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "serialized model is corrupt: a row denominator is ", *v));
      }
      denominator[c] = *v;
    }
    params.AddRow(static_cast<int32_t>(annotator), denominator.data());
    // Row sums: the kept columns, plus u / d over the columns not kept.
    for (size_t c = 0; c < k; ++c) row_sum[c] = numerator_row_sum[c];
    absl::StatusOr<uint32_t> columns = reader.ReadU32();
    if (!columns.ok()) return columns.status();
    if (*columns > k) {
      return absl::InvalidArgumentError(
          "serialized model is corrupt: more columns than classes");
    }
    int64_t previous_label = -1;
    for (uint32_t j = 0; j < *columns; ++j) {
      absl::StatusOr<uint32_t> label = reader.ReadU32();
      if (!label.ok()) return label.status();
      if (*label >= k || static_cast<int64_t>(*label) <= previous_label) {
        return absl::InvalidArgumentError(
            "serialized model is corrupt: columns out of order");
      }
      previous_label = *label;
      for (size_t c = 0; c < k; ++c) {
        absl::StatusOr<double> v = reader.ReadF64();
        if (!v.ok()) return v.status();
        if (!std::isfinite(*v) || !(*v > 0.0) || *v > 1.0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "serialized model is corrupt: an annotator confusion holds "
              "probability ",
              *v));
        }
        column[c] = *v;
        row_sum[c] -= params.untouched_numerator_[*label * k + c];
      }
      params.AddColumn(static_cast<int32_t>(*label), column.data());
      for (size_t c = 0; c < k; ++c) row_sum[c] += column[c] * denominator[c];
    }
    // row_sum[c] now holds d * (sum of kept columns) + sum of u not kept.
    for (size_t c = 0; c < k; ++c) {
      const double sum = row_sum[c] / denominator[c];
      if (!(std::abs(sum - 1.0) <= 1e-9 * static_cast<double>(k))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "serialized model is corrupt: an annotator confusion row sums to ",
            sum));
      }
    }
  }
  params.RecomputeLogs();
  return params;
}

ConfusionCounts::ConfusionCounts(int32_t num_classes, int32_t num_annotators)
    : num_classes_(num_classes),
      num_annotators_(num_annotators),
      column_of_(static_cast<size_t>(num_annotators) * num_classes, -1),
      class_mass_(num_classes, 0.0),
      labels_per_annotator_(num_annotators, 0) {}

int32_t ConfusionCounts::AddColumn(int32_t annotator, int32_t label) {
  const size_t k = static_cast<size_t>(num_classes_);
  const int32_t column = static_cast<int32_t>(column_label_.size());
  column_of_[static_cast<size_t>(annotator) * k + label] = column;
  column_annotator_.push_back(annotator);
  column_label_.push_back(label);
  counts_.resize(counts_.size() + k, 0.0);
  return column;
}

void ConfusionCounts::RemoveItem(
    absl::Span<const AnnotationMatrix::Entry> labels, const double* posterior) {
  const size_t k = static_cast<size_t>(num_classes_);
  for (size_t c = 0; c < k; ++c) {
    class_mass_[c] = std::max(0.0, class_mass_[c] - posterior[c]);
  }
  for (const AnnotationMatrix::Entry& e : labels) {
    const int32_t column = FindColumn(e.other, e.label);
    if (column >= 0) {
      double* cell = counts_.data() + static_cast<size_t>(column) * k;
      for (size_t c = 0; c < k; ++c) {
        cell[c] = std::max(0.0, cell[c] - posterior[c]);
      }
    }
    --labels_per_annotator_[e.other];
  }
}

void ConfusionCounts::RemoveUninformedItem() {
  const double share = 1.0 / static_cast<double>(num_classes_);
  for (double& m : class_mass_) m = std::max(0.0, m - share);
}

void ConfusionCounts::ResizeAnnotators(int32_t num_annotators) {
  if (num_annotators < num_annotators_) {
    // Rebuild without the annotators cut off.
    ConfusionCounts kept(num_classes_, num_annotators);
    const size_t k = static_cast<size_t>(num_classes_);
    for (size_t j = 0; j < column_label_.size(); ++j) {
      const int32_t annotator = column_annotator_[j];
      if (annotator >= num_annotators) continue;
      const int32_t column = kept.AddColumn(annotator, column_label_[j]);
      std::copy_n(counts_.data() + j * k, k,
                  kept.counts_.data() + static_cast<size_t>(column) * k);
    }
    kept.class_mass_ = class_mass_;
    std::copy_n(labels_per_annotator_.begin(), num_annotators,
                kept.labels_per_annotator_.begin());
    *this = std::move(kept);
    return;
  }
  column_of_.resize(static_cast<size_t>(num_annotators) * num_classes_, -1);
  labels_per_annotator_.resize(num_annotators, 0);
  num_annotators_ = num_annotators;
}

void ConfusionCounts::Serialize(ByteWriter& writer) const {
  const size_t k = static_cast<size_t>(num_classes_);
  writer.WriteU32(static_cast<uint32_t>(num_classes_));
  writer.WriteU32(kSparseLayout);
  writer.WriteU32(static_cast<uint32_t>(num_annotators_));
  for (double m : class_mass_) writer.WriteF64(m);
  for (int64_t n : labels_per_annotator_) {
    writer.WriteU64(static_cast<uint64_t>(n));
  }
  // Columns in (annotator, label) order, whatever order they were added in.
  writer.WriteU64(static_cast<uint64_t>(column_label_.size()));
  for (int32_t a = 0; a < num_annotators_; ++a) {
    for (size_t label = 0; label < k; ++label) {
      const int32_t column = column_of_[static_cast<size_t>(a) * k + label];
      if (column < 0) continue;
      writer.WriteU32(static_cast<uint32_t>(a));
      writer.WriteU32(static_cast<uint32_t>(label));
      for (size_t c = 0; c < k; ++c) writer.WriteF64(counts_[column * k + c]);
    }
  }
}

absl::StatusOr<ConfusionCounts> ConfusionCounts::Parse(ByteReader& reader,
                                                       int32_t num_classes) {
  if (absl::Status s = ReadClassCount(reader, num_classes, "counts"); !s.ok()) return s;
  absl::StatusOr<uint32_t> second = reader.ReadU32();
  if (!second.ok()) return second.status();
  const bool sparse = *second == kSparseLayout;
  uint32_t num_annotators = *second;
  if (sparse) {
    absl::StatusOr<uint32_t> a32 = reader.ReadU32();
    if (!a32.ok()) return a32.status();
    num_annotators = *a32;
  }
  const uint64_t k = static_cast<uint64_t>(num_classes);
  // Sizes before allocating: the dense layout holds A * K^2 counts, both
  // hold a label count per annotator.
  const uint64_t want_bytes =
      8 * (static_cast<uint64_t>(num_annotators) * ((sparse ? 0 : k * k) + 1) +
           k);
  if (num_annotators > static_cast<uint32_t>(INT32_MAX) ||
      reader.remaining() < want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized counts are truncated: ", num_annotators,
        " annotators need ", want_bytes, " bytes, have ", reader.remaining()));
  }
  ConfusionCounts counts(num_classes, static_cast<int32_t>(num_annotators));
  auto read_count = [&reader](double& out) -> absl::Status {
    absl::StatusOr<double> v = reader.ReadF64();
    if (!v.ok()) return v.status();
    if (!std::isfinite(*v) || !(*v >= 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "serialized counts are corrupt: expected count ", *v));
    }
    out = *v;
    return absl::OkStatus();
  };
  std::vector<double> column(k);
  if (!sparse) {
    // Dense: [annotator][label][true class]; keep the non-zero columns.
    for (uint32_t a = 0; a < num_annotators; ++a) {
      for (uint64_t label = 0; label < k; ++label) {
        bool any = false;
        for (double& c : column) {
          if (absl::Status s = read_count(c); !s.ok()) return s;
          any = any || c != 0.0;
        }
        if (!any) continue;
        const int32_t j =
            counts.AddColumn(static_cast<int32_t>(a), static_cast<int32_t>(label));
        std::copy(column.begin(), column.end(),
                  counts.counts_.begin() + static_cast<size_t>(j) * k);
      }
    }
  }
  for (double& m : counts.class_mass_) {
    if (absl::Status s = read_count(m); !s.ok()) return s;
  }
  for (int64_t& n : counts.labels_per_annotator_) {
    absl::StatusOr<uint64_t> v = reader.ReadU64();
    if (!v.ok()) return v.status();
    if (*v > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(
          "serialized counts are corrupt: label count out of range");
    }
    n = static_cast<int64_t>(*v);
  }
  if (!sparse) return counts;
  absl::StatusOr<uint64_t> columns = reader.ReadU64();
  if (!columns.ok()) return columns.status();
  if (*columns > reader.remaining() / (8 + 8 * k)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized counts are truncated: ", *columns, " columns"));
  }
  int64_t previous = -1;
  for (uint64_t j = 0; j < *columns; ++j) {
    absl::StatusOr<uint32_t> annotator = reader.ReadU32();
    if (!annotator.ok()) return annotator.status();
    absl::StatusOr<uint32_t> label = reader.ReadU32();
    if (!label.ok()) return label.status();
    const int64_t key = static_cast<int64_t>(*annotator) * static_cast<int64_t>(k) + *label;
    if (*annotator >= num_annotators || *label >= k || key <= previous) {
      return absl::InvalidArgumentError(
          "serialized counts are corrupt: columns out of order");
    }
    previous = key;
    for (double& c : column) {
      if (absl::Status s = read_count(c); !s.ok()) return s;
    }
    const int32_t added = counts.AddColumn(static_cast<int32_t>(*annotator),
                                           static_cast<int32_t>(*label));
    std::copy(column.begin(), column.end(),
              counts.counts_.begin() + static_cast<size_t>(added) * k);
  }
  return counts;
}

void ConfusionCounts::Merge(const ConfusionCounts& other) {
  const size_t k = static_cast<size_t>(num_classes_);
  for (size_t j = 0; j < other.column_label_.size(); ++j) {
    const int32_t annotator = other.column_annotator_[j];
    const int32_t column = FindOrAddColumn(annotator, other.column_label_[j]);
    double* into = counts_.data() + static_cast<size_t>(column) * k;
    const double* from = other.counts_.data() + j * k;
    for (size_t c = 0; c < k; ++c) into[c] += from[c];
  }
  for (size_t i = 0; i < class_mass_.size(); ++i) {
    class_mass_[i] += other.class_mass_[i];
  }
  for (size_t i = 0; i < labels_per_annotator_.size(); ++i) {
    labels_per_annotator_[i] += other.labels_per_annotator_[i];
  }
}

ConfusionParameters EstimateParameters(const ConfusionCounts& counts,
                                       const TruthModelOptions& options,
                                       double population_diagonal) {
  const size_t k = static_cast<size_t>(counts.num_classes_);
  const int32_t num_annotators = counts.num_annotators_;
  const double kd = static_cast<double>(k);
  const double alpha = options.confusion_smoothing;
  const double shrink = options.population_smoothing;

  ConfusionParameters params(counts.num_classes_);
  params.ResizeAnnotators(num_annotators);

  double mass = 0.0;
  for (double m : counts.class_mass_) mass += m;
  for (size_t c = 0; c < k; ++c) {
    params.prior_[c] = (counts.class_mass_[c] + options.prior_smoothing) /
                       (mass + kd * options.prior_smoothing);
  }

  // Calls f(label, counts) for each column of annotator a, in label order.
  auto for_each_column = [&](int32_t a, const auto& f) {
    for (size_t label = 0; label < k; ++label) {
      const int32_t column =
          counts.column_of_[static_cast<size_t>(a) * k + label];
      if (column >= 0) f(label, counts.counts_.data() + column * k);
    }
  };

  // Population: pooled counts, i.e. the label-count-weighted average of the
  // annotators' behaviour; row c = (n[c][l] + alpha + diagonal * [l == c]) /
  // (n[c] + K * alpha + diagonal).
  std::vector<double>& pop = params.population_;
  std::fill(pop.begin(), pop.end(), 0.0);
  for (int32_t a = 0; a < num_annotators; ++a) {
    for_each_column(a, [&](size_t label, const double* n) {
      for (size_t c = 0; c < k; ++c) pop[label * k + c] += n[c];
    });
  }
  std::vector<double> row_total(k, 0.0);
  for (size_t label = 0; label < k; ++label) {
    for (size_t c = 0; c < k; ++c) row_total[c] += pop[label * k + c];
  }
  for (size_t label = 0; label < k; ++label) {
    for (size_t c = 0; c < k; ++c) {
      const double prior_count = alpha + (label == c ? population_diagonal : 0.0);
      pop[label * k + c] = (pop[label * k + c] + prior_count) /
                           (row_total[c] + kd * alpha + population_diagonal);
    }
  }

  // Annotators with labels: row c of annotator a = (n_a[c][l] + u[c][l]) /
  // d_a[c], u = alpha + shrink * pop, d_a[c] = n_a[c] + K * alpha + shrink.
  // Annotators without keep the population confusion.
  for (size_t i = 0; i < k * k; ++i) {
    params.untouched_numerator_[i] = alpha + shrink * pop[i];
  }
  std::vector<double> column(k);
  for (int32_t a = 0; a < num_annotators; ++a) {
    if (counts.labels_per_annotator_[a] == 0) continue;
    std::fill(row_total.begin(), row_total.end(), 0.0);
    for_each_column(a, [&](size_t, const double* n) {
      for (size_t c = 0; c < k; ++c) row_total[c] += n[c];
    });
    for (size_t c = 0; c < k; ++c) row_total[c] = row_total[c] + kd * alpha + shrink;
    params.AddRow(a, row_total.data());
    for_each_column(a, [&](size_t label, const double* n) {
      const double* u = params.untouched_numerator_.data() + label * k;
      for (size_t c = 0; c < k; ++c) column[c] = (n[c] + u[c]) / row_total[c];
      params.AddColumn(static_cast<int32_t>(label), column.data());
    });
  }
  params.RecomputeLogs();
  return params;
}

void SoftMajorityVote(absl::Span<const AnnotationMatrix::Entry> labels,
                      int32_t gold_label, double smoothing,
                      absl::Span<double> out) {
  std::fill(out.begin(), out.end(), 0.0);
  if (gold_label >= 0) {
    out[gold_label] = 1.0;
    return;
  }
  for (const AnnotationMatrix::Entry& e : labels) out[e.label] += 1.0;
  const double denominator =
      static_cast<double>(labels.size()) +
      static_cast<double>(out.size()) * smoothing;
  for (double& p : out) p = (p + smoothing) / denominator;
}

absl::Span<const AnnotationMatrix::Entry> CanonicalLabels(
    absl::Span<const AnnotationMatrix::Entry> labels,
    std::vector<AnnotationMatrix::Entry>& scratch) {
  if (std::is_sorted(labels.begin(), labels.end(), EntryLess)) return labels;
  scratch.assign(labels.begin(), labels.end());
  std::sort(scratch.begin(), scratch.end(), EntryLess);
  return scratch;
}

std::string SerializeConfusionModel(
    std::string_view method, const std::optional<ConfusionParameters>& params,
    const std::function<void(ByteWriter&)>& write_extension) {
  ByteWriter writer;
  WriteModelHeader(writer, method, params.has_value());
  if (params.has_value()) params->Serialize(writer);
  if (write_extension) write_extension(writer);
  return writer.Finish();
}

absl::StatusOr<std::optional<ConfusionParameters>> ParseConfusionModel(
    std::string_view serialized, std::string_view method, int32_t num_classes,
    const std::function<absl::Status(ByteReader&)>& read_extension) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, method);
  if (!has_params.ok()) return has_params.status();
  std::optional<ConfusionParameters> params;
  if (*has_params) {
    absl::StatusOr<ConfusionParameters> parsed =
        ConfusionParameters::Parse(*reader, num_classes);
    if (!parsed.ok()) return parsed.status();
    params = *std::move(parsed);
  }
  if (read_extension && reader->remaining() > 0) {
    absl::Status s = read_extension(*reader);
    if (!s.ok()) return s;
  }
  absl::Status s = reader->ExpectEnd();
  if (!s.ok()) return s;
  return params;
}

}  // namespace verity::models
