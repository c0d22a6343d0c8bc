// conal: Chu et al. (2021), "Learning from Crowds by Modeling Common Confusions". A classifier
// f(x) (an MLP over a learned item embedding, softmax output), a common confusion W_g shared by
// all annotators and an individual confusion W_r per annotator (both K x K logits, row = true
// class, initialised to the same near-identity matrix: 0.8 on the diagonal after a softmax).
// As in the authors' code (github.com/zdchu/CoNAL), the two are mixed before the softmax:
// annotator r's label distribution on item i is
//     p = softmax(ω f W_g + (1 − ω) f W_r),   ω = sigmoid(u_r · v_i),
// with u_r a learned annotator embedding and v_i an instance embedding computed from the item
// (an MLP over its embedding), both L2-normalised (so ω stays within [0.27, 0.73]; the scale of
// the logits, not ω, makes the mixture sharp). Loss: cross-entropy of p against each label
// − λ mean_r ||W_g − W_r||₂ (TruthModelOptions::Neural::conal_lambda, default 5.9e-4; see below
// for fits without features), the distance taken between row-centred logits: the paper
// rewards W_g for differing from the W_r.
// Q(i, r) row k = softmax(ω W_g[k] + (1 − ω) W_r[k]) (p for a one-hot f); an item never seen
// gets the mean instance embedding, and an annotator never seen the mean of the fitted
// annotators' Q on the mean item, as crowdlayer and trace_reg do. Not softmax(W_g): the reward
// pushes W_g away from every annotator's W_r, so W_g alone is no annotator's confusion (after
// the Dawid-Skene start, on the 12-annotator crowd of NeuralModelTest.WarmStartsOntoNew
// ItemsAndAnnotatorsAndHandlesUnseenIds, softmax(W_g) said "always class 1": p(0 | 0) = 0.0015).
//
// Where this deviates from the paper, and why:
//   - The paper writes the label distribution as the ω-mixture of two probability vectors,
//     ω f W_g + (1 − ω) f W_r with row-stochastic W; the authors' code mixes the two
//     confusions' logits and applies one softmax, and so does this model (the paper's results
//     come from that code).
//   - The regulariser is a reward, not a penalty: −λ Σ_r ||W_g − W_r||₂ (not a squared norm)
//     lowers the loss as the common confusion moves away from each individual one, as in the
//     paper and the authors' code. It is taken here between row-centred logits (see above).
//     Without it W_g and W_r, which start equal, move together and ω gets no gradient.
//   - The reward is the mean over annotators, not the paper's sum, so that its weight against
//     the likelihood (a mean over a minibatch's labels) does not grow with the crowd. The
//     reward is unbounded: the confusions drift apart until the likelihood's gradient
//     balances λ × (number of annotators) under the sum, and the fit gets worse the longer it
//     trains. On a simulated crowd of 3,000 annotators (5M labels) the paper's λ on the sum
//     gave 0.907 against λ = 0's 0.969 (docs/PERFORMANCE.md). The default λ, 5.9e-4, is the
//     paper's 1e-5 times LabelMe's 59 annotators: the paper's reward on the paper's data.
//     Where neither items nor annotators carry features the fit trains at ten times the
//     learning rate (TruthModelOptions::Neural::featureless_learning_rate), so the reward's
//     drift per step is ten times larger; there λ is featureless_conal_lambda, a tenth.
//   - Both confusions start at 0.8 on the diagonal, not at the identity, which a row softmax
//     cannot represent.
//   - Learned embeddings replace image features when items carry none; ω then depends on a free
//     item embedding.
// How a fit starts (a deviation from the paper, which starts from a random truth network): as
// crowdlayer, a cold fit first trains TruthModelOptions::Neural::ds_start_fraction of its steps
// with h anchored to Dawid-Skene's posteriors (NeuralTruthModel::StartsFromDawidSkene). With
// the mean reward, mean of 2 fits on each of the 12 shared datasets without features
// (docs/EVALUATION.md, "conal's reward as a mean, and its Dawid-Skene start"): +1.0 points on
// average, relevance 0.497 -> 0.609, bluebirds 0.806 -> 0.847, music 0.755 -> 0.764; the losses
// wordsim 0.900 -> 0.867 (1 item of 30), possent 0.957 -> 0.948 and rte 0.930 -> 0.926. On the
// simulated crowd of 5M labels and 3,000 annotators (CPU, 20 epochs of 8,192 labels): 0.9612
// -> 0.9679. Under the paper's summed reward the same start had fallen there from 0.9074 to
// 0.7219, which is why it was off before the reward became a mean.
#ifndef VERITY_MODELS_NEURAL_CONAL_H_
#define VERITY_MODELS_NEURAL_CONAL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/neural/neural_truth_model.h"

