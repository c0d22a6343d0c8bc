// MmsrModel: Matrix Mean-Subsequence-Reduced (Ma and Olshevsky, "Adversarial
// crowdsourcing through robust rank-one matrix completion", NeurIPS 2020),
// method "mmsr" (crowd-kit's MMSR).
//
// Each annotator j has a one-coin skill p_j (the chance of a correct label;
// errors uniform over the other K - 1 classes). Written x_j = (K p_j - 1) /
// (K - 1), the agreement statistic of two annotators,
//   C_ij = K / (K - 1) * (share of their common items with equal labels)
//          - 1 / (K - 1),
// has expectation x_i x_j, so x is found by robust rank-one completion of the
// observed part of C: the MSR iteration alternates, for u and v, each entry
// := the mean of {|C_ij| / (the other vector)_i over the observed i} after
// dropping the F largest and F smallest values relative to the current
// entry (crowd-kit's _remove_largest_and_smallest_F_value, reproduced with
// its edge cases), F = floor(s / 2) - 1, s = the fewest annotators any
// annotator shares items with. It stops when ||u v^T - u' v'^T||_F < 1e-10 or
// after kMaxIterations (crowd-kit's n_iter); then x = u / sqrt(|u| / |v|),
// clipped into [-1 / (K - 1) + 1 / sqrt(n), 1 - 1 / sqrt(n)] (n = items with
// labels), p_j = x_j (K - 1) / K + 1 / K, and the annotator's weight is
// w_j = ln((K - 1) p_j / (1 - p_j)).
//
// Departures from crowd-kit, and why:
//   - Signs: crowd-kit takes the signs of x from an eigenvector of a graph
//     built from the signs of C (scipy's ARPACK); Verity takes every x_j >= 0
//     (annotators no worse than chance), which is crowd-kit's result whenever
//     that graph says so, and needs no eigen-solver. An adversarial annotator
//     (x_j < 0) thus gets weight 0 at worst instead of a negative one.
//   - The posterior is the one-coin posterior of these skills,
//     p(k | labels) ∝ exp(sum over labels of w_j [y_j = k]), where crowd-kit
//     normalises the weighted vote sum_j w_j [y_j = k] itself (which can be
//     negative); both have the same argmax, ties toward the lower class.
//   - K is the project's number of classes (crowd-kit counts the distinct
//     labels in the data).
//   - The start: crowd-kit draws u and v uniformly from numpy's RandomState(0);
//     Verity draws them from std::mt19937(0) with numpy's double conversion,
//     the same numbers. A warm start (model with parameters) starts from the
//     previous |x| (new annotators from the draw).
//   - A partner whose current estimate is 0 (every agreement of it at chance)
//     is left out of the trimmed means; crowd-kit divides by it, and its
//     infinities and NaNs end in an error (it fails so on the shared product
//     dataset).
//   - Gold: MMSR has no latent truth in its fit, so gold is only clamped in
//     the posteriors (one-hot); the skills ignore it.
//   - Annotators without labels, ids not in the fit: the skill x that is the
//     label-weighted mean of the fitted annotators' x, and the weight that
//     follows from it (not the mean of their weights: the weight is not
//     linear in x).
//
// Cost: the fit keeps two dense A x A counts (A = annotators with labels, 8
// bytes a pair) and the list of observed pairs (12 bytes a pair); building
// them costs O(sum over items of labels^2). Each iteration is one pass over
// the P observed pairs (a division and a few comparisons each) plus, per
// annotator, a selection of the kept ranks (std::nth_element) among the
// values near its current estimate, or among all its values when that window
// misses: O(P) expected, where crowd-kit sorts every row (O(P log P)); the
// kept values are still summed in ascending order, so the estimates are those
// of sorting, bit for bit. The number of iterations to crowd-kit's tolerance
// depends on the data: 97 on the benchmark's 500k crowd (300 annotators), 489
// on its 5M crowd (3,000; docs/PERFORMANCE.md). Fit refuses more than
// kMaxAnnotators annotators with labels (RESOURCE_EXHAUSTED): at 5,000 the fit
// holds up to about 500 MB. This is not the
// O(labels * K) of the other classical methods: MMSR is a method on the
// annotator-annotator matrix. options.max_iterations and options.tolerance
// are not read. Each half-step's rows are split over up to
// options.num_threads threads (one per 100,000 observed pairs at most); a
// row's result depends on nothing else, so the estimates are the same for any
// number of threads.
//
// AnnotatorConfusion: one-coin, p_j on the diagonal and (1 - p_j) / (K - 1)
// elsewhere.
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_MMSR_H_
#define VERITY_MODELS_MMSR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"
#include "models/truth_model.h"

namespace verity::models {

class MmsrModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "mmsr";
  static constexpr int kMaxIterations = 10000;  // crowd-kit's n_iter
  static constexpr double kTolerance = 1e-10;   // crowd-kit's tol
  static constexpr int32_t kMaxAnnotators = 5000;

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<MmsrModel>> Create(
      int32_t num_classes, const TruthModelOptions& options);

  std::string_view method() const override { return kMethod; }
  int32_t num_classes() const override { return num_classes_; }
  bool has_parameters() const override { return params_.has_value(); }
  std::unique_ptr<TruthModel> Clone() const override;

  // Also RESOURCE_EXHAUSTED if data has more than kMaxAnnotators annotators.
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data,
                                absl::Span<const int32_t> gold,
                                bool warm_start) override;
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                     int32_t gold_label,
                     absl::Span<double> out) const override;
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::string Serialize() const override;
  // Also INVALID_ARGUMENT if a skill estimate x is not in (-1 / (K - 1), 1).
  absl::Status Restore(std::string_view serialized) override;

  // w_j (the pooled weight for an id not in the fit); nullopt before a fit.
  std::optional<double> AnnotatorWeight(int32_t annotator) const;

 private:
  MmsrModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  // Slot of `annotator` in x_ / weights_ (0 = pooled).
  size_t SlotOf(int32_t annotator) const;
  void DeriveWeights();

  int32_t num_classes_;
  TruthModelOptions options_;
  // (num_annotators + 1) skill estimates x, slot 0 the pooled one; the
  // weights are derived from them. Empty until Fit/Restore.
  std::optional<std::vector<double>> params_;
  std::vector<double> weights_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_MMSR_H_
