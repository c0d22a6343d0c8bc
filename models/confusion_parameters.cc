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

// Serialization format version; bump on any change of the layout. (A
// method-specific section after the parameters is versioned by its method.)

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
      confusion_(static_cast<size_t>(num_classes) * num_classes,
                 1.0 / num_classes) {
  RecomputeLogs();
}

void ConfusionParameters::RecomputeLogs() {
  log_prior_.resize(prior_.size());
  for (size_t i = 0; i < prior_.size(); ++i) log_prior_[i] = std::log(prior_[i]);
  log_confusion_.resize(confusion_.size());
  for (size_t i = 0; i < confusion_.size(); ++i) {
    log_confusion_[i] = std::log(confusion_[i]);
  }
}

std::vector<double> ConfusionParameters::Confusion(int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  std::vector<double> rows(k * k);
  for (size_t label = 0; label < k; ++label) {
    const double* column =
        confusion_.data() + ColumnOffset(annotator, static_cast<int32_t>(label));
    for (size_t c = 0; c < k; ++c) rows[c * k + label] = column[c];
  }
  return rows;
}

void ConfusionParameters::ResizeAnnotators(int32_t num_annotators) {
  const size_t block = static_cast<size_t>(num_classes_) * num_classes_;
  const size_t old_slots = static_cast<size_t>(num_annotators_) + 1;
  const size_t new_slots = static_cast<size_t>(num_annotators) + 1;
  confusion_.resize(new_slots * block);
  log_confusion_.resize(new_slots * block);
  for (size_t slot = old_slots; slot < new_slots; ++slot) {
    std::copy_n(confusion_.begin(), block, confusion_.begin() + slot * block);
    std::copy_n(log_confusion_.begin(), block,
                log_confusion_.begin() + slot * block);
  }
  num_annotators_ = num_annotators;
}

double ConfusionParameters::Posterior(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    absl::Span<double> out) const {
  const size_t k = static_cast<size_t>(num_classes_);
  if (gold_label >= 0) {
    double ll = log_prior_[gold_label];
    for (const AnnotationMatrix::Entry& e : labels) {
      ll += LogColumn(e.other, e.label)[gold_label];
    }
    std::fill(out.begin(), out.end(), 0.0);
    out[gold_label] = 1.0;
    return ll;
  }
  double* scores = out.data();
  std::copy_n(log_prior_.data(), k, scores);
  for (const AnnotationMatrix::Entry& e : labels) {
    const double* column = LogColumn(e.other, e.label);
    for (size_t c = 0; c < k; ++c) scores[c] += column[c];
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
  writer.WriteU32(static_cast<uint32_t>(num_annotators_));
  for (double p : prior_) writer.WriteF64(p);
  // Row-major per slot (row = true class), population first: the natural
  // reading order, independent of the in-memory layout.
  for (size_t slot = 0; slot <= static_cast<size_t>(num_annotators_); ++slot) {
    const double* block = confusion_.data() + slot * k * k;
    for (size_t c = 0; c < k; ++c) {
      for (size_t label = 0; label < k; ++label) {
        writer.WriteF64(block[label * k + c]);
      }
    }
  }
}

absl::StatusOr<ConfusionParameters> ConfusionParameters::Parse(
    ByteReader& reader, int32_t num_classes) {
  absl::StatusOr<uint32_t> k32 = reader.ReadU32();
  if (!k32.ok()) return k32.status();
  if (*k32 != static_cast<uint32_t>(num_classes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized model has ", *k32,
                     " classes; this model has ", num_classes));
  }
  absl::StatusOr<uint32_t> a32 = reader.ReadU32();
  if (!a32.ok()) return a32.status();
  const size_t k = static_cast<size_t>(num_classes);
  // Check the size before allocating, so a corrupt count cannot make us
  // allocate gigabytes.
  const uint64_t want_bytes =
      8 * (k + (static_cast<uint64_t>(*a32) + 1) * k * k);
  if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
      reader.remaining() < want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is truncated: ", *a32, " annotators need ",
        want_bytes, " bytes, have ", reader.remaining()));
  }
  ConfusionParameters params(num_classes);
  params.num_annotators_ = static_cast<int32_t>(*a32);
  absl::Status s =
      ReadDistribution(reader, k, "the class prior", params.prior_.data(), 1);
  if (!s.ok()) return s;
  params.confusion_.assign((static_cast<size_t>(*a32) + 1) * k * k, 0.0);
  for (size_t slot = 0; slot <= *a32; ++slot) {
    double* block = params.confusion_.data() + slot * k * k;
    for (size_t c = 0; c < k; ++c) {
      // Row c is stored contiguously; in memory it is strided by k.
      s = ReadDistribution(reader, k,
                           slot == 0 ? "the population confusion"
                                     : "an annotator confusion",
                           block + c, k);
      if (!s.ok()) return s;
    }
  }
  params.RecomputeLogs();
  return params;
}

ConfusionCounts::ConfusionCounts(int32_t num_classes, int32_t num_annotators)
    : num_classes_(num_classes),
      num_annotators_(num_annotators),
      counts_(static_cast<size_t>(num_annotators) * num_classes * num_classes,
              0.0),
      class_mass_(num_classes, 0.0),
      labels_per_annotator_(num_annotators, 0) {}

