#include "models/ebcc.h"

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
constexpr size_t kM = static_cast<size_t>(EbccModel::kSubtypes);
// How many items ahead the E-step asks for its annotators' table lines.
constexpr int32_t kPrefetchItems = 2;
// An E-step product of factors whose largest entry is above this holds every
// entry above 1e-100 of the largest as a normal double, to full precision
// (smaller ones count for nothing once normalised).
constexpr double kSmallestProduct = 1e-200;

double PriorCell(size_t row, size_t column) {
  return row == column ? EbccModel::kDiagonalPrior : EbccModel::kOffDiagonalPrior;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// y[c] += x[c], y[c] /= x and y[c] *= x[c] for c < km, a multiple of M,
// written as blocks of M so that even the cheapest vectoriser (GCC's at -O2)
// packs them: the E-step's inner loops (y and x never overlap).
inline void AddInto(double* __restrict y, const double* __restrict x, size_t km) {
  for (size_t b = 0; b < km; b += kM) {
    for (size_t m = 0; m < kM; ++m) y[b + m] += x[b + m];
  }
}

inline void DivideBy(double* y, double x, size_t km) {
  for (size_t b = 0; b < km; b += kM) {
    for (size_t m = 0; m < kM; ++m) y[b + m] /= x;
  }
}

inline void MultiplyInto(double* __restrict y, const double* __restrict x, size_t km) {
  for (size_t b = 0; b < km; b += kM) {
    for (size_t m = 0; m < kM; ++m) y[b + m] *= x[b + m];
  }
}

// Unnormalised log q(k, m) into scores (size K * M).
template <typename ColumnFn>
void LogScores(absl::Span<const Entry> labels, const double* log_class_subtype,
               ColumnFn column, absl::Span<double> scores) {
  const size_t km = scores.size();
  std::copy(log_class_subtype, log_class_subtype + km, scores.begin());
  for (const Entry& e : labels) {
    const double* add = column(e.other, e.label);
    for (size_t c = 0; c < km; ++c) scores[c] += add[c];
  }
}

// Normalises scores[begin, end) in place into probabilities (the rest of
// `scores` set to 0); returns log sum exp over the range.
double NormaliseLogScores(absl::Span<double> scores, size_t begin, size_t end) {
  double top = scores[begin];
  for (size_t c = begin; c < end; ++c) top = std::max(top, scores[c]);
  double sum = 0.0;
  for (size_t c = begin; c < end; ++c) {
    scores[c] = std::exp(scores[c] - top);
    sum += scores[c];
  }
  for (size_t c = begin; c < end; ++c) scores[c] /= sum;
  std::fill(scores.begin(), scores.begin() + begin, 0.0);
  std::fill(scores.begin() + end, scores.end(), 0.0);
  return top + std::log(sum);
}

}  // namespace

void EbccModel::Parameters::Derive(int32_t num_classes) {
  const size_t k = static_cast<size_t>(num_classes);
  const size_t block = k * kM * k;
  const size_t rows = mu.size() / block;
  double total = 0.0;
  for (double v : nu) total += v;
  const double psi_total = Digamma(total);
  log_class_subtype.resize(k * kM);
  for (size_t t = 0; t < k; ++t) {
    const double log_tau = Digamma(nu[t]) - psi_total;
    double row = 0.0;
    for (size_t m = 0; m < kM; ++m) row += eta[t * kM + m];
    const double psi_row = Digamma(row);
    for (size_t m = 0; m < kM; ++m) {
      log_class_subtype[t * kM + m] = log_tau + Digamma(eta[t * kM + m]) - psi_row;
    }
  }
  log_v.resize(mu.size());
  for (size_t r = 0; r < rows; ++r) {
    const double* a = &mu[r * block];
    double* out = &log_v[r * block];
    for (size_t tm = 0; tm < k * kM; ++tm) {
      double row_total = 0.0;
      for (size_t l = 0; l < k; ++l) row_total += a[tm * k + l];
      const double psi_row = Digamma(row_total);
      for (size_t l = 0; l < k; ++l) {
        out[l * k * kM + tm] = Digamma(a[tm * k + l]) - psi_row;
      }
    }
  }
}

absl::StatusOr<std::unique_ptr<EbccModel>> EbccModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("method ebcc: num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<EbccModel>(new EbccModel(num_classes, options));
}

std::unique_ptr<TruthModel> EbccModel::Clone() const {
  return std::unique_ptr<TruthModel>(new EbccModel(*this));
}

size_t EbccModel::SlotOf(int32_t annotator) const {
  const size_t block = static_cast<size_t>(num_classes_) * num_classes_ * kM;
  const int64_t rows = static_cast<int64_t>(params_->mu.size() / block);
  return annotator >= 0 && annotator + int64_t{1} < rows
             ? static_cast<size_t>(annotator) + 1
             : 0;
}

