#include "models/ibcc.h"

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
#include "models/special_functions.h"

namespace verity::models {
namespace {

using Entry = AnnotationMatrix::Entry;

double PriorCell(size_t row, size_t column) {
  return row == column ? IbccModel::kDiagonalPrior : IbccModel::kOffDiagonalPrior;
}

// Unnormalised log posterior into scores (size K): E[ln kappa] plus the
// E[ln pi] column of every label. `column(j, l)` points at K values.
template <typename ColumnFn>
void LogScores(absl::Span<const Entry> labels, const double* log_kappa,
               ColumnFn column, absl::Span<double> scores) {
  const size_t k = scores.size();
  std::copy(log_kappa, log_kappa + k, scores.begin());
  for (const Entry& e : labels) {
    const double* add = column(e.other, e.label);
    for (size_t c = 0; c < k; ++c) scores[c] += add[c];
  }
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

}  // namespace

void IbccModel::Parameters::Derive(int32_t num_classes) {
  const size_t k = static_cast<size_t>(num_classes);
  const size_t rows = alpha.size() / (k * k);
  log_kappa.resize(k);
  double total = 0.0;
  for (double v : nu) total += v;
  const double psi_total = Digamma(total);
  for (size_t c = 0; c < k; ++c) log_kappa[c] = Digamma(nu[c]) - psi_total;
  log_pi.resize(alpha.size());
  for (size_t r = 0; r < rows; ++r) {
    const double* a = &alpha[r * k * k];
    double* out = &log_pi[r * k * k];
    for (size_t t = 0; t < k; ++t) {
      double row_total = 0.0;
      for (size_t l = 0; l < k; ++l) row_total += a[t * k + l];
      const double psi_row = Digamma(row_total);
      for (size_t l = 0; l < k; ++l) out[l * k + t] = Digamma(a[t * k + l]) - psi_row;
    }
  }
}

absl::StatusOr<std::unique_ptr<IbccModel>> IbccModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("method ibcc: num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<IbccModel>(new IbccModel(num_classes, options));
}

std::unique_ptr<TruthModel> IbccModel::Clone() const {
  return std::unique_ptr<TruthModel>(new IbccModel(*this));
}

size_t IbccModel::SlotOf(int32_t annotator) const {
  const size_t kk = static_cast<size_t>(num_classes_) * num_classes_;
  const int64_t rows = static_cast<int64_t>(params_->alpha.size() / kk);
  return annotator >= 0 && annotator + int64_t{1} < rows
             ? static_cast<size_t>(annotator) + 1
             : 0;
}

absl::StatusOr<FitReport> IbccModel::Fit(const AnnotationMatrix& data,
                                         absl::Span<const int32_t> gold,
                                         bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;
  const size_t k = static_cast<size_t>(num_classes_);
  const size_t kk = k * k;
  const int32_t n = data.num_items();
  const int32_t num_annotators = data.num_annotators();
  auto gold_of = [&](int32_t i) { return gold.empty() ? -1 : gold[i]; };

  Parameters params;
  params.nu.assign(k, kClassPrior);
  params.alpha.resize((static_cast<size_t>(num_annotators) + 1) * kk);
  // Expected counts, label-major per annotator: [annotator][label][class].
  std::vector<double> counts(static_cast<size_t>(num_annotators) * kk);
  std::vector<double> class_counts(k);
  auto m_step = [&] {
    for (size_t c = 0; c < k; ++c) params.nu[c] = kClassPrior + class_counts[c];
    for (int32_t a = -1; a < num_annotators; ++a) {
      double* out = &params.alpha[(static_cast<size_t>(a) + 1) * kk];
      const double* n_a = a >= 0 ? &counts[static_cast<size_t>(a) * kk] : nullptr;
      for (size_t t = 0; t < k; ++t) {
        for (size_t l = 0; l < k; ++l) {
          out[t * k + l] = PriorCell(t, l) + (n_a != nullptr ? n_a[l * k + t] : 0.0);
        }
      }
    }
    params.Derive(num_classes_);
  };
  auto accumulate = [&](absl::Span<const Entry> labels, const double* q) {
    for (size_t c = 0; c < k; ++c) class_counts[c] += q[c];
    for (const Entry& e : labels) {
      double* n_a = &counts[static_cast<size_t>(e.other) * kk +
                            static_cast<size_t>(e.label) * k];
      for (size_t c = 0; c < k; ++c) n_a[c] += q[c];
    }
  };

  std::vector<double> q(k);
  if (warm_start && params_.has_value()) {
    params.nu = params_->nu;
    for (int32_t a = -1; a < num_annotators; ++a) {
      const double* from = &params_->alpha[SlotOf(a) * kk];
      std::copy(from, from + kk, &params.alpha[(static_cast<size_t>(a) + 1) * kk]);
    }
    params.Derive(num_classes_);
  } else {
    std::fill(class_counts.begin(), class_counts.end(), 0.0);
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      if (labels.empty()) continue;
      SoftMajorityVote(labels, gold_of(i), options_.vote_smoothing, absl::MakeSpan(q));
      accumulate(labels, q.data());
    }
    m_step();
  }

