#include "models/kos.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/binary_codec.h"
#include "models/confusion_parameters.h"

namespace verity::models {
namespace {

double Sign(int32_t label) { return label == 0 ? 1.0 : -1.0; }

// Scales `v` to a root mean square of 1; returns false (v unchanged) if it is
// all zero.
bool RescaleToUnitRms(std::vector<double>& v) {
  double sum_sq = 0.0;
  for (double x : v) sum_sq += x * x;
  if (!(sum_sq > 0.0) || v.empty()) return false;
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(v.size()));
  for (double& x : v) x *= inv;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KosModel>> KosModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "method kos (Karger-Oh-Shah) is for binary tasks only: num_classes "
        "must be 2, got ",
        num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<KosModel>(new KosModel(options));
}

std::unique_ptr<TruthModel> KosModel::Clone() const {
  return std::unique_ptr<TruthModel>(new KosModel(*this));
}

double KosModel::WeightOf(int32_t annotator) const {
  const std::vector<double>& w = *weights_;
  const int32_t num_annotators = static_cast<int32_t>(w.size()) - 1;
  return annotator >= 0 && annotator < num_annotators
             ? w[static_cast<size_t>(annotator) + 1]
             : w[0];
}

absl::StatusOr<FitReport> KosModel::Fit(const AnnotationMatrix& data,
                                        absl::Span<const int32_t> gold,
                                        bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(2, data, gold);
  if (!s.ok()) return s;
  const int32_t n = data.num_items();
  const int32_t num_annotators = data.num_annotators();
  const size_t num_labels = static_cast<size_t>(data.num_labels());

  // Edges in item-major order; edge_of[p] is the item-major index of the
  // p-th label in annotator-major order. Item rows are sorted by annotator,
  // so visiting annotators in order meets each item's labels in row order.
  std::vector<int64_t> row_start(static_cast<size_t>(n) + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    row_start[i + 1] = row_start[i] + data.LabelsOfItem(i).size();
  }
  std::vector<int64_t> cursor(row_start.begin(), row_start.end() - 1);
  std::vector<int64_t> edge_of;
  edge_of.reserve(num_labels);
  for (int32_t a = 0; a < num_annotators; ++a) {
    for (const AnnotationMatrix::Entry& e : data.LabelsOfAnnotator(a)) {
      edge_of.push_back(cursor[e.other]++);
    }
  }

  std::vector<double> y(num_labels, 1.0);
  if (warm_start && weights_.has_value()) {
    int64_t p = 0;
    for (int32_t a = 0; a < num_annotators; ++a) {
      const double w = WeightOf(a);
      for (size_t k = 0; k < data.LabelsOfAnnotator(a).size(); ++k, ++p) {
        y[edge_of[p]] = w;
      }
    }
  }
  std::vector<double> x(num_labels, 0.0);

  // x_{i->j} from y, item by item.
  auto item_pass = [&] {
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const AnnotationMatrix::Entry> labels =
          data.LabelsOfItem(i);
      const int64_t base = row_start[i];
      double sum = 0.0;
      for (size_t k = 0; k < labels.size(); ++k) {
        sum += Sign(labels[k].label) * y[base + k];
      }
      for (size_t k = 0; k < labels.size(); ++k) {
        x[base + k] = sum - Sign(labels[k].label) * y[base + k];
      }
    }
  };

  FitReport report;
  std::vector<double> next(num_labels);
  while (report.iterations < options_.max_iterations) {
    item_pass();
    // y_{j->i} from x, annotator by annotator.
    int64_t p = 0;
    for (int32_t a = 0; a < num_annotators; ++a) {
      const absl::Span<const AnnotationMatrix::Entry> labels =
          data.LabelsOfAnnotator(a);
      double sum = 0.0;
      for (size_t k = 0; k < labels.size(); ++k) {
        sum += Sign(labels[k].label) * x[edge_of[p + k]];
      }
      for (size_t k = 0; k < labels.size(); ++k) {
        const int64_t e = edge_of[p + k];
        next[e] = sum - Sign(labels[k].label) * x[e];
      }
      p += static_cast<int64_t>(labels.size());
    }
    ++report.iterations;
    if (!RescaleToUnitRms(next)) {
      // Every message is 0: no annotator has a label on an item with another label (no item
      // has two labels, or every annotator has one label). The zero messages are kept, so the
      // weights below are uninformative and all 1, as kos.h promises; the messages of the last
      // iteration would make weights out of labels that carry no leave-one-out evidence.
      y.swap(next);
      break;
    }
    double largest_move = 0.0;
    for (size_t e = 0; e < num_labels; ++e) {
      largest_move = std::max(largest_move, std::abs(next[e] - y[e]));
    }
    y.swap(next);
    if (largest_move <= options_.tolerance) {
      report.converged = true;
      break;
    }
  }

