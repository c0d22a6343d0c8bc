// AnnotatorConfusions: per-annotator log confusion matrices read out of a network, with the
// population confusion (the mean of the annotators' matrices) for annotators never seen.
// Used by the neural models whose confusion does not depend on the item.
#ifndef VERITY_MODELS_NEURAL_ANNOTATOR_CONFUSIONS_H_
#define VERITY_MODELS_NEURAL_ANNOTATOR_CONFUSIONS_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace verity::models::neural {

class AnnotatorConfusions {
 public:
  // `log_q`: num_annotators x K x K log-probabilities (rows normalised), any device.
  void Assign(const torch::Tensor& log_q);
  // Copies annotator `a`'s K x K log confusion (the population's if `a` is out of range).
  void Get(int32_t a, double* out) const;
  int32_t num_annotators() const { return num_annotators_; }

 private:
  int32_t num_annotators_ = 0;
  int32_t k_ = 0;
  std::vector<double> log_q_;       // num_annotators x K x K
  std::vector<double> population_;  // K x K
};

// The population confusion of `num_annotators` log confusions (num_annotators x K x K,
// row-major): log of the mean of their probabilities; uniform when there are none.
std::vector<double> PopulationLogConfusion(const double* log_q, int32_t num_annotators, int32_t k);

// Row-normalised log probabilities of a K x K (or B x K x K) matrix of logits whose diagonal is
// `diagonal` and off-diagonal 0: the "identity" initialisation of a confusion (probability
// on the diagonal e^d / (e^d + K - 1)).
torch::Tensor IdentityLogits(int64_t rows, int64_t k, double diagonal);

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_ANNOTATOR_CONFUSIONS_H_
