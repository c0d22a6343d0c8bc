// cmm: Mena & Ñanculef, "Revisiting Machine Learning from Crowds: a Mixture Model for Grouping
// Annotations" (CIARP 2019, Eq. 3-6), and its Individual variant (C-MoA, Mena, Ñanculef &
// Valle, IDA 2020). M annotator groups with confusions β^(m) (K x K); every label picks its own
// group, so that the labels of an item are independent given its true class k:
//     p(y | k, annotation l) = Σ_m w_l(m) β^(m)[k, y],
// with w_l = α (the crowd's group mix) in the Global setting (neural.cmm_setting = "global":
// annotator ids are not used) and w_l = p(· | a_l), the memberships of the label's annotator,
// in the Individual one ("individual"). The truth network h (an MLP over a learned item
// embedding or the item's features) gives the prior h_i, and an item's posterior is
//     p(k | labels) ∝ h_i[k] Π_l Σ_m w_l(m) β^(m)[k, y_l].
//
// In the Global setting the group mixture collapses to one effective confusion
// B = Σ_m α_m β^(m): every label of every annotator goes through B, so the posteriors (and the
// likelihood) depend on the groups only through B, and the groups are identified only by the
// initialisation below. This is so in the paper too (its get_global_confusionM is exactly B).
// The groups matter for the posteriors only in the Individual setting, where an annotator's
// confusion Σ_m p(m | a) β^(m) is a mixture of a few shared confusions: Dawid-Skene with
// M shared confusion matrices instead of one per annotator, which needs few labels per
// annotator. The default is "individual": on the 12 shared datasets it is at or above the
// Global setting on every one, which stays near majority vote (docs/EVALUATION.md, "cmm before
// and after issue #17"); the Global setting wins where annotators are too sparse for
// memberships (paper_claims_test, CmmAsAnnotatorsGetSparse: about 6 labels per annotator).
//
// Fit (EM; 3 x em_iterations iterations, a third when warm-starting):
//  - E-step: q_i(k) ∝ h_i[k] Π_l Σ_m w_l(m) β^(m)[k, y_l] (gold items clamped; without item
//    features the class prior, mean_i h_i, replaces h_i: h_i is then fitted to the item's own
//    q_i and would count its labels again at every iteration), and per label
//    the group responsibilities r_l(k, m) = q_i(k) w_l(m) β^(m)[k, y_l] / Σ_m' (same)_m'.
//  - M-step in closed form: β^(m)[k, y] ∝ Σ_{l: y_l = y} r_l(k, m) + confusion_smoothing;
//    α_m ∝ Σ_l Σ_k r_l(k, m) + prior_smoothing; Individual: p(m | a) ∝ Σ_{l of a} Σ_k r_l(k, m)
//    + α_m (one pseudo-label of the crowd's mix, so that an annotator with few labels stays near
//    it). h: a few AMSGrad steps on the cross-entropy against q_i(k). The first E-step of a cold
//    start uses the soft majority vote in place of h.
//  - Initialisation (cold start), as the authors' code: K-means with hard assignments gives the
//    initial groups, and the first responsibilities are r_l(k, m) = [l in group m] mv_i(k)
//    (mv_i the soft majority vote). Global: each label l of item i is clustered on the
//    cross-entropy pattern of its label against the item's vote, mv_i with component y_l
//    zeroed; Individual: each annotator on its row-normalised confusion against the hard
//    majority vote (K² values). There are 20 restarts (k-means++ seeding from neural.seed and
//    the restart's index); each is followed by 5 closed-form EM iterations with the vote as
//    the prior, and the restart of the highest log-likelihood of the labels is kept (on
//    100,000 labels the restarts take most of a fit's time).
//
// An annotator's confusion (AnnotatorConfusion) is Σ_m p(m | a) β^(m): in the Individual setting
// its learned memberships; in the Global setting, as the paper's get_ann_confusionM, the
// posterior over groups of the annotator's labels, p(m | a) ∝ α_m Π_{l of a} Σ_k h_i[k]
// β^(m)[k, y_l] (it reports who labels like which group; the item posteriors do not use it).
// An annotator never seen gets B.
//
// Where this deviates from the paper and its reference code (fmenat/PyLearningCrowds), and why:
//  - The reference draws a true class per annotation: its E-step is q_il(k, m) ∝ f_k(x_i) α_m
//    β^(m)[k, y_l], from the prior alone, and it trains f on Σ_l q_il(k). Here the class is
//    shared by an item's labels (q_i(k) uses all of them): the TruthModel interface serves
//    p(k | labels), and with learned item embeddings instead of features the per-annotation
//    target would make h_i the item's label distribution and nothing more.
//  - The Individual memberships p(m | a) are free per-annotator parameters with a closed-form
//    M-step; the reference learns them with a group network over an annotator embedding.
//  - Global K-means runs on the K-dimensional patterns themselves; the reference first projects
//    them on at most 3 principal components (the same distances when K <= 3). Restarts re-run
//    K-means from new seeds and are scored by the likelihood after a short EM with the vote as
//    the prior; the reference's 20 runs re-train the whole model (its K-means seed is fixed), too
//    costly here for 20 networks.
#ifndef VERITY_MODELS_NEURAL_CMM_H_
#define VERITY_MODELS_NEURAL_CMM_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/neural/neural_truth_model.h"

namespace verity::models::neural {

// K-means of the rows of `points` (N x D, float, on the CPU) into `clusters` clusters:
// k-means++ seeding drawn from `seed`, then Lloyd iterations until no assignment changes (at
// most 100). Returns the cluster of each row (int64, N). Deterministic given its arguments; a
// cluster that loses all its rows keeps its centre.
torch::Tensor CmmKMeans(const torch::Tensor& points, int64_t clusters, uint64_t seed);

class CmmModel : public NeuralModel<CmmModel> {
 public:
  static constexpr std::string_view kMethod = "cmm";
  std::string_view method() const override { return kMethod; }

  // The fitted tables (empty before a fit): log α (M), log β (M x K x K, [m][k][y]) and the
  // annotators' memberships p(m | a) (fitted annotators x M; see the file comment for the
  // Global setting).
  int32_t groups() const { return groups_; }
  const std::vector<double>& log_alpha() const { return log_alpha_; }
  const std::vector<double>& log_beta() const { return log_beta_; }
  const std::vector<double>& memberships() const { return membership_; }

 protected:
  friend class NeuralModel<CmmModel>;
  using NeuralModel::NeuralModel;
  std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const override;
  int Train(CrowdNet& net, const LabelTensors& data, bool warm_start) override;
  void ExportTables(CrowdNet& net) override;
  void LogConfusion(int32_t item, int32_t annotator, double* out) const override;
  // Global: the prior plus Σ_l log B[·, y_l], whoever gave the labels.
  void ItemLogJoint(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                    double* out) const override;

 private:
  bool individual() const { return options().neural.cmm_setting == "individual"; }

  int32_t groups_ = 0;
  std::vector<double> log_beta_;    // M x K x K
  std::vector<double> log_alpha_;   // M
  std::vector<double> membership_;  // fitted annotators x M, p(m | a)
  std::vector<double> log_global_;  // K x K, log B = log Σ_m α_m β^(m)
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_CMM_H_
