#include "models/neural/neural_truth_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "models/binary_codec.h"
#include "models/neural/device.h"

namespace verity::models::neural {
namespace {

constexpr int64_t kChunk = 1 << 16;  // rows per forward pass when exporting or E-stepping

// Puts `net` in eval mode for the scope and back into training mode after, if it was in it.
class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& net) : net_(net), training_(net.is_training()) { net_.eval(); }
  ~EvalMode() {
    if (training_) net_.train();
  }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  torch::nn::Module& net_;
  bool training_;
};

// The tensors a checkpoint of `net` keeps: its parameters, then its buffers.
std::vector<torch::Tensor> ParametersAndBuffers(torch::nn::Module& net) {
  std::vector<torch::Tensor> state = net.parameters();
  for (const torch::Tensor& b : net.buffers()) state.push_back(b);
  return state;
}

double LogSumExp(const double* x, int32_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t k = 0; k < n; ++k) m = std::max(m, x[k]);
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (int32_t k = 0; k < n; ++k) s += std::exp(x[k] - m);
  return m + std::log(s);
}

// The labels of `data` as tensors on `device`; when `skip` is not empty, without the labels it
// marks (indexed as HeldOutLabels), which then also leave labels_per_item.
LabelTensors MakeLabelTensors(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                              torch::Device device, const std::vector<bool>& skip = {}) {
  LabelTensors t;
  t.num_items = data.num_items();
  t.num_annotators = data.num_annotators();
  std::vector<int64_t> items, annotators, labels;
  items.reserve(data.num_labels());
  annotators.reserve(data.num_labels());
  labels.reserve(data.num_labels());
  std::vector<float> per_item(t.num_items, 0.0f);
  size_t l = 0;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    for (const AnnotationMatrix::Entry& e : data.LabelsOfItem(i)) {
      if (!skip.empty() && skip[l++]) continue;
      items.push_back(i);
      annotators.push_back(e.other);
      labels.push_back(e.label);
      per_item[i] += 1.0f;
    }
  }
  t.num_labels = static_cast<int64_t>(items.size());
  auto as_long = [&](std::vector<int64_t>& v) {
    return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kLong)
        .clone()
        .to(device);
  };
  t.items = as_long(items);
  t.annotators = as_long(annotators);
  t.labels = as_long(labels);
  t.labels_per_item =
      torch::from_blob(per_item.data(), {t.num_items}, torch::kFloat).clone().to(device);
  std::vector<int64_t> gold_items, gold_labels;
  for (size_t i = 0; i < gold.size(); ++i) {
    if (gold[i] < 0) continue;
    gold_items.push_back(static_cast<int64_t>(i));
    gold_labels.push_back(gold[i]);
  }
  t.gold_items = as_long(gold_items);
  t.gold_labels = as_long(gold_labels);
  return t;
}

}  // namespace

NeuralTruthModel::NeuralTruthModel(int32_t num_classes, TruthModelOptions options)
    : num_classes_(num_classes),
      options_(std::move(options)),
      net_options_(options_),
      class_log_prior_(num_classes, -std::log(static_cast<double>(num_classes))) {}

void NeuralTruthModel::SetItemFeatureDim(int64_t dim) {
  item_feature_dim_ = dim;
  net_options_ = options_;
  if (dim > 0) {
    net_options_.neural.embedding_dim = options_.neural.feature_width;
    net_options_.neural.hidden_units = options_.neural.feature_width;
  }
}

std::shared_ptr<CrowdNet> NeuralTruthModel::BuildNet(int32_t num_items, int32_t num_annotators) const {
  std::shared_ptr<CrowdNet> net = MakeNet(num_items, num_annotators);
  const TruthModelOptions::Neural& n = options_.neural;
  // MakeNet's encoder (one layer of feature_width units, through options()) is the one these
  // options ask for when they add no layer, dropout or batch norm: keep it, and with it the
  // initialisation a fit drew before the options existed.
  const bool default_encoder =
      n.feature_layers == 1 && n.feature_dropout == 0 && !n.feature_batch_norm;
  if (item_feature_dim_ > 0 && !default_encoder) {
    FeatureEncoderOptions encoder;
    encoder.layers = n.feature_layers;
    encoder.dropout = n.feature_dropout;
    encoder.batch_norm = n.feature_batch_norm;
    net->ReplaceItemEncoder(RowEncoder(std::max<int32_t>(1, num_items), n.feature_width,
                                       item_feature_dim_, encoder));
  }
  return net;
}

void NeuralTruthModel::SetCheckpointObserver(int64_t every, CheckpointObserver observer) {
  checkpoint_every_ = observer ? every : 0;
  checkpoint_observer_ = std::move(observer);
}

std::unique_ptr<TruthModel> NeuralTruthModel::Clone() const {
  std::unique_ptr<NeuralTruthModel> copy = NewEmpty();
  copy->SetItemFeatureDim(item_feature_dim_);
  copy->item_features_ = item_features_;
  copy->annotator_feature_dim_ = annotator_feature_dim_;
  copy->annotator_features_ = annotator_features_;
  copy->annotator_feature_mean_ = annotator_feature_mean_;
  copy->annotator_feature_scale_ = annotator_feature_scale_;
  if (has_parameters()) {
    absl::Status restored = copy->Restore(Serialize());
    // Serialize/Restore of the same class and sizes cannot disagree; if LibTorch failed
    // anyway, the copy is an empty model (majority-vote-like answers), which Fit can train.
    (void)restored;
  }
  return copy;
}

int64_t NeuralTruthModel::StepsForFit(int64_t num_labels, bool warm_start) const {
  const TruthModelOptions::Neural& n = options_.neural;
  int64_t steps = n.steps;
  if (steps == 0) {
    const int64_t per_epoch = std::max<int64_t>(1, (num_labels + batch_size_ - 1) / batch_size_);
    const int64_t min_epochs = on_cuda_ ? TruthModelOptions::Neural::kCudaMinEpochs : 2;
    const int64_t epochs =
        std::clamp<int64_t>((3000 + per_epoch - 1) / per_epoch, min_epochs, std::max<int64_t>(min_epochs, 200));
    steps = epochs * per_epoch;
  }
  return warm_start ? std::max<int64_t>(1, steps / 4) : steps;
}

