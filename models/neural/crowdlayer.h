// crowdlayer: Rodrigues & Pereira (2018), "Deep Learning from Crowds". A classifier σ(x) (here an
// MLP over a learned item embedding, softmax output) followed by one crowd layer per annotator
// that maps σ to that annotator's label logits, trained end to end on the cross-entropy of
// softmax(layer_r(σ)) against each label (missing labels simply contribute no term). Variants
// (TruthModelOptions::Neural::crowdlayer_variant):
//   mw   — layer_r(σ) = W_r σ, W_r K x K initialised to the identity scaled by 1 + ln(K - 1);
//   vw   — w_r ⊙ σ, w_r initialised to ones;
//   vb   — σ + b_r, b_r initialised to zeros;
//   vw+b — w_r ⊙ σ + b_r.
// Deviation from the paper: its identity start is unscaled. At a one-hot classifier output that
// gives every annotator the accuracy e / (e + K - 1): 0.73 at K = 2, but 0.23 at K = 10, where
// the layers start by explaining the labels as noise and the classifier learns little. Scaled
// by 1 + ln(K - 1), every K starts at the K = 2 accuracy e / (1 + e) (K = 2 is unchanged).
// Measured (issue 17; `bazel-bin/models/eval --datasets=../shared/datasets DATASET
// --methods=crowdlayer --repeats=2`), unscaled -> scaled: music (K = 10) 0.629 -> 0.756,
// labelme (K = 8) 0.625 -> 0.732, relevance (K = 4) 0.328 -> 0.364 (1 fit); binary datasets
// unchanged. A start from each annotator's confusion against the majority vote was tried too:
// relevance 0.615, but product fell from 0.921 to 0.805.
//
// Posteriors and confusions. The crowd layer has no latent true class: what it trained is
// p(y | item i, annotator r) = softmax(layer_r(σ_i))[y], a function of the classifier's output
// σ_i, which the paper reads as the estimate of the truth. Served posteriors keep the form
// p(k | labels) ∝ σ_i[k] Π_(r, y) Q_r[k, y] of every neural model (they must take labels that
// arrived after the fit), with the likelihood of class k taken from the trained layer at the
// inputs it was trained on:
//     Q_r[k, ·] = softmax(layer_r(σ̄_k)),   σ̄_k = Σ_i σ_i[k] σ_i / Σ_i σ_i[k]
// (sums over the fitted items): σ̄_k is the classifier output of a typical item of class k, so
// Q_r[k, ·] is exactly the trained likelihood of such an item's labels. This is the
// approximation: an item whose σ_i differs from σ̄_k gets the likelihood of the typical item,
// not softmax(layer_r(σ_i)). Until issue #17 it was softmax(layer_r(e_k)), the layer at a
// one-hot input, which training never feeds it while σ is not one-hot. Q_r is also the
// annotator's exported confusion (profiles); an annotator never seen gets the mean of the
// annotators' Q_r, and an item never seen the class prior. TrainedLabelDistribution gives the
// trained likelihood itself.
// Deviation from the paper in how a fit starts: a cold fit first trains for
// TruthModelOptions::Neural::ds_start_fraction (0.25) of its steps with the truth network
// anchored to Dawid-Skene's posteriors (NeuralTruthModel::StartsFromDawidSkene), where the paper
// starts from a random network. Mean of 2 fits without features (docs/EVALUATION.md, "The
// Dawid-Skene start"): relevance 0.362 -> 0.606, labelme 0.732 -> 0.769, bluebirds
// 0.847 -> 0.866, music 0.756 -> 0.769, wordsim unchanged, and product 0.921 -> 0.877 (the one
// loss).
#ifndef VERITY_MODELS_NEURAL_CROWDLAYER_H_
#define VERITY_MODELS_NEURAL_CROWDLAYER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/neural/annotator_confusions.h"
#include "models/neural/neural_truth_model.h"

namespace verity::models::neural {

class CrowdLayerModel : public NeuralModel<CrowdLayerModel> {
 public:
  static constexpr std::string_view kMethod = "crowdlayer";
  std::string_view method() const override { return kMethod; }

  // softmax(layer_r(σ)) for a distribution σ over the K classes: what the fitted crowd layer of
  // `annotator` predicts for the labels of an item whose classifier output is σ (K values).
  // Uniform before a fit; the population's layer (the annotators' mean parameters) for an
  // annotator never seen.
  std::vector<double> TrainedLabelDistribution(int32_t annotator, absl::Span<const double> sigma) const;

 protected:
  friend class NeuralModel<CrowdLayerModel>;
  using NeuralModel::NeuralModel;
  std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const override;
  bool StartsFromDawidSkene() const override { return true; }
  // Without item features, generalised EM (truth_model.h, neural.featureless_em).
  bool TrainsByEmWithoutFeatures() const override { return true; }
  void ExportTables(CrowdNet& net) override;
  void LogConfusion(int32_t item, int32_t annotator, double* out) const override;

 private:
  AnnotatorConfusions confusions_;
  // The crowd layers' parameters, per fitted annotator: W_r (K x K, [label][class]) for mw, or
  // w_r and b_r (K each; ones and zeros when the variant has none).
  std::vector<double> weights_, scales_, biases_;
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_CROWDLAYER_H_
