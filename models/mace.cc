#include "models/mace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
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

using Entry = AnnotationMatrix::Entry;

// Unnormalised log posterior of the true class, into `scores` (size K):
// sum over the labels of log Q_j[k][y], where a label adds log((1 - θ) ξ[y])
// to every class and log(θ + (1 - θ) ξ[y]) - that to class y. `row(j)` gives
// annotator j's parameters (θ, ξ[0..K)).
template <typename RowFn>
void LogScores(absl::Span<const Entry> labels, RowFn row,
               absl::Span<double> scores) {
  double base = 0.0;
  std::fill(scores.begin(), scores.end(), 0.0);
  for (const Entry& e : labels) {
    const double* r = row(e.other);
    const double theta = r[0];
    const double spam = (1.0 - theta) * r[1 + e.label];
    const double log_spam = std::log(spam);
    base += log_spam;
    scores[e.label] += std::log(theta + spam) - log_spam;
  }
  for (double& s : scores) s += base;
}

// Normalises log scores into probabilities in place; returns log sum exp.
double NormaliseLogScores(absl::Span<double> scores) {
  const double top = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  for (double& s : scores) {
    s = std::exp(s - top);
    sum += s;
  }
  for (double& s : scores) s /= sum;
  return top + std::log(sum);
}

// The pooled row (slot 0): label-weighted mean θ and ξ of the annotators with
// labels; θ = 1/2 and uniform ξ without labels.
void SetPooledRow(const AnnotationMatrix& data, int32_t k,
                  std::vector<double>& params) {
  const size_t width = static_cast<size_t>(k) + 1;
  std::fill(params.begin(), params.begin() + width, 0.0);
  const double total = static_cast<double>(data.num_labels());
  if (total <= 0) {
    params[0] = 0.5;
    for (int32_t y = 0; y < k; ++y) params[1 + y] = 1.0 / k;
    return;
  }
  for (int32_t a = 0; a < data.num_annotators(); ++a) {
    const double n = static_cast<double>(data.LabelsOfAnnotator(a).size());
    if (n == 0) continue;
    const double* r = &params[(static_cast<size_t>(a) + 1) * width];
    for (size_t c = 0; c < width; ++c) params[c] += r[c] * n / total;
  }
  for (int32_t a = 0; a < data.num_annotators(); ++a) {
    if (!data.LabelsOfAnnotator(a).empty()) continue;
    std::copy(params.begin(), params.begin() + width,
              params.begin() + (static_cast<size_t>(a) + 1) * width);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MaceModel>> MaceModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("method mace: num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<MaceModel>(new MaceModel(num_classes, options));
}

std::unique_ptr<TruthModel> MaceModel::Clone() const {
  return std::unique_ptr<TruthModel>(new MaceModel(*this));
}

const double* MaceModel::RowOf(int32_t annotator) const {
  const size_t width = static_cast<size_t>(num_classes_) + 1;
  const int64_t rows = static_cast<int64_t>(params_->size() / width);
  const size_t r = annotator >= 0 && annotator + int64_t{1} < rows
                       ? static_cast<size_t>(annotator) + 1
                       : 0;
  return params_->data() + r * width;
}

absl::StatusOr<FitReport> MaceModel::Fit(const AnnotationMatrix& data,
                                         absl::Span<const int32_t> gold,
                                         bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;
  const int32_t k = num_classes_;
  const size_t width = static_cast<size_t>(k) + 1;
  const int32_t n = data.num_items();
  const int32_t num_annotators = data.num_annotators();
  const double log_prior = -std::log(static_cast<double>(k));

  // Expected counts per annotator: truthful, then spamming per label.
  std::vector<double> counts(static_cast<size_t>(num_annotators) * width);
  std::vector<double> params((static_cast<size_t>(num_annotators) + 1) * width);
  auto m_step = [&] {
    for (int32_t a = 0; a < num_annotators; ++a) {
      const double* c = &counts[static_cast<size_t>(a) * width];
      double* r = &params[(static_cast<size_t>(a) + 1) * width];
      const double labels = static_cast<double>(data.LabelsOfAnnotator(a).size());
      r[0] = (c[0] + kCompetencePrior) / (labels + 2 * kCompetencePrior);
      double spam = 0.0;
      for (int32_t y = 0; y < k; ++y) spam += c[1 + y];
      for (int32_t y = 0; y < k; ++y) {
        r[1 + y] = (c[1 + y] + kStrategyPrior) / (spam + k * kStrategyPrior);
      }
    }
    SetPooledRow(data, k, params);
  };

  std::vector<double> q(static_cast<size_t>(k));
  if (warm_start && params_.has_value()) {
    for (int32_t a = -1; a < num_annotators; ++a) {
      const double* r = RowOf(a);
      std::copy(r, r + width, &params[(static_cast<size_t>(a) + 1) * width]);
    }
  } else {
    // θ_j from the annotator's expected agreement with the soft majority
    // vote; ξ_j from the labels the annotator gives.
    std::fill(counts.begin(), counts.end(), 0.0);
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      const int32_t g = gold.empty() ? -1 : gold[i];
      SoftMajorityVote(labels, g, options_.vote_smoothing, absl::MakeSpan(q));
      for (const Entry& e : labels) {
        double* c = &counts[static_cast<size_t>(e.other) * width];
        c[0] += q[e.label];
        c[1 + e.label] += 1.0;
      }
    }
    m_step();
  }

  FitReport report;
  double previous_ll = 0.0;
  while (report.iterations < options_.max_iterations) {
    std::fill(counts.begin(), counts.end(), 0.0);
    double ll = 0.0;
    auto row = [&](int32_t a) {
      return &params[(static_cast<size_t>(a) + 1) * width];
    };
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      if (labels.empty()) continue;
      LogScores(labels, row, absl::MakeSpan(q));
      const int32_t g = gold.empty() ? -1 : gold[i];
      if (g >= 0) {
        ll += log_prior + q[g];
        std::fill(q.begin(), q.end(), 0.0);
        q[g] = 1.0;
      } else {
        ll += log_prior + NormaliseLogScores(absl::MakeSpan(q));
      }
      for (const Entry& e : labels) {
        const double* r = row(e.other);
        const double theta = r[0];
        const double truthful =
            q[e.label] * theta / (theta + (1.0 - theta) * r[1 + e.label]);
        double* c = &counts[static_cast<size_t>(e.other) * width];
        c[0] += truthful;
        c[1 + e.label] += 1.0 - truthful;
      }
    }
    m_step();
    ++report.iterations;
    report.log_likelihood = ll;
    if (report.iterations > 1 &&
        std::abs(ll - previous_ll) <=
            options_.tolerance * std::max(std::abs(ll), 1e-300)) {
      report.converged = true;
      break;
    }
    previous_ll = ll;
  }
  params_ = std::move(params);
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

void MaceModel::ItemPosterior(absl::Span<const Entry> labels,
                              int32_t gold_label,
                              absl::Span<double> out) const {
  if (!params_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  if (gold_label >= 0) {
    std::fill(out.begin(), out.end(), 0.0);
    out[gold_label] = 1.0;
    return;
  }
  std::vector<Entry> scratch;
  LogScores(CanonicalLabels(labels, scratch),
            [this](int32_t a) { return RowOf(a); }, out);
  NormaliseLogScores(out);
}

std::optional<double> MaceModel::AnnotatorCompetence(int32_t annotator) const {
  if (!params_.has_value()) return std::nullopt;
  return RowOf(annotator)[0];
}

std::optional<std::vector<double>> MaceModel::AnnotatorStrategy(
    int32_t annotator) const {
  if (!params_.has_value()) return std::nullopt;
  const double* r = RowOf(annotator);
  return std::vector<double>(r + 1, r + 1 + num_classes_);
}

std::vector<double> MaceModel::AnnotatorConfusion(int32_t annotator) const {
  const int32_t k = num_classes_;
  std::vector<double> q(static_cast<size_t>(k) * k, 1.0 / k);
  if (!params_.has_value()) return q;
  const double* r = RowOf(annotator);
  for (int32_t t = 0; t < k; ++t) {
    for (int32_t y = 0; y < k; ++y) {
      q[static_cast<size_t>(t) * k + y] =
          (1.0 - r[0]) * r[1 + y] + (t == y ? r[0] : 0.0);
    }
  }
  return q;
}

std::string MaceModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, kMethod, params_.has_value());
  if (params_.has_value()) {
    const size_t width = static_cast<size_t>(num_classes_) + 1;
    writer.WriteU32(static_cast<uint32_t>(num_classes_));
    writer.WriteU32(static_cast<uint32_t>(params_->size() / width - 1));
    for (double v : *params_) writer.WriteF64(v);
  }
  return writer.Finish();
}

