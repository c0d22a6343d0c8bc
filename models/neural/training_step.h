// TrainingStep: one minibatch step of a training loop — zero the gradients, compute the loss of
// the batch, back-propagate, update with FlatAmsGrad — run eagerly, or on CUDA replayed from a
// CUDA graph.
//
// Why: the networks here are small (16-unit layers), so a step on a GPU is a few hundred tiny
// kernels, and launching them from the host cost more than running them (about 2.7 ms a step
// for lia on an H100, 14 s for an epoch of 5M labels). A CUDA graph launches the whole step at
// once. The graph is captured at the first full-size batch after a few eager warm-up steps
// (which train as usual), and replayed for every later full-size batch with the batch's rows
// copied into the captured input; a batch of another size (an epoch's last) runs eagerly.
//
// Contract for the loss function: it must be a pure function of the batch (int64 rows on the
// device) and of tensors that live, at the same addresses, as long as this object: captured
// kernels read those addresses. Refill a tensor in place (copy_) to change its values between
// steps, never rebind it. It must not read device values on the host (no item(), no nonzero()).
//
// Graphs are used when all hold: the build has CUDA graph support (VERITY_CUDA_GRAPHS, set when
// building against a CUDA LibTorch), `use_graph` (TruthModelOptions::Neural::cuda_graphs), the
// device is CUDA, and the optimiser keeps its step on the device. Otherwise every step is eager,
// exactly as before. A loss that synchronises with the device is detected during the warm-up
// steps (LibTorch's sync check): that loop then stays eager. If a capture fails nevertheless,
// Run throws (the fit fails with INTERNAL), later TrainingSteps of the process run eagerly,
// and LibTorch's CUDA generator may be unusable until the process restarts.
#ifndef VERITY_MODELS_NEURAL_TRAINING_STEP_H_
#define VERITY_MODELS_NEURAL_TRAINING_STEP_H_

#include <cstdint>
#include <functional>
#include <memory>

#include <torch/torch.h>

#include "models/neural/flat_amsgrad.h"

namespace verity::models::neural {

// Whether this build can capture CUDA graphs (a CUDA LibTorch with VERITY_CUDA_GRAPHS).
bool CudaGraphsCompiledIn();

class TrainingStep {
 public:
  using LossFunction = std::function<torch::Tensor(const torch::Tensor& rows)>;

  // `optimizer` must outlive this object. `batch_size`: the size of the batches to capture.
  TrainingStep(FlatAmsGrad& optimizer, LossFunction loss, int64_t batch_size, bool use_graph);
  ~TrainingStep();
  TrainingStep(const TrainingStep&) = delete;
  TrainingStep& operator=(const TrainingStep&) = delete;

  // One step on `rows` (int64, on the parameters' device).
  void Run(const torch::Tensor& rows);
  // Whether a captured graph is being replayed.
  bool replaying() const;
  // Steps replayed from CUDA graphs in this process so far (tests and benchmarks).
  static int64_t GraphReplays();

 private:
  void RunEagerly(const torch::Tensor& rows);

  struct Graph;  // CUDA graph state; only in builds with VERITY_CUDA_GRAPHS
  FlatAmsGrad& optimizer_;
  LossFunction loss_;
  int64_t batch_size_;
  bool use_graph_;
  int eager_full_batches_ = 0;
  std::unique_ptr<Graph> graph_;
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_TRAINING_STEP_H_
