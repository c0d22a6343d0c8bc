// NeuralTruthModel: what the LibTorch truth models (lia, crowdlayer, trace_reg, conal, cmm)
// share — the TruthModel interface on top of a CrowdNet.
//
// Model. Item i's true class has the prior h_i = softmax(h(e_i)), where e_i is a learned
// embedding of the item, or, when items carry features (SetItemFeatures), the output of a
// feature encoder of TruthModelOptions::Neural's feature_* depth, width, dropout and batch
// norm (crowd_net.h); annotator a labels it
// through the confusion matrix Q(i, a) (row = true class), whose form is the method's. The
// posterior of an item given its labels is
//     p(k | labels) ∝ h_i[k] · Π_(a, y) Q(i, a)[k, y],
// with gold items clamped to their class. An item created after the fit gets the class prior
// (the mean of h over the fitted items) and an annotator never seen in the fit the method's
// population confusion.
//
// When items carry no features, every item's posterior starts from the class prior, not from
// its own h_i: a learned embedding holds nothing but what the fit drew from the item's own
// labels, so h_i · Π Q would count those labels twice. Measured (issue 21): on 9 of the shared
// datasets the class prior raised the mean accuracy of every neural method (+0.2 to +0.6
// points; product +1.6 to +6.6), and at 5M simulated labels on a GPU it raised crowdlayer from
// 0.914 to 0.974 and conal from 0.853 to 0.913 (trace_reg 0.942 -> 0.938); docs/EVALUATION.md.
// With features, h(x) generalises across items and is the truth model's estimate: it stays.
//
// Fit. The subclass trains its CrowdNet (default: minibatch AMSGrad on the marginal
// likelihood of every label, log Σ_k h_i[k] Q(i, a)[k, y], plus the method's regulariser and
// the cross-entropy of h on gold items); crowdlayer and conal start a cold fit with h anchored
// to Dawid-Skene's posteriors (StartsFromDawidSkene). Without any features, crowdlayer and
// trace_reg train by generalised EM instead (TruthModelOptions::Neural::featureless_em,
// TrainByEm), every method at neural.featureless_learning_rate, and E-steps start items from
// the class prior (EStepClassLogPrior; lia keeps h_i, which measured better for it). Then, on
// the CPU, the base reads every item's prior and the subclass its confusion tables out of the
// network (ExportTables). Queries (ItemPosteriorForItem, AnnotatorConfusion, ...) read those
// tables in plain C++: they never call LibTorch, are thread-safe and cost O(labels · K²). A
// warm start copies the previous network's parameters (rows of new items and annotators keep
// their initialisation) and runs a quarter of the steps. Training runs the network in training
// mode (dropout, batch statistics); every export, E-step and checkpoint reads it in eval mode.
//
// Serialize() stores the network's parameters and buffers (a LibTorch archive) and the sizes;
// Restore() rebuilds the network and re-exports the tables, so a restored model answers
// exactly like the one serialized. Errors of LibTorch never leave this class: they become
// INTERNAL statuses.
//
// Thread safety: as for every TruthModel.
#ifndef VERITY_MODELS_NEURAL_NEURAL_TRUTH_MODEL_H_
#define VERITY_MODELS_NEURAL_NEURAL_TRUTH_MODEL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "models/neural/crowd_net.h"
#include "models/neural/dense_layers.h"
#include "models/neural/flat_amsgrad.h"
#include "models/neural/training_step.h"
#include "models/truth_model.h"

