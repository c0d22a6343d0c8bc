// TruthModel: the one interface of every truth-inference method (mv, ds, and
// later one_coin, glad and the neural models).
//
// A truth model holds parameters learned from crowd labels: at least a class
// prior and, for every annotator, a predicted confusion matrix (row = true
// class, column = given label). From those parameters it computes, for any
// item, the posterior distribution over the item's true class given the
// item's labels. The server uses a model in three ways:
//   1. Fit() on a background thread over all labels of a project (usually
//      warm-started from the previous version, on a Clone() of it);
//   2. AllPosteriors() once after a fit, to publish every item's posterior;
//   3. ItemPosteriorForItem() for the items touched by each committed batch,
//      so that a new label is reflected at once, without refitting.
// ItemPosteriorForItem is a pure function of the parameters, of the item's
// dense id and of the *set* of the item's labels (the order in which they are
// passed does not change a single bit of the result), and AllPosteriors is
// ItemPosteriorForItem applied to every item. So the online posteriors always
// equal AllPosteriors(current parameters, current labels) exactly, and a
// restarted server that restores the parameters with Restore() reproduces
// them bit for bit. Most models have no per-item parameters and ignore the
// id (ItemPosteriorForItem is then ItemPosterior); glad uses the fitted
// easiness of the item.
//
// Thread safety: the const methods may be called concurrently from any number
// of threads. Fit() and Restore() mutate the model and must not run
// concurrently with any other call on the same object; to update a model that
// readers can see, Clone() it, Fit() the clone, and publish the clone.
// On error, Fit() and Restore() leave the model unchanged.

#ifndef VERITY_MODELS_TRUTH_MODEL_H_
#define VERITY_MODELS_TRUTH_MODEL_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"

namespace verity::models {

// Hyper-parameters shared by the truth models. Each field says which methods
// read it; a method ignores the others.
struct TruthModelOptions {
  // mv, ds, one_coin: Dirichlet pseudo-count added to every cell of every
  // confusion matrix (and of the pooled population confusion) in each
  // M-step. It keeps every cell strictly positive, so log-space computations
  // never see log(0). Must be > 0. The defaults of this and
  // population_smoothing were picked on the 12 shared datasets
  // (shared/datasets): 0.1 and 2.0 give the best mean ds accuracy of a small
  // grid (0.01 to 1, 0 to 10), though the differences are within a point;
  // 1.0 without shrinkage hurts datasets with few labels per annotator and
  // many classes (music: 0.54 vs 0.78).
  // one_coin reads it as the Beta pseudo-counts of an accuracy: s for a
  // correct label and (K - 1) * s for a wrong one, the symmetric share of a
  // Dirichlet(s) confusion row (see OneCoinModel).
  double confusion_smoothing = 0.1;

  // mv, ds: total pseudo-count per confusion row that shrinks each annotator
  // toward the population confusion (the pooled confusion of all
  // annotators): row k of annotator a is
  //   (n_a[k][l] + confusion_smoothing + population_smoothing * pop[k][l]) /
  //   (n_a[k] + K * confusion_smoothing + population_smoothing).
  // An annotator with few labels thus starts from the crowd's typical
  // behaviour instead of a uniform (uninformative) or a self-confirming
  // confusion; with many labels their own counts dominate. 0 disables the
  // shrinkage (classic Dawid-Skene with additive smoothing). Must be >= 0.
  // one_coin: total pseudo-count that shrinks each annotator's accuracy
  // toward the pooled accuracy of all labels (see OneCoinModel).
  double population_smoothing = 2.0;

  // mv, ds (and one_coin, glad if learn_symmetric_class_prior): Dirichlet
  // pseudo-count added to each class of the class prior. Must be > 0.
  double prior_smoothing = 1.0;

  // ds: extra Dirichlet pseudo-count on the diagonal of every row of the
  // population confusion, the confusion every annotator is shrunk toward
  // (see population_smoothing): the prior belief that annotators are better
  // than chance. ds learns its confusions only from items with at least two
  // labels or with gold, and its class prior from those plus 1/K per other
  // item with labels (dawid_skene.h; one label says nothing about who is right: with
  // one label per item a skewed class prior and annotator bias explain the
  // data equally well, and EM drifted to predicting one class). Without such
  // items this prior alone sets the parameters: every annotator then gets the
  // same better-than-chance confusion and the uniform class prior, and ds
  // gives the majority vote (docs/EVALUATION.md, R = 1). With them, it is a
  // pseudo-count against the pooled counts of all labels and changes little:
  // 0.1 and 1.0 differ by at most 0.4 points of accuracy on the 12 shared
  // datasets at 1, 3 and 5 labels per item and with all labels, 1.0 ahead.
  // Must be finite and > 0.
  double population_diagonal_prior = 1.0;

