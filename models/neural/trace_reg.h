// trace_reg: Tanno et al. (2019), "Learning from Noisy Labels by Regularized Estimation of
// Annotator Confusion". A classifier p_θ(x) (here an MLP over a learned item embedding) and one
// confusion matrix A^(r) per annotator (row = true class, rows on the simplex) are trained
// together on the paper's objective
//     (1/N) Σ_i Σ_(r labelled i) CE(A^(r)ᵀ p_θ(x_i), ỹ_i^(r)) + λ Σ_r tr(A^(r)),
// whose trace term makes the confusions, not the classifier, absorb the label noise
// (TruthModelOptions::Neural::trace_lambda, λ, default 0.01).
//
// As the paper:
//   - the trace is summed over the annotators (not averaged), so the penalty grows with the
//     crowd as in the paper's objective;
//   - every A^(r) starts at the identity exactly;
//   - λ is constant over the fit: the paper gives one λ for the whole training and no
//     schedule, and the released code of the same group (UCLBrain/LearnNoisyLabels) also uses a
//     constant weight (one variant there switches the term on only after some epochs, which
//     the paper does not describe; it is not done here).
//
// Where it deviates, and why:
//   - The minibatch loss is the mean cross-entropy per label, not per item. Dividing the
//     paper's objective by the labels per item n̄ = L / N gives the mean per label plus
//     (λ N / L) Σ_r tr(A^(r)), which is what is minimised (N: items with labels, L: labels);
//     the minimiser is the paper's, and AMSGrad's steps do not depend on the overall scale.
//   - A^(r) is parameterised by its probabilities directly, projected back onto the simplex
//     (entries clamped at kMinConfusion = 1e-6, rows renormalised) after every optimiser step.
//     The identity is not reachable through a row softmax, and a softmax started near it
//     saturates: AMSGrad moves a logit by about the learning rate a step, so a diagonal of
//     0.99 could not come down to an annotator's 0.6 within a fit's budget.
//   - Item embeddings replace the paper's image features when items carry none.
//
// The served confusion of annotator r is A^(r) (entries at least kMinConfusion, so that a label
// the matrix calls impossible still leaves a finite posterior); an annotator never seen gets the
// mean of the annotators' matrices.
#ifndef VERITY_MODELS_NEURAL_TRACE_REG_H_
#define VERITY_MODELS_NEURAL_TRACE_REG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/neural/annotator_confusions.h"
#include "models/neural/neural_truth_model.h"

namespace verity::models::neural {

// The network of trace_reg (exposed for its unit tests).
class TraceRegNet : public CrowdNet {
 public:
  static constexpr double kMinConfusion = 1e-6;

  // Confusions start at the identity; the trace weight at options.trace_lambda until
  // set_trace_weight (the fit sets λ N / L, see the file comment).
  TraceRegNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim,
              const TruthModelOptions::Neural& options);
  torch::Tensor LogPrior(const torch::Tensor& items) override;
  // log A^(r), entries floored at kMinConfusion.
  torch::Tensor LogConfusion(const torch::Tensor& items, const torch::Tensor& annotators) override;
  // log (A^(r)ᵀ p_θ(x))[y], as the paper.
  torch::Tensor LogNoisyLabel(const torch::Tensor& items, const torch::Tensor& annotators) override;
  // weight · Σ_r tr(A^(r)); undefined when the weight is 0.
  torch::Tensor Regularizer() override;
  // Projects every A^(r) back onto the simplex (see the file comment).
  void AfterOptimizerStep() override;

  void set_trace_weight(double weight) { trace_weight_ = weight; }
  // A^(r) of every annotator: R x K x K probabilities (rows sum to 1).
  torch::Tensor Confusions() const;

 private:
  double trace_weight_;
  torch::nn::Sequential classifier_{nullptr};
  torch::Tensor confusion_;  // R x K x K, non-negative; rows normalised in Confusions()
};

class TraceRegModel : public NeuralModel<TraceRegModel> {
 public:
  static constexpr std::string_view kMethod = "trace_reg";
  std::string_view method() const override { return kMethod; }

 protected:
  friend class NeuralModel<TraceRegModel>;
  using NeuralModel::NeuralModel;
  std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const override;
  // Sets the trace weight to λ N / L, then TrainMarginal.
  int Train(CrowdNet& net, const LabelTensors& data, bool warm_start) override;
  void ExportTables(CrowdNet& net) override;
  void LogConfusion(int32_t item, int32_t annotator, double* out) const override;

 private:
  AnnotatorConfusions confusions_;
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_TRACE_REG_H_
