// ConfusionParameters: the parameters of a confusion-matrix truth model (a
// class prior, one confusion matrix per annotator, and a population confusion
// for annotators never seen), with the E-step and M-step building blocks that
// the mv and ds models share.
//
// Probabilities are the canonical state; their logarithms are derived from
// them by one function, so parameters that are serialized and parsed again
// compute bit-identical posteriors. Confusion columns are stored label-major
// ([label][true class]) so that the E-step's inner loop over true classes and
// the M-step's count accumulation both touch contiguous memory. Both classes
// keep, per annotator, only the columns of the labels it gave (see below).
//
// ConfusionCounts accumulates the expected counts of one M-step (and, for
// ds's incremental refits, takes an item's contribution out again);
// PassOverItems runs one fused E+M pass over the item-major CSR, optionally on
// several threads, each with its own ConfusionCounts, merged in a fixed order.
//
// Thread safety: ConfusionParameters is immutable in use (built by
// EstimateParameters or Parse, then only read); its const methods may be
// called concurrently. ConfusionCounts is not thread-safe.

#ifndef VERITY_MODELS_CONFUSION_PARAMETERS_H_
#define VERITY_MODELS_CONFUSION_PARAMETERS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
#include "models/truth_model.h"

namespace verity::models {

class ConfusionCounts;

// The parameters are sparse per annotator. Row k of annotator a's confusion
// is, as documented on TruthModelOptions,
//   theta_a[k][l] = (n_a[k][l] + u[k][l]) / d_a[k],
//   u[k][l] = confusion_smoothing + population_smoothing * pop[k][l],
//   d_a[k] = n_a[k] + K * confusion_smoothing + population_smoothing,
// where n_a[k][l] is the expected count of label l from true class k. Only
// the labels an annotator actually gave have n_a[.][l] != 0, so an annotator
// keeps the K-vectors (columns) of those labels and the K row denominators
// d_a; every other column is u[.][l] / d_a, from the shared u. Annotators
// whose counts are all empty (no informative label) keep nothing and use the
// population confusion. Memory, serialized size and the M-step therefore grow
// as O((labels + annotators) * K), not annotators * K^2.
class ConfusionParameters {
 public:
  // A uniform class prior and uniform confusions, no annotators.
  explicit ConfusionParameters(int32_t num_classes);

  int32_t num_classes() const { return num_classes_; }
  // Annotators with their own confusion; any other id gets the population's.
  int32_t num_annotators() const { return num_annotators_; }

  // log p(true class = k), k = 0..K-1.
  const double* log_prior() const { return log_prior_.data(); }

  // Adds log p(label | true class = k) of `annotator` to scores[k] for
  // k = 0..K-1 (the population confusion's if the annotator is out of
  // [0, num_annotators()) or has no confusion of its own).
  void AddLogColumn(int32_t annotator, int32_t label, double* scores) const {
    const size_t k = static_cast<size_t>(num_classes_);
    const double* add =
        log_population_.data() + static_cast<size_t>(label) * k;
    if (static_cast<uint32_t>(annotator) <
        static_cast<uint32_t>(num_annotators_)) {
      const int32_t column =
          column_of_[static_cast<size_t>(annotator) * k + label];
      if (column >= 0) {
        add = log_columns_.data() + static_cast<size_t>(column) * k;
      } else if (const int32_t row = row_of_[annotator]; row >= 0) {
        const double* numerator =
            log_untouched_numerator_.data() + static_cast<size_t>(label) * k;
        const double* denominator =
            log_row_denominator_.data() + static_cast<size_t>(row) * k;
        for (size_t c = 0; c < k; ++c) scores[c] += numerator[c] - denominator[c];
        return;
      }
    }
    for (size_t c = 0; c < k; ++c) scores[c] += add[c];
  }

  // log p(label | true class) of `annotator`, one cell of AddLogColumn.
  double LogCell(int32_t annotator, int32_t label, int32_t true_class) const;

  // Row-major K*K confusion (row = true class) of `annotator`, population
  // confusion if out of range. O(K^2); ConfusionDiagonal is O(K).
  std::vector<double> Confusion(int32_t annotator) const;
  // p(label = k | true class = k), k = 0..K-1, of `annotator`.
  std::vector<double> ConfusionDiagonal(int32_t annotator) const;
  std::vector<double> ClassPrior() const { return prior_; }

