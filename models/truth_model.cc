#include "models/truth_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verity::models {

absl::Status ValidateTruthModelOptions(const TruthModelOptions& options) {
  // Written as !(x > 0) so that NaN is rejected too.
  if (!(options.confusion_smoothing > 0) ||
      !std::isfinite(options.confusion_smoothing)) {
    return absl::InvalidArgumentError(
        absl::StrCat("confusion_smoothing must be finite and > 0, got ",
                     options.confusion_smoothing));
  }
  if (!(options.population_smoothing >= 0) ||
      !std::isfinite(options.population_smoothing)) {
    return absl::InvalidArgumentError(
        absl::StrCat("population_smoothing must be finite and >= 0, got ",
                     options.population_smoothing));
  }
  if (!(options.prior_smoothing > 0) ||
      !std::isfinite(options.prior_smoothing)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prior_smoothing must be finite and > 0, got ",
                     options.prior_smoothing));
  }
  if (!(options.vote_smoothing > 0) || !std::isfinite(options.vote_smoothing)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vote_smoothing must be finite and > 0, got ", options.vote_smoothing));
  }
  if (options.max_iterations < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_iterations must be >= 1, got ", options.max_iterations));
  }
  if (!(options.tolerance >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tolerance must be >= 0, got ", options.tolerance));
  }
  if (!(options.population_diagonal_prior > 0) ||
      !std::isfinite(options.population_diagonal_prior)) {
    return absl::InvalidArgumentError(
        absl::StrCat("population_diagonal_prior must be finite and > 0, got ",
                     options.population_diagonal_prior));
  }
  if (!(options.incremental_refit_max_fraction >= 0 &&
        options.incremental_refit_max_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("incremental_refit_max_fraction must be in [0, 1], got ",
                     options.incremental_refit_max_fraction));
  }
  if (options.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 1, got ", options.num_threads));
  }
  if (!std::isfinite(options.glad_ability_prior_mean)) {
    return absl::InvalidArgumentError(
        absl::StrCat("glad_ability_prior_mean must be finite, got ",
                     options.glad_ability_prior_mean));
  }
  if (!(options.glad_ability_prior_stddev > 0) ||
      !std::isfinite(options.glad_ability_prior_stddev)) {
    return absl::InvalidArgumentError(
        absl::StrCat("glad_ability_prior_stddev must be finite and > 0, got ",
                     options.glad_ability_prior_stddev));
  }
  // exp(mean) must stay a moderate positive number.
  if (!(std::abs(options.glad_log_easiness_prior_mean) <= 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("glad_log_easiness_prior_mean must be in [-20, 20], got ",
                     options.glad_log_easiness_prior_mean));
  }
  if (!(options.glad_log_easiness_prior_stddev > 0) ||
      !std::isfinite(options.glad_log_easiness_prior_stddev)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "glad_log_easiness_prior_stddev must be finite and > 0, got ",
        options.glad_log_easiness_prior_stddev));
  }
  if (options.calibration != "auto" && options.calibration != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration must be auto or none, got \"", options.calibration, "\""));
  }
  const TruthModelOptions::Neural& n = options.neural;
  if (n.embedding_dim < 1 || n.embedding_dim > 1024 || n.hidden_units < 1 || n.hidden_units > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.embedding_dim must be in [1, 1024] and neural.hidden_units in [1, 4096], got ",
        n.embedding_dim, " and ", n.hidden_units));
  }
  if (!(n.learning_rate > 0) || !std::isfinite(n.learning_rate) || n.batch_size < 0 || n.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.learning_rate must be finite and > 0, neural.batch_size >= 0 (0: by device) and "
        "neural.steps >= 0, "
        "got ", n.learning_rate, ", ", n.batch_size, ", ", n.steps));
  }
  if (!(n.featureless_learning_rate > 0) || !std::isfinite(n.featureless_learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.featureless_learning_rate must be finite and > 0, got ", n.featureless_learning_rate));
  }
  if (n.feature_width < 1 || n.feature_width > 1024 || n.feature_layers < 1 || n.feature_layers > 8 ||
      !(n.feature_dropout >= 0 && n.feature_dropout < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.feature_width must be in [1, 1024], neural.feature_layers in [1, 8] and "
        "neural.feature_dropout in [0, 1), got ", n.feature_width, ", ", n.feature_layers, " and ",
        n.feature_dropout));
  }
  if (!(n.weight_decay >= 0) || !std::isfinite(n.weight_decay) ||
      !(std::max(n.learning_rate, n.featureless_learning_rate) * n.weight_decay < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.weight_decay must be finite, >= 0 and below 1 / max(neural.learning_rate, "
        "neural.featureless_learning_rate), got ",
        n.weight_decay));
  }
  if (!(n.heldout_label_fraction >= 0 && n.heldout_label_fraction <= 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.heldout_label_fraction must be in [0, 0.5], got ", n.heldout_label_fraction));
  }
  for (const auto& [name, lambda] : {std::pair<const char*, double>{"trace_lambda", n.trace_lambda},
                                     {"conal_lambda", n.conal_lambda},
                                     {"featureless_conal_lambda", n.featureless_conal_lambda}}) {
    if (!(lambda >= 0) || !std::isfinite(lambda)) {
      return absl::InvalidArgumentError(
          absl::StrCat("neural.", name, " must be finite and >= 0, got ", lambda));
    }
  }
  if (n.crowdlayer_variant != "mw" && n.crowdlayer_variant != "vw" && n.crowdlayer_variant != "vb" &&
      n.crowdlayer_variant != "vw+b") {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.crowdlayer_variant must be mw, vw, vb or vw+b, got \"", n.crowdlayer_variant, "\""));
  }
  if (n.cmm_groups < 1 || n.cmm_groups > 64 || n.em_iterations < 1 || n.lia_latent_dim < 1 ||
      n.lia_latent_dim > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.cmm_groups must be in [1, 64], neural.em_iterations >= 1 and "
        "neural.lia_latent_dim in [1, 64], got ", n.cmm_groups, ", ", n.em_iterations, ", ",
        n.lia_latent_dim));
  }
  if (n.featureless_lia_latent_dim < 1 || n.featureless_lia_latent_dim > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.featureless_lia_latent_dim must be in [1, 64], got ", n.featureless_lia_latent_dim));
  }
  if (n.cmm_setting != "global" && n.cmm_setting != "individual") {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.cmm_setting must be global or individual, got \"", n.cmm_setting, "\""));
  }
  if (n.lia_max_steps < 0 || !(n.lia_tolerance >= 0) || !std::isfinite(n.lia_tolerance)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neural.lia_max_steps must be >= 0 and neural.lia_tolerance finite and >= 0, got ",
        n.lia_max_steps, " and ", n.lia_tolerance));
  }
  if (!(n.ds_start_fraction >= 0 && n.ds_start_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("neural.ds_start_fraction must be in [0, 1], got ", n.ds_start_fraction));
  }
  return absl::OkStatus();
}

