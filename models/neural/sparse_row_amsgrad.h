// SparseRowAmsGrad: AMSGrad for an embedding table (a RowEncoder without features) that reads
// and writes only the rows a training step used, so that a step over B labels costs O(B × dim)
// whatever the table's size. With 1M items the dense update moved the whole table and its three
// moment buffers (about 256 MB) at every step to change about 1,000 rows.
//
// How a step reaches the rows: while this object lives, the encoder's table takes no gradient.
// Each forward pass of the encoder that records gradients (training, grad mode on) gathers its
// rows into a leaf tensor of its own and remembers (rows, leaf) (RowEncoderImpl::Gather).
// Step() then adds every leaf's gradient into a persistent zeroed accumulator at its rows, so
// that a row used several times in a step gets the sum of its gradients, as in the dense
// gradient; updates the moments and the rows of those rows only; and zeroes the accumulator's
// rows again. Every operation has a size fixed by the batch (no unique(), nothing read on the
// host), so a step can be captured in a CUDA graph (training_step.h).
//
// Arithmetic: for a row used in the step, exactly FlatAmsGrad's (torch's AMSGrad) with the
// step's gradient of that row and the optimiser's global step count for the bias corrections,
// so one step from the same state gives the dense update on the used rows, bit for bit on the
// CPU. Rows a step does not use keep their values and moments ("lazy" moments, as torch's
// SparseAdam): the dense AMSGrad would decay their moments and, when beta1 > 0, keep moving
// them by momentum. FlatAmsGrad therefore runs its tables with beta1 = 0 (flat_amsgrad.cc).
//
// Thread safety: none; one training loop owns it. Precondition: the encoder outlives this
// object and is not moved to another device meanwhile.
#ifndef VERITY_MODELS_NEURAL_SPARSE_ROW_AMSGRAD_H_
#define VERITY_MODELS_NEURAL_SPARSE_ROW_AMSGRAD_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "models/neural/crowd_net.h"

namespace verity::models::neural {

class SparseRowAmsGrad {
 public:
  // Puts `encoder` (which must have no features) into sparse training.
  SparseRowAmsGrad(RowEncoderImpl& encoder, double learning_rate, double beta1 = 0.9,
                   double beta2 = 0.999, double eps = 1e-8);
  // Gives the table its gradient back (dense training) and forgets pending gathers.
  ~SparseRowAmsGrad();
  SparseRowAmsGrad(const SparseRowAmsGrad&) = delete;
  SparseRowAmsGrad& operator=(const SparseRowAmsGrad&) = delete;

  // Forgets the gathers of the previous step.
  void ZeroGrad();
  // Updates the rows gathered since ZeroGrad() from their leaves' gradients. `step`: the
  // optimiser's step count after this step (1 for the first), for the bias corrections.
  void Step(int64_t step);
  // The same with the step count in a float scalar on the table's device (capturable).
  void Step(const torch::Tensor& device_step);

 private:
  // The moment update of the rows used since ZeroGrad(): sums their gradients, updates and
  // stores their moments, and returns the rows (R, duplicates kept), their weights, first
  // moments and largest second moments (R × dim each; duplicates hold the same values).
  // False when no gathered row has a gradient.
  struct RowUpdate {
    torch::Tensor rows, weights, exp_avg, max_exp_avg_sq;
  };
  bool BeginUpdate(RowUpdate& update);
  // Stores the updated weights and zeroes the rows' gradient accumulator.
  void EndUpdate(const RowUpdate& update);

  RowEncoderImpl& encoder_;
  torch::Tensor table_;            // the encoder's embedding weights (num_rows × dim)
  torch::Tensor grad_sum_;         // num_rows × dim, zero outside a step
  torch::Tensor exp_avg_, exp_avg_sq_, max_exp_avg_sq_;  // num_rows × dim
  double learning_rate_, beta1_, beta2_, eps_;
};

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_SPARSE_ROW_AMSGRAD_H_
