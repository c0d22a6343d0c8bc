#include "models/glad.h"

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

// Serialization format version of glad parameters; bump on any change of the
// layout.

// Newton safeguards: the largest step (a factor e^2 on an easiness) and how
// often a step that does not increase the objective is halved before the
// parameter is left as it is.
constexpr double kMaxStep = 2.0;
constexpr int kMaxHalvings = 10;
// A Newton step whose predicted gain is below this fraction of the
// objective's magnitude is not taken: the parameter is as good as solved
// (for an item's log easiness, to within ~1e-5), and checking the step would
// compare values that differ by rounding only.
constexpr double kNegligibleGain = 1e-10;
constexpr double kLog2 = 0.69314718055994531;

double Sigmoid(double x) {
  const double e = std::exp(-std::abs(x));
  return (x >= 0 ? 1.0 : e) / (1.0 + e);
}

// Sums softplus(x) = log(1 + e^x) over many x, and gives sigmoid(x) of each,
// from one exp per term: softplus(x) = max(x, 0) + log(1 + exp(-|x|)), and
// the logs are summed as the log of a product of factors in (1, 2], folded
// every 512 factors, well before it could overflow. This saves a log1p per
// label, which would otherwise be half the cost of a fit; the result differs
// from a sum of log1p by rounding only.
class SoftplusSum {
 public:
  // Adds softplus(x); returns sigmoid(x).
  double Add(double x) {
    const double e = std::exp(-std::abs(x));
    const double one_plus_e = 1.0 + e;
    positive_ += std::max(x, 0.0);
    product_ *= one_plus_e;
    if (++factors_ == 512) Fold();
    return (x >= 0 ? 1.0 : e) / one_plus_e;
  }
  double Total() {
    Fold();
    return positive_ + log_;
  }

 private:
  void Fold() {
    log_ += std::log(product_);
    product_ = 1.0;
    factors_ = 0;
  }

  double positive_ = 0.0;
  double log_ = 0.0;
  double product_ = 1.0;
  int factors_ = 0;
};

// A one-dimensional objective at a point: its value, gradient and a positive
// curvature (at least the true -f'' there) for the Newton step.
struct Objective {
  double value;
  double gradient;
  double curvature;
};

// Maximises a one-dimensional function from x (where it is `at_x`) within
// [-bound, bound] by up to `steps` Newton steps, each clamped to kMaxStep and
// halved until the value does not decrease; stops early once the predicted
// gain is negligible (kNegligibleGain) or no halving helps. eval(x') returns
// the Objective at x'; accept() is called whenever the point last evaluated
// becomes the new x, so that the caller can keep what eval computed there.
template <typename EvalFn, typename AcceptFn>
double NewtonAscent(double x, Objective at_x, double bound, int steps,
                    const EvalFn& eval, const AcceptFn& accept) {
  for (int step = 0; step < steps; ++step) {
    double delta =
        std::clamp(at_x.gradient / at_x.curvature, -kMaxStep, kMaxStep);
    const double predicted_gain = 0.5 * at_x.gradient * delta;
    if (!(predicted_gain >
          kNegligibleGain * std::max(1.0, std::abs(at_x.value)))) {
      break;
    }
    bool accepted = false;
    for (int halving = 0; halving <= kMaxHalvings; ++halving, delta *= 0.5) {
      const double trial = std::clamp(x + delta, -bound, bound);
      if (trial == x) break;
      const Objective at_trial = eval(trial);
      if (at_trial.value >= at_x.value) {
        x = trial;
        at_x = at_trial;
        accept();
        accepted = true;
        break;
      }
    }
    if (!accepted) break;
  }
  return x;
}

// Threads for a pass over `num_labels` labels split into `units` ranges: as
// in PassOverItems, below ~64k labels per thread starting threads costs more
// than it saves.
int UsefulThreads(int num_threads, int64_t num_labels, int64_t units) {
  const int64_t max_useful = std::max<int64_t>(1, num_labels / 65536);
  return static_cast<int>(std::min<int64_t>(
      {num_threads, max_useful, std::max<int64_t>(units, 1)}));
}

