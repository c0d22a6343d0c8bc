#include "models/one_coin.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/binary_codec.h"
#include "models/confusion_parameters.h"

namespace verity::models {
namespace {

// Serialization format version of one_coin parameters; bump on any change of
// the layout.

// Expected counts of one M-step.
struct OneCoinCounts {
  OneCoinCounts(int32_t num_classes, int32_t num_annotators)
      : class_mass(num_classes, 0.0), correct(num_annotators, 0.0) {}

  void Merge(const OneCoinCounts& other) {
    for (size_t c = 0; c < class_mass.size(); ++c) {
      class_mass[c] += other.class_mass[c];
    }
    for (size_t a = 0; a < correct.size(); ++a) correct[a] += other.correct[a];
    log_likelihood += other.log_likelihood;
  }

  // Posterior mass of each class over items with labels or gold.
  std::vector<double> class_mass;
  // Per annotator, the posterior mass of their labels being correct.
  std::vector<double> correct;
  // Sum of the items' log-likelihood terms.
  double log_likelihood = 0.0;
};

// One fused E+M pass: for every item with labels or gold, its posterior by
// posterior_fn(labels, gold_label, out) -> log-likelihood term, accumulated
// into the counts. Items without labels and gold are skipped (they carry no
// information about any parameter). Contiguous item ranges run on up to
// num_threads threads, merged in range order, so the result depends only on
// the data and num_threads.
template <typename PosteriorFn>
OneCoinCounts CountOverItems(const AnnotationMatrix& data,
                             absl::Span<const int32_t> gold, int num_threads,
                             const PosteriorFn& posterior_fn) {
  const int32_t k = data.num_classes();
  const int32_t n = data.num_items();
  // As in PassOverItems: below ~64k labels per thread, starting threads costs
  // more than it saves.
  const int64_t max_useful_threads =
      std::max<int64_t>(1, data.num_labels() / 65536);
  const int threads = static_cast<int>(
      std::min<int64_t>({num_threads, max_useful_threads, std::max(n, 1)}));

  auto run_range = [&](int32_t begin, int32_t end, OneCoinCounts& counts) {
    std::vector<double> posterior(static_cast<size_t>(k));
    double ll = 0.0;
    for (int32_t i = begin; i < end; ++i) {
      const absl::Span<const AnnotationMatrix::Entry> labels =
          data.LabelsOfItem(i);
      const int32_t gold_label = gold.empty() ? -1 : gold[i];
      if (labels.empty() && gold_label < 0) continue;
      ll += posterior_fn(labels, gold_label, absl::MakeSpan(posterior));
      for (int32_t c = 0; c < k; ++c) counts.class_mass[c] += posterior[c];
      for (const AnnotationMatrix::Entry& e : labels) {
        counts.correct[e.other] += posterior[e.label];
      }
    }
    counts.log_likelihood = ll;
  };

  OneCoinCounts result(k, data.num_annotators());
  if (threads <= 1) {
    run_range(0, n, result);
    return result;
  }
  std::vector<OneCoinCounts> partial(threads - 1,
                                     OneCoinCounts(k, data.num_annotators()));
  auto range_begin = [&](int t) {
    return static_cast<int32_t>(static_cast<int64_t>(n) * t / threads);
  };
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) {
    workers.emplace_back([&, t] {
      run_range(range_begin(t), range_begin(t + 1), partial[t - 1]);
    });
  }
  run_range(0, range_begin(1), result);
  for (std::thread& w : workers) w.join();
  for (const OneCoinCounts& p : partial) result.Merge(p);
  return result;
}

// The M-step documented in one_coin.h.
OneCoinParameters EstimateOneCoin(const OneCoinCounts& counts,
                                  const AnnotationMatrix& data,
                                  const TruthModelOptions& options) {
  const int32_t k = data.num_classes();
  const double kd = static_cast<double>(k);
  const int32_t num_annotators = data.num_annotators();
  OneCoinParameters params(k);

  if (options.learn_symmetric_class_prior) {
    double mass = 0.0;
    for (double m : counts.class_mass) mass += m;
    for (int32_t c = 0; c < k; ++c) {
      params.prior[c] = (counts.class_mass[c] + options.prior_smoothing) /
                        (mass + kd * options.prior_smoothing);
    }
  }  // else the uniform prior of OneCoinParameters(k)

  const double s = options.confusion_smoothing;
  const double m = options.population_smoothing;
  double total_correct = 0.0;
  double total_labels = 0.0;
  for (int32_t a = 0; a < num_annotators; ++a) {
    total_correct += counts.correct[a];
    total_labels += static_cast<double>(data.LabelsOfAnnotator(a).size());
  }
  const double pooled = (total_correct + s) / (total_labels + kd * s);
  params.accuracy.assign(static_cast<size_t>(num_annotators) + 1, pooled);
  for (int32_t a = 0; a < num_annotators; ++a) {
    const size_t n_a = data.LabelsOfAnnotator(a).size();
    if (n_a == 0) continue;  // keeps the pooled accuracy
    params.accuracy[static_cast<size_t>(a) + 1] =
        (counts.correct[a] + s + m * pooled) /
        (static_cast<double>(n_a) + kd * s + m);
  }
  params.DeriveLogs();
  return params;
}

absl::Status CorruptError(std::string_view what, double value) {
  return absl::InvalidArgumentError(absl::StrCat(
      "serialized model is corrupt: ", std::string(what), " is ", value));
}

absl::StatusOr<OneCoinParameters> ParseParameters(ByteReader& reader,
                                                  int32_t num_classes) {
  if (absl::Status s = ReadClassCount(reader, num_classes); !s.ok()) return s;
  absl::StatusOr<uint32_t> a32 = reader.ReadU32();
  if (!a32.ok()) return a32.status();
  // Check the size before allocating, so a corrupt count cannot make us
  // allocate gigabytes.
  const uint64_t want_bytes =
      8 * (static_cast<uint64_t>(num_classes) + 1 + *a32);
  if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
      reader.remaining() < want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is truncated: ", *a32, " annotators need ",
        want_bytes, " bytes, have ", reader.remaining()));
  }
  OneCoinParameters params(num_classes);
  double sum = 0.0;
  for (int32_t c = 0; c < num_classes; ++c) {
    absl::StatusOr<double> v = reader.ReadF64();
    if (!v.ok()) return v.status();
    if (!std::isfinite(*v) || !(*v > 0.0) || *v > 1.0) {
      return CorruptError("a class prior probability", *v);
    }
    params.prior[c] = *v;
    sum += *v;
  }
  if (std::abs(sum - 1.0) > 1e-9 * num_classes) {
    return CorruptError("the sum of the class prior", sum);
  }
  params.accuracy.assign(static_cast<size_t>(*a32) + 1, 0.0);
  for (double& p : params.accuracy) {
    absl::StatusOr<double> v = reader.ReadF64();
    if (!v.ok()) return v.status();
    if (!(*v > 0.0 && *v < 1.0)) return CorruptError("an accuracy", *v);
    p = *v;
  }
  params.DeriveLogs();
  return params;
}

}  // namespace