  // one_coin, glad: whether Fit learns the class prior (as ds does, with
  // prior_smoothing) or keeps it uniform, as Whitehill et al.'s GLAD (a
  // fixed prior) and ZenCrowd do. Off by default: with errors forced to be
  // symmetric, a learned prior absorbs the annotators' class biases and
  // collapses onto one class on biased crowds. Measured on shared/datasets
  // (learned vs uniform): relevance one_coin 0.19 vs 0.48, glad 0.27 vs
  // 0.52; bluebirds one_coin 0.58, glad 0.59 vs 0.72; product glad 0.896 vs
  // 0.928; no dataset gains more than 0.002 from learning it.
  bool learn_symmetric_class_prior = false;

  // mv (and the majority-vote initialisation of ds, one_coin and glad, and
  // their posteriors before their first fit): pseudo-count added to each
  // class's vote count before normalising, so that no class gets
  // probability 0 (1 label of class 0 out of K = 2 gives
  // (1 + 0.01) / (1 + 0.02) = 0.990). Must be > 0.
  double vote_smoothing = 0.01;

  // ds, one_coin, glad: the most EM iterations of one Fit; an iteration is
  // an E-step under the current parameters followed by an M-step (the
  // majority-vote initialisation of a cold start is not counted). Must be
  // >= 1.
  int max_iterations = 100;

  // ds, one_coin, glad: the fit has converged when the relative change of
  // the marginal log-likelihood between two consecutive E-steps,
  // |ΔLL| / |LL|, is below this. Must be >= 0.
  double tolerance = 1e-6;

  // ds: a warm Fit of a model that kept the state of its last fit refits
  // incrementally: it E-steps only the items whose labels or gold changed
  // (and new items), the others keep their responsibilities, as long as the
  // labels of those items, added to the labels refitted incrementally since
  // the last full EM, are at most this fraction of all labels; beyond it, or
  // after DawidSkeneModel::kMaxIncrementalRefits incremental refits in a row,
  // the fit runs full EM passes over all labels. 0 makes every fit a full one.
  // Must be in [0, 1]. At 0.2, the costliest incremental refit (19 % new
  // labels) takes 11-15 % of a cold fit against 30-44 % for full EM, with the
  // same accuracy (docs/PERFORMANCE.md); see DawidSkeneModel.
  double incremental_refit_max_fraction = 0.2;

  // mv, ds, one_coin, glad: threads used by one Fit (each pass over the
  // labels is split by items, glad's ability step by annotators). The fitted
  // parameters are bit-identical for the same data and the same num_threads;
  // different thread counts may differ in the last bits. Must be >= 1.
  int num_threads = 1;

  // glad: Gaussian prior of an annotator's ability alpha_a,
  // N(glad_ability_prior_mean, glad_ability_prior_stddev^2), as in Whitehill
  // et al. (2009). A mean of 1 says that an annotator is a priori better
  // than chance (p(correct) = sigmoid(1) = 0.73 on an item of prior
  // easiness); the prior keeps the ability of an annotator with few labels
  // finite and near it. Mean finite; stddev finite and > 0.
  double glad_ability_prior_mean = 1.0;
  double glad_ability_prior_stddev = 1.0;

  // glad: Gaussian prior of an item's log easiness b_i = log beta_i
  // (beta_i = 1 / difficulty in Whitehill et al.; beta_i -> 0 makes every
  // label of the item a coin toss), N(glad_log_easiness_prior_mean,
  // glad_log_easiness_prior_stddev^2). Items without labels and items
  // created after the fit get the prior mean. Mean in [-20, 20]; stddev
  // finite and > 0.
  double glad_log_easiness_prior_mean = 0.0;
  double glad_log_easiness_prior_stddev = 1.0;

