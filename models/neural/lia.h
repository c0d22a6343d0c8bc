// lia: Platanios et al. (2020), "Learning from Imperfect Annotations". Truth h_θ(x), item
// difficulty d_φ(x) ∈ R^{K×K×L} and annotator competence c_ψ(r) ∈ R^{K×K×L}; the confusion of
// annotator j on item i is Q_ij = row-softmax(Σ_l D_i[·,·,l] C_j[·,·,l]). Items and annotators
// carry no features here, so x and r are learned embeddings (size embedding_dim); h and d are
// 4-layer MLPs with hidden_units units, c is linear (the paper's settings). L is
// lia_latent_dim where items or annotators carry features, featureless_lia_latent_dim (1) where
// neither does: a free embedding per item, identified by the item's few labels alone, gave the
// larger difficulty room to explain those labels away (truth_model.h). A stored net keeps the L
// it was fitted with: LiaNet::load rebuilds the difficulty and competence networks at the
// stored size, and a warm start from a net of another L is a cold fit (its entries would pair
// other (class, label, l) cells).
//
// Fit (EM): the first E-step is Dawid-Skene's posteriors (20 EM iterations from the soft
// majority vote, on the device: DawidSkenePosteriors); each M-step runs
// AMSGrad steps on the expected complete log-likelihood Σ_labels Σ_k q_i[k] (log Q_ij[k, y] +
// log h_i[k] / n_i) (the optimiser's state carries over between EM iterations); each E-step
// sets q_i ∝ h_i Π_j Q_ij[·, y_ij] (gold clamped). After em_iterations iterations, the model
// is fine-tuned on the marginal likelihood. A warm start begins with an E-step under the
// previous parameters and runs a third of the iterations.
//
// Each M-step and the fine-tuning run to convergence, as the paper's (1,000 steps per M-step,
// 10 EM iterations, then the marginal likelihood to convergence): the mean minibatch loss over
// each window of 50 steps is compared with the previous window's, and the phase stops when it
// improved by less than TruthModelOptions::Neural::lia_tolerance of it (relative; default
// 1e-3), or after a budget of steps: neural.steps / em_iterations when neural.steps is set,
// else lia_max_steps when > 0 (1,000 is the paper's M-step), else the budget scaled with the
// data (StepsForFit / em_iterations, at least 50). A phase takes at least 100 steps (two
// windows) unless its budget is smaller.
// Deviations from the paper: the first E-step, which the paper takes from the majority vote
// (symmetry breaking only). Dawid-Skene's posteriors are a better start at the same cost
// (milliseconds): mean of 2 fits without features (docs/EVALUATION.md, "The Dawid-Skene
// start"), majority-vote start -> Dawid-Skene start: bluebirds 0.852 -> 0.889, wordsim
// 0.900 -> 0.933, labelme 0.757 -> 0.771, music 0.744 -> 0.754, product 0.906 -> 0.927,
// possent 0.953 -> 0.958, medical_treat 0.829 -> 0.842. Also: the stopping rule (the paper
// states a step count, not a test); the default budget, scaled with the data rather than the
// paper's 1,000 steps, because M-steps run that long fit the item table to the current E-step
// on small projects (bluebirds, 108 items: 0.867 with the scaled budget of about 60 steps,
// 0.576 with 1,000, mean of 5 fits); windows of minibatch losses rather than the full
// objective, so that checking costs one read of the device per 50 steps; and learned
// embeddings in place of features when items or annotators carry none.
//
// Queries evaluate Q_ij from exported D (per fitted item) and C (per fitted annotator) tables:
// K² L doubles (8 K² L bytes) per item and per annotator. An annotator never seen gets the mean
// C. An item never seen gets the mean item's confusion: row k of Q averaged, as probabilities,
// over the fitted items (over kMeanItemSample of them, spread evenly, on larger projects) with
// weights h_i[k], precomputed for each fitted annotator (K² doubles each) and for the mean C.
// A fitted item's served Q weighs row k of its own Q_ij by h_i[k] and the mean item's row k by
// 1 - h_i[k]: the fit trains row k of an item's D with weight q_i[k] (the M-step above), so
// the rows of the classes an item is not believed to be hold no evidence of that item, only
// what the difficulty network carried over from other items. Served as they were, with the
// class prior of a featureless fit (neural_truth_model.h), they decided such items: with gold
// on one item of TinyCrowd(10, 3), its unanimously labelled items of the other class copied
// the gold item's row and were served the class prior (GoldClampTest in
// neural_contracts_test.cc). The mean item is then exactly the mean of the fitted items'
// served Q, and its weighted rows are those the fit trained. Averaging D instead was
// dominated by the easiest items, whose D grows without bound: an item labelled after the fit
// was served near certainty from one label (posterior 1 - 1e-13 where a fitted item with the
// same label got 0.52; difficulty 5e-8 against a mean of 0.12 over the fitted items). With annotator features, r is a
// projection of the annotator's features, and an annotator added after the fit who was given
// features is served c_ψ(r) of its own features (AnnotatorConfusionFromFeatures: the exported
// encoder and competence layer, in plain C++), the paper's prediction of a new annotator's
// competence, instead of the mean C.
#ifndef VERITY_MODELS_NEURAL_LIA_H_
#define VERITY_MODELS_NEURAL_LIA_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/neural/neural_truth_model.h"

