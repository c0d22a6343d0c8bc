#include "models/neural/cmm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

namespace verity::models::neural {
namespace {

constexpr int kKMeansRestarts = 20;     // the paper's
constexpr int kRestartEmIterations = 5;  // closed-form EM iterations that score a restart

class CmmNet : public CrowdNet {
 public:
  CmmNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim,
         const TruthModelOptions::Neural& options)
      : groups_(options.cmm_groups) {
    InitItems(num_items, options.embedding_dim, feature_dim);
    truth_ = register_module("truth", MakeMlp(options.embedding_dim, options.hidden_units, k, 2));
    // Uniform until the fit's initialisation (K-means) or a warm start replaces them.
    log_beta = register_buffer("log_beta", torch::full({groups_, k, k}, -std::log(static_cast<double>(k))));
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
  int64_t groups_;
  torch::nn::Sequential truth_{nullptr};
};

// target.index_add_(0, index, values) through a flat, 1-D index_add_: LibTorch's CPU kernel
// runs a 1-D one as a plain loop but a row-wise one as a tensor operation per index, which
// made a pass over 100,000 labels cost a quarter of a second. `target` must be contiguous.
torch::Tensor AddRows(torch::Tensor target, const torch::Tensor& index, const torch::Tensor& values) {
  const int64_t width = target.size(0) == 0 ? 0 : target.numel() / target.size(0);
  torch::Tensor flat = (index.unsqueeze(1) * width + torch::arange(width, index.options())).view({-1});
  target.view({-1}).index_add_(0, flat, values.contiguous().view({-1}));
  return target;
}

// The group parameters an EM iteration carries: β, α and (Individual) the memberships.
struct Groups {
  torch::Tensor log_beta;    // M x K x K
  torch::Tensor log_alpha;   // M
  torch::Tensor membership;  // annotators x M (Individual; undefined for Global)
};

// The closed-form EM of the group parameters over a fit's labels, for a given prior.
class GroupEm {
 public:
  GroupEm(const LabelTensors& data, int64_t k, int64_t groups, bool individual,
          const TruthModelOptions& options)
      : data_(data), k_(k), groups_(groups), individual_(individual), options_(options) {
    const auto float_options = data.labels_per_item.options();
    labelled_ = torch::nonzero(data.labels_per_item > 0).squeeze(1);
    if (data.gold_items.numel() > 0) {
      gold_mask_ = torch::zeros({data.num_items, k}, float_options);
      gold_mask_.index_copy_(0, data.gold_items,
                             torch::full({data.gold_items.size(0), k}, -1e4, float_options)
                                 .scatter_(1, data.gold_labels.view({-1, 1}), 0.0));
    }
  }

  // log w_l(m): the group weights of every label (L x M).
  torch::Tensor LabelLogWeights(const Groups& g) const {
    if (individual_) return torch::log(g.membership.clamp_min(1e-12)).index_select(0, data_.annotators);
    return g.log_alpha.view({1, groups_}).expand({data_.num_labels, groups_});
  }

  // E-step for prior `log_prior` (N x K): fills q (N x K), the responsibilities r (L x K x M)
  // and returns the log-likelihood of the labelled items' labels.
  double EStep(const torch::Tensor& log_prior, const Groups& g) {
    // c[l, k, m] = log w_l(m) + log β^(m)[k, y_l]
    torch::Tensor c = g.log_beta.permute({2, 1, 0}).contiguous().index_select(0, data_.labels) +
                      LabelLogWeights(g).unsqueeze(1);
    torch::Tensor joint = AddRows(log_prior.clone(), data_.items, torch::logsumexp(c, 2));
    if (gold_mask_.defined()) joint = joint + gold_mask_;
    q_ = torch::softmax(joint, 1);
    r_ = q_.index_select(0, data_.items).unsqueeze(2) * torch::softmax(c, 2);
    return torch::logsumexp(joint.index_select(0, labelled_), 1).sum().item<double>();
  }

  // Responsibilities from hard initial groups: r_l(k, m) = [group_l = m] mv_i(k).
  void SetResponsibilities(const torch::Tensor& label_groups, const torch::Tensor& mv) {
    r_ = mv.index_select(0, data_.items).unsqueeze(2) *
         torch::one_hot(label_groups, groups_).to(mv.dtype()).unsqueeze(1);
  }