void NeuralTruthModel::CountAsInitialisation(std::chrono::steady_clock::time_point since) {
  if (on_cuda_) torch::cuda::synchronize(device_index_);
  initialisation_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

void NeuralTruthModel::SetTrainingSchedule(const torch::Device& device, bool features) {
  const TruthModelOptions::Neural& n = options_.neural;
  on_cuda_ = device.is_cuda();
  device_index_ = device.index();
  batch_size_ = n.batch_size > 0 ? n.batch_size
                : on_cuda_     ? TruthModelOptions::Neural::kCudaBatchSize
                               : TruthModelOptions::Neural::kCpuBatchSize;
  learning_rate_ = (features ? n.learning_rate : n.featureless_learning_rate) *
                   std::sqrt(static_cast<double>(batch_size_) / TruthModelOptions::Neural::kCpuBatchSize);
}

std::unique_ptr<FlatAmsGrad> NeuralTruthModel::MakeOptimizer(CrowdNet& net) const {
  std::vector<torch::Tensor> parameters = net.parameters();
  const bool on_device_step = options_.neural.cuda_graphs && CudaGraphsCompiledIn() &&
                              !parameters.empty() && parameters.front().is_cuda();
  // Embedding tables (items, and annotators where the model embeds them) are updated sparsely:
  // a step then costs O(batch), not O(items) (sparse_row_amsgrad.h).
  std::vector<RowEncoderImpl*> row_tables;
  if (options_.neural.sparse_embeddings) {
    for (RowEncoder* encoder : {&net.items(), &net.annotators()}) {
      if (!encoder->is_empty() && (*encoder)->feature_dim() == 0) row_tables.push_back(encoder->get());
    }
  }
  return std::make_unique<FlatAmsGrad>(std::move(parameters), learning_rate_, on_device_step,
                                       row_tables);
}

std::unique_ptr<TrainingStep> NeuralTruthModel::MakeTrainingStep(
    FlatAmsGrad& optimizer, TrainingStep::LossFunction loss, int64_t batch_size) const {
  return std::make_unique<TrainingStep>(optimizer, std::move(loss), batch_size,
                                        options_.neural.cuda_graphs);
}

void NeuralTruthModel::TakeStep(TrainingStep& step, const torch::Tensor& rows) {
  step.Run(rows);
  if (training_net_ != nullptr) training_net_->AfterOptimizerStep();
  ++steps_taken_;
  if (!decayed_.empty()) {
    torch::NoGradGuard no_grad;
    // The step's own rate (the square-root rule's), as AdamW; never below zero at batches
    // larger than the 1,024 labels the options' bound is checked at.
    const double keep = std::max(0.0, 1.0 - learning_rate_ * options_.neural.weight_decay);
    for (torch::Tensor& w : decayed_) w.mul_(keep);
  }
  if (selection_ != nullptr && training_net_ != nullptr && steps_taken_ % selection_->every == 0) {
    SelectionCheckpoint();
  }
  if (checkpoint_every_ > 0 && training_net_ != nullptr && steps_taken_ % checkpoint_every_ == 0) {
    torch::NoGradGuard no_grad;
    EvalMode eval_mode(*training_net_);
    checkpoint_observer_(steps_taken_, *training_net_);
  }
}

void NeuralTruthModel::SelectionCheckpoint() {
  HeldOutSelection& selection = *selection_;
  const LabelTensors& held_out = selection.labels;
  torch::NoGradGuard no_grad;
  torch::Tensor sum = torch::zeros({}, held_out.labels_per_item.options().dtype(torch::kDouble));
  {
    EvalMode eval_mode(*training_net_);
    for (int64_t start = 0; start < held_out.num_labels; start += kChunk) {
      const int64_t n = std::min(kChunk, held_out.num_labels - start);
      torch::Tensor log_p = training_net_->LogNoisyLabel(held_out.items.narrow(0, start, n),
                                                         held_out.annotators.narrow(0, start, n));
      sum += log_p.gather(1, held_out.labels.narrow(0, start, n).unsqueeze(1)).to(torch::kDouble).sum();
    }
  }
  const double mean = sum.item<double>() / static_cast<double>(held_out.num_labels);
  if (!(mean > selection.best)) return;
  selection.best = mean;
  selection.best_step = steps_taken_;
  const std::vector<torch::Tensor> state = ParametersAndBuffers(*training_net_);
  if (selection.best_state.empty()) {
    for (const torch::Tensor& t : state) selection.best_state.push_back(t.detach().clone());
  } else {
    for (size_t i = 0; i < state.size(); ++i) selection.best_state[i].copy_(state[i]);
  }
}

torch::Tensor NeuralTruthModel::WithGoldLoss(torch::Tensor loss, CrowdNet& net,
                                             const LabelTensors& data) {
  if (data.gold_items.numel() == 0) return loss;
  return loss + torch::nll_loss(net.LogPrior(data.gold_items), data.gold_labels);
}

ConvergenceCheck::ConvergenceCheck(int64_t max_steps, int64_t window, double tolerance,
                                   const torch::TensorOptions& options)
    : max_steps_(std::max<int64_t>(1, max_steps)),
      window_(std::max<int64_t>(1, window)),
      tolerance_(tolerance),
      sum_(torch::zeros({}, options)) {}

void ConvergenceCheck::Restart() {
  torch::NoGradGuard no_grad;
  sum_.zero_();
  steps_ = 0;
  has_previous_ = converged_ = false;
}

void ConvergenceCheck::Add(const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  sum_.add_(loss.detach());
}

bool ConvergenceCheck::StepDone() {
  ++steps_;
  if (steps_ % window_ == 0) {
    torch::NoGradGuard no_grad;
    const double mean = sum_.item<double>() / window_;
    sum_.zero_();
    if (has_previous_ && previous_ - mean < tolerance_ * std::abs(previous_)) {
      converged_ = true;
      return true;
    }
    has_previous_ = true;
    previous_ = mean;
  }
  return steps_ >= max_steps_;
}

namespace {

// The minibatch loss of TrainMarginal: the mean negative log-likelihood of the labels `idx`,
// plus the method's regulariser and the gold cross-entropy.
torch::Tensor MarginalLoss(CrowdNet& net, const LabelTensors& data, const torch::Tensor& idx) {
  torch::Tensor log_p = net.LogNoisyLabel(data.items.index_select(0, idx),
                                          data.annotators.index_select(0, idx));
  torch::Tensor loss = torch::nll_loss(log_p, data.labels.index_select(0, idx));
  torch::Tensor regularizer = net.Regularizer();
  if (regularizer.defined()) loss = loss + regularizer;
  if (data.gold_items.numel() == 0) return loss;
  return loss + torch::nll_loss(net.LogPrior(data.gold_items), data.gold_labels);
}

}  // namespace

int64_t NeuralTruthModel::TrainMarginalToConvergence(CrowdNet& net, const LabelTensors& data,
                                                     int64_t max_steps, int64_t window,
                                                     double tolerance) {
  if (data.num_labels == 0) return 0;
  net.train();
  std::unique_ptr<FlatAmsGrad> optimizer = MakeOptimizer(net);
  const int64_t batch = std::min<int64_t>(batch_size_, data.num_labels);
  ConvergenceCheck check(max_steps, window, tolerance, data.labels_per_item.options());
  std::unique_ptr<TrainingStep> step = MakeTrainingStep(
      *optimizer,
      [&net, &data, &check](const torch::Tensor& idx) {
        torch::Tensor loss = MarginalLoss(net, data, idx);
        check.Add(loss);
        return loss;
      },
      batch);
  torch::Tensor order;
  for (int64_t s = 0;; ++s) {
    const int64_t start = (s * batch) % data.num_labels;
    if (start < batch) order = torch::randperm(data.num_labels, data.items.options());
    TakeStep(*step, order.narrow(0, start, std::min(batch, data.num_labels - start)));
    if (check.StepDone()) break;
  }
  return check.steps();
}

int NeuralTruthModel::TrainByEm(CrowdNet& net, const LabelTensors& data, int64_t steps) {
  const int32_t k = num_classes_;
  net.train();
  std::unique_ptr<FlatAmsGrad> optimizer = MakeOptimizer(net);
  const int64_t batch = std::min<int64_t>(batch_size_, data.num_labels);
  const int64_t per_epoch = (data.num_labels + batch - 1) / batch;
  const int epochs = static_cast<int>(std::max<int64_t>(1, (steps + per_epoch - 1) / per_epoch));
  const int refresh = std::max(1, epochs / TruthModelOptions::Neural::kFeaturelessEmSteps);
  // q lives at one address for the whole loop (the step's contract): E-steps refill it.
  torch::Tensor q = torch::zeros({data.num_items, k}, data.labels_per_item.options());
  torch::Tensor labelled = data.labels_per_item > 0;
  const int64_t labelled_items = labelled.sum().item<int64_t>();
  bool first = true;
  auto e_step = [&]() {
    torch::NoGradGuard no_grad;
    // π: the mean of q over the labelled items; at the first E-step, the mean of h (the
    // Dawid-Skene start's, where the method has one).
    torch::Tensor log_prior = first ? EStepClassLogPrior(net, data)
                                    : torch::log(q.index({labelled}).mean(0).clamp_min(1e-6));
    first = false;
    q.copy_(ItemLogPosteriors(net, data, k, log_prior).exp());
  };
  std::unique_ptr<TrainingStep> step = MakeTrainingStep(
      *optimizer,
      [&net, &data, &q, k](const torch::Tensor& idx) {
        torch::Tensor items = data.items.index_select(0, idx);
        torch::Tensor q_b = q.index_select(0, items);
        torch::Tensor y = data.labels.index_select(0, idx).view({-1, 1, 1}).expand({-1, k, 1});
        // [b, k] = log Q(b)[k, y_b]
        torch::Tensor log_q_y = net.LogConfusion(items, data.annotators.index_select(0, idx)).gather(2, y).squeeze(2);
        torch::Tensor loss = -(q_b * (log_q_y + net.LogPrior(items))).sum(1).mean();
        torch::Tensor regularizer = net.Regularizer();
        if (regularizer.defined()) loss = loss + regularizer;
        return WithGoldLoss(loss, net, data);
      },
      batch);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    if (epoch % refresh == 0 && labelled_items > 0) e_step();
    torch::Tensor order = torch::randperm(data.num_labels, data.items.options());
    for (int64_t start = 0; start < data.num_labels; start += batch) {
      TakeStep(*step, order.narrow(0, start, std::min(batch, data.num_labels - start)));
    }
  }
  return epochs;
}