namespace verity::models::neural {

class LiaModel : public NeuralModel<LiaModel> {
 public:
  static constexpr std::string_view kMethod = "lia";
  std::string_view method() const override { return kMethod; }

 protected:
  friend class NeuralModel<LiaModel>;
  using NeuralModel::NeuralModel;
  std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const override;
  int Train(CrowdNet& net, const LabelTensors& data, bool warm_start) override;
  void ExportTables(CrowdNet& net) override;
  void LogConfusion(int32_t item, int32_t annotator, double* out) const override;
  // Q = row-softmax(Σ_l D_i[·,·,l] c_ψ(r)[·,·,l]) averaged over the mean item's sample of
  // fitted items i: the competence network applied to the annotator encoder's output r, as
  // AnnotatorConfusion of a fitted annotator is computed from its own c_ψ(r_j).
  std::vector<double> ConfusionFromAnnotatorEmbedding(absl::Span<const double> embedding) const override;

 public:
  // 1 - (1/K) Σ_k Q[k, k], with Q the served confusion (above) of C̄, the mean competence of
  // the fitted annotators (row k: h_item[k] of row-softmax(Σ_l D_item[·,·,l] C̄[·,·,l]), the
  // rest the mean item's): the chance that an annotator of average competence mislabels the
  // item, averaged over its true classes. For an item not in the fit, the mean item's Q: the
  // mean of the fitted items' difficulties (over the sample, on large projects).
  std::optional<double> ItemDifficulty(int32_t item) const override;

 private:
  int32_t latent_ = 0;
  // At most this many fitted items stand for the mean item (export cost: annotators x this x
  // K² L).
  static constexpr int64_t kMeanItemSample = 256;
  // The mean item's Q (K x K, probabilities) for a competence C (K x K x L): row k is the mean
  // over mean_item_sample_ of row k of row-softmax(Σ_l D_i C), weighted by h_i[k].
  void MeanItemConfusion(const double* competence, double* out) const;

  std::vector<double> difficulty_;       // fitted items x K x K x L
  std::vector<int32_t> mean_item_sample_;
  std::vector<double> unseen_item_confusion_;  // (fitted annotators + 1) x K x K, probabilities
  std::vector<double> competence_;       // fitted annotators x K x K x L
  std::vector<double> mean_competence_;  // K x K x L
  DenseLayer competence_network_;        // c_ψ: embedding -> K x K x L
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_LIA_H_