  // M-step of β, α and the memberships from the current responsibilities.
  Groups MStep() const {
    const auto float_options = data_.labels_per_item.options();
    Groups g;
    // by_label[y, k, m] = Σ_{l: y_l = y} r_l(k, m)
    torch::Tensor by_label = AddRows(torch::zeros({k_, k_, groups_}, float_options), data_.labels, r_);
    torch::Tensor beta = by_label.permute({2, 1, 0}) + options_.confusion_smoothing;
    g.log_beta = torch::log(beta / beta.sum(2, true));
    torch::Tensor per_label = r_.sum(1);  // L x M
    torch::Tensor alpha = per_label.sum(0) + options_.prior_smoothing;
    alpha = alpha / alpha.sum();
    g.log_alpha = torch::log(alpha);
    if (individual_) {
      torch::Tensor sums = AddRows(torch::zeros({std::max(1, data_.num_annotators), groups_}, float_options),
                                   data_.annotators, per_label) +
                           alpha.view({1, groups_});
      g.membership = sums / sums.sum(1, true);
    }
    return g;
  }

  const torch::Tensor& q() const { return q_; }

 private:
  const LabelTensors& data_;
  int64_t k_, groups_;
  bool individual_;
  const TruthModelOptions& options_;
  torch::Tensor labelled_, gold_mask_;
  torch::Tensor q_, r_;
};

}  // namespace

torch::Tensor CmmKMeans(const torch::Tensor& points_in, int64_t clusters, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::Tensor points = points_in.to(torch::kCPU, torch::kFloat).contiguous();
  const int64_t n = points.size(0);
  if (n == 0) return torch::zeros({0}, torch::kLong);
  std::mt19937_64 rng(seed);
  // k-means++: the first centre uniformly, each next one with probability ∝ its squared
  // distance to the nearest centre chosen (uniformly when every row sits on a centre).
  std::vector<int64_t> chosen{static_cast<int64_t>(rng() % static_cast<uint64_t>(n))};
  torch::Tensor nearest = (points - points[chosen[0]]).pow(2).sum(1);
  while (static_cast<int64_t>(chosen.size()) < clusters) {
    std::vector<double> weights(nearest.data_ptr<float>(), nearest.data_ptr<float>() + n);
    double total = 0;
    for (double w : weights) total += w;
    int64_t next;
    if (total > 0) {
      double u = std::uniform_real_distribution<double>(0, total)(rng);
      next = n - 1;
      for (int64_t i = 0; i < n; ++i) {
        u -= weights[i];
        if (u < 0) {
          next = i;
          break;
        }
      }
    } else {
      next = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    }
    chosen.push_back(next);
    nearest = torch::minimum(nearest, (points - points[next]).pow(2).sum(1));
  }
  torch::Tensor centres = points.index_select(0, torch::tensor(chosen, torch::kLong)).clone();
  torch::Tensor assignment;
  for (int iteration = 0; iteration < 100; ++iteration) {
    torch::Tensor next = torch::cdist(points, centres).argmin(1);
    if (assignment.defined() && torch::equal(next, assignment)) break;
    assignment = next;
    torch::Tensor sums = AddRows(torch::zeros_like(centres), assignment, points);
    torch::Tensor counts = torch::zeros({clusters}, torch::kFloat)
                               .index_add_(0, assignment, torch::ones({n}, torch::kFloat));
    torch::Tensor occupied = (counts > 0).unsqueeze(1);
    centres = torch::where(occupied, sums / counts.clamp_min(1).unsqueeze(1), centres);
  }
  return assignment;
}

std::shared_ptr<CrowdNet> CmmModel::MakeNet(int32_t num_items, int32_t num_annotators) const {
  return std::make_shared<CmmNet>(num_items, num_annotators, num_classes(), item_feature_dim(), options().neural);
}

int CmmModel::Train(CrowdNet& base_net, const LabelTensors& data, bool warm_start) {
  if (data.num_labels == 0) return 0;
  auto& net = static_cast<CmmNet&>(base_net);
  const int64_t k = num_classes(), groups = options().neural.cmm_groups;
  const bool by_annotator = individual();
  const auto float_options = data.labels_per_item.options();
  const int iterations = std::max(1, 3 * options().neural.em_iterations / (warm_start ? 3 : 1));
  const int64_t steps = std::max<int64_t>(20, StepsForFit(data.num_labels, false) / iterations);
  torch::Tensor labelled = torch::nonzero(data.labels_per_item > 0).squeeze(1);
  GroupEm em(data, k, groups, by_annotator, options());
  Groups current{net.log_beta.clone(), net.log_alpha.clone(), net.membership.clone()};
  torch::Tensor first_prior;  // soft majority vote for a cold start's first E-step
  if (!warm_start) {
    const auto start = std::chrono::steady_clock::now();
    torch::NoGradGuard no_grad;
    torch::Tensor counts = torch::zeros({data.num_items, k}, float_options);
    AddRows(counts, data.items, torch::one_hot(data.labels, k).to(counts.dtype()));
    torch::Tensor mv = counts + options().vote_smoothing;
    mv = mv / mv.sum(1, true);
    first_prior = torch::log(mv);
    // What K-means clusters: Global, each label's pattern against its item's vote; Individual,
    // each annotator's row-normalised confusion against the hard vote.
    torch::Tensor points;
    if (by_annotator) {
      torch::Tensor hard = mv.argmax(1).index_select(0, data.items);
      torch::Tensor confusion = AddRows(torch::zeros({std::max(1, data.num_annotators), k * k}, float_options),
                                        data.annotators, torch::one_hot(hard * k + data.labels, k * k).to(mv.dtype()))
                                    .view({-1, k, k});
      torch::Tensor rows = confusion.sum(2, true);
      points = torch::where(rows > 0, confusion / rows.clamp_min(1), torch::full_like(confusion, 1.0 / k))
                   .view({-1, k * k});
    } else {
      points = mv.index_select(0, data.items) * (1 - torch::one_hot(data.labels, k).to(mv.dtype()));
    }
    double best = -std::numeric_limits<double>::infinity();
    for (int restart = 0; restart < kKMeansRestarts; ++restart) {
      torch::Tensor clusters =
          CmmKMeans(points, groups, options().neural.seed * 1000003 + static_cast<uint64_t>(restart))
              .to(data.items.device());
      em.SetResponsibilities(by_annotator ? clusters.index_select(0, data.annotators) : clusters, mv);
      Groups g = em.MStep();
      double log_likelihood = 0;
      for (int t = 0; t < kRestartEmIterations; ++t) {
        log_likelihood = em.EStep(first_prior, g);
        g = em.MStep();
      }
      if (log_likelihood > best) {
        best = log_likelihood;
        current = g;
      }
    }
    CountAsInitialisation(start);
  }
  std::unique_ptr<FlatAmsGrad> optimizer = MakeOptimizer(net);
  // h's M-step: cross-entropy against target = q_i(k), refilled in place by every iteration
  // (the training step reads its storage), over minibatches of labelled items.
  torch::Tensor target = torch::zeros({data.num_items, k}, float_options);
  const int64_t n = labelled.size(0);
  const int64_t batch = std::min<int64_t>(batch_size(), std::max<int64_t>(n, 1));
  std::unique_ptr<TrainingStep> step = MakeTrainingStep(
      *optimizer,
      [&](const torch::Tensor& items) {
        return WithGoldLoss(-(target.index_select(0, items) * net.LogPrior(items)).sum(1).mean(),
                            net, data);
      },
      batch);
  auto all_priors = [&] {
    std::vector<torch::Tensor> chunks;
    torch::Tensor all = torch::arange(data.num_items, data.items.options());
    for (int64_t s = 0; s < data.num_items; s += 65536) {
      chunks.push_back(net.LogPrior(all.narrow(0, s, std::min<int64_t>(65536, data.num_items - s))));
    }
    return torch::cat(chunks);
  };
  // The E-step's prior of each item: h_i with features; without them the class prior, the mean
  // of h over the labelled items, as the served posteriors take it (neural_truth_model.h): h_i
  // is then fitted to the item's own q_i, and starting from it would count the item's labels
  // again at every iteration.
  auto e_step_prior = [&] {
    torch::Tensor class_log_prior = EStepClassLogPrior(net, data);
    if (!class_log_prior.defined()) return all_priors();
    return class_log_prior.view({1, k}).expand({data.num_items, k}).contiguous();
  };
  for (int t = 0; t < iterations; ++t) {
    {
      torch::NoGradGuard no_grad;
      em.EStep(t == 0 && !warm_start ? first_prior : e_step_prior(), current);
      current = em.MStep();
      // The network carries the current groups while h trains, so that a checkpoint (early
      // stopping, observers) scores the model of this iteration, not the starting tables.
      net.log_beta.copy_(current.log_beta);
      net.log_alpha.copy_(current.log_alpha);
      if (by_annotator) net.membership.copy_(current.membership);
    }
    net.train();
    target.copy_(em.q());
    torch::Tensor order;
    for (int64_t s = 0; s < steps && n > 0; ++s) {
      const int64_t start = (s * batch) % n;
      if (start < batch) order = labelled.index_select(0, torch::randperm(n, data.items.options()));
      TakeStep(*step, order.narrow(0, start, std::min(batch, n - start)));
    }
  }
  torch::NoGradGuard no_grad;
  net.log_beta.copy_(current.log_beta);
  net.log_alpha.copy_(current.log_alpha);
  if (by_annotator) {
    net.membership.copy_(current.membership);
  } else {
    // The paper's annotator-to-group posterior: log p(m | a) = log α_m + Σ_{l of a} log Σ_k
    // h_i[k] β^(m)[k, y_l].
    torch::Tensor label_given_group =  // [l, m] = Σ_k h_i[k] β^(m)[k, y_l]
        torch::einsum("lk,lkm->lm", {torch::exp(all_priors()).index_select(0, data.items),
                                     torch::exp(current.log_beta.permute({2, 1, 0}).index_select(0, data.labels))});
    torch::Tensor log_posterior =
        AddRows(torch::zeros({std::max(1, data.num_annotators), groups}, float_options), data.annotators,
                torch::log(label_given_group.clamp_min(1e-30))) +
        current.log_alpha.view({1, groups});
    net.membership.copy_(torch::softmax(log_posterior, 1));
  }
  return iterations;
}

void CmmModel::ExportTables(CrowdNet& base_net) {
  auto& net = static_cast<CmmNet&>(base_net);
  const int32_t k = num_classes();
  const size_t kk = static_cast<size_t>(k) * k;
  groups_ = options().neural.cmm_groups;
  log_beta_ = TensorToVector(net.log_beta);
  log_alpha_ = TensorToVector(net.log_alpha);
  membership_ = TensorToVector(net.membership.narrow(0, 0, fitted_annotators()));
  log_global_.assign(kk, 0.0);
  for (int32_t m = 0; m < groups_; ++m) {
    for (size_t c = 0; c < kk; ++c) log_global_[c] += std::exp(log_alpha_[m] + log_beta_[m * kk + c]);
  }
  for (double& v : log_global_) v = std::log(std::max(v, 1e-300));
}

void CmmModel::LogConfusion(int32_t, int32_t annotator, double* out) const {
  const int32_t k = num_classes();
  const size_t kk = static_cast<size_t>(k) * k;
  if (annotator < 0 || annotator >= fitted_annotators()) {
    std::copy(log_global_.begin(), log_global_.end(), out);
    return;
  }
  std::fill(out, out + kk, 0.0);
  for (int32_t m = 0; m < groups_; ++m) {
    const double w = membership_[static_cast<size_t>(annotator) * groups_ + m];
    for (size_t c = 0; c < kk; ++c) out[c] += w * std::exp(log_beta_[m * kk + c]);
  }
  for (size_t c = 0; c < kk; ++c) out[c] = std::log(std::max(out[c], 1e-300));
}

void CmmModel::ItemLogJoint(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            double* out) const {
  if (individual()) {
    NeuralTruthModel::ItemLogJoint(item, labels, out);
    return;
  }
  const int32_t k = num_classes();
  const double* prior = PosteriorLogPriorOf(item);
  std::copy(prior, prior + k, out);
  for (const AnnotationMatrix::Entry& e : labels) {
    for (int32_t c = 0; c < k; ++c) out[c] += log_global_[static_cast<size_t>(c) * k + e.label];
  }
}

}  // namespace verity::models::neural