bool NeuralTruthModel::TrainsByEm() const {
  return item_feature_dim_ == 0 && options_.neural.featureless_em && TrainsByEmWithoutFeatures();
}

int NeuralTruthModel::TrainMarginal(CrowdNet& net, const LabelTensors& data, int64_t steps) {
  if (data.num_labels == 0) return 0;
  if (TrainsByEm()) return TrainByEm(net, data, steps);
  net.train();
  std::unique_ptr<FlatAmsGrad> optimizer = MakeOptimizer(net);
  const int64_t batch = std::min<int64_t>(batch_size_, data.num_labels);
  const int64_t per_epoch = (data.num_labels + batch - 1) / batch;
  const int epochs = static_cast<int>(std::max<int64_t>(1, (steps + per_epoch - 1) / per_epoch));
  std::unique_ptr<TrainingStep> step = MakeTrainingStep(
      *optimizer, [&net, &data](const torch::Tensor& idx) { return MarginalLoss(net, data, idx); },
      batch);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    torch::Tensor order = torch::randperm(data.num_labels, data.items.options());
    for (int64_t start = 0; start < data.num_labels; start += batch) {
      TakeStep(*step, order.narrow(0, start, std::min(batch, data.num_labels - start)));
    }
  }
  return epochs;
}

void NeuralTruthModel::StartFromPosteriors(CrowdNet& net, const LabelTensors& data,
                                           const torch::Tensor& q, int64_t steps) {
  if (data.num_labels == 0) return;
  net.train();
  std::unique_ptr<FlatAmsGrad> optimizer = MakeOptimizer(net);
  const int64_t batch = std::min<int64_t>(batch_size_, data.num_labels);
  std::unique_ptr<TrainingStep> step = MakeTrainingStep(
      *optimizer,
      [&net, &data, &q](const torch::Tensor& rows) {
        torch::Tensor items = data.items.index_select(0, rows);
        return MarginalLoss(net, data, rows) -
               (q.index_select(0, items) * net.LogPrior(items)).sum(1).mean();
      },
      batch);
  int64_t taken = 0;
  while (taken < steps) {
    torch::Tensor order = torch::randperm(data.num_labels, data.items.options());
    for (int64_t start = 0; start < data.num_labels && taken < steps; start += batch, ++taken) {
      TakeStep(*step, order.narrow(0, start, std::min(batch, data.num_labels - start)));
    }
  }
}