// Runs body(t, bounds[t], bounds[t + 1]) for t < bounds.size() - 1, range 0
// on the calling thread and the others on threads of their own.
template <typename Body>
void RunRanges(const std::vector<int32_t>& bounds, const Body& body) {
  const int ranges = static_cast<int>(bounds.size()) - 1;
  std::vector<std::thread> workers;
  workers.reserve(std::max(ranges - 1, 0));
  for (int t = 1; t < ranges; ++t) {
    workers.emplace_back([&, t] { body(t, bounds[t], bounds[t + 1]); });
  }
  if (ranges > 0) body(0, bounds[0], bounds[1]);
  for (std::thread& w : workers) w.join();
}

// Sums over an annotator's labels, at the current ability alpha and the
// items' new easiness beta_i, from which the ability step's gradient and
// curvature follow: with q_i = p(label correct) and s_i =
// sigmoid(alpha beta_i), the data part of the gradient is
// correct - expected, of the curvature `curvature`.
struct AbilitySums {
  double correct = 0.0;       // sum q_i beta_i
  double expected = 0.0;      // sum s_i beta_i
  double curvature = 0.0;     // sum s_i (1 - s_i) beta_i^2
  double max_easiness = 0.0;  // max beta_i
};

// One Fit's EM over GladParameters sized for the data (slot layout as in
// GladParameters). Not thread-safe itself; its passes start their own
// threads.
class GladFitter {
 public:
  GladFitter(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
             const TruthModelOptions& options, GladParameters& params)
      : data_(data),
        gold_(gold),
        options_(options),
        params_(params),
        k_(data.num_classes()),
        ability_mean_(std::clamp(options.glad_ability_prior_mean,
                                 -GladModel::kMaxAbsAbility,
                                 GladModel::kMaxAbsAbility)),
        ability_precision_(1.0 / (options.glad_ability_prior_stddev *
                                  options.glad_ability_prior_stddev)),
        easiness_mean_(options.glad_log_easiness_prior_mean),
        easiness_precision_(1.0 / (options.glad_log_easiness_prior_stddev *
                                   options.glad_log_easiness_prior_stddev)) {
    const int32_t n = data.num_items();
    const int32_t a = data.num_annotators();
    for (int32_t i = 0; i < n; ++i) {
      max_item_labels_ =
          std::max(max_item_labels_, data.LabelsOfItem(i).size());
    }
    const int item_threads =
        UsefulThreads(options.num_threads, data.num_labels(), n);
    item_bounds_.resize(item_threads + 1);
    for (int t = 0; t <= item_threads; ++t) {
      item_bounds_[t] =
          static_cast<int32_t>(static_cast<int64_t>(n) * t / item_threads);
    }
    // Annotator ranges of about equal numbers of labels.
    const int annotator_threads =
        UsefulThreads(options.num_threads, data.num_labels(), a);
    annotator_bounds_.assign(annotator_threads + 1, a);
    annotator_bounds_[0] = 0;
    int64_t cumulative = 0;
    int next = 1;
    for (int32_t j = 0; j < a && next < annotator_threads; ++j) {
      cumulative += static_cast<int64_t>(data.LabelsOfAnnotator(j).size());
      while (next < annotator_threads &&
             cumulative * annotator_threads >= data.num_labels() * next) {
        annotator_bounds_[next++] = j + 1;
      }
    }
    partial_.assign(item_threads, Sums(k_, a));
  }

