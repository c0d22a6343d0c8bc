// Evaluation of truth models against gold labels: the accuracy and macro-F1
// of their MAP labels, the calibration of their posteriors (expected
// calibration error and log-loss), label subsampling for redundancy experiments, and
// mean ± standard error over repeated draws.
//
// The conventions are those of shared/datasets/README.md, so that the
// majority-vote accuracy computed here equals the README's: an item is scored
// if it has a gold class and at least one crowd label; its predicted class is
// the most probable one, the lowest class index on ties. Fits are
// unsupervised: gold is used only for scoring, never passed to Fit().
//
// Thread safety: every function here is pure (FitAndScore creates its own
// model), safe to call from any number of threads.

#ifndef VERITY_MODELS_EVALUATION_H_
#define VERITY_MODELS_EVALUATION_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"
#include "models/truth_model.h"

namespace verity::models {

struct ClassificationScores {
  // Items scored (gold class >= 0 and, for ScorePosteriors, >= 1 label).
  int64_t items = 0;
  // Fraction of scored items whose predicted class is the gold class; 0 when
  // no item is scored.
  double accuracy = 0.0;
  // Unweighted mean over classes of F1 = 2 TP / (2 TP + FP + FN), over the
  // classes that occur among the scored items as gold or as prediction (as
  // scikit-learn's f1_score(average="macro") does), so a class absent from
  // both does not count as a zero; 0 when no item is scored.
  double macro_f1 = 0.0;
  // F1 of each class (size num_classes; 0 for a class neither true nor
  // predicted), e.g. the positive-class F1 that some papers report for
  // binary tasks.
  std::vector<double> class_f1;

  // Calibration of the posteriors, set by ScorePosteriors over the same
  // scored items as `accuracy` (ScorePredictions, which sees no posteriors,
  // leaves both 0). Both are 0 when no item is scored.
  //
  // Expected calibration error with 10 equal-width confidence bins. An
  // item's confidence c is its largest posterior probability and it counts
  // as correct iff its predicted class (ArgMax: lowest index on ties, as for
  // accuracy) is the gold class. Bin b in 0..9 holds the items with
  // b / 10 <= c < (b + 1) / 10, computed as min(9, floor(10 c)) in double, so
  // c = 1.0 falls in the last bin [0.9, 1.0]. With n scored items, n_b of
  // them in bin b, acc_b the fraction of those correct and conf_b their mean
  // confidence: ece = sum over non-empty bins of (n_b / n) |acc_b - conf_b|.
  double ece = 0.0;
  // Mean over the scored items of -ln max(p_gold, 1e-15), p_gold the item's
  // posterior probability of its gold class: scikit-learn's log_loss with
  // its former default eps = 1e-15 (which also clips at 1 - 1e-15 and
  // renormalises; that changes a normalised row's terms by < 1e-14).
  double log_loss = 0.0;
};

// The index of the largest value, the lowest index on ties. Precondition:
// values is not empty.
int32_t ArgMax(absl::Span<const double> values);

// Scores `predicted` against `truth` (same size): pairs with truth < 0 are
// skipped. Preconditions: every predicted and truth value < num_classes;
// predicted >= 0 where truth >= 0.
ClassificationScores ScorePredictions(absl::Span<const int32_t> predicted,
                                      absl::Span<const int32_t> truth,
                                      int32_t num_classes);

// Scores posteriors (data.num_items() * K, row-major, K =
// data.num_classes()) against `gold` (size data.num_items(), -1 = no gold)
// over the gold items with at least one label in `data`, predicting
// ArgMax of each item's row; also sets `ece` and `log_loss` from the rows.
// Precondition: each scored item's row is a probability distribution.
ClassificationScores ScorePosteriors(absl::Span<const double> posteriors,
                                     const AnnotationMatrix& data,
                                     absl::Span<const int32_t> gold);

// Keeps, independently for each item, a uniformly random subset of
// min(max_labels_per_item, n_i) of its n_i labels, and returns them in their
// input order. An item's labels are kept all when n_i <= max_labels_per_item,
// so every item keeps at least one label if max_labels_per_item >= 1. The
// draw depends only on the input (order included) and `seed` (through
// std::mt19937_64, whose sequence the standard fixes), so it is the same on
// every platform. With one_more_fraction > 0, each item independently keeps
// one label more (max_labels_per_item + 1) with that probability: partly
// redundant data, as a project has early on or under dynamic overlap (e.g.
// 1 label per item and 2 on about 10% of the items). Preconditions:
// max_labels_per_item >= 1; 0 <= one_more_fraction <= 1; every item in
// [0, num_items).
std::vector<Annotation> SubsampleLabelsPerItem(
    absl::Span<const Annotation> annotations, int32_t num_items,
    int32_t max_labels_per_item, uint64_t seed, double one_more_fraction = 0);

struct MeanWithError {
  double mean = 0.0;
  // Sample standard deviation / sqrt(count); 0 for fewer than two values.
  double standard_error = 0.0;
  int64_t count = 0;
};

// Mean and standard error of the mean; all zero for no values.
MeanWithError MeanAndStandardError(absl::Span<const double> values);

struct MethodEvaluation {
  ClassificationScores scores;
  FitReport fit;
};

// Creates `method` (see CreateTruthModel) for data.num_classes() classes,
// fits it cold on `data` without gold, and scores AllPosteriors against
// `gold` (size data.num_items()) with ScorePosteriors. Returns the errors of
// CreateTruthModel and Fit (INVALID_ARGUMENT for an unknown method or bad
// options), and INVALID_ARGUMENT if gold has another size than
// data.num_items().
absl::StatusOr<MethodEvaluation> FitAndScore(std::string_view method,
                                             const TruthModelOptions& options,
                                             const AnnotationMatrix& data,
                                             absl::Span<const int32_t> gold);

}  // namespace verity::models

#endif  // VERITY_MODELS_EVALUATION_H_
