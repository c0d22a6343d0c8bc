// cmm: Mena & Ñanculef, "Revisiting Machine Learning from Crowds: a Mixture Model for Grouping
// Annotations", in its global form: the labels of an item are counts r_i over the classes (no
// annotator ids are needed), produced by one of M annotator groups with confusion β^(m) (K x K)
// and mixing weights α:
//     p(k, r_i) = h_i[k] Σ_m α_m Π_y β^(m)[k, y]^{r_iy},
// with h_i the truth network (an MLP over a learned item embedding). EM: the E-step computes
// q_i(k, m); the M-step sets β and α in closed form (with confusion_smoothing and
// prior_smoothing pseudo-counts) and trains h for a few AMSGrad steps on the cross-entropy
// against q_i(k) = Σ_m q_i(k, m). The first E-step uses the soft majority vote in place of h,
// and the groups start at different reliabilities (β^(m) = (1 − ε_m) I + ε_m / K, ε_m spread
// over (0, 0.8]) to break their symmetry. Iterations: 3 × em_iterations (a third when
// warm-starting); the closed-form steps are cheap.
//
// An annotator's confusion is Σ_m p(m | a) β^(m), with p(m | a) the mean of q_i(m) over the
// items a labelled; an annotator never seen gets Σ_m α_m β^(m).
#ifndef VERITY_MODELS_NEURAL_CMM_H_
#define VERITY_MODELS_NEURAL_CMM_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/neural/neural_truth_model.h"

namespace verity::models::neural {

class CmmModel : public NeuralModel<CmmModel> {
 public:
  static constexpr std::string_view kMethod = "cmm";
  std::string_view method() const override { return kMethod; }

 protected:
  friend class NeuralModel<CmmModel>;
  using NeuralModel::NeuralModel;
  std::shared_ptr<CrowdNet> MakeNet(int32_t num_items, int32_t num_annotators) const override;
  int Train(CrowdNet& net, const LabelTensors& data, bool warm_start) override;
  void ExportTables(CrowdNet& net) override;
  void LogConfusion(int32_t item, int32_t annotator, double* out) const override;
  void ItemLogJoint(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                    double* out) const override;

 private:
  int32_t groups_ = 0;
  std::vector<double> log_beta_;   // M x K x K
  std::vector<double> log_alpha_;  // M
  std::vector<double> membership_; // fitted annotators x M, p(m | a)
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_CMM_H_