  // One EM iteration: the E-step of the current parameters (the soft
  // majority vote instead if `majority_vote`), then the M-step. Returns the
  // marginal log-likelihood of the E-step (0 for the majority vote).
  double Iterate(bool majority_vote) {
    RunRanges(item_bounds_, [&](int t, int32_t begin, int32_t end) {
      ItemRange(begin, end, majority_vote, partial_[t]);
    });
    Sums& total = partial_[0];
    for (size_t t = 1; t < partial_.size(); ++t) total.Merge(partial_[t]);

    if (options_.learn_symmetric_class_prior) {
      const double kd = static_cast<double>(k_);
      double mass = 0.0;
      for (double m : total.class_mass) mass += m;
      for (int32_t c = 0; c < k_; ++c) {
        params_.prior[c] = (total.class_mass[c] + options_.prior_smoothing) /
                           (mass + kd * options_.prior_smoothing);
      }
    } else {
      std::fill(params_.prior.begin(), params_.prior.end(), 1.0 / k_);
    }

    RunRanges(annotator_bounds_, [&](int, int32_t begin, int32_t end) {
      AbilityRange(begin, end, total.ability);
    });

    // Population ability: the label-weighted mean, also given to annotators
    // without labels.
    double weighted = 0.0;
    double labels = 0.0;
    for (int32_t j = 0; j < data_.num_annotators(); ++j) {
      const double n_j = static_cast<double>(data_.LabelsOfAnnotator(j).size());
      weighted += n_j * params_.ability[static_cast<size_t>(j) + 1];
      labels += n_j;
    }
    const double population = labels > 0 ? weighted / labels : ability_mean_;
    params_.ability[0] = population;
    for (int32_t j = 0; j < data_.num_annotators(); ++j) {
      if (data_.LabelsOfAnnotator(j).empty()) {
        params_.ability[static_cast<size_t>(j) + 1] = population;
      }
    }
    for (int32_t c = 0; c < k_; ++c) {
      params_.log_prior[c] = std::log(params_.prior[c]);
    }
    return total.log_likelihood;
  }

 private:
  // What the item pass accumulates, per thread.
  struct Sums {
    Sums(int32_t num_classes, int32_t num_annotators)
        : class_mass(num_classes, 0.0), ability(num_annotators) {}
    void Reset() {
      std::fill(class_mass.begin(), class_mass.end(), 0.0);
      std::fill(ability.begin(), ability.end(), AbilitySums());
      log_likelihood = 0.0;
    }
    void Merge(const Sums& other) {
      for (size_t c = 0; c < class_mass.size(); ++c) {
        class_mass[c] += other.class_mass[c];
      }
      for (size_t j = 0; j < ability.size(); ++j) {
        ability[j].correct += other.ability[j].correct;
        ability[j].expected += other.ability[j].expected;
        ability[j].curvature += other.ability[j].curvature;
        ability[j].max_easiness =
            std::max(ability[j].max_easiness, other.ability[j].max_easiness);
      }
      log_likelihood += other.log_likelihood;
    }
    // Posterior mass of each class over items with labels or gold.
    std::vector<double> class_mass;
    std::vector<AbilitySums> ability;  // per annotator
    double log_likelihood = 0.0;
  };

