#include "models/bwa.h"

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

using Entry = AnnotationMatrix::Entry;

// z_i (unnormalised, each z_ik in [0, 1]) of an item with `labels`:
//   z_ik = (lambda mu_k + sum v_jk [y = k]) / (lambda + sum v_jk).
// `row(j)` gives annotator j's K precisions; `denominator` is scratch of size K.
template <typename RowFn>
void ItemTruth(absl::Span<const Entry> labels, const double* mu, RowFn row,
               absl::Span<double> denominator, absl::Span<double> z) {
  const size_t k = z.size();
  for (size_t c = 0; c < k; ++c) {
    z[c] = BwaModel::kLambda * mu[c];
    denominator[c] = BwaModel::kLambda;
  }
  for (const Entry& e : labels) {
    const double* v = row(e.other);
    for (size_t c = 0; c < k; ++c) denominator[c] += v[c];
    z[e.label] += v[e.label];
  }
  for (size_t c = 0; c < k; ++c) z[c] /= denominator[c];
}

void OneHot(int32_t label, absl::Span<double> out) {
  std::fill(out.begin(), out.end(), 0.0);
  out[label] = 1.0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BwaModel>> BwaModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("method bwa: num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<BwaModel>(new BwaModel(num_classes, options));
}

std::unique_ptr<TruthModel> BwaModel::Clone() const {
  return std::unique_ptr<TruthModel>(new BwaModel(*this));
}

const double* BwaModel::RowOf(int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  const int64_t rows = static_cast<int64_t>(params_->size() / k) - 1;
  const size_t r = annotator >= 0 && annotator + int64_t{1} < rows
                       ? static_cast<size_t>(annotator) + 1
                       : 0;
  return params_->data() + k + r * k;
}

absl::StatusOr<FitReport> BwaModel::Fit(const AnnotationMatrix& data,
                                        absl::Span<const int32_t> gold,
                                        bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;
  const size_t k = static_cast<size_t>(num_classes_);
  const int32_t n = data.num_items();
  const int32_t num_annotators = data.num_annotators();
  auto gold_of = [&](int32_t i) { return gold.empty() ? -1 : gold[i]; };

  // z starts as the majority-vote fractions, which also set b_k.
  std::vector<double> z(static_cast<size_t>(n) * k, 0.0);
  std::vector<double> rate(k, 0.0);
  int64_t labelled_items = 0;
  for (int32_t i = 0; i < n; ++i) {
    const absl::Span<const Entry> labels = data.LabelsOfItem(i);
    if (labels.empty()) continue;
    ++labelled_items;
    double* zi = &z[static_cast<size_t>(i) * k];
    for (const Entry& e : labels) zi[e.label] += 1.0;
    const double w = static_cast<double>(labels.size());
    for (size_t c = 0; c < k; ++c) {
      zi[c] /= w;
      rate[c] += w * zi[c] * (1.0 - zi[c]);
    }
  }
  const double correction = 4.0 * (1.0 - 1.0 / static_cast<double>(k));
  for (size_t c = 0; c < k; ++c) {
    rate[c] = data.num_labels() > 0
                  ? kPrecisionShape * correction * rate[c] /
                        static_cast<double>(data.num_labels())
                  : 0.0;
    rate[c] = std::max(rate[c], kMinRate * kPrecisionShape);
  }

  // params: K class means, the prior row, one row per annotator.
  std::vector<double> params(k + (static_cast<size_t>(num_annotators) + 1) * k);
  std::vector<double> denominator(k);
  if (warm_start && params_.has_value()) {
    for (int32_t a = -1; a < num_annotators; ++a) {
      const double* r = RowOf(a);
      std::copy(r, r + k, &params[k + (static_cast<size_t>(a) + 1) * k]);
    }
    const double* mu = params_->data();
    auto row = [&](int32_t a) { return &params[k + (static_cast<size_t>(a) + 1) * k]; };
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      if (labels.empty()) continue;
      ItemTruth(labels, mu, row, absl::MakeSpan(denominator),
                absl::MakeSpan(&z[static_cast<size_t>(i) * k], k));
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    const int32_t g = gold_of(i);
    if (g >= 0 && !data.LabelsOfItem(i).empty()) {
      OneHot(g, absl::MakeSpan(&z[static_cast<size_t>(i) * k], k));
    }
  }

  std::vector<double> squares(static_cast<size_t>(num_annotators) * k);
  std::vector<double> next(k);
  FitReport report;
  while (report.iterations < options_.max_iterations) {
    double* mu = params.data();
    std::fill(mu, mu + k, 0.0);
    std::fill(squares.begin(), squares.end(), 0.0);
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      if (labels.empty()) continue;
      const double* zi = &z[static_cast<size_t>(i) * k];
      for (size_t c = 0; c < k; ++c) mu[c] += zi[c];
      for (const Entry& e : labels) {
        double* sq = &squares[static_cast<size_t>(e.other) * k];
        for (size_t c = 0; c < k; ++c) sq[c] += zi[c] * zi[c];
        sq[e.label] += 1.0 - 2.0 * zi[e.label];
      }
    }
    for (size_t c = 0; c < k; ++c) {
      mu[c] = labelled_items > 0 ? mu[c] / static_cast<double>(labelled_items)
                                 : 1.0 / static_cast<double>(k);
      params[k + c] = kPrecisionShape / rate[c];
    }
    for (int32_t a = 0; a < num_annotators; ++a) {
      const double labels = static_cast<double>(data.LabelsOfAnnotator(a).size());
      const double* sq = &squares[static_cast<size_t>(a) * k];
      double* v = &params[k + (static_cast<size_t>(a) + 1) * k];
      for (size_t c = 0; c < k; ++c) {
        // sq may be a rounding error below 0 when z is one-hot.
        v[c] = (kPrecisionShape + labels) / (rate[c] + std::max(sq[c], 0.0));
      }
    }
    auto row = [&](int32_t a) { return &params[k + (static_cast<size_t>(a) + 1) * k]; };
    bool converged = true;
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      if (labels.empty() || gold_of(i) >= 0) continue;
      ItemTruth(labels, mu, row, absl::MakeSpan(denominator), absl::MakeSpan(next));
      double* zi = &z[static_cast<size_t>(i) * k];
      for (size_t c = 0; c < k; ++c) {
        if (std::abs(next[c] - zi[c]) >
            kAbsoluteTolerance + kRelativeTolerance * std::abs(next[c])) {
          converged = false;
        }
        zi[c] = next[c];
      }
    }
    ++report.iterations;
    if (converged) {
      report.converged = true;
      break;
    }
  }
  params_ = std::move(params);
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

