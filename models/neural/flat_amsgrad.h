// FlatAmsGrad: AMSGrad (Adam keeping the running maximum of the second moment; Reddi et al.,
// "On the Convergence of Adam and Beyond"), the update of torch::optim::Adam with amsgrad(true)
// and no weight decay, made over all of a network's parameters at once.
//
// The constructor moves the parameters into one flat buffer (each parameter becomes a view of
// it) and gives every parameter a gradient that is a view of one flat gradient buffer, which
// autograd accumulates into in place. A step is then a fixed handful of element-wise kernels
// over the flat buffers, however many parameter tensors the network has; torch's Adam runs
// about a dozen per tensor, and on a GPU the launch overhead of those dominated the steps of
// these small networks. The arithmetic is element for element torch's, so a fit gives the same
// parameters as with torch::optim::Adam, except that a parameter that never received a
// gradient is still updated with a zero gradient (its moments decay) where torch skips it.
//
// Embedding tables can be left to SparseRowAmsGrad instead (the constructor's `row_tables`):
// the same update, made only on the rows a step used (sparse_row_amsgrad.h).
//
// Preconditions: every parameter that requires a gradient is a float tensor on one device, and
// the parameters are not replaced (module.to(), load) while the optimiser lives. The
// destructor drops the gradients, so a trained network does not keep a gradient buffer as
// large as itself; the parameters stay views of the flat buffer.
//
// Thread safety: none; one training loop owns it.
#ifndef VERITY_MODELS_NEURAL_FLAT_AMSGRAD_H_
#define VERITY_MODELS_NEURAL_FLAT_AMSGRAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "models/neural/crowd_net.h"
#include "models/neural/sparse_row_amsgrad.h"

namespace verity::models::neural {

class FlatAmsGrad {
 public:
  // Throws std::invalid_argument when the parameters break the preconditions (mixed devices
  // or dtypes); the fit turns it into an INTERNAL status like any LibTorch error.
  // `on_device_step`: keep the step count and the bias corrections in tensors on the
  // parameters' device, so that Step() reads nothing from the host and can be captured in a
  // CUDA graph (training_step.h). Its arithmetic differs from torch's in the last bits. On CUDA
  // with torch >= 2 (the CUDA builds) the step is torch's fused Adam kernel.
  // `row_tables`: embedding encoders (without features) whose tables are updated sparsely
  // instead (sparse_row_amsgrad.h), with the same hyper-parameters and step count; their
  // tables are left out of the flat buffer. They must outlive the optimiser.
  FlatAmsGrad(std::vector<torch::Tensor> parameters, double learning_rate,
              bool on_device_step = false, const std::vector<RowEncoderImpl*>& row_tables = {},
              double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8);
  ~FlatAmsGrad();
  FlatAmsGrad(const FlatAmsGrad&) = delete;
  FlatAmsGrad& operator=(const FlatAmsGrad&) = delete;

  // Sets every gradient to zero (one kernel) and forgets the row tables' gathers.
  void ZeroGrad();
  // One AMSGrad update from the accumulated gradients.
  void Step();
  // Calls of Step() (a step captured in a CUDA graph counts once, however often replayed).
  int64_t steps() const { return steps_; }
  bool on_device_step() const { return device_step_.defined(); }

 private:
  std::vector<torch::Tensor> parameters_;
  std::vector<std::unique_ptr<SparseRowAmsGrad>> row_tables_;
  torch::Tensor flat_, grad_, exp_avg_, exp_avg_sq_, max_exp_avg_sq_, denom_;
  torch::Tensor device_step_;  // float scalar on the device; undefined unless on_device_step
  double learning_rate_, beta1_, beta2_, eps_;
  int64_t steps_ = 0;
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_FLAT_AMSGRAD_H_