  // E-step and easiness step of the items in [begin, end).
  void ItemRange(int32_t begin, int32_t end, bool majority_vote, Sums& sums) {
    sums.Reset();
    const size_t k = static_cast<size_t>(k_);
    const double log_others = params_.log_other_classes;
    const double prior_log_easiness = params_.log_easiness[0];
    const double prior_easiness = params_.easiness[0];
    std::vector<double> posterior(k);
    // Per label of the item: the annotator's ability, p(correct) at the
    // current easiness, and p(label correct) after the E-step.
    std::vector<double> alpha(max_item_labels_);
    std::vector<double> sigmoid(max_item_labels_);
    std::vector<double> trial_sigmoid(max_item_labels_);
    std::vector<double> correct(max_item_labels_);
    double ll = 0.0;
    for (int32_t i = begin; i < end; ++i) {
      const absl::Span<const AnnotationMatrix::Entry> labels =
          data_.LabelsOfItem(i);
      const int32_t gold_label = gold_.empty() ? -1 : gold_[i];
      const size_t slot = static_cast<size_t>(i) + 1;
      if (labels.empty()) {
        // No evidence about the easiness; a gold item still counts toward
        // the class prior.
        params_.log_easiness[slot] = prior_log_easiness;
        params_.easiness[slot] = prior_easiness;
        if (gold_label >= 0) {
          sums.class_mass[gold_label] += 1.0;
          if (!majority_vote) ll += params_.log_prior[gold_label];
        }
        continue;
      }
      const size_t n = labels.size();
      const double b = params_.log_easiness[slot];
      const double beta = params_.easiness[slot];

      // E-step (the same arithmetic as GladParameters::Posterior).
      double* scores = posterior.data();
      std::copy_n(params_.log_prior.data(), k, scores);
      SoftplusSum softplus;
      for (size_t j = 0; j < n; ++j) {
        const AnnotationMatrix::Entry& e = labels[j];
        alpha[j] = params_.ability[static_cast<size_t>(e.other) + 1];
        const double x = alpha[j] * beta;
        scores[e.label] += x + log_others;
        sigmoid[j] = softplus.Add(x);
      }
      const double total_softplus = softplus.Total();
      const double all_wrong =
          -total_softplus - static_cast<double>(n) * log_others;
      if (majority_vote) {
        SoftMajorityVote(labels, gold_label, options_.vote_smoothing,
                         absl::MakeSpan(posterior));
      } else if (gold_label >= 0) {
        ll += scores[gold_label] + all_wrong;
        std::fill(posterior.begin(), posterior.end(), 0.0);
        posterior[gold_label] = 1.0;
      } else {
        const double max_score = *std::max_element(scores, scores + k);
        double sum = 0.0;
        for (size_t c = 0; c < k; ++c) {
          scores[c] = std::exp(scores[c] - max_score);
          sum += scores[c];
        }
        const double inv_sum = 1.0 / sum;
        for (size_t c = 0; c < k; ++c) scores[c] *= inv_sum;
        ll += max_score + std::log(sum) + all_wrong;
      }
      for (size_t c = 0; c < k; ++c) sums.class_mass[c] += posterior[c];

      // Easiness step: maximise over b
      //   f(b) = sum_j [q_j x_j - softplus(x_j)] - (b - mu)^2 * precision / 2
      // with x_j = alpha_j e^b and q_j = p(label j correct). With
      // T = sum_j q_j alpha_j, sum_j q_j x_j = e^b T.
      double t_sum = 0.0;
      for (size_t j = 0; j < n; ++j) {
        correct[j] = posterior[labels[j].label];
        t_sum += correct[j] * alpha[j];
      }
      auto objective = [&](double b_at, double beta_at, double sum_softplus,
                           double sum_sigmoid_x, double sum_weight_x2) {
        const double data_gradient = beta_at * t_sum - sum_sigmoid_x;
        const double d = b_at - easiness_mean_;
        return Objective{
            beta_at * t_sum - sum_softplus - 0.5 * easiness_precision_ * d * d,
            data_gradient - easiness_precision_ * d,
            sum_weight_x2 + easiness_precision_ +
                std::max(0.0, -data_gradient)};
      };
      double sum_sigmoid_x = 0.0;
      double sum_weight_x2 = 0.0;
      for (size_t j = 0; j < n; ++j) {
        const double x = alpha[j] * beta;
        sum_sigmoid_x += sigmoid[j] * x;
        sum_weight_x2 += sigmoid[j] * (1.0 - sigmoid[j]) * x * x;
      }
      // sigmoid[] always holds the sigmoids at the current b, so that the
      // ability sums below reuse those of the last accepted evaluation.
      const double new_b = NewtonAscent(
          b, objective(b, beta, total_softplus, sum_sigmoid_x, sum_weight_x2),
          GladModel::kMaxAbsLogEasiness, GladModel::kEasinessNewtonSteps,
          [&](double b_trial) {
            const double beta_trial = std::exp(b_trial);
            SoftplusSum sp;
            double sx = 0.0;
            double wx2 = 0.0;
            for (size_t j = 0; j < n; ++j) {
              const double x = alpha[j] * beta_trial;
              const double sig = sp.Add(x);
              trial_sigmoid[j] = sig;
              sx += sig * x;
              wx2 += sig * (1.0 - sig) * x * x;
            }
            return objective(b_trial, beta_trial, sp.Total(), sx, wx2);
          },
          [&] { std::swap(sigmoid, trial_sigmoid); });
      const double new_beta = new_b == b ? beta : std::exp(new_b);
      params_.log_easiness[slot] = new_b;
      params_.easiness[slot] = new_beta;
      for (size_t j = 0; j < n; ++j) {
        const double sig = sigmoid[j];
        AbilitySums& a = sums.ability[labels[j].other];
        a.correct += correct[j] * new_beta;
        a.expected += sig * new_beta;
        a.curvature += sig * (1.0 - sig) * new_beta * new_beta;
        a.max_easiness = std::max(a.max_easiness, new_beta);
      }
    }
    sums.log_likelihood = ll;
  }