  // Every method: the map from the fitted model's posteriors to the served
  // ones (models/calibrated_truth_model.h, issue 18). "auto" (the default)
  // serves CalibratedTruthModel: after each Fit, a posterior temperature
  // fitted on the project's gold items when it has at least
  // CalibratedTruthModel::kMinGoldItems of them with labels, else on the
  // crowd labels (leave-one-label-out likelihood); it keeps every MAP label
  // and makes the served confidence (and so confidence_target) mean what it
  // says. "none" serves the model's own posteriors (the behaviour before
  // issue 18).
  std::string calibration = "auto";

  // The neural models (lia, crowdlayer, trace_reg, conal, cmm; models/neural/).
  struct Neural {
    // "cpu", "cuda", "cuda:N" or "auto" (CUDA when available, else CPU). A CUDA device asked
    // for and not available falls back to the CPU with a log line.
    std::string device = "auto";
    // Seed of parameter initialisation and minibatch order: a fit is deterministic on the CPU
    // given the seed, the data and num_threads.
    uint64_t seed = 1;
    // Size of the learned item and annotator embeddings, and of hidden layers.
    int embedding_dim = 16;
    int hidden_units = 16;
    // The truth network of a project with item features, h(x) = head(encoder(x)): the encoder
    // is feature_layers layers of feature_width units, each Linear, then BatchNorm when
    // feature_batch_norm, then ReLU, then dropout of rate feature_dropout (in training only);
    // the head is the method's (two layers for crowdlayer, trace_reg, conal, cmm; four for lia)
    // and feature_width replaces embedding_dim and hidden_units in it and in every other network
    // of the model. Projects without item features ignore these four options: their items keep
    // learned embeddings of embedding_dim and the networks hidden_units. The defaults (one
    // 16-unit layer, no dropout) are the network these options replaced, so that versions
    // stored before them restore and lia keeps its measured behaviour; the papers' capacity
    // (128 units, 50% dropout) is what models/neural/feature_eval's grid measured
    // (docs/EVALUATION.md) and is set per fit. Width in [1, 1024], layers in [1, 8], dropout
    // in [0, 1).
    int feature_width = 16;
    int feature_layers = 1;
    double feature_dropout = 0.0;
    bool feature_batch_norm = false;
    // Decoupled weight decay (as AdamW) of the truth network: after every optimiser step, each
    // weight matrix of the item encoder and of the method's truth head ("classifier" or
    // "truth") is multiplied by 1 − r · weight_decay, r the step's learning rate (the
    // square-root rule's, below; at most 0 is kept). Biases, batch-norm
    // parameters and the annotator side are not decayed. Finite, >= 0 and
    // max(learning_rate, featureless_learning_rate) · weight_decay < 1.
    double weight_decay = 0.0;
    // AMSGrad (Adam) learning rate at the reference minibatch of 1,024 labels. A fit with
    // batches of B labels uses learning_rate × sqrt(B / 1,024) (the square-root rule for
    // adaptive optimisers: the gradient's noise falls as 1/sqrt(B), so the step may grow as
    // sqrt(B) for the same noise per label seen).
    double learning_rate = 1e-3;
    // The same for fits where neither items nor annotators carry features (every input a
    // learned embedding), under the same square-root rule; learning_rate is for networks over
    // features (lia's competence network over annotator features saturated at 1e-2:
    // served_fields_test). Measured on the 12 shared datasets (docs/EVALUATION.md,
    // "Generalised EM without features"): at 1e-3 a fit of up to 200 epochs moves the
    // annotators' confusion logits by a few tenths at most on small projects (wordsim: 250
    // steps), so they stay near their start; 1e-2 lets them reach Dawid-Skene's.
    double featureless_learning_rate = 1e-2;
    // Minibatch size in labels; 0 (the default) = by device: 1,024 on the CPU (the papers'
    // size), kCudaBatchSize on CUDA, where a batch of 1,024 leaves the GPU mostly idle.
    int batch_size = 0;
    static constexpr int kCpuBatchSize = 1024;
    static constexpr int kCudaBatchSize = 8192;
    // Optimiser steps of a fit from scratch (lia: per EM iteration); 0 = scale with the data:
    // enough epochs for about 3,000 steps, between 2 and 200 epochs (on CUDA at least
    // kCudaMinEpochs: an epoch there costs a fraction of a second at 5M labels). A warm start
    // runs a quarter of them.
    int steps = 0;
    static constexpr int kCudaMinEpochs = 20;
    // trace_reg: λ, the weight of the trace summed over the annotators' confusion matrices
    // (Tanno et al.; constant over the fit, see models/neural/trace_reg.h).
    double trace_lambda = 0.01;
    // conal: λ of the regulariser −λ mean_r ||W_g − W_r||_2 (Chu et al., as the authors' code:
    // the distance between the common and each individual confusion is rewarded; taken between
    // row-centred logits, and a mean where the paper sums, see models/neural/conal.h). 5.9e-4 is
    // the paper's 1e-5 on its sum over LabelMe's 59 annotators. For networks over features.
    double conal_lambda = 5.9e-4;
    // conal's λ where neither items nor annotators carry features, the fits that train at
    // featureless_learning_rate (the same rule chooses both). The reward is unbounded, so its
    // drift grows with the step size: at ten times the rate, a tenth of the λ. Measured on the
    // 12 shared datasets (docs/EVALUATION.md, "conal's reward at the featureless rate"):
    // within 1.5 points of Dawid-Skene on 10 of them against 7 at conal_lambda.
    double featureless_conal_lambda = 5.9e-5;
    // crowdlayer: "mw" (matrix), "vw" (vector), "vb" (bias) or "vw+b".
    std::string crowdlayer_variant = "mw";
    // cmm: number of annotator groups M.
    int cmm_groups = 3;
    // cmm: "global" (each label's group drawn from the crowd's mix α; annotator ids unused in
    // the posteriors) or "individual" (from the annotator's own memberships p(m | a)); the
    // default by measurement on the shared datasets (models/neural/cmm.h, docs/EVALUATION.md).
    std::string cmm_setting = "individual";
    // lia, cmm: EM iterations of a fit from scratch (a warm start runs a third of them).
    int em_iterations = 10;
    // lia: size L of the difficulty and competence tensors (C x C x L). The paper's value is
    // not stated for every dataset; 4 keeps the per-item table at 4 K^2 floats.
    int lia_latent_dim = 4;
    // lia where neither items nor annotators carry features: L of the per-item difficulty and
    // per-annotator competence, then learned embeddings that only the few labels of each item
    // identify. With L = 1, D_i and C_j are K x K each and Q_ij = row-softmax(D_i ⊙ C_j); the
    // larger L gave each item's difficulty room to explain its own labels away (labelme -1.5
    // points below ds at L = 4, -0.7 at L = 1; docs/EVALUATION.md, "lia's latent size without
    // features"). In [1, 64]. A stored net keeps the L it was fitted with (lia.h).
    int featureless_lia_latent_dim = 1;
    // lia: each M-step, and the marginal-likelihood fine-tuning after the last, runs until the
    // mean minibatch loss over a window of 50 steps improves on the previous window's by less
    // than lia_tolerance of it (relative), or for at most a budget of steps: neural.steps /
    // em_iterations when neural.steps is set, else lia_max_steps when it is > 0 (1,000 is the
    // paper's M-step), else (0, the default) the budget scaled with the data, StepsForFit /
    // em_iterations and at least 50. The paper's 1,000 steps overfit the item table to the
    // current E-step on small projects: bluebirds (108 items) fell from 0.867 to 0.576
    // (models/neural/lia.h).
    int lia_max_steps = 0;
    double lia_tolerance = 1e-3;
    // crowdlayer, conal: a cold fit first trains this share of its steps (StepsForFit) with the truth
    // network h anchored to Dawid-Skene's posteriors (the marginal likelihood plus the
    // cross-entropy of h_i against them), so that the annotators' layers learn whom to discount
    // before h can drift to the majority vote. 0 starts from the initialisation, as the paper
    // does. In [0, 1]. Measured (docs/EVALUATION.md, "The Dawid-Skene start"), crowdlayer:
    // relevance 0.362 -> 0.606, labelme 0.732 -> 0.769; product 0.921 -> 0.877; conal:
    // relevance 0.495 -> 0.607, bluebirds 0.806 -> 0.847; wordsim 0.900 -> 0.867.
    double ds_start_fraction = 0.25;
    // Update the learned item and annotator embedding tables sparsely: each step reads and
    // writes only the rows its batch used, with lazy moments (models/neural/sparse_row_amsgrad.h).
    // false updates the whole tables at every step (dense AMSGrad), as before issue 21.
    bool sparse_embeddings = true;
    // Early stopping on held-out crowd labels (issue 17's protocol without gold): each item with
    // two or more labels holds this share of them out of training (stochastically rounded, at
    // most all but one), the held-out labels' mean log-likelihood log p(y | item, annotator) is
    // scored at about kSelectionCheckpoints points of the fit and at its end, and the fit keeps
    // the parameters of the best checkpoint. The posteriors then use every label. 0 trains on
    // every label and keeps the last step. In [0, 0.5].
    double heldout_label_fraction = 0.0;
    // crowdlayer and trace_reg on projects without item features (the other methods keep
    // their losses: neural_truth_model.h, TrainsByEmWithoutFeatures): train the crowd layers
    // by generalised EM, as Dawid-Skene does, instead of the paper's per-label marginal
    // likelihood. Without features the truth network is a free table h_i per item, and the
    // per-label marginal log Σ_k h_i[k] Q_a[k, y] is maximised by the majority vote (h_i = the
    // item's label frequencies, every Q_a the identity), so the fit drifts there on projects
    // with few labels per item (product: crowdlayer 0.762, trace_reg 0.906, against
    // Dawid-Skene's 0.938). EM instead alternates an E-step,
    // q_i ∝ π · Π_(a, y) Q(i, a)[·, y] (π the class prior: the model the posteriors are served
    // from), with gradient steps on the expected complete log-likelihood
    // Σ_labels Σ_k q_i[k] log Q(i, a)[k, y] (plus the method's regulariser) and the
    // cross-entropy of h_i against q_i; π = the mean q over the labelled items. An E-step before
    // the first epoch, then every epochs / kFeaturelessEmSteps epochs. false: the paper's loss.
    bool featureless_em = true;
    static constexpr int kFeaturelessEmSteps = 20;
    static constexpr int kSelectionCheckpoints = 30;
    // On a CUDA device, replay each training step from a CUDA graph (training_step.h) when the
    // build supports it; false runs every step eagerly.
    bool cuda_graphs = true;
  };
  Neural neural;
};

// Returns INVALID_ARGUMENT naming the first option out of its documented
// range.
absl::Status ValidateTruthModelOptions(const TruthModelOptions& options);

struct FitReport {
  // EM iterations run (see TruthModelOptions::max_iterations); mv runs 1.
  int iterations = 0;
  // Marginal log-likelihood of the labels under the parameters of the last
  // E-step: the sum over labelled items without gold of log p(labels of i)
  // plus, over labelled gold items, log p(gold class, labels of i). A gold item
  // without labels adds log p(gold class) in mv, ds, one_coin and glad (and
  // auto when it serves one of them), nothing in the other methods. So it is
  // zero for data without labels, but for gold items in those four. Always
  // zero for the methods that define no likelihood (wawa, zero_based_skill,
  // kos, bwa, mmsr).
  double log_likelihood = 0.0;
  // Whether the tolerance was met before max_iterations (always true for mv).
  bool converged = false;
  // Wall time of the fit.
  double seconds = 0.0;
  // Neural models only (0 for the classical ones): the part of `seconds` spent training on the
  // device (the optimiser loop and E-steps, device work waited for), and the optimiser steps it
  // took. Export of the tables and the log-likelihood pass on the CPU are outside it.
  double training_seconds = 0.0;
  int64_t training_steps = 0;
  // Neural models only: the part of `training_seconds` a cold fit spends once, before its
  // training passes: the Dawid-Skene posteriors it starts from (lia, crowdlayer) and cmm's
  // K-means restarts. What is left of training_seconds is the passes themselves.
  double initialisation_seconds = 0.0;
};

class TruthModel {
 public:
  virtual ~TruthModel() = default;