int NeuralTruthModel::Train(CrowdNet& net, const LabelTensors& data, bool warm_start) {
  return TrainMarginal(net, data, StepsForFit(data.num_labels, warm_start));
}

std::vector<bool> HeldOutLabels(const AnnotationMatrix& data, double fraction, uint64_t seed) {
  std::vector<bool> held_out(static_cast<size_t>(data.num_labels()), false);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<size_t> order;
  size_t first = 0;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const size_t n = data.LabelsOfItem(i).size();
    if (n >= 2) {
      const size_t h = std::min(n - 1, static_cast<size_t>(fraction * static_cast<double>(n) + uniform(rng)));
      order.resize(n);
      for (size_t l = 0; l < n; ++l) order[l] = l;
      for (size_t l = 0; l < h; ++l) {  // the first h of a partial Fisher-Yates shuffle
        std::swap(order[l], order[l + static_cast<size_t>(rng() % (n - l))]);
        held_out[first + order[l]] = true;
      }
    }
    first += n;
  }
  return held_out;
}

torch::Tensor DawidSkenePosteriors(const LabelTensors& data, int32_t num_classes, double smoothing,
                                   int iterations) {
  torch::NoGradGuard no_grad;
  const int64_t k = num_classes;
  const auto options = data.labels_per_item.options();
  torch::Tensor one_hot = torch::one_hot(data.labels, k).to(torch::kFloat);
  auto clamp_gold = [&](torch::Tensor& q) {
    if (data.gold_items.numel() > 0) {
      q.index_copy_(0, data.gold_items, torch::one_hot(data.gold_labels, k).to(torch::kFloat));
    }
  };
  torch::Tensor q = torch::full({data.num_items, k}, smoothing, options);
  q.index_add_(0, data.items, one_hot);
  q.div_(q.sum(1, /*keepdim=*/true));
  clamp_gold(q);
  // Annotator a's confusion, flattened: row a * K + true class, column label.
  const torch::Tensor rows_of = data.annotators * k;
  for (int it = 0; it < iterations; ++it) {
    torch::Tensor counts = torch::full({static_cast<int64_t>(data.num_annotators) * k, k}, smoothing, options);
    torch::Tensor q_of = q.index_select(0, data.items);  // L x K
    // counts[a * K + c, y] += q_i[c] for every label (i, a, y).
    torch::Tensor cells = (rows_of.unsqueeze(1) + torch::arange(k, data.labels.options())).reshape({-1});
    torch::Tensor contributions = (q_of.unsqueeze(2) * one_hot.unsqueeze(1)).reshape({-1, k});
    counts.index_add_(0, cells, contributions);
    torch::Tensor log_confusion = torch::log(counts / counts.sum(1, /*keepdim=*/true));
    torch::Tensor log_prior = torch::log((q.sum(0) + smoothing) / (q.sum() + smoothing * k));
    // log q_i[c] = log prior[c] + Σ_labels log π_a[c, y].
    torch::Tensor per_label = log_confusion.index_select(0, cells).view({-1, k, k})
                                  .gather(2, data.labels.view({-1, 1, 1}).expand({-1, k, 1}))
                                  .squeeze(2);  // L x K
    torch::Tensor log_q = log_prior.unsqueeze(0).expand({data.num_items, k}).clone();
    log_q.index_add_(0, data.items, per_label);
    q = torch::softmax(log_q, 1);
    clamp_gold(q);
  }
  return q;
}

torch::Tensor NeuralTruthModel::EStepClassLogPrior(CrowdNet& net, const LabelTensors& data) const {
  if (item_feature_dim_ > 0) return torch::Tensor();
  torch::NoGradGuard no_grad;
  EvalMode eval_mode(net);
  torch::Tensor labelled = torch::nonzero(data.labels_per_item > 0).squeeze(1);
  torch::Tensor sum = torch::zeros({num_classes_}, data.labels_per_item.options());
  for (int64_t start = 0; start < labelled.size(0); start += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, labelled.size(0) - start);
    sum += net.LogPrior(labelled.narrow(0, start, n)).exp().sum(0);
  }
  if (labelled.size(0) == 0) return torch::full({num_classes_}, -std::log(static_cast<double>(num_classes_)), sum.options());
  return torch::log((sum / static_cast<double>(labelled.size(0))).clamp_min(1e-30));
}