  // Ability step of the annotators in [begin, end): maximise over alpha
  //   g(alpha) = alpha S - sum_i softplus(alpha beta_i)
  //              - (alpha - mu)^2 * precision / 2,
  // S = sum_i p(label correct) beta_i over the annotator's labels; g is
  // concave, with curvature c = sum_i w(alpha beta_i) beta_i^2 + precision,
  // w = sigmoid (1 - sigmoid). Since |d log w / dx| < 1, along a step delta
  // with |delta| max_i beta_i <= log 2 the curvature stays below 2c, so
  // g(alpha + delta) >= g(alpha) + g' delta - c delta^2, which the Newton
  // step delta = g' / c makes >= 0: such a step, computed from the item
  // pass's sums alone, needs no check. A larger one is taken by NewtonAscent
  // over the annotator's labels, with its checks.
  void AbilityRange(int32_t begin, int32_t end,
                    const std::vector<AbilitySums>& sums) {
    std::vector<double> betas;
    for (int32_t a = begin; a < end; ++a) {
      const absl::Span<const AnnotationMatrix::Entry> labels =
          data_.LabelsOfAnnotator(a);
      if (labels.empty()) continue;
      double& alpha = params_.ability[static_cast<size_t>(a) + 1];
      const AbilitySums& sum = sums[a];
      const double gradient = sum.correct - sum.expected -
                              ability_precision_ * (alpha - ability_mean_);
      const double delta =
          gradient / (sum.curvature + ability_precision_);
      if (std::abs(delta) * sum.max_easiness <= kLog2) {
        alpha = std::clamp(alpha + delta, -GladModel::kMaxAbsAbility,
                           GladModel::kMaxAbsAbility);
        continue;
      }
      const size_t n = labels.size();
      betas.resize(n);
      for (size_t j = 0; j < n; ++j) {
        betas[j] = params_.easiness[static_cast<size_t>(labels[j].other) + 1];
      }
      auto eval = [&](double at) {
        SoftplusSum sp;
        double sb = 0.0;
        double wb2 = 0.0;
        for (size_t j = 0; j < n; ++j) {
          const double sig = sp.Add(at * betas[j]);
          sb += sig * betas[j];
          wb2 += sig * (1.0 - sig) * betas[j] * betas[j];
        }
        const double d = at - ability_mean_;
        return Objective{
            at * sum.correct - sp.Total() - 0.5 * ability_precision_ * d * d,
            sum.correct - sb - ability_precision_ * d,
            wb2 + ability_precision_};
      };
      alpha = NewtonAscent(alpha, eval(alpha), GladModel::kMaxAbsAbility,
                           GladModel::kAbilityNewtonSteps, eval, [] {});
    }
  }

  const AnnotationMatrix& data_;
  absl::Span<const int32_t> gold_;
  const TruthModelOptions& options_;
  GladParameters& params_;
  const int32_t k_;
  const double ability_mean_;
  const double ability_precision_;
  const double easiness_mean_;
  const double easiness_precision_;
  size_t max_item_labels_ = 0;
  std::vector<int32_t> item_bounds_;
  std::vector<int32_t> annotator_bounds_;
  std::vector<Sums> partial_;  // one per item range
};

absl::Status CorruptError(std::string_view what, double value) {
  return absl::InvalidArgumentError(absl::StrCat(
      "serialized model is corrupt: ", std::string(what), " is ", value));
}