  // Keeps the first `num_annotators` annotators; new ones get the population
  // confusion.
  void ResizeAnnotators(int32_t num_annotators);

  // Annotators with a confusion of their own, and label columns they keep
  // (the rest follow from the smoothing prior): the size of the parameters.
  int32_t num_own_annotators() const {
    return static_cast<int32_t>(row_annotator_.size());
  }
  int64_t num_own_columns() const {
    return static_cast<int64_t>(columns_.size()) / num_classes_;
  }

  // The Dawid-Skene posterior of one item: writes p(true class | labels) into
  // out (size K) and returns the log-likelihood term of the item,
  // log p(labels), or log p(gold_label, labels) when gold_label >= 0 (out is
  // then one-hot). `labels` must be sorted by (annotator, label) for results
  // that do not depend on the order; see CanonicalLabels.
  double Posterior(absl::Span<const AnnotationMatrix::Entry> labels,
                   int32_t gold_label, absl::Span<double> out) const;

  void Serialize(ByteWriter& writer) const;
  // Parses what Serialize wrote, and the dense layout of earlier builds
  // (every annotator's K*K confusion). INVALID_ARGUMENT if the data are
  // truncated, of another number of classes, or not probability
  // distributions. Allocates no more than the data's own size warrants.
  static absl::StatusOr<ConfusionParameters> Parse(ByteReader& reader,
                                                   int32_t num_classes);

 private:
  friend ConfusionParameters EstimateParameters(
      const ConfusionCounts& counts, const TruthModelOptions& options,
      double population_diagonal);

  static absl::StatusOr<ConfusionParameters> ParseDense(ByteReader& reader,
                                                        int32_t num_classes,
                                                        uint32_t num_annotators);
  static absl::StatusOr<ConfusionParameters> ParseSparse(ByteReader& reader,
                                                         int32_t num_classes);

  int32_t RowOf(int32_t annotator) const {
    return annotator >= 0 && annotator < num_annotators_ ? row_of_[annotator]
                                                          : -1;
  }
  // Starts the own confusion of `annotator` (the next in increasing order)
  // with row denominators `denominator` (K); returns its row.
  int32_t AddRow(int32_t annotator, const double* denominator);
  // Adds column `label` (K probabilities over true classes) to the last row.
  void AddColumn(int32_t label, const double* column);
  void RecomputeLogs();

  int32_t num_classes_;
  int32_t num_annotators_ = 0;
  std::vector<double> prior_;      // K
  std::vector<double> log_prior_;  // K
  // Label-major K*K ([label][true class]): the population confusion, and the
  // numerators u of the columns an annotator does not keep.
  std::vector<double> population_;
  std::vector<double> log_population_;
  std::vector<double> untouched_numerator_;
  std::vector<double> log_untouched_numerator_;
  // Annotator -> row of its own confusion, or -1 (population).
  std::vector<int32_t> row_of_;
  std::vector<int32_t> row_annotator_;        // per row, increasing
  std::vector<double> row_denominator_;      // rows * K: d_a
  std::vector<double> log_row_denominator_;  // rows * K
  // Annotator * K + label -> column, or -1 (the column is not kept).
  std::vector<int32_t> column_of_;
  std::vector<double> columns_;              // columns * K
  std::vector<double> log_columns_;          // columns * K
};

// Expected counts of one M-step: for each annotator, label and true class the
// posterior mass of the items the annotator gave that label; and the
// posterior mass of each class over labelled or gold items. Sparse like
// ConfusionParameters: an annotator keeps a K-vector per label it gave.
class ConfusionCounts {
 public:
  ConfusionCounts(int32_t num_classes, int32_t num_annotators);

  // Adds one item with labels `labels` and posterior `posterior`.
  void AddItem(absl::Span<const AnnotationMatrix::Entry> labels,
               const double* posterior) {
    const size_t k = static_cast<size_t>(num_classes_);
    for (size_t c = 0; c < k; ++c) class_mass_[c] += posterior[c];
    for (const AnnotationMatrix::Entry& e : labels) {
      // (The column first: adding one may move counts_.)
      const int32_t column = FindOrAddColumn(e.other, e.label);
      double* cell = counts_.data() + static_cast<size_t>(column) * k;
      for (size_t c = 0; c < k; ++c) cell[c] += posterior[c];
      ++labels_per_annotator_[e.other];
    }
  }