  FitReport report;
  double previous_ll = 0.0;
  while (report.iterations < options_.max_iterations) {
    std::fill(counts.begin(), counts.end(), 0.0);
    std::fill(class_counts.begin(), class_counts.end(), 0.0);
    double ll = 0.0;
    auto column = [&](int32_t a, int32_t l) {
      return &params.log_pi[(static_cast<size_t>(a) + 1) * kk + static_cast<size_t>(l) * k];
    };
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      if (labels.empty()) continue;
      LogScores(labels, params.log_kappa.data(), column, absl::MakeSpan(q));
      const int32_t g = gold_of(i);
      if (g >= 0) {
        ll += q[g];
        std::fill(q.begin(), q.end(), 0.0);
        q[g] = 1.0;
      } else {
        ll += NormaliseLogScores(absl::MakeSpan(q));
      }
      accumulate(labels, q.data());
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

void IbccModel::ItemPosterior(absl::Span<const Entry> labels, int32_t gold_label,
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
  const size_t k = static_cast<size_t>(num_classes_);
  std::vector<Entry> scratch;
  LogScores(CanonicalLabels(labels, scratch), params_->log_kappa.data(),
            [&](int32_t a, int32_t l) {
              return &params_->log_pi[SlotOf(a) * k * k + static_cast<size_t>(l) * k];
            },
            out);
  NormaliseLogScores(out);
}

std::vector<double> IbccModel::AnnotatorConfusion(int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  std::vector<double> q(k * k, 1.0 / static_cast<double>(k));
  if (!params_.has_value()) return q;
  const double* a = &params_->alpha[SlotOf(annotator) * k * k];
  for (size_t t = 0; t < k; ++t) {
    double total = 0.0;
    for (size_t l = 0; l < k; ++l) total += a[t * k + l];
    for (size_t l = 0; l < k; ++l) q[t * k + l] = a[t * k + l] / total;
  }
  return q;
}

std::optional<std::vector<double>> IbccModel::AnnotatorDirichlet(
    int32_t annotator) const {
  if (!params_.has_value()) return std::nullopt;
  const size_t kk = static_cast<size_t>(num_classes_) * num_classes_;
  const double* a = &params_->alpha[SlotOf(annotator) * kk];
  return std::vector<double>(a, a + kk);
}

std::optional<std::vector<double>> IbccModel::ClassDirichlet() const {
  if (!params_.has_value()) return std::nullopt;
  return params_->nu;
}

std::string IbccModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, kMethod, params_.has_value());
  if (params_.has_value()) {
    const size_t kk = static_cast<size_t>(num_classes_) * num_classes_;
    writer.WriteU32(static_cast<uint32_t>(num_classes_));
    writer.WriteU32(static_cast<uint32_t>(params_->alpha.size() / kk - 1));
    for (double v : params_->nu) writer.WriteF64(v);
    // Row 0 is the constant prior: not written.
    for (size_t i = kk; i < params_->alpha.size(); ++i) writer.WriteF64(params_->alpha[i]);
  }
  return writer.Finish();
}

absl::Status IbccModel::Restore(std::string_view serialized) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, kMethod);
  if (!has_params.ok()) return has_params.status();
  std::optional<Parameters> params;
  if (*has_params) {
    absl::Status s = ReadClassCount(*reader, num_classes_);
    if (!s.ok()) return s;
    absl::StatusOr<uint32_t> a32 = reader->ReadU32();
    if (!a32.ok()) return a32.status();
    const uint64_t k = static_cast<uint64_t>(num_classes_);
    const uint64_t want_bytes = 8 * (k + static_cast<uint64_t>(*a32) * k * k);
    if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
        reader->remaining() < want_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "serialized model is truncated: ", *a32, " annotators need ",
          want_bytes, " bytes, have ", reader->remaining()));
    }
    params.emplace();
    auto read_at_least = [&](double floor, const char* what) -> absl::StatusOr<double> {
      absl::StatusOr<double> v = reader->ReadF64();
      if (!v.ok()) return v.status();
      if (!(*v >= floor) || !std::isfinite(*v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "serialized model is corrupt: ", what, " is ", *v, ", below its prior ", floor));
      }
      return *v;
    };
    params->nu.resize(k);
    for (uint64_t c = 0; c < k; ++c) {
      absl::StatusOr<double> v = read_at_least(kClassPrior, "a class Dirichlet parameter");
      if (!v.ok()) return v.status();
      params->nu[c] = *v;
    }
    params->alpha.resize((static_cast<size_t>(*a32) + 1) * k * k);
    for (uint64_t t = 0; t < k; ++t) {
      for (uint64_t l = 0; l < k; ++l) params->alpha[t * k + l] = PriorCell(t, l);
    }
    for (size_t i = k * k; i < params->alpha.size(); ++i) {
      const size_t cell = i % (k * k);
      absl::StatusOr<double> v =
          read_at_least(PriorCell(cell / k, cell % k), "a confusion Dirichlet parameter");
      if (!v.ok()) return v.status();
      params->alpha[i] = *v;
    }
    params->Derive(num_classes_);
  }
  absl::Status s = reader->ExpectEnd();
  if (!s.ok()) return s;
  params_ = std::move(params);
  return absl::OkStatus();
}

}  // namespace verity::models