absl::StatusOr<GladParameters> ParseParameters(ByteReader& reader,
                                               int32_t num_classes) {
  if (absl::Status s = ReadClassCount(reader, num_classes); !s.ok()) return s;
  absl::StatusOr<uint32_t> a32 = reader.ReadU32();
  if (!a32.ok()) return a32.status();
  absl::StatusOr<uint32_t> n32 = reader.ReadU32();
  if (!n32.ok()) return n32.status();
  // Check the size before allocating, so a corrupt count cannot make us
  // allocate gigabytes.
  const uint64_t want_bytes =
      8 * (static_cast<uint64_t>(num_classes) + 2 + *a32 + *n32);
  if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
      *n32 > static_cast<uint32_t>(INT32_MAX - 1) ||
      reader.remaining() < want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is truncated: ", *a32, " annotators and ", *n32,
        " items need ", want_bytes, " bytes, have ", reader.remaining()));
  }
  GladParameters params(num_classes, 0.0, 0.0);
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
  params.ability.assign(static_cast<size_t>(*a32) + 1, 0.0);
  for (double& alpha : params.ability) {
    absl::StatusOr<double> v = reader.ReadF64();
    if (!v.ok()) return v.status();
    if (!(std::abs(*v) <= GladModel::kMaxAbsAbility)) {
      return CorruptError("an ability", *v);
    }
    alpha = *v;
  }
  params.log_easiness.assign(static_cast<size_t>(*n32) + 1, 0.0);
  for (double& b : params.log_easiness) {
    absl::StatusOr<double> v = reader.ReadF64();
    if (!v.ok()) return v.status();
    if (!(std::abs(*v) <= GladModel::kMaxAbsLogEasiness)) {
      return CorruptError("a log easiness", *v);
    }
    b = *v;
  }
  params.Derive();
  return params;
}

}  // namespace

GladParameters::GladParameters(int32_t num_classes, double population_ability,
                               double prior_log_easiness)
    : num_classes(num_classes),
      prior(num_classes, 1.0 / num_classes),
      ability(1, population_ability),
      log_easiness(1, prior_log_easiness) {
  Derive();
}

void GladParameters::Derive() {
  log_prior.resize(prior.size());
  for (size_t c = 0; c < prior.size(); ++c) log_prior[c] = std::log(prior[c]);
  easiness.resize(log_easiness.size());
  for (size_t i = 0; i < log_easiness.size(); ++i) {
    easiness[i] = std::exp(log_easiness[i]);
  }
  log_other_classes = std::log(static_cast<double>(num_classes - 1));
}

void GladParameters::Posterior(
    absl::Span<const AnnotationMatrix::Entry> labels, double beta,
    int32_t gold_label, absl::Span<double> out) const {
  if (gold_label >= 0) {
    std::fill(out.begin(), out.end(), 0.0);
    out[gold_label] = 1.0;
    return;
  }
  const size_t k = static_cast<size_t>(num_classes);
  double* scores = out.data();
  std::copy_n(log_prior.data(), k, scores);
  for (const AnnotationMatrix::Entry& e : labels) {
    scores[e.label] += Ability(e.other) * beta + log_other_classes;
  }
  const double max_score = *std::max_element(scores, scores + k);
  double sum = 0.0;
  for (size_t c = 0; c < k; ++c) {
    scores[c] = std::exp(scores[c] - max_score);
    sum += scores[c];
  }
  const double inv_sum = 1.0 / sum;
  for (size_t c = 0; c < k; ++c) scores[c] *= inv_sum;
}

absl::StatusOr<std::unique_ptr<GladModel>> GladModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<GladModel>(new GladModel(num_classes, options));
}

std::unique_ptr<TruthModel> GladModel::Clone() const {
  return std::unique_ptr<TruthModel>(new GladModel(*this));
}

