#include "models/testing/synthetic_crowd.h"

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace verity::models::testing {
namespace {

double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

int32_t SampleCategorical(std::mt19937_64& rng, const double* p, int32_t k) {
  double u = Uniform01(rng);
  for (int32_t c = 0; c < k - 1; ++c) {
    if (u < p[c]) return c;
    u -= p[c];
  }
  return k - 1;
}

}  // namespace

SyntheticCrowd GenerateSyntheticCrowd(const SyntheticCrowdSpec& spec) {
  const int32_t k = spec.num_classes;
  const int32_t num_annotators = static_cast<int32_t>(spec.confusions.size());
  std::vector<double> prior = spec.class_prior;
  if (prior.empty()) prior.assign(k, 1.0 / k);

  std::mt19937_64 rng(spec.seed);
  SyntheticCrowd crowd;
  crowd.truth.resize(spec.num_items);
  std::vector<int32_t> pool(num_annotators);
  for (int32_t a = 0; a < num_annotators; ++a) pool[a] = a;
  std::vector<int32_t> picks(spec.labels_per_item);
  for (int32_t i = 0; i < spec.num_items; ++i) {
    const int32_t truth = SampleCategorical(rng, prior.data(), k);
    crowd.truth[i] = truth;
    // Partial Fisher-Yates: the first labels_per_item entries of pool are
    // the item's annotators; the swaps are undone afterwards so that pool is
    // the identity again at O(labels_per_item) cost.
    for (int32_t j = 0; j < spec.labels_per_item; ++j) {
      const int32_t pick =
          j + static_cast<int32_t>(rng() % static_cast<uint64_t>(
                                               num_annotators - j));
      picks[j] = pick;
      std::swap(pool[j], pool[pick]);
      const int32_t annotator = pool[j];
      const int32_t label = SampleCategorical(
          rng, spec.confusions[annotator].data() + truth * k, k);
      crowd.annotations.push_back(Annotation{i, annotator, label});
    }
    for (int32_t j = spec.labels_per_item - 1; j >= 0; --j) {
      std::swap(pool[j], pool[picks[j]]);
    }
  }
  crowd.matrix = *AnnotationMatrix::Build(spec.num_items, num_annotators, k,
                                          crowd.annotations);
  return crowd;
}

std::vector<double> SymmetricConfusion(int32_t num_classes, double accuracy) {
  std::vector<double> c(static_cast<size_t>(num_classes) * num_classes,
                        (1.0 - accuracy) / (num_classes - 1));
  for (int32_t k = 0; k < num_classes; ++k) c[k * num_classes + k] = accuracy;
  return c;
}

double Accuracy(const std::vector<double>& posteriors,
                const AnnotationMatrix& matrix,
                const std::vector<int32_t>& truth) {
  const int32_t k = matrix.num_classes();
  int64_t correct = 0;
  int64_t total = 0;
  for (int32_t i = 0; i < matrix.num_items(); ++i) {
    if (truth[i] < 0 || matrix.LabelsOfItem(i).empty()) continue;
    const double* p = posteriors.data() + static_cast<size_t>(i) * k;
    int32_t best = 0;
    for (int32_t c = 1; c < k; ++c) {
      if (p[c] > p[best]) best = c;
    }
    correct += best == truth[i];
    ++total;
  }
  return total == 0 ? 0.0 : static_cast<double>(correct) / total;
}

std::vector<int32_t> ArgMax(const std::vector<double>& posteriors, int32_t k) {
  std::vector<int32_t> labels;
  for (size_t i = 0; i * k < posteriors.size(); ++i) {
    int32_t best = 0;
    for (int32_t c = 1; c < k; ++c) {
      if (posteriors[i * k + c] > posteriors[i * k + best]) best = c;
    }
    labels.push_back(best);
  }
  return labels;
}

}  // namespace verity::models::testing