std::vector<double> TruthModel::PredictLabel(int32_t item,
                                             absl::Span<const AnnotationMatrix::Entry> labels,
                                             int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes());
  std::vector<double> posterior(k);
  ItemPosteriorForItem(item, labels, /*gold_label=*/-1, absl::MakeSpan(posterior));
  const std::vector<double> confusion = ItemAnnotatorConfusion(item, annotator);
  std::vector<double> out(k, 0.0);
  for (size_t t = 0; t < k; ++t) {
    for (size_t l = 0; l < k; ++l) out[l] += posterior[t] * confusion[t * k + l];
  }
  return out;
}

std::vector<double> TruthModel::AnnotatorConfusionDiagonal(int32_t annotator) const {
  const std::vector<double> confusion = AnnotatorConfusion(annotator);
  const size_t k = static_cast<size_t>(num_classes());
  std::vector<double> diagonal(k);
  for (size_t c = 0; c < k; ++c) diagonal[c] = confusion[c * k + c];
  return diagonal;
}

absl::Status ValidateFitInputs(int32_t num_classes,
                               const AnnotationMatrix& data,
                               absl::Span<const int32_t> gold) {
  if (data.num_classes() != num_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.num_classes() = ", data.num_classes(),
                     " but the model has num_classes = ", num_classes));
  }
  if (!gold.empty() && gold.size() != static_cast<size_t>(data.num_items())) {
    return absl::InvalidArgumentError(
        absl::StrCat("gold has ", gold.size(),
                     " entries; want 0 or num_items = ", data.num_items()));
  }
  for (size_t i = 0; i < gold.size(); ++i) {
    if (gold[i] < -1 || gold[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("gold[", i, "] = ", gold[i], " is out of range [-1, ",
                       num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<double> AllPosteriors(const TruthModel& model,
                                  const AnnotationMatrix& data,
                                  absl::Span<const int32_t> gold) {
  assert(data.num_classes() == model.num_classes());
  assert(gold.empty() || gold.size() == static_cast<size_t>(data.num_items()));
  const int32_t k = model.num_classes();
  std::vector<double> posteriors(static_cast<size_t>(data.num_items()) * k);
  for (int32_t i = 0; i < data.num_items(); ++i) {
    model.ItemPosteriorForItem(
        i, data.LabelsOfItem(i), gold.empty() ? -1 : gold[i],
        absl::MakeSpan(posteriors.data() + static_cast<size_t>(i) * k, k));
  }
  return posteriors;
}

}  // namespace verity::models