void ConfusionCounts::RemoveItem(
    absl::Span<const AnnotationMatrix::Entry> labels, const double* posterior) {
  const size_t k = static_cast<size_t>(num_classes_);
  for (size_t c = 0; c < k; ++c) {
    class_mass_[c] = std::max(0.0, class_mass_[c] - posterior[c]);
  }
  for (const AnnotationMatrix::Entry& e : labels) {
    double* cell =
        counts_.data() + (static_cast<size_t>(e.other) * k + e.label) * k;
    for (size_t c = 0; c < k; ++c) {
      cell[c] = std::max(0.0, cell[c] - posterior[c]);
    }
    --labels_per_annotator_[e.other];
  }
}

void ConfusionCounts::ResizeAnnotators(int32_t num_annotators) {
  const size_t k = static_cast<size_t>(num_classes_);
  counts_.resize(static_cast<size_t>(num_annotators) * k * k, 0.0);
  labels_per_annotator_.resize(num_annotators, 0);
  num_annotators_ = num_annotators;
}

void ConfusionCounts::Serialize(ByteWriter& writer) const {
  writer.WriteU32(static_cast<uint32_t>(num_classes_));
  writer.WriteU32(static_cast<uint32_t>(num_annotators_));
  for (double c : counts_) writer.WriteF64(c);
  for (double m : class_mass_) writer.WriteF64(m);
  for (int64_t n : labels_per_annotator_) {
    writer.WriteU64(static_cast<uint64_t>(n));
  }
}

absl::StatusOr<ConfusionCounts> ConfusionCounts::Parse(ByteReader& reader,
                                                       int32_t num_classes) {
  absl::StatusOr<uint32_t> k32 = reader.ReadU32();
  if (!k32.ok()) return k32.status();
  if (*k32 != static_cast<uint32_t>(num_classes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized counts have ", *k32,
                     " classes; this model has ", num_classes));
  }
  absl::StatusOr<uint32_t> a32 = reader.ReadU32();
  if (!a32.ok()) return a32.status();
  const uint64_t k = static_cast<uint64_t>(num_classes);
  const uint64_t want_bytes =
      8 * (static_cast<uint64_t>(*a32) * (k * k + 1) + k);
  if (*a32 > static_cast<uint32_t>(INT32_MAX) ||
      reader.remaining() < want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized counts are truncated: ", *a32, " annotators need ",
        want_bytes, " bytes, have ", reader.remaining()));
  }
  ConfusionCounts counts(num_classes, static_cast<int32_t>(*a32));
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
  for (double& c : counts.counts_) {
    if (absl::Status s = read_count(c); !s.ok()) return s;
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
  return counts;
}

void ConfusionCounts::Merge(const ConfusionCounts& other) {
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
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
  const size_t num_annotators = static_cast<size_t>(counts.num_annotators_);
  const double kd = static_cast<double>(k);
  const double alpha = options.confusion_smoothing;
  const double shrink = options.population_smoothing;

  ConfusionParameters params(counts.num_classes_);
  params.num_annotators_ = counts.num_annotators_;

  double mass = 0.0;
  for (double m : counts.class_mass_) mass += m;
  for (size_t c = 0; c < k; ++c) {
    params.prior_[c] = (counts.class_mass_[c] + options.prior_smoothing) /
                       (mass + kd * options.prior_smoothing);
  }

  params.confusion_.assign((num_annotators + 1) * k * k, 0.0);
  // Population: pooled counts, i.e. the label-count-weighted average of the
  // annotators' behaviour.
  double* pop = params.confusion_.data();
  for (size_t a = 0; a < num_annotators; ++a) {
    const double* cell = counts.counts_.data() + a * k * k;
    for (size_t i = 0; i < k * k; ++i) pop[i] += cell[i];
  }
  std::vector<double> row_total(k);
  // Row c of `out` = (n[c][l] + alpha + diagonal * [l == c] +
  // shrink * shrink_to[c][l]) / (n[c] + K * alpha + diagonal + shrink), where
  // the shrinkage terms are absent without shrink_to.
  auto normalize_rows = [&](const double* n, const double* shrink_to,
                            double diagonal, double* out) {
    std::fill(row_total.begin(), row_total.end(), 0.0);
    for (size_t label = 0; label < k; ++label) {
      for (size_t c = 0; c < k; ++c) row_total[c] += n[label * k + c];
    }
    for (size_t label = 0; label < k; ++label) {
      for (size_t c = 0; c < k; ++c) {
        const double prior_count =
            alpha + (label == c ? diagonal : 0.0) +
            (shrink_to ? shrink * shrink_to[label * k + c] : 0.0);
        out[label * k + c] = (n[label * k + c] + prior_count) /
                             (row_total[c] + kd * alpha + diagonal +
                              (shrink_to ? shrink : 0.0));
      }
    }
  };
  normalize_rows(pop, nullptr, population_diagonal, pop);
  for (size_t a = 0; a < num_annotators; ++a) {
    double* out = params.confusion_.data() + (a + 1) * k * k;
    if (counts.labels_per_annotator_[a] == 0) {
      std::copy_n(pop, k * k, out);
    } else {
      normalize_rows(counts.counts_.data() + a * k * k, pop, 0.0, out);
    }
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
