// trace_reg: Tanno et al. (2019), "Learning from Noisy Labels by Regularized Estimation of
// Annotator Confusion". A classifier p_θ(x) (here an MLP over a learned item embedding) and one
// confusion matrix A^(r) per annotator (rows softmax-parameterised, initialised near the
// identity) are trained together on the cross-entropy of A^(r)ᵀ p_θ(x) against each label,
// plus λ times the trace of the confusion matrices, which pushes the matrices to absorb the
// noise rather than the classifier (TruthModelOptions::Neural::trace_lambda, default 0.01;
// applied to the mean trace over annotators so that λ does not scale with the crowd size).
#ifndef VERITY_MODELS_NEURAL_TRACE_REG_H_
#define VERITY_MODELS_NEURAL_TRACE_REG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/neural/annotator_confusions.h"
#include "models/neural/neural_truth_model.h"

namespace verity::models::neural {

class TraceRegModel : public NeuralModel<TraceRegModel> {
 public:
  static constexpr std::string_view kMethod = "trace_reg";
  std::string_view method() const override { return kMethod; }

 protected:
  friend class NeuralModel<TraceRegModel>;
  using NeuralModel::NeuralModel;
  std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const override;
  void ExportTables(CrowdNet& net) override;
  void LogConfusion(int32_t item, int32_t annotator, double* out) const override;

 private:
  AnnotatorConfusions confusions_;
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_TRACE_REG_H_