torch::Tensor NeuralTruthModel::ItemLogPosteriors(CrowdNet& net, const LabelTensors& data,
                                                  int32_t num_classes,
                                                  const torch::Tensor& class_log_prior) {
  torch::NoGradGuard no_grad;
  // The E-step reads the network as an export does: no dropout, running batch statistics.
  EvalMode eval_mode(net);
  const auto options = data.labels_per_item.options();
  torch::Tensor log_q;
  if (class_log_prior.defined()) {
    log_q = class_log_prior.to(options).view({1, num_classes}).repeat({data.num_items, 1});
  } else {
    torch::Tensor all_items = torch::arange(data.num_items, data.items.options());
    std::vector<torch::Tensor> priors;
    for (int64_t start = 0; start < data.num_items; start += kChunk) {
      priors.push_back(net.LogPrior(all_items.narrow(0, start, std::min(kChunk, data.num_items - start))));
    }
    log_q = priors.empty() ? torch::zeros({0, num_classes}, options) : torch::cat(priors);
  }
  for (int64_t start = 0; start < data.num_labels; start += kChunk) {
    const int64_t n = std::min(kChunk, data.num_labels - start);
    torch::Tensor items = data.items.narrow(0, start, n);
    torch::Tensor log_conf = net.LogConfusion(items, data.annotators.narrow(0, start, n));
    // [b, k] = log Q(b)[k, y_b]
    torch::Tensor y = data.labels.narrow(0, start, n).view({n, 1, 1}).expand({n, num_classes, 1});
    log_q.index_add_(0, items, log_conf.gather(2, y).squeeze(2));
  }
  if (data.gold_items.numel() > 0) {
    torch::Tensor clamp = torch::full({data.gold_items.size(0), num_classes}, -1e4, options);
    clamp.scatter_(1, data.gold_labels.view({-1, 1}), 0.0);
    log_q.index_copy_(0, data.gold_items, clamp);
  }
  return torch::log_softmax(log_q, 1);
}

absl::StatusOr<FitReport> NeuralTruthModel::Fit(const AnnotationMatrix& data,
                                                absl::Span<const int32_t> gold, bool warm_start) {
  if (absl::Status s = ValidateFitInputs(num_classes_, data, gold); !s.ok()) return s;
  absl::StatusOr<torch::Device> device = ResolveDevice(options_.neural.device);
  if (!device.ok()) return device.status();
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<CrowdNet> net;
  int iterations = 0;
  double training_seconds = 0;
  int64_t selected = -1;  // selected_step() of this fit, once it succeeds
  try {
    torch::manual_seed(options_.neural.seed);
    torch::set_num_threads(std::max(1, options_.num_threads));
    net = BuildNet(data.num_items(), data.num_annotators());
    LoadFeatures(net->items(), item_feature_dim_, item_features_, data.num_items());
    if (net->annotators()) {
      LoadFeatures(net->annotators(), annotator_feature_dim_, annotator_features_,
                   data.num_annotators());
    }
    // Features the network reads (a model without an annotator encoder ignores annotator
    // features, which the server sets on every model) choose the learning rate.
    SetTrainingSchedule(*device, net->items()->feature_dim() > 0 ||
                                     (net->annotators() && net->annotators()->feature_dim() > 0));
    // A net of another item representation (features added or dropped), or one the new net
    // cannot read (CanWarmStartFrom), starts afresh.
    const bool warm = warm_start && net_ != nullptr && net->CanWarmStartFrom(*net_) &&
                      net_->items()->feature_dim() == net->items()->feature_dim() &&
                      (!net->annotators() ||
                       net_->annotators()->feature_dim() == net->annotators()->feature_dim());
    if (warm) CopyOverlappingParameters(*net_, *net);
    net->to(*device);
    // With heldout_label_fraction, the network trains on the other labels and the held-out
    // ones choose the checkpoint it keeps (SelectionCheckpoint).
    std::vector<bool> held_out;
    if (options_.neural.heldout_label_fraction > 0) {
      held_out = HeldOutLabels(data, options_.neural.heldout_label_fraction, options_.neural.seed);
    }
    LabelTensors tensors = MakeLabelTensors(data, gold, *device, held_out);
    selection_.reset();
    if (tensors.num_labels < data.num_labels()) {
      std::vector<bool> trained(held_out.size());
      for (size_t l = 0; l < held_out.size(); ++l) trained[l] = !held_out[l];
      selection_ = std::make_unique<HeldOutSelection>();
      selection_->labels = MakeLabelTensors(data, {}, *device, trained);
      selection_->every = std::max<int64_t>(
          1, StepsForFit(tensors.num_labels, warm) / TruthModelOptions::Neural::kSelectionCheckpoints);
    }
    steps_taken_ = 0;
    initialisation_seconds_ = 0;
    training_net_ = net.get();
    decayed_.clear();
    if (options_.neural.weight_decay > 0) {
      for (const auto& p : net->named_parameters()) {
        const std::string& name = p.key();
        const bool truth = name.rfind("items.", 0) == 0 || name.rfind("classifier.", 0) == 0 ||
                           name.rfind("truth.", 0) == 0;
        if (truth && p.value().dim() >= 2) decayed_.push_back(p.value());
      }
    }
    const auto train_start = std::chrono::steady_clock::now();
    if (!warm && StartsFromDawidSkene() && options_.neural.ds_start_fraction > 0) {
      const int64_t steps = std::max<int64_t>(
          1, static_cast<int64_t>(options_.neural.ds_start_fraction *
                                  static_cast<double>(StepsForFit(tensors.num_labels, false))));
      torch::Tensor q =
          DawidSkenePosteriors(tensors, num_classes_, options_.vote_smoothing, kDawidSkeneStartIterations);
      CountAsInitialisation(train_start);
      StartFromPosteriors(*net, tensors, q, steps);
    }
    iterations = Train(*net, tensors, warm);
    if (selection_ != nullptr) {
      SelectionCheckpoint();  // the last step competes too
      torch::NoGradGuard no_grad;
      const std::vector<torch::Tensor> state = ParametersAndBuffers(*net);
      // Nothing to restore when no checkpoint scored a finite likelihood (a diverged fit).
      if (selection_->best_state.size() == state.size()) {
        for (size_t i = 0; i < state.size(); ++i) state[i].copy_(selection_->best_state[i]);
      }
      selected = selection_->best_step;
      selection_.reset();
    }
    training_net_ = nullptr;
    decayed_.clear();
    if (device->is_cuda()) torch::cuda::synchronize(device->index());
    training_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
    net->to(torch::kCPU);
    net->eval();
  } catch (const std::exception& e) {
    training_net_ = nullptr;
    decayed_.clear();
    selection_.reset();
    return absl::InternalError(absl::StrCat(std::string(method()), " fit failed in LibTorch: ", e.what()));
  }
  std::shared_ptr<CrowdNet> previous = std::move(net_);
  const int32_t previous_items = fitted_items_, previous_annotators = fitted_annotators_;
  std::vector<double> previous_mean = std::move(fitted_feature_mean_);
  std::vector<double> previous_scale = std::move(fitted_feature_scale_);
  net_ = std::move(net);
  fitted_items_ = data.num_items();
  fitted_annotators_ = data.num_annotators();
  const bool feature_annotators = net_->annotators() && net_->annotators()->feature_dim() > 0;
  fitted_feature_mean_ = feature_annotators ? annotator_feature_mean_ : std::vector<double>();
  fitted_feature_scale_ = feature_annotators ? annotator_feature_scale_ : std::vector<double>();
  try {
    ExportAll();
  } catch (const std::exception& e) {
    // Put the previous parameters (and their tables) back: on error nothing changes.
    net_ = std::move(previous);
    fitted_items_ = previous_items;
    fitted_annotators_ = previous_annotators;
    fitted_feature_mean_ = std::move(previous_mean);
    fitted_feature_scale_ = std::move(previous_scale);
    if (net_ != nullptr) ExportAll();
    return absl::InternalError(absl::StrCat(std::string(method()), " export failed in LibTorch: ", e.what()));
  }
  selected_step_ = selected;

  FitReport report;
  report.iterations = iterations;
  report.converged = true;  // a fixed step budget, not a tolerance
  report.training_seconds = training_seconds;
  report.training_steps = steps_taken_;
  report.initialisation_seconds = initialisation_seconds_;
  std::vector<double> log_post(num_classes_);
  for (int32_t i = 0; i < data.num_items(); ++i) {
    absl::Span<const AnnotationMatrix::Entry> labels = data.LabelsOfItem(i);
    if (labels.empty()) continue;
    ItemLogJoint(i, labels, log_post.data());
    const int32_t g = gold.empty() ? -1 : gold[i];
    report.log_likelihood += g >= 0 ? log_post[g] : LogSumExp(log_post.data(), num_classes_);
  }
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

void NeuralTruthModel::ExportAll() {
  torch::NoGradGuard no_grad;
  const int32_t k = num_classes_;
  item_log_prior_.assign(static_cast<size_t>(fitted_items_) * k, 0.0);
  torch::Tensor all_items = torch::arange(static_cast<int64_t>(fitted_items_), torch::kLong);
  for (int64_t start = 0; start < fitted_items_; start += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, fitted_items_ - start);
    torch::Tensor lp = net_->LogPrior(all_items.narrow(0, start, n)).to(torch::kDouble).contiguous();
    std::copy(lp.data_ptr<double>(), lp.data_ptr<double>() + n * k, item_log_prior_.begin() + start * k);
  }
  // Class prior: the mean of the fitted items' priors (uniform without items).
  std::vector<double> mean(k, fitted_items_ > 0 ? 0.0 : 1.0 / k);
  for (int32_t i = 0; i < fitted_items_; ++i) {
    for (int32_t c = 0; c < k; ++c) mean[c] += std::exp(item_log_prior_[static_cast<size_t>(i) * k + c]) / fitted_items_;
  }
  for (int32_t c = 0; c < k; ++c) class_log_prior_[c] = std::log(std::max(mean[c], 1e-300));
  annotator_embedding_dim_ = 0;
  annotator_embeddings_.clear();
  if (!net_->annotators().is_empty() && fitted_annotators_ > 0) {
    torch::Tensor all = torch::arange(static_cast<int64_t>(fitted_annotators_), torch::kLong);
    for (int64_t start = 0; start < fitted_annotators_; start += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, fitted_annotators_ - start);
      torch::Tensor e = net_->annotators()->forward(all.narrow(0, start, n)).to(torch::kFloat).contiguous();
      annotator_embedding_dim_ = e.size(1);
      annotator_embeddings_.insert(annotator_embeddings_.end(), e.data_ptr<float>(),
                                   e.data_ptr<float>() + e.numel());
    }
  }
  annotator_encoder_.clear();
  if (net_->annotators() && net_->annotators()->feature_dim() > 0) {
    annotator_encoder_ = net_->annotators()->ExportDenseLayers();
  }
  ExportTables(*net_);
}