  // Per-annotator weights from the full sums of the last x messages.
  item_pass();
  std::vector<double> weights(static_cast<size_t>(num_annotators) + 1, 0.0);
  double sum_sq = 0.0;
  int32_t with_labels = 0;
  int64_t p = 0;
  for (int32_t a = 0; a < num_annotators; ++a) {
    const absl::Span<const AnnotationMatrix::Entry> labels =
        data.LabelsOfAnnotator(a);
    double sum = 0.0;
    for (size_t k = 0; k < labels.size(); ++k, ++p) {
      sum += Sign(labels[k].label) * x[edge_of[p]];
    }
    weights[static_cast<size_t>(a) + 1] = sum;
    sum_sq += sum * sum;
    with_labels += labels.empty() ? 0 : 1;
  }
  const bool informative = sum_sq > 0.0 && std::isfinite(sum_sq);
  const double inv_rms =
      informative ? 1.0 / std::sqrt(sum_sq / with_labels) : 0.0;
  double weighted = 0.0;
  for (int32_t a = 0; a < num_annotators; ++a) {
    double& w = weights[static_cast<size_t>(a) + 1];
    w = informative ? w * inv_rms : 1.0;
    weighted += w * static_cast<double>(data.LabelsOfAnnotator(a).size());
  }
  weights[0] = num_labels > 0 && informative
                   ? weighted / static_cast<double>(num_labels)
                   : 1.0;
  for (int32_t a = 0; a < num_annotators; ++a) {
    if (data.LabelsOfAnnotator(a).empty()) {
      weights[static_cast<size_t>(a) + 1] = weights[0];
    }
  }
  weights_ = std::move(weights);
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

void KosModel::ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                             int32_t gold_label,
                             absl::Span<double> out) const {
  if (!weights_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  if (gold_label >= 0) {
    out[0] = gold_label == 0 ? 1.0 : 0.0;
    out[1] = 1.0 - out[0];
    return;
  }
  std::vector<AnnotationMatrix::Entry> scratch;
  double log_odds = 0.0;
  for (const AnnotationMatrix::Entry& e : CanonicalLabels(labels, scratch)) {
    log_odds += Sign(e.label) * WeightOf(e.other);
  }
  // A stable sigmoid: exp of a non-positive number only.
  const double z = std::exp(-std::abs(log_odds));
  const double larger = 1.0 / (1.0 + z);
  out[0] = log_odds >= 0 ? larger : 1.0 - larger;
  out[1] = log_odds >= 0 ? 1.0 - larger : larger;
}

std::optional<double> KosModel::AnnotatorWeight(int32_t annotator) const {
  if (!weights_.has_value()) return std::nullopt;
  return WeightOf(annotator);
}

std::vector<double> KosModel::AnnotatorConfusion(int32_t annotator) const {
  if (!weights_.has_value()) return {0.5, 0.5, 0.5, 0.5};
  const double p =
      std::clamp(1.0 / (1.0 + std::exp(-WeightOf(annotator))),
                 kMinConfusionAccuracy, 1.0 - kMinConfusionAccuracy);
  return {p, 1.0 - p, 1.0 - p, p};
}

std::string KosModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, kMethod, weights_.has_value());
  if (weights_.has_value()) {
    writer.WriteU32(static_cast<uint32_t>(weights_->size() - 1));
    for (double w : *weights_) writer.WriteF64(w);
  }
  return writer.Finish();
}

absl::Status KosModel::Restore(std::string_view serialized) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, kMethod);
  if (!has_params.ok()) return has_params.status();
  std::optional<std::vector<double>> weights;
  if (*has_params) {
    absl::StatusOr<uint32_t> a32 = reader->ReadU32();
    if (!a32.ok()) return a32.status();
    const uint64_t want_bytes = 8 * (static_cast<uint64_t>(*a32) + 1);
    if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
        reader->remaining() < want_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "serialized model is truncated: ", *a32, " annotators need ",
          want_bytes, " bytes, have ", reader->remaining()));
    }
    weights.emplace(static_cast<size_t>(*a32) + 1);
    for (double& w : *weights) {
      absl::StatusOr<double> v = reader->ReadF64();
      if (!v.ok()) return v.status();
      if (!std::isfinite(*v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("serialized model is corrupt: a weight is ", *v));
      }
      w = *v;
    }
  }
  absl::Status s = reader->ExpectEnd();
  if (!s.ok()) return s;
  weights_ = std::move(weights);
  return absl::OkStatus();
}

}  // namespace verity::models
