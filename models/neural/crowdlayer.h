// crowdlayer: Rodrigues & Pereira (2018), "Deep Learning from Crowds". A classifier σ(x) (here an
// MLP over a learned item embedding, softmax output) followed by one crowd layer per annotator
// that maps σ to that annotator's label logits, trained end to end on the cross-entropy of
// softmax(layer_r(σ)) against each label (missing labels simply contribute no term). Variants
// (TruthModelOptions::Neural::crowdlayer_variant):
//   mw   — layer_r(σ) = W_r σ, W_r K x K initialised to the identity;
//   vw   — w_r ⊙ σ, w_r initialised to ones;
//   vb   — σ + b_r, b_r initialised to zeros;
//   vw+b — w_r ⊙ σ + b_r.
// The confusion matrix of annotator r is the layer applied to a one-hot class:
// Q_r[k, ·] = softmax(layer_r(e_k)). The population confusion is the mean of the annotators'.
#ifndef VERITY_MODELS_NEURAL_CROWDLAYER_H_
#define VERITY_MODELS_NEURAL_CROWDLAYER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/neural/annotator_confusions.h"
#include "models/neural/neural_truth_model.h"

namespace verity::models::neural {

class CrowdLayerModel : public NeuralModel<CrowdLayerModel> {
 public:
  static constexpr std::string_view kMethod = "crowdlayer";
  std::string_view method() const override { return kMethod; }

 protected:
  friend class NeuralModel<CrowdLayerModel>;
  using NeuralModel::NeuralModel;
  std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const override;
  void ExportTables(CrowdNet& net) override;
  void LogConfusion(int32_t item, int32_t annotator, double* out) const override;

 private:
  AnnotatorConfusions confusions_;
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_CROWDLAYER_H_