std::vector<double> NeuralTruthModel::AnnotatorConfusionFromFeatures(
    int32_t annotator, absl::Span<const float> features) const {
  if (!has_parameters() || (annotator >= 0 && annotator < fitted_annotators_)) return {};
  const size_t dim = fitted_feature_mean_.size();
  if (dim == 0 || annotator_encoder_.empty() || features.size() != dim ||
      fitted_feature_scale_.size() != dim) {
    return {};
  }
  std::vector<double> standardised(dim);
  for (size_t c = 0; c < dim; ++c) {
    if (!std::isfinite(features[c])) return {};
    standardised[c] = (features[c] - fitted_feature_mean_[c]) * fitted_feature_scale_[c];
  }
  const std::vector<double> embedding = ApplyDenseLayers(annotator_encoder_, standardised);
  if (embedding.empty()) return {};
  return ConfusionFromAnnotatorEmbedding(embedding);
}

std::vector<float> NeuralTruthModel::AnnotatorEmbedding(int32_t annotator) const {
  if (annotator < 0 || annotator >= fitted_annotators_ || annotator_embedding_dim_ == 0) return {};
  const size_t dim = static_cast<size_t>(annotator_embedding_dim_);
  return std::vector<float>(annotator_embeddings_.begin() + annotator * dim,
                            annotator_embeddings_.begin() + (annotator + 1) * dim);
}

const double* NeuralTruthModel::LogPriorOf(int32_t item) const {
  if (item >= 0 && item < fitted_items_) return item_log_prior_.data() + static_cast<size_t>(item) * num_classes_;
  return class_log_prior_.data();
}