absl::Status MaceModel::Restore(std::string_view serialized) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, kMethod);
  if (!has_params.ok()) return has_params.status();
  std::optional<std::vector<double>> params;
  if (*has_params) {
    absl::Status s = ReadClassCount(*reader, num_classes_);
    if (!s.ok()) return s;
    absl::StatusOr<uint32_t> a32 = reader->ReadU32();
    if (!a32.ok()) return a32.status();
    const uint64_t width = static_cast<uint64_t>(num_classes_) + 1;
    const uint64_t want_bytes = 8 * (static_cast<uint64_t>(*a32) + 1) * width;
    if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
        reader->remaining() < want_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "serialized model is truncated: ", *a32, " annotators need ",
          want_bytes, " bytes, have ", reader->remaining()));
    }
    params.emplace((static_cast<size_t>(*a32) + 1) * width);
    for (size_t i = 0; i < params->size(); ++i) {
      absl::StatusOr<double> v = reader->ReadF64();
      if (!v.ok()) return v.status();
      // θ in (0, 1) and ξ in (0, 1]: every log in the posteriors is finite.
      const bool theta = i % width == 0;
      if (!(*v > 0.0) || !(theta ? *v < 1.0 : *v <= 1.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "serialized model is corrupt: ", theta ? "a competence" : "a strategy",
            " is ", *v));
      }
      (*params)[i] = *v;
    }
  }
  absl::Status s = reader->ExpectEnd();
  if (!s.ok()) return s;
  params_ = std::move(params);
  return absl::OkStatus();
}

}  // namespace verity::models
