#include "models/neural/cmm.h"

#include <algorithm>
#include <cmath>

namespace verity::models::neural {
namespace {

class CmmNet : public CrowdNet {
 public:
  CmmNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim, const TruthModelOptions::Neural& options)
      : k_(k), groups_(options.cmm_groups) {
    InitItems(num_items, options.embedding_dim, feature_dim);
    truth_ = register_module("truth", MakeMlp(options.embedding_dim, options.hidden_units, k, 2));
    torch::Tensor beta = torch::empty({groups_, k, k});
    for (int64_t m = 0; m < groups_; ++m) {
      const double eps = 0.8 * static_cast<double>(m + 1) / groups_;
      beta[m] = torch::eye(k) * (1 - eps) + eps / k;
    }
    log_beta = register_buffer("log_beta", torch::log(beta));
    log_alpha = register_buffer("log_alpha", torch::full({groups_}, -std::log(static_cast<double>(groups_))));
    membership = register_buffer(
        "membership", torch::full({std::max(1, num_annotators), groups_}, 1.0 / groups_));
  }
  torch::Tensor LogPrior(const torch::Tensor& items) override {
    return torch::log_softmax(truth_->forward(items_->forward(items)), 1);
  }
  // Σ_m p(m | a) β^(m), log.
  torch::Tensor LogConfusion(const torch::Tensor&, const torch::Tensor& annotators) override {
    torch::Tensor p = membership.index_select(0, annotators);  // B x M
    return torch::log(torch::einsum("bm,mky->bky", {p, torch::exp(log_beta)}).clamp_min(1e-12));
  }
  torch::Tensor log_beta, log_alpha, membership;

 private:
  int64_t k_, groups_;
  torch::nn::Sequential truth_{nullptr};
};

}  // namespace

std::shared_ptr<CrowdNet> CmmModel::MakeNet(int32_t num_items, int32_t num_annotators) const {
  return std::make_shared<CmmNet>(num_items, num_annotators, num_classes(), item_feature_dim(), options().neural);
}