void NeuralTruthModel::ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                                     int32_t gold_label, absl::Span<double> out) const {
  ItemPosteriorForItem(-1, labels, gold_label, out);
}

void NeuralTruthModel::ItemPosteriorForItem(int32_t item,
                                            absl::Span<const AnnotationMatrix::Entry> labels,
                                            int32_t gold_label, absl::Span<double> out) const {
  const int32_t k = num_classes_;
  if (gold_label >= 0) {
    std::fill(out.begin(), out.end(), 0.0);
    out[gold_label] = 1.0;
    return;
  }
  if (!has_parameters()) {
    // Before the first fit: the soft majority vote, as every model gives.
    std::fill(out.begin(), out.end(), options_.vote_smoothing);
    for (const AnnotationMatrix::Entry& e : labels) out[e.label] += 1.0;
  } else {
    std::vector<double> log_post(k);
    ItemLogJoint(item, labels, log_post.data());
    const double norm = LogSumExp(log_post.data(), k);
    for (int32_t c = 0; c < k; ++c) out[c] = std::exp(log_post[c] - norm);
    return;
  }
  double sum = 0;
  for (double v : out) sum += v;
  for (double& v : out) v /= sum;
}

std::vector<double> NeuralTruthModel::ItemPrior(int32_t item) const {
  const double* log_prior = LogPriorOf(item);
  std::vector<double> prior(num_classes_);
  for (int32_t c = 0; c < num_classes_; ++c) prior[c] = std::exp(log_prior[c]);
  return prior;
}

const double* NeuralTruthModel::PosteriorLogPriorOf(int32_t item) const {
  return item_feature_dim_ == 0 ? class_log_prior_.data() : LogPriorOf(item);
}

void NeuralTruthModel::ItemLogJoint(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                                    double* out) const {
  const int32_t k = num_classes_;
  const double* prior = PosteriorLogPriorOf(item);
  std::copy(prior, prior + k, out);
  std::vector<double> conf(static_cast<size_t>(k) * k);
  for (const AnnotationMatrix::Entry& e : labels) {
    LogConfusion(item, e.other, conf.data());
    for (int32_t c = 0; c < k; ++c) out[c] += conf[c * k + e.label];
  }
}

std::vector<double> NeuralTruthModel::ItemAnnotatorConfusion(int32_t item, int32_t annotator) const {
  const int32_t k = num_classes_;
  std::vector<double> q(static_cast<size_t>(k) * k, 1.0 / k);
  if (!has_parameters()) return q;
  LogConfusion(item, annotator, q.data());
  for (double& v : q) v = std::exp(v);
  return q;
}

std::vector<double> NeuralTruthModel::AnnotatorConfusion(int32_t annotator) const {
  return ItemAnnotatorConfusion(-1, annotator);
}

std::string NeuralTruthModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, method(), has_parameters());
  if (has_parameters()) {
    writer.WriteU32(static_cast<uint32_t>(num_classes_));
    writer.WriteU32(static_cast<uint32_t>(fitted_items_));
    writer.WriteU32(static_cast<uint32_t>(fitted_annotators_));
    writer.WriteU32(static_cast<uint32_t>(net_->items()->feature_dim()));
    writer.WriteU32(static_cast<uint32_t>(net_->annotators() ? net_->annotators()->feature_dim() : 0));
    std::ostringstream archive_bytes;
    try {
      torch::serialize::OutputArchive archive;
      net_->save(archive);
      archive.save_to(archive_bytes);
    } catch (const std::exception&) {
      // Saving parameters already in memory does not fail short of running out of memory;
      // an empty archive then makes Restore fail loudly rather than restore garbage.
      archive_bytes.str("");
    }
    writer.WriteString(archive_bytes.str());
    // The annotator features' standardisation (absent from blobs written before it was kept;
    // Restore accepts both).
    writer.WriteU32(static_cast<uint32_t>(fitted_feature_mean_.size()));
    for (size_t c = 0; c < fitted_feature_mean_.size(); ++c) {
      writer.WriteF64(fitted_feature_mean_[c]);
      writer.WriteF64(fitted_feature_scale_[c]);
    }
  }
  return writer.Finish();
}

absl::Status NeuralTruthModel::Restore(std::string_view serialized) {
  return Restore(serialized, RestoreBounds());
}