  // An item whose labels do not inform the parameters (ds: a single label,
  // no gold) still has a class drawn from the prior: it adds 1/K to every
  // class's mass, and nothing to any confusion. So a class prior learnt from
  // a few informative items cannot overrule the many items it is applied to.
  void AddUninformedItem() {
    const double share = 1.0 / static_cast<double>(num_classes_);
    for (double& m : class_mass_) m += share;
  }
  // Takes out what AddUninformedItem() added (clamped at 0).
  void RemoveUninformedItem();

  // Takes out what AddItem(labels, posterior) added. Cells are clamped at 0,
  // so rounding can never leave a negative count.
  void RemoveItem(absl::Span<const AnnotationMatrix::Entry> labels,
                  const double* posterior);

  // Adds `other` into this (same sizes).
  void Merge(const ConfusionCounts& other);

  // Keeps the first `num_annotators` annotators; new ones have no counts.
  void ResizeAnnotators(int32_t num_annotators);

  int32_t num_classes() const { return num_classes_; }
  int32_t num_annotators() const { return num_annotators_; }
  // (annotator, label) pairs holding counts: the size of the counts.
  int64_t num_columns() const {
    return static_cast<int64_t>(column_label_.size());
  }

  void Serialize(ByteWriter& writer) const;
  // Parses what Serialize wrote, and the dense layout of earlier builds.
  // INVALID_ARGUMENT if the data are truncated, of another number of
  // classes, or hold a negative or non-finite count.
  static absl::StatusOr<ConfusionCounts> Parse(ByteReader& reader,
                                               int32_t num_classes);

 private:
  friend ConfusionParameters EstimateParameters(
      const ConfusionCounts& counts, const TruthModelOptions& options,
      double population_diagonal);

  // The column of (annotator, label), or -1.
  int32_t FindColumn(int32_t annotator, int32_t label) const {
    return column_of_[static_cast<size_t>(annotator) * num_classes_ + label];
  }
  int32_t FindOrAddColumn(int32_t annotator, int32_t label) {
    const int32_t column = FindColumn(annotator, label);
    return column >= 0 ? column : AddColumn(annotator, label);
  }
  int32_t AddColumn(int32_t annotator, int32_t label);  // zeroed