namespace verity::models::neural {

// The network of conal (exposed for its unit tests).
class ConalNet : public CrowdNet {
 public:
  // Both confusions start at 0.8 on the diagonal (see the file comment). λ is
  // options.conal_lambda when items or annotators carry features (feature_dim or
  // annotator_feature_dim > 0), else options.featureless_conal_lambda: the rule that chooses
  // the learning rate (NeuralTruthModel::SetTrainingSchedule).
  ConalNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim,
           int64_t annotator_feature_dim, const TruthModelOptions::Neural& options);
  torch::Tensor LogPrior(const torch::Tensor& items) override;
  // The paper's noisy-label distribution: log softmax(ω f W_g + (1 − ω) f W_r), f the prior.
  // The items are encoded once for f and for ω (a training step's item rows are gathered once).
  torch::Tensor LogNoisyLabel(const torch::Tensor& items, const torch::Tensor& annotators) override;
  // The same for a one-hot f: row k is log softmax(ω W_g[k] + (1 − ω) W_r[k]).
  torch::Tensor LogConfusion(const torch::Tensor& items, const torch::Tensor& annotators) override;
  // −λ mean_r ||W_g − W_r||₂ over every annotator of the net, the distance taken between
  // row-centred logits (see the file comment); undefined when λ = 0. λ: the constructor's.
  torch::Tensor Regularizer() override;
  // The instance vectors v_i of items (L2-normalised), and of item encodings.
  torch::Tensor InstanceVectors(const torch::Tensor& items);
  torch::Tensor InstanceVectorsOf(const torch::Tensor& item_encodings);
  // The annotator vectors u_r (L2-normalised).
  torch::Tensor AnnotatorVectors(const torch::Tensor& annotators);
  // ω(i, r) for each (item encoding, annotator) pair of a batch: B.
  torch::Tensor Omega(const torch::Tensor& item_encodings, const torch::Tensor& annotators);
  const torch::Tensor& common() const { return common_; }          // W_g, K x K logits
  const torch::Tensor& individual() const { return individual_; }  // W_r, A x K x K logits

 private:
  double lambda_;
  torch::nn::Sequential classifier_{nullptr}, instance_{nullptr};
  torch::Tensor common_, individual_;
};

class ConalModel : public NeuralModel<ConalModel> {
 public:
  static constexpr std::string_view kMethod = "conal";
  std::string_view method() const override { return kMethod; }

 protected:
  friend class NeuralModel<ConalModel>;
  using NeuralModel::NeuralModel;
  bool StartsFromDawidSkene() const override { return true; }
  std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const override;
  void ExportTables(CrowdNet& net) override;
  void LogConfusion(int32_t item, int32_t annotator, double* out) const override;
  // log softmax(ω W_g + (1 − ω) W_r) of a fitted annotator on `item` (an item outside the fit:
  // the mean instance vector); log softmax(W_g) for an annotator outside the fit.
  void MixedLogConfusion(int32_t item, int32_t annotator, double* out) const;

 private:
  int32_t dim_ = 0;
  std::vector<double> item_vectors_;       // fitted items x dim (normalised)
  std::vector<double> mean_item_vector_;   // dim
  std::vector<double> annotator_vectors_;  // fitted annotators x dim (normalised)
  std::vector<double> common_;             // K x K logits
  std::vector<double> individual_;         // fitted annotators x K x K logits
  std::vector<double> population_;         // K x K log confusion of an annotator never seen
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_CONAL_H_