OneCoinParameters::OneCoinParameters(int32_t num_classes)
    : num_classes(num_classes),
      prior(num_classes, 1.0 / num_classes),
      accuracy(1, 1.0 / num_classes) {
  DeriveLogs();
}

void OneCoinParameters::DeriveLogs() {
  log_prior.resize(prior.size());
  for (size_t c = 0; c < prior.size(); ++c) log_prior[c] = std::log(prior[c]);
  const double log_others = std::log(static_cast<double>(num_classes - 1));
  log_wrong.resize(accuracy.size());
  vote_weight.resize(accuracy.size());
  for (size_t s = 0; s < accuracy.size(); ++s) {
    log_wrong[s] = std::log1p(-accuracy[s]) - log_others;
    vote_weight[s] = std::log(accuracy[s]) - log_wrong[s];
  }
}

void OneCoinParameters::ResizeAnnotators(int32_t num_annotators) {
  const size_t slots = static_cast<size_t>(num_annotators) + 1;
  accuracy.resize(slots, accuracy[0]);
  log_wrong.resize(slots, log_wrong[0]);
  vote_weight.resize(slots, vote_weight[0]);
}

double OneCoinParameters::Posterior(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    absl::Span<double> out) const {
  const size_t k = static_cast<size_t>(num_classes);
  double* scores = out.data();
  std::copy_n(log_prior.data(), k, scores);
  // Every label is wrong for all classes but its own: log p(labels | k) is
  // the sum of log_wrong plus, for each label of class k, its vote weight.
  double all_wrong = 0.0;
  for (const AnnotationMatrix::Entry& e : labels) {
    const size_t slot = Slot(e.other);
    scores[e.label] += vote_weight[slot];
    all_wrong += log_wrong[slot];
  }
  if (gold_label >= 0) {
    const double ll = scores[gold_label] + all_wrong;
    std::fill(out.begin(), out.end(), 0.0);
    out[gold_label] = 1.0;
    return ll;
  }
  const double max_score = *std::max_element(scores, scores + k);
  double sum = 0.0;
  for (size_t c = 0; c < k; ++c) {
    scores[c] = std::exp(scores[c] - max_score);
    sum += scores[c];
  }
  const double inv_sum = 1.0 / sum;
  for (size_t c = 0; c < k; ++c) scores[c] *= inv_sum;
  return max_score + std::log(sum) + all_wrong;
}