  // The method's name as in the project configuration: "mv", "ds",
  // "one_coin", "glad".
  virtual std::string_view method() const = 0;
  virtual int32_t num_classes() const = 0;

  // Whether the model holds parameters from a Fit or a Restore. An empty
  // model gives the soft majority vote as ItemPosterior and uniform
  // confusion matrices.
  virtual bool has_parameters() const = 0;

  // A deep copy, parameters and options included.
  virtual std::unique_ptr<TruthModel> Clone() const = 0;

  // Fits on `data`. `gold` is empty (no gold) or has data.num_items()
  // entries: gold[i] is the known class of item i, or -1. Gold items are
  // clamped as observed truth in every E-step. If `warm_start` is true and
  // the model has parameters, EM starts from them (annotators beyond the old
  // parameters start with the population confusion); otherwise the first
  // E-step is the soft majority vote. Returns INVALID_ARGUMENT if
  // data.num_classes() != num_classes(), if gold has another size, or if a
  // gold class is out of [-1, num_classes()).
  virtual absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data,
                                        absl::Span<const int32_t> gold,
                                        bool warm_start) = 0;

  // Writes into `out` (size num_classes()) the posterior over the true class
  // of one item whose labels are `labels` (Entry::other = annotator id), under
  // the current parameters. An annotator id never seen in the fit (beyond the
  // fitted range, or negative) gets the population confusion. gold_label >= 0
  // gives the one-hot posterior of that class; no labels give the class prior
  // (uniform for mv). Preconditions: out.size() == num_classes(), every label
  // and gold_label < num_classes().
  // For a model with per-item parameters (glad), the posterior of an item
  // whose parameters are unknown: one of prior easiness. Online updates use
  // ItemPosteriorForItem instead.
  virtual void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                             int32_t gold_label,
                             absl::Span<double> out) const = 0;

  // ItemPosterior of the item with dense id `item`, its row in the
  // AnnotationMatrix of the fits. A model with per-item parameters (glad)
  // uses those the last Fit (or the restored parameters) learned for `item`,
  // and the prior ones when `item` was not in that fit (an item created
  // since, or a negative id); the other models ignore `item` (this default
  // calls ItemPosterior). AllPosteriors calls this with each item's row, so
  // a caller that keeps posteriors up to date online must call it, with the
  // same ids, to get exactly AllPosteriors. Same preconditions as
  // ItemPosterior.
  virtual void ItemPosteriorForItem(
      int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
      int32_t gold_label, absl::Span<double> out) const {
    (void)item;
    ItemPosterior(labels, gold_label, out);
  }

  // The predicted confusion matrix of `annotator`, num_classes()^2 values,
  // row-major, row = true class, each row summing to 1. An annotator never
  // seen in the fit gets the population confusion.
  virtual std::vector<double> AnnotatorConfusion(int32_t annotator) const = 0;

  // The diagonal of AnnotatorConfusion(annotator): p(label = k | true class = k),
  // k = 0..num_classes()-1. Models that keep confusions sparsely override it with an O(K)
  // computation; this default takes the diagonal of the full matrix.
  virtual std::vector<double> AnnotatorConfusionDiagonal(int32_t annotator) const;

  // The predicted confusion matrix of `annotator` on item `item` (same layout as
  // AnnotatorConfusion). Models whose confusion depends on the item (glad: item easiness)
  // override it; an item out of the fitted range gets the prior item. Default: the
  // annotator's confusion.
  virtual std::vector<double> ItemAnnotatorConfusion(int32_t item, int32_t annotator) const {
    (void)item;
    return AnnotatorConfusion(annotator);
  }

  // True when ItemAnnotatorConfusion(item, a) may differ from AnnotatorConfusion(a) (glad's item
  // easiness, the neural models' item-dependent confusions). Callers that need every label's
  // confusion (the label-free calibration map) may then not cache one matrix per annotator.
  virtual bool ConfusionsDependOnItem() const { return false; }

  // The predictive distribution of one more label from `annotator` on item `item` whose labels
  // so far are `labels`: num_classes() probabilities summing to 1. Default:
  // sum_k p(k | labels) ItemAnnotatorConfusion(item, annotator)[k][.], with p(k | labels) from
  // ItemPosteriorForItem; right for every model whose labels are independent given the class.
  // Models whose labels depend on each other given the class override it (ebcc: the labels
  // also share the item's subtype). auto scores held-out crowd labels with it.
  virtual std::vector<double> PredictLabel(int32_t item,
                                           absl::Span<const AnnotationMatrix::Entry> labels,
                                           int32_t annotator) const;

  // The learned embedding of `annotator`, for models that learn one (lia and conal: the output
  // of their annotator encoder, a free embedding or a projection of the annotator's features);
  // empty for the other models, before a fit, and for annotators not in the fit.
  virtual std::vector<float> AnnotatorEmbedding(int32_t annotator) const {
    (void)annotator;
    return {};
  }

  // The confusion (AnnotatorConfusion's layout) that the model predicts from an annotator's
  // features, for an annotator its fit did not see: `features` are the annotator's raw
  // annotator_feature_dim values, as given to SetAnnotatorFeatures. lia predicts it with its
  // competence network (lia.h); every other model, an annotator in the fit (AnnotatorConfusion
  // answers for it), features of the wrong size, and a model fitted without annotator
  // features give an empty vector: the caller then serves AnnotatorConfusion, the population
  // confusion.
  virtual std::vector<double> AnnotatorConfusionFromFeatures(int32_t annotator,
                                                             absl::Span<const float> features) const {
    (void)annotator;
    (void)features;
    return {};
  }

  // The difficulty of item `item` for models that learn one (lia; see LiaModel), in [0, 1]: the
  // chance that an annotator of average competence mislabels the item, averaged over its
  // possible true classes. An item not in the fit gets the mean item's. nullopt for the other
  // models and before a fit.
  virtual std::optional<double> ItemDifficulty(int32_t item) const {
    (void)item;
    return std::nullopt;
  }

  // Numeric features of the items, row-major: features.size() / dim rows, row i for item i
  // (items beyond them have none). Models that use features (the neural models: h(x) from the
  // features instead of a learned embedding, so items with features and no labels get a truth
  // estimate) read them at the next Fit; the others ignore them (this default). INVALID_ARGUMENT
  // if dim < 0, the size is not a multiple of dim, or a value is not finite.
  virtual absl::Status SetItemFeatures(int32_t dim, std::vector<float> features) {
    (void)dim;
    (void)features;
    return absl::OkStatus();
  }

  // The same for annotators (lia and conal learn an annotator's embedding from them).
  virtual absl::Status SetAnnotatorFeatures(int32_t dim, std::vector<float> features) {
    (void)dim;
    (void)features;
    return absl::OkStatus();
  }

  // The parameters as a compact, versioned, checksummed binary string.
  virtual std::string Serialize() const = 0;

  // Replaces the parameters by those of Serialize() output. Returns
  // INVALID_ARGUMENT if `serialized` is corrupt, of another method or
  // version, or of another number of classes.
  virtual absl::Status Restore(std::string_view serialized) = 0;

  // The most a restored model may hold: the sizes of the project it serves. A
  // stored blob names its own sizes, and a model that allocates from them
  // (a neural network's embedding tables) must check them against these
  // first, so that a corrupt or forged blob cannot make it allocate more.
  struct RestoreBounds {
    int64_t max_items = std::numeric_limits<int32_t>::max();
    int64_t max_annotators = std::numeric_limits<int32_t>::max();
    int64_t max_item_feature_dim = std::numeric_limits<int32_t>::max();
    int64_t max_annotator_feature_dim = std::numeric_limits<int32_t>::max();
  };
  // Restore, refusing (INVALID_ARGUMENT, the model unchanged) a blob whose
  // sizes exceed `bounds` before allocating anything for them. Models whose
  // allocations are bounded by the blob's own length need no more than
  // Restore(serialized), the default.
  virtual absl::Status Restore(std::string_view serialized, const RestoreBounds& bounds) {
    (void)bounds;
    return Restore(serialized);
  }
};

// Checks the arguments of TruthModel::Fit for a model of `num_classes`
// classes: INVALID_ARGUMENT naming the field if data.num_classes() differs,
// if gold is neither empty nor of size data.num_items(), or if a gold class
// is out of [-1, num_classes).
absl::Status ValidateFitInputs(int32_t num_classes,
                               const AnnotationMatrix& data,
                               absl::Span<const int32_t> gold);

// The posteriors of all items (num_items * num_classes, row-major) under the
// model's current parameters: ItemPosteriorForItem of every item (its row
// index and labels), with gold clamped where gold[i] >= 0 (`gold` empty or
// of size num_items).
// Preconditions: data.num_classes() == model.num_classes(), gold in range.
std::vector<double> AllPosteriors(const TruthModel& model,
                                  const AnnotationMatrix& data,
                                  absl::Span<const int32_t> gold);

}  // namespace verity::models

#endif  // VERITY_MODELS_TRUTH_MODEL_H_
