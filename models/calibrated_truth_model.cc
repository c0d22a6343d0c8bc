#include "models/calibrated_truth_model.h"

#include "models/auto_truth_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/binary_codec.h"

namespace verity::models {
namespace {

constexpr uint32_t kFormatVersion = 1;
// Posteriors are floored here before the log, so that a class the inner
// model gives probability 0 (underflow) keeps a finite log.
constexpr double kMinProbability = 1e-300;
// The most held-out (label, class) values FitLabelMap keeps: 2 x 16 MB, and
// at K = 2 a million labels, plenty for one parameter.
constexpr int64_t kMaxHeldOutValues = 2'000'000;
// Largest deviation (nats) from the product form that FitLabelMap accepts:
// rounding in a model's E-step stays far below it.
constexpr double kProductFormTolerance = 1e-6;

uint32_t MagicU32() {
  const std::string_view m = CalibratedTruthModel::kMagic;
  return static_cast<uint32_t>(static_cast<unsigned char>(m[0])) |
         static_cast<uint32_t>(static_cast<unsigned char>(m[1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(m[2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(m[3])) << 24;
}

// Minimises f over [lo, hi] (f unimodal there, else a local minimum): a grid
// of 13 points, then golden-section search around the best one to a width of
// 1e-4 (about 20 evaluations).
double MinimiseOnInterval(const std::function<double(double)>& f, double lo, double hi) {
  constexpr int kGrid = 13;
  double best_x = lo;
  double best_f = f(lo);
  const double step = (hi - lo) / (kGrid - 1);
  for (int g = 1; g < kGrid; ++g) {
    const double x = g == kGrid - 1 ? hi : lo + g * step;
    const double fx = f(x);
    if (fx < best_f) {
      best_f = fx;
      best_x = x;
    }
  }
  double a = std::max(lo, best_x - step);
  double b = std::min(hi, best_x + step);
  const double r = (std::sqrt(5.0) - 1) / 2;
  double c = b - r * (b - a);
  double d = a + r * (b - a);
  double fc = f(c);
  double fd = f(d);
  for (int it = 0; it < 30 && b - a > 1e-4; ++it) {
    if (fc < fd) {
      b = d;
      d = c;
      fd = fc;
      c = b - r * (b - a);
      fc = f(c);
    } else {
      a = c;
      c = d;
      fc = fd;
      d = a + r * (b - a);
      fd = f(d);
    }
  }
  const double x = (a + b) / 2;
  return f(x) < best_f ? x : best_x;
}

// The map of lowest loss: a full temperature and a top-label temperature in
// [kMinTemperature, kMaxTemperature] (above 1 the top-label map could change
// the MAP label of an item whose top class is below 1/2), each minimised over
// log tau, where the losses are closer to symmetric. With two classes the two maps are the same
// map, whose losses differ only by rounding: the plain temperature alone is fitted, so that the
// kind reported does not depend on the rounding.
FittedMap BestMap(int32_t num_classes,
                  const std::function<double(CalibrationMapKind, double)>& loss) {
  FittedMap best;
  best.loss = loss(CalibrationMapKind::kTemperature, 1.0);
  const double lo = std::log(CalibratedTruthModel::kMinTemperature);
  for (const CalibrationMapKind kind :
       {CalibrationMapKind::kTemperature, CalibrationMapKind::kTopLabelTemperature}) {
    if (num_classes == 2 && kind == CalibrationMapKind::kTopLabelTemperature) continue;
    const double hi = std::log(CalibratedTruthModel::kMaxTemperature);
    const auto f = [&](double x) { return loss(kind, std::exp(x)); };
    const double x = MinimiseOnInterval(f, lo, hi);
    const double fx = f(x);
    // Clamped: exp(log(t)) may fall an ulp outside [t_min, t_max], and
    // Restore refuses temperatures out of that range.
    const double tau = std::clamp(std::exp(x), CalibratedTruthModel::kMinTemperature,
                                  CalibratedTruthModel::kMaxTemperature);
    if (fx < best.loss) best = {kind, tau, fx};
  }
  return best;
}

// ECE with 10 equal-width bins (as ClassificationScores::ece; the
// evaluation library depends on the model factory, so it is not used here).
double ExpectedCalibrationError(absl::Span<const double> rows, int32_t k,
                                absl::Span<const int32_t> truth) {
  double count[10] = {}, correct[10] = {}, confidence[10] = {};
  for (size_t i = 0; i < truth.size(); ++i) {
    const double* p = rows.data() + i * k;
    int32_t best = 0;
    for (int32_t c = 1; c < k; ++c) {
      if (p[c] > p[best]) best = c;
    }
    const int bin = std::min(9, static_cast<int>(std::floor(10 * p[best])));
    count[bin] += 1;
    correct[bin] += best == truth[i] ? 1 : 0;
    confidence[bin] += p[best];
  }
  double ece = 0;
  for (int b = 0; b < 10; ++b) {
    if (count[b] > 0) ece += std::abs(correct[b] - confidence[b]);
  }
  return truth.empty() ? 0.0 : ece / static_cast<double>(truth.size());
}

}  // namespace

std::string_view CalibrationSourceName(CalibrationSource source) {
  switch (source) {
    case CalibrationSource::kCrowdLabels:
      return "crowd_labels";
    case CalibrationSource::kGold:
      return "gold";
    case CalibrationSource::kNone:
      break;
  }
  return "none";
}

void ApplyTemperature(double temperature, absl::Span<double> row) {
  if (temperature == 1.0) return;
  double max_log = -std::numeric_limits<double>::infinity();
  for (double& v : row) {
    v = temperature * std::log(std::max(v, kMinProbability));
    max_log = std::max(max_log, v);
  }
  double sum = 0;
  for (double& v : row) {
    v = std::exp(v - max_log);
    sum += v;
  }
  for (double& v : row) v /= sum;
}

void ApplyTopLabelTemperature(double temperature, absl::Span<double> row) {
  if (temperature == 1.0) return;
  size_t best = 0;
  for (size_t c = 1; c < row.size(); ++c) {
    if (row[c] > row[best]) best = c;
  }
  double rest = 0;
  for (size_t c = 0; c < row.size(); ++c) {
    if (c != best) rest += row[c];
  }
  if (!(rest > 0) || !(row[best] > 0)) return;
  const double log_odds = std::log(row[best]) - std::log(rest);
  // The new top probability 1 / (1 + e) and the others' share e / (1 + e),
  // the latter not as 1 - top, which would round to 0 below 1e-16.
  const double e = std::exp(-temperature * log_odds);
  const double top = 1.0 / (1.0 + e);
  const double scale = e / (1.0 + e) / rest;
  for (size_t c = 0; c < row.size(); ++c) row[c] = c == best ? top : row[c] * scale;
}

void ApplyCalibrationMap(CalibrationMapKind kind, double temperature, absl::Span<double> row) {
  if (kind == CalibrationMapKind::kTopLabelTemperature) {
    ApplyTopLabelTemperature(temperature, row);
  } else {
    ApplyTemperature(temperature, row);
  }
}

std::string_view CalibrationMapKindName(CalibrationMapKind kind) {
  return kind == CalibrationMapKind::kTopLabelTemperature ? "top_label_temperature"
                                                          : "temperature";
}

FittedMap FitLabelMap(const TruthModel& inner, const AnnotationMatrix& data,
                      absl::Span<const double> raw_posteriors) {
  const int32_t k = data.num_classes();
  // The log confusion of annotator a on item i: computed once per annotator,
  // or per label for models whose confusions depend on the item (glad, the
  // neural models), into `scratch`, valid until the next call.
  const bool per_item = inner.ConfusionsDependOnItem();
  std::vector<double> log_confusion(
      per_item ? 0 : static_cast<size_t>(data.num_annotators()) * k * k);
  for (int32_t a = 0; !per_item && a < data.num_annotators(); ++a) {
    const std::vector<double> confusion = inner.AnnotatorConfusion(a);
    for (int32_t c = 0; c < k * k; ++c) {
      log_confusion[static_cast<size_t>(a) * k * k + c] =
          std::log(std::max(confusion[c], kMinProbability));
    }
  }
  std::vector<double> scratch(static_cast<size_t>(k) * k);
  const auto log_confusion_of = [&](int32_t item, int32_t annotator) -> const double* {
    if (!per_item) return log_confusion.data() + static_cast<size_t>(annotator) * k * k;
    const std::vector<double> confusion = inner.ItemAnnotatorConfusion(item, annotator);
    for (int32_t c = 0; c < k * k; ++c) scratch[c] = std::log(std::max(confusion[c], kMinProbability));
    return scratch.data();
  };
  // On large projects, every stride-th item only (kMaxHeldOutValues bounds
  // the memory and the cost of each evaluation of the loss, and of the
  // product-form check with per-item confusions).
  const int64_t values = data.num_labels() * static_cast<int64_t>(k);
  const int32_t stride = static_cast<int32_t>(
      std::max<int64_t>(1, (values + kMaxHeldOutValues - 1) / kMaxHeldOutValues));
  // Expected class counts of every annotator's items, N_j[k] = sum over the
  // items i that j labelled of p_i(k): with them, the held-out label's own
  // share can be taken out of pi_j (below).
  std::vector<double> class_count(static_cast<size_t>(data.num_annotators()) * k, 0.0);
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const double* p = raw_posteriors.data() + static_cast<size_t>(i) * k;
    for (const AnnotationMatrix::Entry& e : data.LabelsOfItem(i)) {
      if (e.other < 0 || e.other >= data.num_annotators()) continue;
      for (int32_t c = 0; c < k; ++c) class_count[static_cast<size_t>(e.other) * k + c] += p[c];
    }
  }
  // The held-out posterior below is exact only if the model's posterior is
  // prior x product of ItemAnnotatorConfusion terms. Check it: log p_i(k)
  // minus the item's log confusion terms, centred over k, must be the same
  // (the centred log prior) for every item. mv's vote shares, cmm's mixture
  // over groups and any model with a per-item prior (the neural models given
  // item features) fail it, and there the map fitted on the held-out labels
  // misled: mv, already underconfident, was softened further (labelme ECE
  // 0.08 -> 0.26). Such models keep the identity unless the project has gold.
  {
    std::vector<double> reference, residual(k);
    for (int32_t i = 0; i < data.num_items(); i += stride) {
      const double* p = raw_posteriors.data() + static_cast<size_t>(i) * k;
      bool extreme = false;
      for (int32_t c = 0; c < k; ++c) {
        extreme |= !(p[c] > 1e-200);
        residual[c] = std::log(std::max(p[c], kMinProbability));
      }
      if (extreme) continue;  // Underflow would break the identity.
      for (const AnnotationMatrix::Entry& e : data.LabelsOfItem(i)) {
        if (e.other < 0 || e.other >= data.num_annotators()) continue;
        const double* lc = log_confusion_of(i, e.other);
        for (int32_t c = 0; c < k; ++c) residual[c] -= lc[c * k + e.label];
      }
      double mean = 0;
      for (int32_t c = 0; c < k; ++c) mean += residual[c] / k;
      for (int32_t c = 0; c < k; ++c) residual[c] -= mean;
      if (reference.empty()) {
        reference = residual;
        continue;
      }
      for (int32_t c = 0; c < k; ++c) {
        if (!(std::abs(residual[c] - reference[c]) <= kProductFormTolerance)) return {};
      }
    }
  }
  // Per label, the log posterior of its item without it (up to a constant),
  // and the label's probability under each class with the label taken out of
  // the annotator's confusion, pi_j^{-i}[k, l] = (pi_j[k, l] N_j[k] - p_i(k))
  // / (N_j[k] - p_i(k)): pi_j was fitted with this very label, and without
  // the correction an annotator with few labels predicts its own labels too
  // well, which rewards overconfident posteriors. K values each: O(labels x
  // K) memory, computed once.
  // The confusion that predicts a held-out label must not have been fitted
  // with it. For models whose confusions depend on the item, the item's own
  // (glad's easiness, lia's difficulty) was fitted with its labels, the
  // held-out one among them, and predicts it too well: lia's map barely
  // softened (labelme ECE 0.189 -> 0.178; with the annotator's confusion on an
  // item outside the fit, 0.092; docs/EVALUATION.md). There the label is
  // predicted with AnnotatorConfusion(j); the item's confusion still takes
  // the label out of the posterior, being the factor the posterior holds.
  std::vector<double> predictive_confusion(
      per_item ? static_cast<size_t>(data.num_annotators()) * k * k : 0);
  for (int32_t a = 0; per_item && a < data.num_annotators(); ++a) {
    const std::vector<double> confusion = inner.AnnotatorConfusion(a);
    std::copy(confusion.begin(), confusion.end(),
              predictive_confusion.begin() + static_cast<size_t>(a) * k * k);
  }
  std::vector<double> held_out;
  std::vector<double> held_out_likelihood;
  held_out.reserve(static_cast<size_t>(data.num_labels()) * k);
  held_out_likelihood.reserve(static_cast<size_t>(data.num_labels()) * k);
  for (int32_t i = 0; i < data.num_items(); i += stride) {
    const auto labels = data.LabelsOfItem(i);
    if (labels.size() < 2) continue;  // The prior alone predicts it: no signal on tau.
    const double* p = raw_posteriors.data() + static_cast<size_t>(i) * k;
    for (const AnnotationMatrix::Entry& e : labels) {
      if (e.other < 0 || e.other >= data.num_annotators()) continue;
      const double* lc = log_confusion_of(i, e.other);
      const double* n_j = class_count.data() + static_cast<size_t>(e.other) * k;
      for (int32_t c = 0; c < k; ++c) {
        held_out.push_back(std::log(std::max(p[c], kMinProbability)) - lc[c * k + e.label]);
        const double pi =
            per_item ? predictive_confusion[(static_cast<size_t>(e.other) * k + c) * k + e.label]
                     : std::exp(lc[c * k + e.label]);
        const double rest = n_j[c] - p[c];
        held_out_likelihood.push_back(
            rest > 1e-9 ? std::clamp((pi * n_j[c] - p[c]) / rest, 1e-6, 1.0) : pi);
      }
    }
  }
  if (held_out.empty()) return {};
  const size_t num_held_out = held_out.size() / k;
  // Once per label: the held-out posterior as normalised log-probabilities
  // (in place), and for the top-label map its top class's log-odds, the
  // label's likelihood under the top class, and its mean likelihood under
  // the other classes weighted by their probabilities. Each evaluation of
  // the loss then costs K exponentials per label for the full temperature
  // and one for the top-label map.
  std::vector<double> top_log_odds(num_held_out), top_likelihood(num_held_out),
      rest_likelihood(num_held_out);
  for (size_t n = 0; n < num_held_out; ++n) {
    double* h = held_out.data() + n * k;
    const double* likelihood = held_out_likelihood.data() + n * k;
    int32_t top = 0;
    for (int32_t c = 1; c < k; ++c) {
      if (h[c] > h[top]) top = c;
    }
    double z = 0;
    for (int32_t c = 0; c < k; ++c) z += std::exp(h[c] - h[top]);
    const double log_z = h[top] + std::log(z);
    double rest = 0, rest_mass = 0;
    for (int32_t c = 0; c < k; ++c) {
      h[c] -= log_z;
      if (c == top) continue;
      const double p = std::exp(h[c]);
      rest += p;
      rest_mass += p * likelihood[c];
    }
    top_log_odds[n] = rest > 0 ? h[top] - std::log(rest)
                               : std::numeric_limits<double>::infinity();
    top_likelihood[n] = likelihood[top];
    rest_likelihood[n] = rest > 0 ? rest_mass / rest : 0.0;
  }
  const auto negative_log_likelihood = [&](CalibrationMapKind kind, double tau) {
    double total = 0;
    if (kind == CalibrationMapKind::kTopLabelTemperature) {
      for (size_t n = 0; n < num_held_out; ++n) {
        const double q_top = 1.0 / (1.0 + std::exp(-tau * top_log_odds[n]));
        const double predictive = q_top * top_likelihood[n] + (1.0 - q_top) * rest_likelihood[n];
        total -= std::log(std::max(predictive, kMinProbability));
      }
      return total;
    }
    for (size_t n = 0; n < num_held_out; ++n) {
      const double* h = held_out.data() + n * k;
      const double* likelihood = held_out_likelihood.data() + n * k;
      double max_log = h[0];
      for (int32_t c = 1; c < k; ++c) max_log = std::max(max_log, h[c]);
      double z = 0, predictive = 0;
      for (int32_t c = 0; c < k; ++c) {
        const double w = std::exp(tau * (h[c] - max_log));
        z += w;
        predictive += w * likelihood[c];
      }
      total -= std::log(std::max(predictive / z, kMinProbability));
    }
    return total;
  };
  return BestMap(k, negative_log_likelihood);
}

std::vector<int32_t> GoldCalibrationLabelCounts(const AnnotationMatrix& data,
                                                absl::Span<const int32_t> gold) {
  std::vector<int32_t> counts(gold.size(), -1);
  std::vector<int32_t> gold_counts, other_counts;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const int32_t n = static_cast<int32_t>(data.LabelsOfItem(i).size());
    if (n == 0) continue;
    const bool is_gold = static_cast<size_t>(i) < gold.size() && gold[i] >= 0;
    (is_gold ? gold_counts : other_counts).push_back(n);
  }
  std::sort(gold_counts.begin(), gold_counts.end());
  std::sort(other_counts.begin(), other_counts.end());
  for (size_t i = 0; i < gold.size(); ++i) {
    if (gold[i] < 0) continue;
    const int32_t n = static_cast<int32_t>(data.LabelsOfItem(static_cast<int32_t>(i)).size());
    if (n == 0) continue;
    if (other_counts.empty()) {
      counts[i] = n;
      continue;
    }
    const auto [lo, hi] = std::equal_range(gold_counts.begin(), gold_counts.end(), n);
    const double q = (static_cast<double>(lo - gold_counts.begin()) + 0.5 * (hi - lo)) /
                     static_cast<double>(gold_counts.size());
    const size_t at = std::min(other_counts.size() - 1,
                               static_cast<size_t>(q * static_cast<double>(other_counts.size())));
    counts[i] = std::max(1, std::min(n, other_counts[at]));
  }
  return counts;
}

std::vector<AnnotationMatrix::Entry> GoldCalibrationLabels(
    int32_t item, absl::Span<const AnnotationMatrix::Entry> labels, int32_t count) {
  std::vector<AnnotationMatrix::Entry> kept(labels.begin(), labels.end());
  if (count >= static_cast<int32_t>(kept.size())) return kept;
  // splitmix64 of (item, annotator): a fixed choice that does not favour low annotator ids.
  const auto hash = [item](const AnnotationMatrix::Entry& e) {
    uint64_t z = (static_cast<uint64_t>(static_cast<uint32_t>(item)) << 32) |
                 static_cast<uint32_t>(e.other);
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::sort(kept.begin(), kept.end(),
            [&](const AnnotationMatrix::Entry& a, const AnnotationMatrix::Entry& b) {
              return hash(a) < hash(b);
            });
  kept.resize(std::max(0, count));
  std::sort(kept.begin(), kept.end(),
            [](const AnnotationMatrix::Entry& a, const AnnotationMatrix::Entry& b) {
              return a.other < b.other;
            });
  return kept;
}

FittedMap FitGoldMap(absl::Span<const double> raw_posteriors, int32_t num_classes,
                     absl::Span<const int32_t> truth) {
  const int32_t k = num_classes;
  std::vector<double> q(k);
  const auto log_loss = [&](CalibrationMapKind kind, double tau) {
    double total = 0;
    for (size_t i = 0; i < truth.size(); ++i) {
      q.assign(raw_posteriors.begin() + i * k, raw_posteriors.begin() + (i + 1) * k);
      ApplyCalibrationMap(kind, tau, absl::MakeSpan(q));
      total -= std::log(std::max(q[truth[i]], kMinProbability));
    }
    return total;
  };
  return BestMap(k, log_loss);
}

CalibratedTruthModel::CalibratedTruthModel(std::unique_ptr<TruthModel> inner, bool fit_map)
    : inner_(std::move(inner)), fit_map_(fit_map) {}

std::unique_ptr<TruthModel> CalibratedTruthModel::Clone() const {
  auto copy = std::make_unique<CalibratedTruthModel>(inner_->Clone(), fit_map_);
  copy->calibration_ = calibration_;
  return copy;
}

std::unique_ptr<CalibratedTruthModel> CalibratedTruthModel::WithoutMap() const {
  return std::make_unique<CalibratedTruthModel>(inner_->Clone(), /*fit_map=*/false);
}

absl::StatusOr<FitReport> CalibratedTruthModel::Fit(const AnnotationMatrix& data,
                                                    absl::Span<const int32_t> gold,
                                                    bool warm_start) {
  absl::StatusOr<FitReport> report = inner_->Fit(data, gold, warm_start);
  if (!report.ok()) return report;
  PosteriorCalibration calibration;
  if (!fit_map_ || !inner_->has_parameters()) {
    calibration_ = calibration;
    return report;
  }
  const int32_t k = data.num_classes();
  // Unclamped posteriors of every item.
  const std::vector<double> raw = AllPosteriors(*inner_, data, {});
  int64_t gold_items = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    gold_items += gold[i] >= 0 && !data.LabelsOfItem(static_cast<int32_t>(i)).empty();
  }
  std::vector<double> gold_rows;
  std::vector<int32_t> gold_truth;
  if (gold_items >= kMinGoldItems) {
    // The gold items' posteriors under models that did not see their gold,
    // by two-fold cross-fitting: the gold items with labels are split
    // alternately into two halves, and each half is scored by a copy of the
    // fitted model refitted (warm-started) with only the other half's gold.
    // Under the fitted model itself they are optimistic (its confusions were
    // learned from those very items with their truth known), and the map
    // sharpened where it should soften (music, 10 % gold: tau 1.23, ECE
    // 0.10 -> 0.12). A single copy refitted without any gold erred the other
    // way (medical_cause, 30 % gold: ECE 0.075): it is worse than the served
    // model, which saw all the gold; each half-gold copy is nearer to it.
    std::vector<int32_t> half(gold.size(), -1);
    int32_t next = 0;
    for (size_t i = 0; i < gold.size(); ++i) {
      if (gold[i] >= 0 && !data.LabelsOfItem(static_cast<int32_t>(i)).empty()) {
        half[i] = next;
        next = 1 - next;
      }
    }
    std::vector<double> rows(gold.size() * k, 0.0);
    const std::vector<int32_t> label_counts = GoldCalibrationLabelCounts(data, gold);
    bool ok = true;
    for (int32_t h = 0; h < 2 && ok; ++h) {
      std::vector<int32_t> fold_gold(gold.begin(), gold.end());
      for (size_t i = 0; i < gold.size(); ++i) {
        if (half[i] == h) fold_gold[i] = -1;
      }
      // Auto's copies would rerun its whole selection (up to 22 fits each) and might choose
      // another method than the one served: the served method's model is refitted instead.
      const auto* automatic = dynamic_cast<const AutoTruthModel*>(inner_.get());
      std::unique_ptr<TruthModel> fold =
          automatic != nullptr ? automatic->served().Clone() : inner_->Clone();
      ok = fold->Fit(data, fold_gold, /*warm_start=*/true).ok();
      for (size_t i = 0; ok && i < gold.size(); ++i) {
        if (half[i] != h) continue;
        const int32_t item = static_cast<int32_t>(i);
        const std::vector<AnnotationMatrix::Entry> labels =
            GoldCalibrationLabels(item, data.LabelsOfItem(item), label_counts[i]);
        fold->ItemPosteriorForItem(item, labels, -1, absl::MakeSpan(rows.data() + i * k, k));
      }
    }
    for (size_t i = 0; ok && i < gold.size(); ++i) {
      if (half[i] < 0) continue;
      gold_rows.insert(gold_rows.end(), rows.begin() + i * k, rows.begin() + (i + 1) * k);
      gold_truth.push_back(gold[i]);
    }
  }
  if (static_cast<int64_t>(gold_truth.size()) >= kMinGoldItems) {
    calibration.source = CalibrationSource::kGold;
    const FittedMap map = FitGoldMap(gold_rows, k, gold_truth);
    calibration.kind = map.kind;
    calibration.temperature = map.temperature;
    calibration.gold_items = static_cast<int64_t>(gold_truth.size());
    calibration.gold_ece_raw = ExpectedCalibrationError(gold_rows, k, gold_truth);
    for (size_t n = 0; n < gold_truth.size(); ++n) {
      ApplyCalibrationMap(calibration.kind, calibration.temperature, absl::MakeSpan(gold_rows.data() + n * k, k));
    }
    calibration.gold_ece = ExpectedCalibrationError(gold_rows, k, gold_truth);
  } else {
    calibration.source = CalibrationSource::kCrowdLabels;
    const FittedMap map = FitLabelMap(*inner_, data, raw);
    calibration.kind = map.kind;
    calibration.temperature = map.temperature;
  }
  calibration_ = calibration;
  return report;
}

void CalibratedTruthModel::ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                                         int32_t gold_label, absl::Span<double> out) const {
  inner_->ItemPosterior(labels, gold_label, out);
  if (gold_label < 0) ApplyCalibrationMap(calibration_.kind, calibration_.temperature, out);
}

void CalibratedTruthModel::ItemPosteriorForItem(int32_t item,
                                                absl::Span<const AnnotationMatrix::Entry> labels,
                                                int32_t gold_label,
                                                absl::Span<double> out) const {
  inner_->ItemPosteriorForItem(item, labels, gold_label, out);
  if (gold_label < 0) ApplyCalibrationMap(calibration_.kind, calibration_.temperature, out);
}

std::string CalibratedTruthModel::Serialize() const {
  // Identity maps are written as the bare inner blob, readable by builds
  // without calibration.
  if (calibration_.source == CalibrationSource::kNone && calibration_.temperature == 1.0) {
    return inner_->Serialize();
  }
  ByteWriter writer;
  writer.WriteU32(MagicU32());
  writer.WriteU32(kFormatVersion);
  writer.WriteU32(static_cast<uint32_t>(calibration_.kind));
  writer.WriteF64(calibration_.temperature);
  writer.WriteU32(static_cast<uint32_t>(calibration_.source));
  writer.WriteU64(static_cast<uint64_t>(calibration_.gold_items));
  writer.WriteF64(calibration_.gold_ece_raw);
  writer.WriteF64(calibration_.gold_ece);
  writer.WriteString(inner_->Serialize());
  return writer.Finish();
}

absl::Status CalibratedTruthModel::Restore(std::string_view serialized) {
  return RestoreImpl(serialized, nullptr);
}

absl::Status CalibratedTruthModel::Restore(std::string_view serialized,
                                           const RestoreBounds& bounds) {
  return RestoreImpl(serialized, &bounds);
}

absl::Status CalibratedTruthModel::RestoreImpl(std::string_view serialized,
                                               const RestoreBounds* bounds) {
  const auto restore_inner = [&](std::string_view blob) {
    return bounds == nullptr ? inner_->Restore(blob) : inner_->Restore(blob, *bounds);
  };
  if (serialized.substr(0, kMagic.size()) != kMagic) {
    // A version stored before calibration: the inner model alone.
    if (absl::Status s = restore_inner(serialized); !s.ok()) return s;
    calibration_ = PosteriorCalibration();
    return absl::OkStatus();
  }
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  auto magic = reader->ReadU32();
  auto version = reader->ReadU32();
  auto kind = reader->ReadU32();
  auto temperature = reader->ReadF64();
  auto source = reader->ReadU32();
  auto gold_items = reader->ReadU64();
  auto gold_ece_raw = reader->ReadF64();
  auto gold_ece = reader->ReadF64();
  auto inner_blob = reader->ReadString();
  for (const absl::Status& s :
       {magic.status(), version.status(), kind.status(), temperature.status(), source.status(),
        gold_items.status(), gold_ece_raw.status(), gold_ece.status(), inner_blob.status()}) {
    if (!s.ok()) return s;
  }
  if (absl::Status s = reader->ExpectEnd(); !s.ok()) return s;
  if (*magic != MagicU32() || *version != kFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized calibration: format version ", *version, "; this build reads ",
                     kFormatVersion));
  }
  if (*kind != static_cast<uint32_t>(CalibrationMapKind::kTemperature) &&
      *kind != static_cast<uint32_t>(CalibrationMapKind::kTopLabelTemperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized calibration: unknown map kind ", *kind));
  }
  if (!(*temperature >= kMinTemperature && *temperature <= kMaxTemperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized calibration: temperature ", *temperature, " out of [",
                     kMinTemperature, ", ", kMaxTemperature, "]"));
  }
  if (*source > static_cast<uint32_t>(CalibrationSource::kGold)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized calibration: unknown source ", *source));
  }
  if (absl::Status s = restore_inner(*inner_blob); !s.ok()) return s;
  calibration_ = PosteriorCalibration();
  if (!fit_map_) return absl::OkStatus();
  calibration_.kind = static_cast<CalibrationMapKind>(*kind);
  calibration_.temperature = *temperature;
  calibration_.source = static_cast<CalibrationSource>(*source);
  calibration_.gold_items = static_cast<int64_t>(*gold_items);
  calibration_.gold_ece_raw = *gold_ece_raw;
  calibration_.gold_ece = *gold_ece;
  return absl::OkStatus();
}

}  // namespace verity::models