void BwaModel::ItemPosterior(absl::Span<const Entry> labels, int32_t gold_label,
                             absl::Span<double> out) const {
  if (!params_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  if (gold_label >= 0) {
    OneHot(gold_label, out);
    return;
  }
  std::vector<Entry> scratch;
  std::vector<double> denominator(out.size());
  ItemTruth(CanonicalLabels(labels, scratch), params_->data(),
            [this](int32_t a) { return RowOf(a); }, absl::MakeSpan(denominator),
            out);
  double sum = 0.0;
  for (double p : out) sum += p;
  if (!(sum > 0.0)) {
    std::fill(out.begin(), out.end(), 1.0 / static_cast<double>(out.size()));
    return;
  }
  for (double& p : out) p /= sum;
}

std::optional<std::vector<double>> BwaModel::AnnotatorPrecision(
    int32_t annotator) const {
  if (!params_.has_value()) return std::nullopt;
  const double* r = RowOf(annotator);
  return std::vector<double>(r, r + num_classes_);
}

std::optional<std::vector<double>> BwaModel::ClassMean() const {
  if (!params_.has_value()) return std::nullopt;
  return std::vector<double>(params_->begin(), params_->begin() + num_classes_);
}

std::vector<double> BwaModel::AnnotatorConfusion(int32_t annotator) const {
  const int32_t k = num_classes_;
  std::vector<double> q(static_cast<size_t>(k) * k, 1.0 / k);
  if (!params_.has_value()) return q;
  const double* v = RowOf(annotator);
  for (int32_t t = 0; t < k; ++t) {
    const double p = std::clamp(1.0 - k / (2.0 * v[t]), 1.0 / k, 1.0 - 1e-6);
    for (int32_t y = 0; y < k; ++y) {
      q[static_cast<size_t>(t) * k + y] = t == y ? p : (1.0 - p) / (k - 1);
    }
  }
  return q;
}

std::string BwaModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, kMethod, params_.has_value());
  if (params_.has_value()) {
    const size_t k = static_cast<size_t>(num_classes_);
    writer.WriteU32(static_cast<uint32_t>(num_classes_));
    writer.WriteU32(static_cast<uint32_t>(params_->size() / k - 2));
    for (double v : *params_) writer.WriteF64(v);
  }
  return writer.Finish();
}

absl::Status BwaModel::Restore(std::string_view serialized) {
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
    const uint64_t k = static_cast<uint64_t>(num_classes_);
    const uint64_t want_bytes = 8 * (static_cast<uint64_t>(*a32) + 2) * k;
    if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
        reader->remaining() < want_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "serialized model is truncated: ", *a32, " annotators need ",
          want_bytes, " bytes, have ", reader->remaining()));
    }
    params.emplace((static_cast<size_t>(*a32) + 2) * k);
    for (size_t i = 0; i < params->size(); ++i) {
      absl::StatusOr<double> v = reader->ReadF64();
      if (!v.ok()) return v.status();
      const bool mean = i < k;
      const bool valid = mean ? (*v >= 0.0 && *v <= 1.0)
                              : (*v > 0.0 && std::isfinite(*v));
      if (!valid) {
        return absl::InvalidArgumentError(absl::StrCat(
            "serialized model is corrupt: ", mean ? "a class mean" : "a precision",
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