absl::Status NeuralTruthModel::Restore(std::string_view serialized, const RestoreBounds& bounds) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, method());
  if (!has_params.ok()) return has_params.status();
  if (!*has_params) {
    if (absl::Status s = reader->ExpectEnd(); !s.ok()) return s;
    net_ = nullptr;
    fitted_items_ = fitted_annotators_ = 0;
    fitted_feature_mean_.clear();
    fitted_feature_scale_.clear();
    annotator_encoder_.clear();
    item_log_prior_.clear();
    std::fill(class_log_prior_.begin(), class_log_prior_.end(), -std::log(static_cast<double>(num_classes_)));
    return absl::OkStatus();
  }
  absl::StatusOr<uint32_t> k = reader->ReadU32();
  absl::StatusOr<uint32_t> items = reader->ReadU32();
  absl::StatusOr<uint32_t> annotators = reader->ReadU32();
  absl::StatusOr<uint32_t> feature_dim = reader->ReadU32();
  absl::StatusOr<uint32_t> annotator_feature_dim = reader->ReadU32();
  absl::StatusOr<std::string_view> archive_bytes = reader->ReadString();
  if (!k.ok() || !items.ok() || !annotators.ok() || !feature_dim.ok() ||
      !annotator_feature_dim.ok() || !archive_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(method()), " model: truncated parameters"));
  }
  if (*k != static_cast<uint32_t>(num_classes_)) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(method()), " model has ", *k,
                                                   " classes, expected ", num_classes_));
  }
  std::vector<double> feature_mean, feature_scale;
  if (reader->remaining() > 0) {
    absl::StatusOr<uint32_t> columns = reader->ReadU32();
    if (!columns.ok() || *columns != *annotator_feature_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(method()), " model: the annotator feature standardisation does not match ",
          *annotator_feature_dim, " annotator feature dimensions"));
    }
    for (uint32_t c = 0; c < *columns; ++c) {
      absl::StatusOr<double> mean = reader->ReadF64();
      absl::StatusOr<double> scale = reader->ReadF64();
      if (!mean.ok() || !scale.ok() || !std::isfinite(*mean) || !std::isfinite(*scale)) {
        return absl::InvalidArgumentError(absl::StrCat(
            std::string(method()), " model: truncated or invalid annotator feature standardisation"));
      }
      feature_mean.push_back(*mean);
      feature_scale.push_back(*scale);
    }
  }
  if (absl::Status s = reader->ExpectEnd(); !s.ok()) return s;
  // The sizes come from the blob: bound them by the project's before any allocation.
  const struct {
    const char* what;
    uint32_t value;
    int64_t limit;
  } sizes[] = {{"items", *items, bounds.max_items},
               {"annotators", *annotators, bounds.max_annotators},
               {"item feature dimensions", *feature_dim, bounds.max_item_feature_dim},
               {"annotator feature dimensions", *annotator_feature_dim,
                bounds.max_annotator_feature_dim}};
  for (const auto& size : sizes) {
    if (static_cast<int64_t>(size.value) > size.limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(method()), " model: parameters claim ", size.value, " ", size.what,
          ", more than the project's ", size.limit));
    }
  }
  std::shared_ptr<CrowdNet> previous = std::move(net_);
  const int32_t previous_items = fitted_items_, previous_annotators = fitted_annotators_;
  const int64_t previous_feature_dim = item_feature_dim_;
  const int64_t previous_annotator_feature_dim = annotator_feature_dim_;
  std::vector<double> previous_mean = fitted_feature_mean_, previous_scale = fitted_feature_scale_;
  try {
    // The networks' feature buffers come back from the archive.
    SetItemFeatureDim(*feature_dim);
    annotator_feature_dim_ = *annotator_feature_dim;
    net_ = BuildNet(static_cast<int32_t>(*items), static_cast<int32_t>(*annotators));
    std::istringstream in{std::string(*archive_bytes)};
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    net_->load(archive);
    net_->eval();
    fitted_items_ = static_cast<int32_t>(*items);
    fitted_annotators_ = static_cast<int32_t>(*annotators);
    fitted_feature_mean_ = std::move(feature_mean);
    fitted_feature_scale_ = std::move(feature_scale);
    ExportAll();
  } catch (const std::exception& e) {
    net_ = std::move(previous);
    fitted_items_ = previous_items;
    fitted_annotators_ = previous_annotators;
    SetItemFeatureDim(previous_feature_dim);
    annotator_feature_dim_ = previous_annotator_feature_dim;
    fitted_feature_mean_ = std::move(previous_mean);
    fitted_feature_scale_ = std::move(previous_scale);
    if (net_ != nullptr) ExportAll();
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(method()), " model: parameters do not load: ", e.what()));
  }
  return absl::OkStatus();
}

namespace {

// Validates and standardises (zero mean, unit variance per column) row-major features; `mean`
// and `scale` receive each column's mean and the factor applied after subtracting it.
absl::Status StandardiseFeatures(const char* what, int32_t dim, std::vector<float>& features,
                                 std::vector<double>& mean_out, std::vector<double>& scale_out) {
  if (dim < 0 || (dim == 0 && !features.empty()) ||
      (dim > 0 && features.size() % static_cast<size_t>(dim) != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " features: ", features.size(), " values do not make rows of dimension ", dim));
  }
  for (size_t i = 0; i < features.size(); ++i) {
    if (!std::isfinite(features[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, " features: value ", i, " is not finite"));
    }
  }
  const size_t rows = dim > 0 ? features.size() / dim : 0;
  mean_out.assign(dim, 0.0);
  scale_out.assign(dim, 1.0);
  for (int32_t c = 0; c < dim; ++c) {
    double mean = 0, square = 0;
    for (size_t r = 0; r < rows; ++r) mean += features[r * dim + c] / rows;
    for (size_t r = 0; r < rows; ++r) square += std::pow(features[r * dim + c] - mean, 2) / rows;
    const double scale = square > 1e-12 ? 1.0 / std::sqrt(square) : 1.0;
    mean_out[c] = mean;
    scale_out[c] = scale;
    for (size_t r = 0; r < rows; ++r) {
      features[r * dim + c] = static_cast<float>((features[r * dim + c] - mean) * scale);
    }
  }
  return absl::OkStatus();
}

}  // namespace

void NeuralTruthModel::LoadFeatures(RowEncoder& encoder, int64_t dim,
                                    const std::vector<float>& features, int32_t num_rows) {
  if (dim == 0 || encoder->feature_dim() != dim) return;
  // Rows beyond the given features stay zero (the mean, after standardisation).
  const int64_t rows = std::min<int64_t>(num_rows, static_cast<int64_t>(features.size()) / dim);
  torch::Tensor all = torch::zeros({std::max<int64_t>(1, num_rows), dim});
  if (rows > 0) {
    all.narrow(0, 0, rows).copy_(
        torch::from_blob(const_cast<float*>(features.data()), {rows, dim}, torch::kFloat));
  }
  encoder->SetFeatures(all);
}

absl::Status NeuralTruthModel::SetItemFeatures(int32_t dim, std::vector<float> features) {
  std::vector<double> unused_mean, unused_scale;
  if (absl::Status s = StandardiseFeatures("item", dim, features, unused_mean, unused_scale);
      !s.ok()) {
    return s;
  }
  SetItemFeatureDim(dim);
  item_features_ = std::move(features);
  return absl::OkStatus();
}

absl::Status NeuralTruthModel::SetAnnotatorFeatures(int32_t dim, std::vector<float> features) {
  if (absl::Status s = StandardiseFeatures("annotator", dim, features, annotator_feature_mean_,
                                          annotator_feature_scale_);
      !s.ok()) {
    return s;
  }
  annotator_feature_dim_ = dim;
  annotator_features_ = std::move(features);
  return absl::OkStatus();
}

}  // namespace verity::models::neural
