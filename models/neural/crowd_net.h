// CrowdNet: the LibTorch side of a neural truth model — the networks that map an item to a
// distribution over its true class and an (item, annotator) pair to a confusion matrix.
//
// Every per-item parameter tensor has the item count as its first dimension, and every
// per-annotator one the annotator count, so that a warm start onto more items or annotators
// copies the old rows and keeps the new rows' initialisation (CopyOverlappingParameters).
#ifndef VERITY_MODELS_NEURAL_CROWD_NET_H_
#define VERITY_MODELS_NEURAL_CROWD_NET_H_

#include <vector>

#include <torch/torch.h>

#include "models/neural/dense_layers.h"

namespace verity::models::neural {

// The layers of a feature encoder after its input (see RowEncoderImpl); a learned-embedding
// encoder ignores them.
struct FeatureEncoderOptions {
  int64_t layers = 1;       // >= 1
  double dropout = 0.0;     // in [0, 1): the rate of dropout after each layer, in training only
  bool batch_norm = false;  // BatchNorm1d between each Linear and its ReLU
};

// The representation of an item (or an annotator): a learned embedding per row when rows carry
// no features, or a small network over the row's features, kept in a buffer so that a
// serialized network carries them: `layers` times Linear (to `dim` units), [BatchNorm], ReLU,
// [Dropout]. Dropout and batch norm behave differently in training and eval mode
// (torch::nn::Module::train / eval); the output is `dim` wide in both.
class RowEncoderImpl : public torch::nn::Module {
 public:
  RowEncoderImpl(int64_t num_rows, int64_t dim, int64_t feature_dim,
                 FeatureEncoderOptions feature_options = {});
  torch::Tensor forward(const torch::Tensor& rows);
  // Copies `features` (num_rows x feature_dim) into the buffer. Precondition: feature mode.
  void SetFeatures(const torch::Tensor& features);
  int64_t feature_dim() const { return feature_dim_; }

  // Sparse training (sparse_row_amsgrad.h), for an encoder without features. While on, the
  // table takes no gradient, and each forward pass that records gradients (grad mode on)
  // returns its rows gathered into a leaf tensor of their own, remembered in gathers() until
  // the optimiser applies the leaf's gradient to those rows.
  struct Gather {
    torch::Tensor rows;  // int64, B
    torch::Tensor leaf;  // B × dim, requires grad
  };
  void SetSparseTraining(bool on);
  std::vector<Gather>& gathers() { return gathers_; }
  // The embedding weights (num_rows × dim); undefined with features.
  torch::Tensor table() const;
  // Feature mode without batch norm: the layers as plain C++ (dense_layers.h), which compute
  // forward() in eval mode on any standardised feature row. Empty otherwise (learned
  // embeddings, or batch norm, which the plain layers do not carry).
  std::vector<DenseLayer> ExportDenseLayers() const;

 private:
  int64_t feature_dim_;
  bool sparse_training_ = false;
  std::vector<Gather> gathers_;
  double dropout_ = 0;
  torch::nn::Embedding embedding_{nullptr};
  // Feature mode: layer 0 is "projection" (the name of the single layer before the encoder
  // had options, so that those archives still load), later ones "layer1", "layer2", ...
  std::vector<torch::nn::Linear> layers_;
  std::vector<torch::nn::BatchNorm1d> norms_;  // empty without batch norm
  torch::Tensor features_;
};
TORCH_MODULE(RowEncoder);

class CrowdNet : public torch::nn::Module {
 public:
  // The item encoder (see RowEncoderImpl); subclasses create it with InitItems.
  RowEncoder& items() { return items_; }
  // The annotator encoder of models that embed annotators (lia, conal); null for the others.
  RowEncoder& annotators() { return annotators_; }
  // Replaces the item encoder by `encoder`, whose output must have the width of the one the
  // subclass created (the networks after it are sized by it). Used by NeuralTruthModel to give
  // feature encoders the configured depth, dropout and batch norm.
  void ReplaceItemEncoder(RowEncoder encoder) { items_ = replace_module("items", std::move(encoder)); }

  // log p(true class | item) for a batch of item ids (int64, B): B x K.
  virtual torch::Tensor LogPrior(const torch::Tensor& items) = 0;
  // log p(label | true class, item, annotator): B x K x K, [b, k, y], rows log-normalised.
  virtual torch::Tensor LogConfusion(const torch::Tensor& items, const torch::Tensor& annotators) = 0;
  // log p(label | item, annotator), B x K: what the marginal-likelihood training fits. Default:
  // log sum_k p(k | item) p(label | k, item, annotator).
  virtual torch::Tensor LogNoisyLabel(const torch::Tensor& items, const torch::Tensor& annotators) {
    return torch::logsumexp(LogPrior(items).unsqueeze(2) + LogConfusion(items, annotators), 1);
  }
  // The method's regulariser (added to the mean loss of a minibatch); undefined when the
  // method has none (the default).
  virtual torch::Tensor Regularizer() { return torch::Tensor(); }
  // Called after every optimiser step of the marginal-likelihood training (outside any CUDA
  // graph), to restore constraints the parameterisation does not keep by itself, in place.
  // Default: nothing.
  virtual void AfterOptimizerStep() {}
  // Whether a warm start may copy `previous`'s parameters into this net (CopyOverlappingParameters
  // copies what has the same name and trailing sizes). Default: yes. A net whose parameters
  // change meaning with a size that the copy cannot see (lia's latent size L) says no.
  virtual bool CanWarmStartFrom(const CrowdNet& previous) const { return true; }

 protected:
  void InitItems(int64_t num_items, int64_t dim, int64_t feature_dim) {
    items_ = register_module("items", RowEncoder(std::max<int64_t>(1, num_items), dim, feature_dim));
  }
  void InitAnnotators(int64_t num_annotators, int64_t dim, int64_t feature_dim) {
    annotators_ = register_module(
        "annotators", RowEncoder(std::max<int64_t>(1, num_annotators), dim, feature_dim));
  }
  RowEncoder items_{nullptr};
  RowEncoder annotators_{nullptr};
};

// The values of `t` (any device, any dtype) as doubles, row-major.
std::vector<double> TensorToVector(const torch::Tensor& t);

// A small multilayer perceptron: `layers` Linear layers with ReLU between them.
torch::nn::Sequential MakeMlp(int64_t in, int64_t hidden, int64_t out, int layers);

// Copies into `to` every parameter and buffer of `from` with the same name: whole when the
// shapes are equal; when only the first dimension differs (per-item or per-annotator tables),
// the leading rows they share. Other mismatches are left at `to`'s initialisation. The
// encoders' "features" buffers are inputs, not learned state: `to` keeps its own (features
// given since the last fit would otherwise be replaced by the old ones).
void CopyOverlappingParameters(torch::nn::Module& from, torch::nn::Module& to);

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_CROWD_NET_H_
