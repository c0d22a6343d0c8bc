// ConfusionParameters: the parameters of a confusion-matrix truth model (a
// class prior, one confusion matrix per annotator, and a population confusion
// for annotators never seen), with the E-step and M-step building blocks that
// the mv and ds models share.
//
// Probabilities are the canonical state; their logarithms are derived from
// them by one function, so parameters that are serialized and parsed again
// compute bit-identical posteriors. Confusions are stored label-major
// ([annotator][label][true class]) so that the E-step's inner loop over true
// classes and the M-step's count accumulation both touch contiguous memory.
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

class ConfusionParameters {
 public:
  // A uniform class prior and uniform confusions, no annotators.
  explicit ConfusionParameters(int32_t num_classes);

  int32_t num_classes() const { return num_classes_; }
  // Annotators with their own confusion; any other id gets the population's.
  int32_t num_annotators() const { return num_annotators_; }

  // log p(true class = k), k = 0..K-1.
  const double* log_prior() const { return log_prior_.data(); }

  // log p(label | true class = k) for k = 0..K-1, of `annotator` (population
  // confusion if the annotator is out of [0, num_annotators())).
  const double* LogColumn(int32_t annotator, int32_t label) const {
    return log_confusion_.data() + ColumnOffset(annotator, label);
  }

  // Row-major K*K confusion (row = true class) of `annotator`, population
  // confusion if out of range.
  std::vector<double> Confusion(int32_t annotator) const;
  std::vector<double> ClassPrior() const { return prior_; }

  // Keeps the first `num_annotators` annotators; new ones get the population
  // confusion.
  void ResizeAnnotators(int32_t num_annotators);

  // The Dawid-Skene posterior of one item: writes p(true class | labels) into
  // out (size K) and returns the log-likelihood term of the item,
  // log p(labels), or log p(gold_label, labels) when gold_label >= 0 (out is
  // then one-hot). `labels` must be sorted by (annotator, label) for results
  // that do not depend on the order; see CanonicalLabels.
  double Posterior(absl::Span<const AnnotationMatrix::Entry> labels,
                   int32_t gold_label, absl::Span<double> out) const;

  void Serialize(ByteWriter& writer) const;
  // Parses what Serialize wrote. INVALID_ARGUMENT if the data are truncated,
  // of another number of classes, or not probability distributions.
  static absl::StatusOr<ConfusionParameters> Parse(ByteReader& reader,
                                                   int32_t num_classes);

 private:
  friend ConfusionParameters EstimateParameters(
      const ConfusionCounts& counts, const TruthModelOptions& options,
      double population_diagonal);

  // Slot 0 is the population confusion, slot a + 1 annotator a.
  size_t ColumnOffset(int32_t annotator, int32_t label) const {
    const size_t slot = (annotator >= 0 && annotator < num_annotators_)
                            ? static_cast<size_t>(annotator) + 1
                            : 0;
    const size_t k = static_cast<size_t>(num_classes_);
    return (slot * k + static_cast<size_t>(label)) * k;
  }
  void RecomputeLogs();

  int32_t num_classes_;
  int32_t num_annotators_ = 0;
  std::vector<double> prior_;          // K
  std::vector<double> log_prior_;      // K
  std::vector<double> confusion_;      // (A + 1) * K * K, label-major
  std::vector<double> log_confusion_;  // same layout
};

// Expected counts of one M-step: for each annotator, label and true class the
// posterior mass of the items the annotator gave that label; and the
// posterior mass of each class over labelled or gold items.
class ConfusionCounts {
 public:
  ConfusionCounts(int32_t num_classes, int32_t num_annotators);

  // Adds one item with labels `labels` and posterior `posterior`.
  void AddItem(absl::Span<const AnnotationMatrix::Entry> labels,
               const double* posterior) {
    const size_t k = static_cast<size_t>(num_classes_);
    for (size_t c = 0; c < k; ++c) class_mass_[c] += posterior[c];
    for (const AnnotationMatrix::Entry& e : labels) {
      double* cell = counts_.data() +
                     (static_cast<size_t>(e.other) * k + e.label) * k;
      for (size_t c = 0; c < k; ++c) cell[c] += posterior[c];
      ++labels_per_annotator_[e.other];
    }
  }

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

  void Serialize(ByteWriter& writer) const;
  // Parses what Serialize wrote. INVALID_ARGUMENT if the data are truncated,
  // of another number of classes, or hold a negative or non-finite count.
  static absl::StatusOr<ConfusionCounts> Parse(ByteReader& reader,
                                               int32_t num_classes);

 private:
  friend ConfusionParameters EstimateParameters(
      const ConfusionCounts& counts, const TruthModelOptions& options,
      double population_diagonal);

  int32_t num_classes_;
  int32_t num_annotators_;
  std::vector<double> counts_;  // A * K * K, label-major like the confusions
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
// counts of the items for which informs_fn(labels, gold_label) is true.
// Items without labels and without gold are skipped (they carry no
// information about any parameter). Uses up to num_threads threads over
// contiguous item ranges; partial results are merged in range order, so the
// result depends only on the data and num_threads.
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