  int32_t num_classes_;
  int32_t num_annotators_;
  std::vector<int32_t> column_of_;        // annotator * K + label, or -1
  std::vector<int32_t> column_annotator_;  // per column
  std::vector<int32_t> column_label_;   // per column
  std::vector<double> counts_;          // columns * K
  std::vector<double> class_mass_;
  std::vector<int64_t> labels_per_annotator_;
};

// The M-step: smoothed class prior, population confusion from the pooled
// counts, and per-annotator confusions shrunk toward it, as documented on
// TruthModelOptions. Annotators without labels get the population confusion.
// `population_diagonal` is an extra pseudo-count on the diagonal of the
// population confusion (ds passes options.population_diagonal_prior; mv
// passes nothing): with no counts at all the population, and so every
// annotator, is then better than chance instead of uniform.
ConfusionParameters EstimateParameters(const ConfusionCounts& counts,
                                       const TruthModelOptions& options,
                                       double population_diagonal = 0.0);

// Writes the soft majority vote of `labels` into out (size K):
// (count_k + smoothing) / (n + K * smoothing); gold_label >= 0 gives one-hot.
void SoftMajorityVote(absl::Span<const AnnotationMatrix::Entry> labels,
                      int32_t gold_label, double smoothing,
                      absl::Span<double> out);

// `labels` itself if it is sorted by (annotator, label), else a sorted copy
// held in `scratch`.
absl::Span<const AnnotationMatrix::Entry> CanonicalLabels(
    absl::Span<const AnnotationMatrix::Entry> labels,
    std::vector<AnnotationMatrix::Entry>& scratch);

// The serialized form of a confusion-matrix model: magic, format version,
// method name, then the parameters if any, in a checksummed ByteWriter blob.
// If `write_extension` is given, it appends a method-specific section after
// the parameters (ds: the state of its incremental refits), which the method
// versions itself.
std::string SerializeConfusionModel(
    std::string_view method, const std::optional<ConfusionParameters>& params,
    const std::function<void(ByteWriter&)>& write_extension = nullptr);

// Parses SerializeConfusionModel output. If bytes follow the parameters and
// read_extension is given, it is called with the reader just after them and
// must read the whole method-specific section (a blob without one, e.g.
// written before the method had one, does not call it). INVALID_ARGUMENT if
// the blob is corrupt, of another format version, of another method than
// `method`, or of another number of classes than `num_classes`, if bytes
// follow the parameters and read_extension is null, or if read_extension
// fails (its error is returned).
absl::StatusOr<std::optional<ConfusionParameters>> ParseConfusionModel(
    std::string_view serialized, std::string_view method, int32_t num_classes,
    const std::function<absl::Status(ByteReader&)>& read_extension = nullptr);

struct PassResult {
  ConfusionCounts counts;
  double log_likelihood;
};

// One fused E+M pass: for every item with labels or gold, computes its
// posterior with posterior_fn(labels, gold_label, out) -> log-likelihood term
// (summed into PassResult::log_likelihood), and accumulates the expected
// counts of the items for which informs_fn(labels, gold_label) is true; the
// other items with labels add ConfusionCounts::AddUninformedItem() (a
// uniform share of the class prior's mass). Items without labels and without
// gold are skipped (they carry no information about any parameter). Uses up
// to num_threads threads over contiguous item ranges; partial results are
// merged in range order, so the result depends only on the data and
// num_threads.
template <typename PosteriorFn, typename InformsFn>
PassResult PassOverItems(const AnnotationMatrix& data,
                         absl::Span<const int32_t> gold, int num_threads,
                         const PosteriorFn& posterior_fn,
                         const InformsFn& informs_fn) {
  const int32_t k = data.num_classes();
  const int32_t n = data.num_items();
  // Below ~64k labels per thread, starting threads costs more than it saves.
  const int64_t max_useful_threads =
      std::max<int64_t>(1, data.num_labels() / 65536);
  const int threads = static_cast<int>(
      std::min<int64_t>({num_threads, max_useful_threads, std::max(n, 1)}));

  auto run_range = [&](int32_t begin, int32_t end, ConfusionCounts& counts,
                       double& log_likelihood) {
    std::vector<double> posterior(static_cast<size_t>(k));
    double ll = 0.0;
    for (int32_t i = begin; i < end; ++i) {
      const absl::Span<const AnnotationMatrix::Entry> labels =
          data.LabelsOfItem(i);
      const int32_t gold_label = gold.empty() ? -1 : gold[i];
      if (labels.empty() && gold_label < 0) continue;
      ll += posterior_fn(labels, gold_label, absl::MakeSpan(posterior));
      if (informs_fn(labels, gold_label)) {
        counts.AddItem(labels, posterior.data());
      } else if (!labels.empty()) {
        counts.AddUninformedItem();
      }
    }
    log_likelihood = ll;
  };

  PassResult result{ConfusionCounts(k, data.num_annotators()), 0.0};
  if (threads <= 1) {
    run_range(0, n, result.counts, result.log_likelihood);
    return result;
  }
  std::vector<ConfusionCounts> partial_counts(
      threads - 1, ConfusionCounts(k, data.num_annotators()));
  std::vector<double> partial_ll(threads, 0.0);
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  auto range_begin = [&](int t) {
    return static_cast<int32_t>(static_cast<int64_t>(n) * t / threads);
  };
  for (int t = 1; t < threads; ++t) {
    workers.emplace_back([&, t] {
      run_range(range_begin(t), range_begin(t + 1), partial_counts[t - 1],
                partial_ll[t]);
    });
  }
  run_range(0, range_begin(1), result.counts, partial_ll[0]);
  for (std::thread& w : workers) w.join();
  result.log_likelihood = partial_ll[0];
  for (int t = 1; t < threads; ++t) {
    result.counts.Merge(partial_counts[t - 1]);
    result.log_likelihood += partial_ll[t];
  }
  return result;
}

// PassOverItems where every item with labels or gold adds its counts.
template <typename PosteriorFn>
PassResult PassOverItems(const AnnotationMatrix& data,
                         absl::Span<const int32_t> gold, int num_threads,
                         const PosteriorFn& posterior_fn) {
  return PassOverItems(
      data, gold, num_threads, posterior_fn,
      [](absl::Span<const AnnotationMatrix::Entry>, int32_t) { return true; });
}

}  // namespace verity::models

#endif  // VERITY_MODELS_CONFUSION_PARAMETERS_H_