absl::StatusOr<std::unique_ptr<OneCoinModel>> OneCoinModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<OneCoinModel>(new OneCoinModel(num_classes, options));
}

std::unique_ptr<TruthModel> OneCoinModel::Clone() const {
  return std::unique_ptr<TruthModel>(new OneCoinModel(*this));
}

absl::StatusOr<FitReport> OneCoinModel::Fit(const AnnotationMatrix& data,
                                            absl::Span<const int32_t> gold,
                                            bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;

  FitReport report;
  std::optional<OneCoinParameters> params;
  if (warm_start && params_.has_value()) {
    params = *params_;
    params->ResizeAnnotators(data.num_annotators());
  } else {
    // Initialisation (not counted as an iteration): the M-step on the soft
    // majority vote.
    const double smoothing = options_.vote_smoothing;
    OneCoinCounts counts = CountOverItems(
        data, gold, options_.num_threads,
        [smoothing](absl::Span<const AnnotationMatrix::Entry> labels,
                    int32_t gold_label, absl::Span<double> out) {
          SoftMajorityVote(labels, gold_label, smoothing, out);
          return 0.0;
        });
    params = EstimateOneCoin(counts, data, options_);
  }

  // Each pass is the E-step of the current parameters (giving their
  // log-likelihood) fused with the M-step that replaces them.
  std::optional<double> previous_ll;
  while (report.iterations < options_.max_iterations) {
    const OneCoinParameters& current = *params;
    OneCoinCounts counts = CountOverItems(
        data, gold, options_.num_threads,
        [&current](absl::Span<const AnnotationMatrix::Entry> labels,
                   int32_t gold_label, absl::Span<double> out) {
          return current.Posterior(labels, gold_label, out);
        });
    report.log_likelihood = counts.log_likelihood;
    params = EstimateOneCoin(counts, data, options_);
    ++report.iterations;
    if (previous_ll.has_value()) {
      const double change = std::abs(counts.log_likelihood - *previous_ll);
      if (change <= options_.tolerance * std::abs(counts.log_likelihood)) {
        report.converged = true;
        break;
      }
    }
    previous_ll = counts.log_likelihood;
  }

  params_ = std::move(params);
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

void OneCoinModel::ItemPosterior(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    absl::Span<double> out) const {
  if (!params_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  std::vector<AnnotationMatrix::Entry> scratch;
  params_->Posterior(CanonicalLabels(labels, scratch), gold_label, out);
}

double OneCoinModel::AnnotatorAccuracy(int32_t annotator) const {
  if (!params_.has_value()) return 1.0 / num_classes_;
  return params_->accuracy[params_->Slot(annotator)];
}

std::vector<double> OneCoinModel::AnnotatorConfusion(int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  const double p = AnnotatorAccuracy(annotator);
  std::vector<double> confusion(k * k, (1.0 - p) / static_cast<double>(k - 1));
  for (size_t c = 0; c < k; ++c) confusion[c * k + c] = p;
  return confusion;
}

std::vector<double> OneCoinModel::ClassPrior() const {
  if (!params_.has_value()) {
    return std::vector<double>(num_classes_, 1.0 / num_classes_);
  }
  return params_->prior;
}

std::string OneCoinModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, kMethod, params_.has_value());
  if (params_.has_value()) {
    writer.WriteU32(static_cast<uint32_t>(num_classes_));
    writer.WriteU32(static_cast<uint32_t>(params_->num_annotators()));
    for (double p : params_->prior) writer.WriteF64(p);
    for (double p : params_->accuracy) writer.WriteF64(p);
  }
  return writer.Finish();
}

absl::Status OneCoinModel::Restore(std::string_view serialized) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, kMethod);
  if (!has_params.ok()) return has_params.status();
  std::optional<OneCoinParameters> params;
  if (*has_params) {
    absl::StatusOr<OneCoinParameters> parsed =
        ParseParameters(*reader, num_classes_);
    if (!parsed.ok()) return parsed.status();
    params = *std::move(parsed);
  }
  absl::Status s = reader->ExpectEnd();
  if (!s.ok()) return s;
  params_ = std::move(params);
  return absl::OkStatus();
}

}  // namespace verity::models