namespace verity::models::neural {

// The labels of a fit as tensors on the training device.
struct LabelTensors {
  int32_t num_items = 0;
  int32_t num_annotators = 0;
  int64_t num_labels = 0;
  torch::Tensor items, annotators, labels;  // int64, num_labels each
  torch::Tensor labels_per_item;            // float, num_items (0 for unlabelled items)
  torch::Tensor gold_items, gold_labels;    // int64; empty when there is no gold
};

// q(true class | labels) of every item (num_items x K, on data's device, gold clamped) under
// Dawid-Skene, fitted by `iterations` EM iterations from the soft majority vote, with the
// confusion counts and the class prior smoothed by `smoothing`: where lia's EM and the other
// models' truth network start (lia.h, TruthModelOptions::Neural::ds_start_fraction).
torch::Tensor DawidSkenePosteriors(const LabelTensors& data, int32_t num_classes, double smoothing,
                                   int iterations);
// The labels a fit with TruthModelOptions::Neural::heldout_label_fraction = `fraction` and seed
// `seed` holds out of training, indexed as data.LabelsOfItem enumerates them item by item: of
// each item with n >= 2 labels, floor(fraction · n + u) chosen at random, u uniform in [0, 1)
// (so fraction · n on average), at most n − 1; none of an item with one label. Deterministic
// given `seed`.
std::vector<bool> HeldOutLabels(const AnnotationMatrix& data, double fraction, uint64_t seed);

// The EM iterations of the Dawid-Skene start (lia's first E-step, and the posteriors the other
// models' truth network starts from: TruthModelOptions::Neural::ds_start_fraction).
inline constexpr int kDawidSkeneStartIterations = 20;

// The stopping rule of a training loop run to convergence: the mean minibatch loss over each
// window of `window` steps is compared with the previous window's, and the loop stops when it
// improved by less than `tolerance` of it (relative; a loss that rose stops it too), or after
// `max_steps` steps. The losses are summed on the device (Add, called inside the loss function:
// capturable in a CUDA graph) and read on the host once per window.
class ConvergenceCheck {
 public:
  ConvergenceCheck(int64_t max_steps, int64_t window, double tolerance,
                   const torch::TensorOptions& options);
  // Starts a new loop (the accumulator keeps its address, as a captured loss needs).
  void Restart();
  // Adds a step's loss (a scalar on the accumulator's device), inside the loss function.
  void Add(const torch::Tensor& loss);
  // Counts a step taken; true when the loop should stop.
  bool StepDone();
  int64_t steps() const { return steps_; }
  // Whether the last loop stopped on the tolerance rather than on max_steps.
  bool converged() const { return converged_; }

 private:
  int64_t max_steps_, window_;
  double tolerance_;
  torch::Tensor sum_;
  int64_t steps_ = 0;
  bool has_previous_ = false, converged_ = false;
  double previous_ = 0;
};

class NeuralTruthModel : public TruthModel {
 public:
  NeuralTruthModel(int32_t num_classes, TruthModelOptions options);