absl::StatusOr<FitReport> GladModel::Fit(const AnnotationMatrix& data,
                                         absl::Span<const int32_t> gold,
                                         bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;

  const double ability_mean =
      std::clamp(options_.glad_ability_prior_mean, -kMaxAbsAbility,
                 kMaxAbsAbility);
  const bool warm = warm_start && params_.has_value();
  GladParameters params =
      warm ? *params_
           : GladParameters(num_classes_, ability_mean,
                            options_.glad_log_easiness_prior_mean);
  // New annotators start with the population ability (the prior mean on a
  // cold start), new items with the prior easiness of the current options.
  params.ability.resize(static_cast<size_t>(data.num_annotators()) + 1,
                        params.ability[0]);
  params.log_easiness[0] = options_.glad_log_easiness_prior_mean;
  params.log_easiness.resize(static_cast<size_t>(data.num_items()) + 1,
                             options_.glad_log_easiness_prior_mean);
  params.Derive();

  GladFitter fitter(data, gold, options_, params);
  // Initialisation (not counted as an iteration): the M-step on the soft
  // majority vote.
  if (!warm) fitter.Iterate(/*majority_vote=*/true);

  FitReport report;
  std::optional<double> previous_ll;
  while (report.iterations < options_.max_iterations) {
    const double ll = fitter.Iterate(/*majority_vote=*/false);
    report.log_likelihood = ll;
    ++report.iterations;
    if (previous_ll.has_value() &&
        std::abs(ll - *previous_ll) <= options_.tolerance * std::abs(ll)) {
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

void GladModel::ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                              int32_t gold_label,
                              absl::Span<double> out) const {
  ItemPosteriorForItem(-1, labels, gold_label, out);
}

void GladModel::ItemPosteriorForItem(
    int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
    int32_t gold_label, absl::Span<double> out) const {
  if (!params_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  std::vector<AnnotationMatrix::Entry> scratch;
  params_->Posterior(CanonicalLabels(labels, scratch), params_->Easiness(item),
                     gold_label, out);
}

double GladModel::AnnotatorAbility(int32_t annotator) const {
  if (!params_.has_value()) {
    return std::clamp(options_.glad_ability_prior_mean, -kMaxAbsAbility,
                      kMaxAbsAbility);
  }
  return params_->Ability(annotator);
}

double GladModel::ItemEasiness(int32_t item) const {
  if (!params_.has_value()) {
    return std::exp(options_.glad_log_easiness_prior_mean);
  }
  return params_->Easiness(item);
}

std::vector<double> GladModel::AnnotatorConfusion(int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  if (!params_.has_value()) {
    return std::vector<double>(k * k, 1.0 / num_classes_);
  }
  const double p =
      Sigmoid(params_->Ability(annotator) * params_->Easiness(-1));
  std::vector<double> confusion(k * k, (1.0 - p) / static_cast<double>(k - 1));
  for (size_t c = 0; c < k; ++c) confusion[c * k + c] = p;
  return confusion;
}

std::vector<double> GladModel::ItemAnnotatorConfusion(int32_t item, int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes_);
  if (!params_.has_value()) {
    return std::vector<double>(k * k, 1.0 / num_classes_);
  }
  const double p = Sigmoid(params_->Ability(annotator) * params_->Easiness(item));
  std::vector<double> confusion(k * k, (1.0 - p) / static_cast<double>(k - 1));
  for (size_t c = 0; c < k; ++c) confusion[c * k + c] = p;
  return confusion;
}

std::vector<double> GladModel::ClassPrior() const {
  if (!params_.has_value()) {
    return std::vector<double>(num_classes_, 1.0 / num_classes_);
  }
  return params_->prior;
}

std::string GladModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, kMethod, params_.has_value());
  if (params_.has_value()) {
    writer.WriteU32(static_cast<uint32_t>(num_classes_));
    writer.WriteU32(static_cast<uint32_t>(params_->num_annotators()));
    writer.WriteU32(static_cast<uint32_t>(params_->num_items()));
    for (double p : params_->prior) writer.WriteF64(p);
    for (double alpha : params_->ability) writer.WriteF64(alpha);
    for (double b : params_->log_easiness) writer.WriteF64(b);
  }
  return writer.Finish();
}

absl::Status GladModel::Restore(std::string_view serialized) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, kMethod);
  if (!has_params.ok()) return has_params.status();
  std::optional<GladParameters> params;
  if (*has_params) {
    absl::StatusOr<GladParameters> parsed =
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
