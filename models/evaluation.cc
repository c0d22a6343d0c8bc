#include "models/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/truth_model_factory.h"

namespace verity::models {

int32_t ArgMax(absl::Span<const double> values) {
  int32_t best = 0;
  for (size_t c = 1; c < values.size(); ++c) {
    if (values[c] > values[best]) best = static_cast<int32_t>(c);
  }
  return best;
}

ClassificationScores ScorePredictions(absl::Span<const int32_t> predicted,
                                      absl::Span<const int32_t> truth,
                                      int32_t num_classes) {
  std::vector<int64_t> true_positives(num_classes, 0);
  std::vector<int64_t> predicted_count(num_classes, 0);
  std::vector<int64_t> truth_count(num_classes, 0);
  ClassificationScores scores;
  scores.class_f1.assign(num_classes, 0.0);
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    if (truth[i] < 0) continue;
    ++scores.items;
    ++truth_count[truth[i]];
    ++predicted_count[predicted[i]];
    if (predicted[i] == truth[i]) {
      ++correct;
      ++true_positives[truth[i]];
    }
  }
  if (scores.items == 0) return scores;
  scores.accuracy = static_cast<double>(correct) / scores.items;
  double f1_sum = 0.0;
  int32_t classes_present = 0;
  for (int32_t c = 0; c < num_classes; ++c) {
    // 2 TP + FP + FN = (TP + FP) + (TP + FN).
    const int64_t denominator = predicted_count[c] + truth_count[c];
    if (denominator == 0) continue;
    ++classes_present;
    scores.class_f1[c] = 2.0 * true_positives[c] / denominator;
    f1_sum += scores.class_f1[c];
  }
  scores.macro_f1 = f1_sum / classes_present;
  return scores;
}

ClassificationScores ScorePosteriors(absl::Span<const double> posteriors,
                                     const AnnotationMatrix& data,
                                     absl::Span<const int32_t> gold) {
  const int32_t k = data.num_classes();
  std::vector<int32_t> predicted(data.num_items(), -1);
  std::vector<int32_t> truth(data.num_items(), -1);
  for (int32_t i = 0; i < data.num_items(); ++i) {
    if (gold[i] < 0 || data.LabelsOfItem(i).empty()) continue;
    predicted[i] = ArgMax(posteriors.subspan(static_cast<size_t>(i) * k, k));
    truth[i] = gold[i];
  }
  ClassificationScores scores = ScorePredictions(predicted, truth, k);
  if (scores.items == 0) return scores;

  constexpr int kBins = 10;
  constexpr double kMinProbability = 1e-15;
  std::vector<int64_t> bin_count(kBins, 0);
  std::vector<int64_t> bin_correct(kBins, 0);
  std::vector<double> bin_confidence(kBins, 0.0);
  double log_loss_sum = 0.0;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    if (truth[i] < 0) continue;
    const absl::Span<const double> row =
        posteriors.subspan(static_cast<size_t>(i) * k, k);
    const double confidence = row[predicted[i]];
    const int bin = std::min(
        kBins - 1, static_cast<int>(std::floor(kBins * confidence)));
    ++bin_count[bin];
    bin_correct[bin] += predicted[i] == truth[i];
    bin_confidence[bin] += confidence;
    log_loss_sum -= std::log(std::max(row[truth[i]], kMinProbability));
  }
  double ece = 0.0;
  for (int b = 0; b < kBins; ++b) {
    if (bin_count[b] == 0) continue;
    // (n_b / n) |acc_b - conf_b| = |correct_b - confidence_sum_b| / n.
    ece += std::abs(bin_correct[b] - bin_confidence[b]);
  }
  scores.ece = ece / scores.items;
  scores.log_loss = log_loss_sum / scores.items;
  return scores;
}

std::vector<Annotation> SubsampleLabelsPerItem(
    absl::Span<const Annotation> annotations, int32_t num_items,
    int32_t max_labels_per_item, uint64_t seed, double one_more_fraction) {
  // Counting sort of the annotation indices by item, stable, so each item's
  // indices are in input order before they are shuffled.
  std::vector<int64_t> offsets(static_cast<size_t>(num_items) + 1, 0);
  for (const Annotation& a : annotations) ++offsets[a.item + 1];
  for (int32_t i = 0; i < num_items; ++i) offsets[i + 1] += offsets[i];
  std::vector<int64_t> by_item(annotations.size());
  {
    std::vector<int64_t> next(offsets.begin(), offsets.end() - 1);
    for (size_t j = 0; j < annotations.size(); ++j) {
      by_item[next[annotations[j].item]++] = static_cast<int64_t>(j);
    }
  }
  std::mt19937_64 rng(seed);
  std::vector<bool> keep(annotations.size(), false);
  for (int32_t i = 0; i < num_items; ++i) {
    int64_t* first = by_item.data() + offsets[i];
    const int64_t n = offsets[i + 1] - offsets[i];
    int64_t allowed = max_labels_per_item;
    if (one_more_fraction > 0 &&
        static_cast<double>(rng()) < one_more_fraction * 18446744073709551616.0) {
      ++allowed;
    }
    const int64_t kept = std::min<int64_t>(n, allowed);
    if (kept < n) {
      // Partial Fisher-Yates: the first `kept` entries become a uniform
      // random subset.
      for (int64_t j = 0; j < kept; ++j) {
        const int64_t pick =
            j + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - j));
        std::swap(first[j], first[pick]);
      }
    }
    for (int64_t j = 0; j < kept; ++j) keep[first[j]] = true;
  }
  std::vector<Annotation> result;
  for (size_t j = 0; j < annotations.size(); ++j) {
    if (keep[j]) result.push_back(annotations[j]);
  }
  return result;
}

MeanWithError MeanAndStandardError(absl::Span<const double> values) {
  MeanWithError result;
  result.count = static_cast<int64_t>(values.size());
  if (values.empty()) return result;
  double sum = 0.0;
  for (double v : values) sum += v;
  result.mean = sum / values.size();
  if (values.size() < 2) return result;
  double squares = 0.0;
  for (double v : values) squares += (v - result.mean) * (v - result.mean);
  const double variance = squares / (values.size() - 1);
  result.standard_error = std::sqrt(variance / values.size());
  return result;
}

absl::StatusOr<MethodEvaluation> FitAndScore(std::string_view method,
                                             const TruthModelOptions& options,
                                             const AnnotationMatrix& data,
                                             absl::Span<const int32_t> gold) {
  if (gold.size() != static_cast<size_t>(data.num_items())) {
    return absl::InvalidArgumentError(
        absl::StrCat("gold has ", gold.size(), " entries, expected ",
                     data.num_items(), " (one per item)"));
  }
  absl::StatusOr<std::unique_ptr<TruthModel>> model =
      CreateTruthModel(method, data.num_classes(), options);
  if (!model.ok()) return model.status();
  absl::StatusOr<FitReport> fit =
      (*model)->Fit(data, /*gold=*/{}, /*warm_start=*/false);
  if (!fit.ok()) return fit.status();
  MethodEvaluation evaluation;
  evaluation.fit = *fit;
  evaluation.scores =
      ScorePosteriors(AllPosteriors(**model, data, /*gold=*/{}), data, gold);
  return evaluation;
}

}  // namespace verity::models