  int32_t num_classes() const override { return num_classes_; }
  bool has_parameters() const override { return net_ != nullptr; }
  std::unique_ptr<TruthModel> Clone() const override;
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                                bool warm_start) final;
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override;
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label, absl::Span<double> out) const override;
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::vector<double> ItemAnnotatorConfusion(int32_t item, int32_t annotator) const override;
  // Conservatively true for every neural model: lia's and conal's confusions depend on the
  // item, and ItemAnnotatorConfusion is exactly the factor ItemLogJoint multiplies in.
  bool ConfusionsDependOnItem() const override { return true; }
  // lia and conal: a row of the annotator encoder's output, exported after each fit.
  std::vector<float> AnnotatorEmbedding(int32_t annotator) const override;
  // An annotator outside the fit, given features: the features standardised as the fit's were,
  // through the exported annotator encoder (dense_layers.h), then the subclass's
  // ConfusionFromAnnotatorEmbedding. Empty as truth_model.h says, and for models fitted before
  // the standardisation was stored with the parameters (until their next fit).
  std::vector<double> AnnotatorConfusionFromFeatures(int32_t annotator,
                                                     absl::Span<const float> features) const override;
  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;
  // Checks the blob's item and annotator counts and feature sizes against `bounds` before
  // sizing any network from them.
  absl::Status Restore(std::string_view serialized, const RestoreBounds& bounds) override;
  // Standardises each feature (zero mean, unit variance over the given rows) and keeps them for
  // the next Fit; dim 0 goes back to learned item embeddings.
  absl::Status SetItemFeatures(int32_t dim, std::vector<float> features) override;
  // The same for annotators, used by the models that embed annotators (lia, conal).
  absl::Status SetAnnotatorFeatures(int32_t dim, std::vector<float> features) override;

  // The truth network's prior h_i of fitted item `item` (K probabilities; the class prior for
  // any other id). Without item features, posteriors start from the class prior instead (see
  // the file comment); crowdlayer's typical classifier outputs are built from these.
  std::vector<double> ItemPrior(int32_t item) const;
  // Calls `observer` every `every` optimiser steps of each later Fit (after the step, with its
  // count), with the network being trained in eval mode on the training device, gradients off;
  // training resumes in training mode afterwards. For model selection and early stopping
  // outside the model (models/neural/feature_eval): the observer may read the network (e.g.
  // CrowdNet::LogPrior of held-out items) but must not change it. every <= 0 or an empty
  // observer removes it. Clone does not copy it.
  using CheckpointObserver = std::function<void(int64_t step, CrowdNet& net)>;
  void SetCheckpointObserver(int64_t every, CheckpointObserver observer);

  // The optimiser step (counted as FitReport::training_steps) whose parameters the last fit
  // kept by early stopping on held-out labels (TruthModelOptions::Neural::
  // heldout_label_fraction); -1 when it held no label out.
  int64_t selected_step() const { return selected_step_; }

  // Items and annotators of the last fit (0 before).
  int32_t fitted_items() const { return fitted_items_; }
  int32_t fitted_annotators() const { return fitted_annotators_; }

 protected:
  // The options the networks are built with: those given, except that with item features
  // neural.feature_width replaces neural.embedding_dim and neural.hidden_units.
  const TruthModelOptions& options() const { return net_options_; }
  // Dimension of the item features the networks are built for (0: learned embeddings).
  int64_t item_feature_dim() const { return item_feature_dim_; }
  int64_t annotator_feature_dim() const { return annotator_feature_dim_; }

  // A network for this many items and annotators, freshly initialised (seeded by Fit).
  virtual std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const = 0;
  // An empty model of the same method and options (for Clone).
  virtual std::unique_ptr<NeuralTruthModel> NewEmpty() const = 0;
  // Trains `net` (on data's device, initialised or warm-started). Returns the iterations to
  // report (epochs, or EM iterations). Default: TrainMarginal(StepsForFit(...)).
  virtual int Train(CrowdNet& net, const LabelTensors& data, bool warm_start);
  // Whether a cold fit first trains with the truth network anchored to Dawid-Skene's posteriors
  // (TruthModelOptions::Neural::ds_start_fraction): crowdlayer and conal. lia starts its EM
  // from the same posteriors instead (lia.h); cmm from K-means (cmm.h); trace_reg as its paper
  // does, which measured better for it (trace_reg.h).
  virtual bool StartsFromDawidSkene() const { return false; }
  // Whether TrainMarginal trains by EM when items carry no features and neural.featureless_em
  // is set (truth_model.h): crowdlayer and trace_reg (with its confusions as logits:
  // trace_reg.h). conal keeps the paper's loss, which measured better for it
  // (docs/EVALUATION.md, "Generalised EM without features"): its per-item mix of the common
  // and the individual confusions, free without features, lets EM fit each item's own labels.
  virtual bool TrainsByEmWithoutFeatures() const { return false; }
  // Whether a fit of this model trains by EM: no item features, neural.featureless_em and
  // TrainsByEmWithoutFeatures(). Known before the net is built (MakeNet may depend on it).
  bool TrainsByEm() const;
  // Reads the tables LogConfusion needs from `net` (on the CPU, in eval mode).
  virtual void ExportTables(CrowdNet& net) = 0;
  // Writes log Q(item, annotator) (K x K, row-major) into `out`. `item` outside
  // [0, fitted_items()) means an item unknown to the fit, `annotator` outside
  // [0, fitted_annotators()) an unknown annotator (the population confusion).
  virtual void LogConfusion(int32_t item, int32_t annotator, double* out) const = 0;

  // log p(true class, labels) of one item (K values into `out`): by default its log prior
  // plus Σ_labels log Q(item, a)[·, y]. cmm overrides it (its groups couple an item's labels).
  virtual void ItemLogJoint(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            double* out) const;

  // Minibatch AMSGrad on the marginal likelihood of the labels (see the file comment) for
  // about `steps` steps (whole epochs, at least one); for items without features and
  // neural.featureless_em, TrainByEm instead. Returns the epochs run.
  int TrainMarginal(CrowdNet& net, const LabelTensors& data, int64_t steps);
  // Generalised EM for items without features (TruthModelOptions::Neural::featureless_em):
  // whole epochs of AMSGrad steps on the expected complete log-likelihood given q, with an
  // E-step before the first and then every epochs / kFeaturelessEmSteps epochs (at least one).
  // Returns the epochs run.
  int TrainByEm(CrowdNet& net, const LabelTensors& data, int64_t steps);
  // The same loss, step by step until ConvergenceCheck(max_steps, window, tolerance) stops it.
  // Returns the steps run.
  int64_t TrainMarginalToConvergence(CrowdNet& net, const LabelTensors& data, int64_t max_steps,
                                     int64_t window, double tolerance);
  // Steps of a fit: options.neural.steps, or about 3,000 scaled to whole epochs (2 to 200; on
  // CUDA at least kCudaMinEpochs); a quarter of that when warm-starting.
  int64_t StepsForFit(int64_t num_labels, bool warm_start) const;
  // The minibatch size and learning rate of the fit in progress (truth_model.h: by device
  // when options.neural.batch_size is 0, the rate scaled by the square-root rule).
  int64_t batch_size() const { return batch_size_; }
  double learning_rate() const { return learning_rate_; }
  // An AMSGrad optimiser over `net`'s parameters with the configured learning rate (see
  // flat_amsgrad.h: it moves them into one buffer; `net` must stay on its device meanwhile).
  // It keeps its step count on the device when training steps can be CUDA graphs.
  std::unique_ptr<FlatAmsGrad> MakeOptimizer(CrowdNet& net) const;
  // The step of a training loop over `optimizer` (declared after it, so destroyed first) for
  // batches of `batch_size` rows, whose loss `loss` computes under training_step.h's contract.
  std::unique_ptr<TrainingStep> MakeTrainingStep(FlatAmsGrad& optimizer,
                                                 TrainingStep::LossFunction loss,
                                                 int64_t batch_size) const;
  // Runs `step` on `rows`, counted in the fit's FitReport::training_steps, then restores the
  // network's constraints (CrowdNet::AfterOptimizerStep), applies the weight decay, and scores
  // the held-out labels and calls the checkpoint observer when due. Every training loop steps
  // through here.
  void TakeStep(TrainingStep& step, const torch::Tensor& rows);
  // `loss` plus the cross-entropy of the prior on the gold items (`loss` itself without gold).
  static torch::Tensor WithGoldLoss(torch::Tensor loss, CrowdNet& net, const LabelTensors& data);
  // The Dawid-Skene start: `steps` AMSGrad steps of the marginal-likelihood loss (as
  // TrainMarginal's) plus the cross-entropy of the prior h_i against q_i (num_items x K, on
  // data's device), which anchors h to q while the annotators' layers learn their confusions
  // against it, as an M-step of Dawid-Skene would. Without the anchor, h drifts to the majority
  // vote before the layers have learnt which annotators to discount.
  void StartFromPosteriors(CrowdNet& net, const LabelTensors& data, const torch::Tensor& q,
                           int64_t steps);
  // Counts the time since `since` (device work waited for) as the fit's one-off initialisation
  // (FitReport::initialisation_seconds). Called by a Train that starts with such work.
  void CountAsInitialisation(std::chrono::steady_clock::time_point since);
  // The prior an E-step should start every item from when items carry no features: the class
  // log prior log mean_i h_i over the labelled items (K); served posteriors start from a class
  // prior too (the mean over every fitted item), see the file comment. h_i, fitted to the
  // item's own posterior, would count its labels again. Undefined with features, where each
  // item starts from its own h(x).
  torch::Tensor EStepClassLogPrior(CrowdNet& net, const LabelTensors& data) const;
  // log q(true class | labels) of every item (num_items x K), gold clamped: the E-step. Each
  // item's prior is the network's h_i, or `class_log_prior` (K) for every item when given.
  static torch::Tensor ItemLogPosteriors(CrowdNet& net, const LabelTensors& data,
                                         int32_t num_classes,
                                         const torch::Tensor& class_log_prior = torch::Tensor());

  // Copies `features` (rows of `dim`) into `encoder` for `num_rows` rows; nothing when dim is 0.
  static void LoadFeatures(RowEncoder& encoder, int64_t dim, const std::vector<float>& features,
                           int32_t num_rows);

  // The confusion (K x K, row-major, rows summing to 1) of an annotator whose annotator-encoder
  // output is `embedding`, on the mean item; empty when the method has no competence network
  // over the embedding (the default: every method but lia).
  virtual std::vector<double> ConfusionFromAnnotatorEmbedding(absl::Span<const double> embedding) const {
    (void)embedding;
    return {};
  }

  // Log prior of fitted item `item`, or the class log prior for any other id.
  const double* LogPriorOf(int32_t item) const;
  // The prior an item's posterior starts from: LogPriorOf(item) when items carry features,
  // else the class log prior (see the file comment).
  const double* PosteriorLogPriorOf(int32_t item) const;

 private:
  // Sets batch_size_, learning_rate_ and on_cuda_ for a fit on `device` of a network that reads
  // item or annotator `features` (learning_rate) or none (featureless_learning_rate).
  void SetTrainingSchedule(const torch::Device& device, bool features);
  // Reads the priors and the subclass's tables out of net_ (which must be on the CPU).
  void ExportAll();
  // MakeNet, with the item encoder rebuilt to the feature_* options when items have features.
  std::shared_ptr<CrowdNet> BuildNet(int32_t num_items, int32_t num_annotators) const;
  // Sets item_feature_dim_ and the net_options_ that depend on it.
  void SetItemFeatureDim(int64_t dim);

  int32_t num_classes_;
  TruthModelOptions options_;
  TruthModelOptions net_options_;  // see options()
  std::shared_ptr<CrowdNet> net_;  // on the CPU between fits; null before the first fit
  int32_t fitted_items_ = 0;
  int32_t fitted_annotators_ = 0;
  int64_t steps_taken_ = 0;  // optimiser steps of the fit in progress (TakeStep)
  // Of the fit in progress (SetTrainingSchedule).
  int64_t batch_size_ = TruthModelOptions::Neural::kCpuBatchSize;
  double learning_rate_ = 1e-3;
  bool on_cuda_ = false;
  torch::DeviceIndex device_index_ = -1;  // the CUDA device of the fit, when on_cuda_
  double initialisation_seconds_ = 0;     // CountAsInitialisation's sum in the fit in progress
  CrowdNet* training_net_ = nullptr;        // the network of the fit in progress
  std::vector<torch::Tensor> decayed_;      // its weights under neural.weight_decay
  int64_t checkpoint_every_ = 0;
  CheckpointObserver checkpoint_observer_;
  // Early stopping on held-out labels in the fit in progress (heldout_label_fraction > 0).
  struct HeldOutSelection {
    LabelTensors labels;  // the held-out labels, on the training device
    int64_t every = 1;    // optimiser steps between checkpoints
    double best = -std::numeric_limits<double>::infinity();  // mean log-likelihood per label
    int64_t best_step = -1;
    std::vector<torch::Tensor> best_state;  // the parameters, then the buffers, at best_step
  };
  // Scores training_net_ (in eval mode) on the held-out labels and copies its parameters and
  // buffers into selection_ when the score is the best so far.
  void SelectionCheckpoint();
  std::unique_ptr<HeldOutSelection> selection_;
  int64_t selected_step_ = -1;
  std::vector<double> item_log_prior_;   // fitted_items_ x K
  std::vector<double> class_log_prior_;  // K
  int64_t item_feature_dim_ = 0;
  std::vector<float> item_features_;     // standardised, rows of item_feature_dim_
  int64_t annotator_feature_dim_ = 0;
  std::vector<float> annotator_features_;
  // The per-column mean and scale (1 / standard deviation) SetAnnotatorFeatures standardised
  // with, and those of the features the current network was fitted on: stored with the
  // parameters (Serialize), so that a new annotator's raw features can be standardised alike.
  std::vector<double> annotator_feature_mean_, annotator_feature_scale_;
  std::vector<double> fitted_feature_mean_, fitted_feature_scale_;
  // The annotator encoder as plain layers (feature mode only; exported with the tables).
  std::vector<DenseLayer> annotator_encoder_;
  // The annotator encoder's output for each fitted annotator (rows of annotator_embedding_dim_);
  // empty for models without an annotator encoder.
  int64_t annotator_embedding_dim_ = 0;
  std::vector<float> annotator_embeddings_;
};

// The base of each concrete neural model: Create() (argument checks, then the model) and
// NewEmpty(), written once. A model derives as `class X : public NeuralModel<X>` and declares
// `friend class NeuralModel<X>;` so that these can call its protected constructor.
template <typename Model>
class NeuralModel : public NeuralTruthModel {
 public:
  // INVALID_ARGUMENT for fewer than 2 classes or options out of range.
  static absl::StatusOr<std::unique_ptr<Model>> Create(int32_t num_classes,
                                                       const TruthModelOptions& options) {
    if (num_classes < 2) return absl::InvalidArgumentError("num_classes must be >= 2");
    if (absl::Status s = ValidateTruthModelOptions(options); !s.ok()) return s;
    return std::unique_ptr<Model>(new Model(num_classes, options));
  }

 protected:
  using NeuralTruthModel::NeuralTruthModel;
  std::unique_ptr<NeuralTruthModel> NewEmpty() const override {
    return std::unique_ptr<NeuralTruthModel>(new Model(num_classes(), options()));
  }
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_NEURAL_TRUTH_MODEL_H_