absl::StatusOr<FitReport> EbccModel::Fit(const AnnotationMatrix& data,
                                         absl::Span<const int32_t> gold,
                                         bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;
  const size_t k = static_cast<size_t>(num_classes_);
  const size_t km = k * kM;
  const size_t block = km * k;
  const int32_t n = data.num_items();
  const int32_t num_annotators = data.num_annotators();
  auto gold_of = [&](int32_t i) { return gold.empty() ? -1 : gold[i]; };

  Parameters params;
  params.nu.assign(k, kClassPrior);
  params.eta.assign(km, kSubtypePrior / kM);
  params.mu.resize((static_cast<size_t>(num_annotators) + 1) * block);
  // Expected counts: per annotator label-major [label][k * M + m]; per
  // (class, subtype).
  std::vector<double> counts(static_cast<size_t>(num_annotators) * block);
  std::vector<double> subtype_counts(km);
  auto m_step = [&] {
    for (size_t t = 0; t < k; ++t) {
      double z = 0.0;
      for (size_t m = 0; m < kM; ++m) {
        params.eta[t * kM + m] = kSubtypePrior / kM + subtype_counts[t * kM + m];
        z += subtype_counts[t * kM + m];
      }
      params.nu[t] = kClassPrior + z;
    }
    for (int32_t a = -1; a < num_annotators; ++a) {
      double* out = &params.mu[(static_cast<size_t>(a) + 1) * block];
      const double* n_a = a >= 0 ? &counts[static_cast<size_t>(a) * block] : nullptr;
      for (size_t tm = 0; tm < km; ++tm) {
        for (size_t l = 0; l < k; ++l) {
          out[tm * k + l] =
              PriorCell(tm / kM, l) + (n_a != nullptr ? n_a[l * km + tm] : 0.0);
        }
      }
    }
    params.Derive(num_classes_);
  };
  auto accumulate = [&](absl::Span<const Entry> labels, const double* q) {
    AddInto(subtype_counts.data(), q, km);
    for (const Entry& e : labels) {
      double* n_a = &counts[static_cast<size_t>(e.other) * block +
                            static_cast<size_t>(e.label) * km];
      AddInto(n_a, q, km);
    }
  };

  std::vector<double> q(km);
  if (warm_start && params_.has_value()) {
    params.nu = params_->nu;
    params.eta = params_->eta;
    for (int32_t a = -1; a < num_annotators; ++a) {
      const double* from = &params_->mu[SlotOf(a) * block];
      std::copy(from, from + block, &params.mu[(static_cast<size_t>(a) + 1) * block]);
    }
    params.Derive(num_classes_);
  } else {
    // The majority vote, split over the subtypes by Dirichlet(1) weights
    // (normalised exponential draws) from a counter-based hash.
    std::vector<double> vote(k);
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      if (labels.empty()) continue;
      SoftMajorityVote(labels, gold_of(i), options_.vote_smoothing, absl::MakeSpan(vote));
      for (size_t t = 0; t < k; ++t) {
        double total = 0.0;
        for (size_t m = 0; m < kM; ++m) {
          const uint64_t h = SplitMix64(
              kSeed ^ SplitMix64((static_cast<uint64_t>(i) * k + t) * kM + m));
          const double u = (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
          q[t * kM + m] = -std::log(u);
          total += q[t * kM + m];
        }
        for (size_t m = 0; m < kM; ++m) q[t * kM + m] *= vote[t] / total;
      }
      accumulate(labels, q.data());
    }
    m_step();
  }

  // q_i(k) of the previous E-step, for the stopping rule.
  std::vector<double> previous_z(static_cast<size_t>(n) * k, -1.0);
  // The E-step in product form: exp(E[ln v]) per (annotator, label) column,
  // divided by the column's largest entry (whose log is kept aside), so that
  // q_i(k, m) ∝ exp(E[ln tau_k] + E[ln pi_km]) times one factor per label,
  // without an exp per item and (k, m).
  std::vector<double> factors(params.log_v.size());
  std::vector<double> log_scales(params.log_v.size() / km);
  std::vector<double> prior_factors(km);
  FitReport report;
  while (report.iterations < options_.max_iterations) {
    std::fill(counts.begin(), counts.end(), 0.0);
    std::fill(subtype_counts.begin(), subtype_counts.end(), 0.0);
    for (size_t column = 0; column < log_scales.size(); ++column) {
      const double* from = &params.log_v[column * km];
      const double top = *std::max_element(from, from + km);
      for (size_t c = 0; c < km; ++c) factors[column * km + c] = std::exp(from[c] - top);
      log_scales[column] = top;
    }
    const double prior_top = *std::max_element(params.log_class_subtype.begin(),
                                               params.log_class_subtype.end());
    for (size_t c = 0; c < km; ++c) {
      prior_factors[c] = std::exp(params.log_class_subtype[c] - prior_top);
    }
    double ll = 0.0;
    double largest_change = 0.0;
    auto column_of = [&](const Entry& e) {
      return (static_cast<size_t>(e.other) + 1) * (block / km) + static_cast<size_t>(e.label);
    };
    // Each label reads and updates K * M doubles of its annotator's tables,
    // which the hardware cannot foresee (annotators come in random order): the
    // lines of an item a few ahead are requested while this one is computed.
    auto prefetch = [&](int32_t i) {
      if (i >= n) return;
      for (const Entry& e : data.LabelsOfItem(i)) {
        const char* from = reinterpret_cast<const char*>(&factors[column_of(e) * km]);
        const char* to = reinterpret_cast<const char*>(
            &counts[static_cast<size_t>(e.other) * block + static_cast<size_t>(e.label) * km]);
        for (size_t byte = 0; byte < km * sizeof(double); byte += 64) {
          __builtin_prefetch(from + byte);
          __builtin_prefetch(to + byte, 1);
        }
      }
    };
    for (int32_t i = 0; i < kPrefetchItems; ++i) prefetch(i);
    for (int32_t i = 0; i < n; ++i) {
      prefetch(i + kPrefetchItems);
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      if (labels.empty()) continue;
      const int32_t g = gold_of(i);
      const size_t begin = g >= 0 ? static_cast<size_t>(g) * kM : 0;
      const size_t end = g >= 0 ? begin + kM : km;
      std::copy(prior_factors.begin(), prior_factors.end(), q.begin());
      double log_scale = prior_top;
      for (const Entry& e : labels) {
        const size_t column = column_of(e);
        const double* factor = &factors[column * km];
        MultiplyInto(q.data(), factor, km);
        log_scale += log_scales[column];
      }
      double top = 0.0, sum = 0.0;
      for (size_t c = begin; c < end; ++c) {
        top = std::max(top, q[c]);
        sum += q[c];
      }
      if (top > kSmallestProduct) {
        DivideBy(&q[begin], sum, end - begin);
        std::fill(q.begin(), q.begin() + begin, 0.0);
        std::fill(q.begin() + end, q.end(), 0.0);
        ll += log_scale + std::log(sum);
      } else {
        // So many labels that the product may have lost precision: the log
        // form.
        auto column = [&](int32_t a, int32_t l) {
          return &params.log_v[(static_cast<size_t>(a) + 1) * block +
                               static_cast<size_t>(l) * km];
        };
        LogScores(labels, params.log_class_subtype.data(), column, absl::MakeSpan(q));
        ll += NormaliseLogScores(absl::MakeSpan(q), begin, end);
      }
      accumulate(labels, q.data());
      double* z = &previous_z[static_cast<size_t>(i) * k];
      for (size_t t = 0; t < k; ++t) {
        double p = 0.0;
        for (size_t m = 0; m < kM; ++m) p += q[t * kM + m];
        largest_change = std::max(largest_change, std::abs(p - z[t]));
        z[t] = p;
      }
    }
    m_step();
    ++report.iterations;
    report.log_likelihood = ll;
    if (report.iterations > 1 && largest_change < kClassTolerance) {
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

std::vector<double> EbccModel::ClassSubtypePosterior(absl::Span<const Entry> labels) const {
  const size_t k = static_cast<size_t>(num_classes_);
  const size_t km = k * kM;
  std::vector<Entry> scratch;
  std::vector<double> q(km);
  LogScores(CanonicalLabels(labels, scratch), params_->log_class_subtype.data(),
            [&](int32_t a, int32_t l) {
              return &params_->log_v[SlotOf(a) * km * k + static_cast<size_t>(l) * km];
            },
            absl::MakeSpan(q));
  NormaliseLogScores(absl::MakeSpan(q), 0, km);
  return q;
}

void EbccModel::ItemPosterior(absl::Span<const Entry> labels, int32_t gold_label,
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
  const std::vector<double> q = ClassSubtypePosterior(labels);
  for (size_t t = 0; t < k; ++t) {
    double p = 0.0;
    for (size_t m = 0; m < kM; ++m) p += q[t * kM + m];
    out[t] = p;
  }
}

std::vector<double> EbccModel::PredictLabel(int32_t item, absl::Span<const Entry> labels,
                                            int32_t annotator) const {
  if (!params_.has_value()) return TruthModel::PredictLabel(item, labels, annotator);
  const size_t k = static_cast<size_t>(num_classes_);
  const size_t km = k * kM;
  const std::vector<double> q = ClassSubtypePosterior(labels);
  // mu is [annotator][k][m][label]: row (k, m) of the annotator's block is E[v_jkm] once
  // normalised.
  const double* block = &params_->mu[SlotOf(annotator) * km * k];
  std::vector<double> out(k, 0.0);
  for (size_t c = 0; c < km; ++c) {
    const double* row = &block[c * k];
    double total = 0.0;
    for (size_t l = 0; l < k; ++l) total += row[l];
    for (size_t l = 0; l < k; ++l) out[l] += q[c] * row[l] / total;
  }
  return out;
}

std::optional<std::vector<double>> EbccModel::SubtypeProportions() const {
  if (!params_.has_value()) return std::nullopt;
  const size_t k = static_cast<size_t>(num_classes_);
  std::vector<double> p(k * kM);
  for (size_t t = 0; t < k; ++t) {
    double total = 0.0;
    for (size_t m = 0; m < kM; ++m) total += params_->eta[t * kM + m];
    for (size_t m = 0; m < kM; ++m) p[t * kM + m] = params_->eta[t * kM + m] / total;
  }
  return p;
}

std::vector<double> EbccModel::AnnotatorConfusion(int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  std::vector<double> q(k * k, 1.0 / static_cast<double>(k));
  if (!params_.has_value()) return q;
  const std::vector<double> pi = *SubtypeProportions();
  const double* a = &params_->mu[SlotOf(annotator) * k * kM * k];
  std::fill(q.begin(), q.end(), 0.0);
  for (size_t t = 0; t < k; ++t) {
    for (size_t m = 0; m < kM; ++m) {
      const double* row = &a[(t * kM + m) * k];
      double total = 0.0;
      for (size_t l = 0; l < k; ++l) total += row[l];
      for (size_t l = 0; l < k; ++l) q[t * k + l] += pi[t * kM + m] * row[l] / total;
    }
  }
  return q;
}

std::string EbccModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, kMethod, params_.has_value());
  if (params_.has_value()) {
    const size_t block = static_cast<size_t>(num_classes_) * num_classes_ * kM;
    writer.WriteU32(static_cast<uint32_t>(num_classes_));
    writer.WriteU32(static_cast<uint32_t>(kSubtypes));
    writer.WriteU32(static_cast<uint32_t>(params_->mu.size() / block - 1));
    for (double v : params_->nu) writer.WriteF64(v);
    for (double v : params_->eta) writer.WriteF64(v);
    // Block 0 is the constant prior: not written.
    for (size_t i = block; i < params_->mu.size(); ++i) writer.WriteF64(params_->mu[i]);
  }
  return writer.Finish();
}

absl::Status EbccModel::Restore(std::string_view serialized) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, kMethod);
  if (!has_params.ok()) return has_params.status();
  std::optional<Parameters> params;
  if (*has_params) {
    absl::Status s = ReadClassCount(*reader, num_classes_);
    if (!s.ok()) return s;
    absl::StatusOr<uint32_t> subtypes = reader->ReadU32();
    if (!subtypes.ok()) return subtypes.status();
    if (*subtypes != static_cast<uint32_t>(kSubtypes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "serialized model has ", *subtypes, " subtypes; this build has ", kSubtypes));
    }
    absl::StatusOr<uint32_t> a32 = reader->ReadU32();
    if (!a32.ok()) return a32.status();
    const uint64_t k = static_cast<uint64_t>(num_classes_);
    const uint64_t block = k * kM * k;
    const uint64_t want_bytes = 8 * (k + k * kM + static_cast<uint64_t>(*a32) * block);
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
    for (double& v : params->nu) {
      absl::StatusOr<double> r = read_at_least(kClassPrior, "a class Dirichlet parameter");
      if (!r.ok()) return r.status();
      v = *r;
    }
    params->eta.resize(k * kM);
    for (double& v : params->eta) {
      absl::StatusOr<double> r =
          read_at_least(kSubtypePrior / kM, "a subtype Dirichlet parameter");
      if (!r.ok()) return r.status();
      v = *r;
    }
    params->mu.resize((static_cast<size_t>(*a32) + 1) * block);
    for (size_t i = 0; i < params->mu.size(); ++i) {
      const size_t cell = i % block;
      const double prior = PriorCell(cell / k / kM, cell % k);
      if (i < block) {
        params->mu[i] = prior;
        continue;
      }
      absl::StatusOr<double> r = read_at_least(prior, "a confusion Dirichlet parameter");
      if (!r.ok()) return r.status();
      params->mu[i] = *r;
    }
    params->Derive(num_classes_);
  }
  absl::Status s = reader->ExpectEnd();
  if (!s.ok()) return s;
  params_ = std::move(params);
  return absl::OkStatus();
}

}  // namespace verity::models