int CmmModel::Train(CrowdNet& base_net, const LabelTensors& data, bool warm_start) {
  if (data.num_labels == 0) return 0;
  auto& net = static_cast<CmmNet&>(base_net);
  const int64_t k = num_classes(), groups = options().neural.cmm_groups;
  const auto float_options = data.labels_per_item.options();
  const int iterations = std::max(1, 3 * options().neural.em_iterations / (warm_start ? 3 : 1));
  const int64_t steps = std::max<int64_t>(20, StepsForFit(data.num_labels, false) / iterations);
  // r_i: label counts per item.
  torch::Tensor counts = torch::zeros({data.num_items, k}, float_options);
  counts.index_add_(0, data.items, torch::one_hot(data.labels, k).to(torch::kFloat));
  torch::Tensor labelled = torch::nonzero(data.labels_per_item > 0).squeeze(1);
  torch::Tensor gold_mask;
  if (data.gold_items.numel() > 0) {
    gold_mask = torch::full({data.num_items, k}, 0.0, float_options);
    gold_mask.index_copy_(0, data.gold_items,
                          torch::full({data.gold_items.size(0), k}, -1e4, float_options)
                              .scatter_(1, data.gold_labels.view({-1, 1}), 0.0));
  }
  torch::Tensor first_prior;  // soft majority vote for a cold start's first E-step
  if (!warm_start) {
    torch::Tensor mv = counts + options().vote_smoothing;
    first_prior = torch::log(mv / mv.sum(1, true));
  }
  std::unique_ptr<FlatAmsGrad> optimizer = MakeOptimizer(net);
  // h's M-step: cross-entropy against target = Σ_m q_i(k, m), refilled in place by every
  // iteration (the training step reads its storage), over minibatches of labelled items.
  torch::Tensor target = torch::zeros({data.num_items, k}, float_options);
  const int64_t n = labelled.size(0);
  const int64_t batch = std::min<int64_t>(options().neural.batch_size, std::max<int64_t>(n, 1));
  std::unique_ptr<TrainingStep> step = MakeTrainingStep(
      *optimizer,
      [&](const torch::Tensor& items) {
        return WithGoldLoss(-(target.index_select(0, items) * net.LogPrior(items)).sum(1).mean(),
                            net, data);
      },
      batch);
  torch::Tensor q_km;  // N x K x M
  for (int t = 0; t < iterations; ++t) {
    // E-step.
    {
      torch::NoGradGuard no_grad;
      torch::Tensor prior;
      if (t == 0 && !warm_start) {
        prior = first_prior;
      } else {
        std::vector<torch::Tensor> chunks;
        torch::Tensor all = torch::arange(data.num_items, data.items.options());
        for (int64_t s = 0; s < data.num_items; s += 65536) {
          chunks.push_back(net.LogPrior(all.narrow(0, s, std::min<int64_t>(65536, data.num_items - s))));
        }
        prior = torch::cat(chunks);
      }
      // log p(k, m, r_i) = log h_i[k] + log α_m + Σ_y r_iy log β_m[k, y]
      torch::Tensor log_joint = torch::einsum("ny,mky->nkm", {counts, net.log_beta}) +
                                prior.unsqueeze(2) + net.log_alpha.view({1, 1, groups});
      if (gold_mask.defined()) log_joint = log_joint + gold_mask.unsqueeze(2);
      q_km = torch::softmax(log_joint.view({data.num_items, k * groups}), 1).view({data.num_items, k, groups});
    }
    // M-step: β and α in closed form over labelled items.
    {
      torch::NoGradGuard no_grad;
      torch::Tensor q = q_km.index_select(0, labelled);
      torch::Tensor beta = torch::einsum("nkm,ny->mky", {q, counts.index_select(0, labelled)}) +
                           options().confusion_smoothing;
      net.log_beta.copy_(torch::log(beta / beta.sum(2, true)));
      torch::Tensor alpha = q.sum(std::vector<int64_t>{0, 1}) + options().prior_smoothing;
      net.log_alpha.copy_(torch::log(alpha / alpha.sum()));
    }
    // M-step for h: cross-entropy against q_i(k) on labelled items.
    net.train();
    target.copy_(q_km.sum(2));
    torch::Tensor order;
    for (int64_t s = 0; s < steps && n > 0; ++s) {
      const int64_t start = (s * batch) % n;
      if (start < batch) order = labelled.index_select(0, torch::randperm(n, data.items.options()));
      TakeStep(*step, order.narrow(0, start, std::min(batch, n - start)));
    }
  }
  // p(m | a): the mean group responsibility of the items a labelled.
  {
    torch::NoGradGuard no_grad;
    torch::Tensor q_m = q_km.sum(1);  // N x M
    torch::Tensor sums = torch::zeros({std::max(1, data.num_annotators), groups}, float_options);
    sums.index_add_(0, data.annotators, q_m.index_select(0, data.items));
    torch::Tensor alpha = torch::exp(net.log_alpha).view({1, groups});
    sums = sums + alpha;  // one pseudo-label of the population's mix
    net.membership.copy_(sums / sums.sum(1, true));
  }
  return iterations;
}

void CmmModel::ExportTables(CrowdNet& base_net) {
  auto& net = static_cast<CmmNet&>(base_net);
  groups_ = options().neural.cmm_groups;
  log_beta_ = TensorToVector(net.log_beta);
  log_alpha_ = TensorToVector(net.log_alpha);
  membership_ = TensorToVector(net.membership.narrow(0, 0, fitted_annotators()));
}

void CmmModel::LogConfusion(int32_t, int32_t annotator, double* out) const {
  const int32_t k = num_classes();
  const size_t kk = static_cast<size_t>(k) * k;
  const bool known = annotator >= 0 && annotator < fitted_annotators();
  std::fill(out, out + kk, 0.0);
  for (int32_t m = 0; m < groups_; ++m) {
    const double w = known ? membership_[static_cast<size_t>(annotator) * groups_ + m] : std::exp(log_alpha_[m]);
    for (size_t c = 0; c < kk; ++c) out[c] += w * std::exp(log_beta_[m * kk + c]);
  }
  for (size_t c = 0; c < kk; ++c) out[c] = std::log(std::max(out[c], 1e-300));
}

void CmmModel::ItemLogJoint(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            double* out) const {
  const int32_t k = num_classes();
  const size_t kk = static_cast<size_t>(k) * k;
  const double* prior = LogPriorOf(item);
  std::vector<double> per_group(groups_);
  for (int32_t c = 0; c < k; ++c) {
    double m_max = -1e300;
    for (int32_t m = 0; m < groups_; ++m) {
      double v = log_alpha_[m];
      for (const AnnotationMatrix::Entry& e : labels) v += log_beta_[m * kk + c * k + e.label];
      per_group[m] = v;
      m_max = std::max(m_max, v);
    }
    double s = 0;
    for (double v : per_group) s += std::exp(v - m_max);
    out[c] = prior[c] + m_max + std::log(s);
  }
}

}  // namespace verity::models::neural
