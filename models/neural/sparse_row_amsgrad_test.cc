// SparseRowAmsGrad against the dense AMSGrad (FlatAmsGrad over the whole table): the same
// update on the rows a step used, bit for bit on the CPU, and nothing on the rows it did not.
// FlatAmsGrad gives its row tables beta1 = 0 (flat_amsgrad.cc), so the dense runs here use
// beta1 = 0 for every parameter (kBeta1).
#include "models/neural/sparse_row_amsgrad.h"

#include <vector>

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "models/neural/crowd_net.h"
#include "models/neural/flat_amsgrad.h"

namespace verity::models::neural {
namespace {

constexpr int64_t kRows = 40, kDim = 6, kClasses = 3;
constexpr double kBeta1 = 0.0;

// An embedding table and a linear head: the kinds of parameter of the neural truth models.
struct TableNetImpl : torch::nn::Module {
  TableNetImpl() {
    encoder = register_module("encoder", RowEncoder(kRows, kDim, 0));
    head = register_module("head", torch::nn::Linear(kDim, kClasses));
  }
  torch::Tensor Loss(const torch::Tensor& rows, const torch::Tensor& targets) {
    return torch::nll_loss(torch::log_softmax(head->forward(encoder->forward(rows)), 1), targets);
  }
  RowEncoder encoder{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(TableNet);

// Two nets with the same parameters on `device`: one trained densely, one sparsely.
struct Pair {
  explicit Pair(torch::Device device) {
    torch::manual_seed(3);
    torch::NoGradGuard no_grad;
    auto from = dense->parameters();
    auto to = sparse->parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
    dense->to(device);
    sparse->to(device);
  }
  TableNet dense, sparse;
};

torch::Tensor Table(TableNet& net) { return net->encoder->table().detach().cpu().clone(); }

// One step of each optimiser on the same batch.
void StepBoth(Pair& p, FlatAmsGrad& dense, FlatAmsGrad& sparse, const std::vector<int64_t>& rows,
              torch::Device device) {
  torch::Tensor r = torch::tensor(rows, torch::kLong).to(device);
  torch::Tensor targets = (r * 7 + 1).remainder(kClasses);
  dense.ZeroGrad();
  p.dense->Loss(r, targets).backward();
  dense.Step();
  sparse.ZeroGrad();
  p.sparse->Loss(r, targets).backward();
  sparse.Step();
}

void ExpectRowsEqual(const torch::Tensor& a, const torch::Tensor& b, const std::vector<int64_t>& rows,
                     bool exact) {
  for (int64_t row : rows) {
    if (exact) {
      EXPECT_TRUE(torch::equal(a[row], b[row])) << "row " << row << ": " << a[row] << " vs " << b[row];
    } else {
      EXPECT_TRUE(torch::allclose(a[row], b[row], 1e-5, 1e-6)) << "row " << row;
    }
  }
}

// Rows 2, 5 (twice) and 9 are used; every other row must keep its value, and the used rows and
// the head must be the dense step's.
void ExpectOneStepMatchesDense(torch::Device device, bool on_device_step, bool exact) {
  Pair p(device);
  const torch::Tensor before = Table(p.sparse);
  FlatAmsGrad dense(p.dense->parameters(), 0.05, on_device_step, {}, kBeta1);
  FlatAmsGrad sparse(p.sparse->parameters(), 0.05, on_device_step, {p.sparse->encoder.get()},
                     kBeta1);
  const std::vector<int64_t> used = {2, 5, 9, 5};
  StepBoth(p, dense, sparse, used, device);
  const torch::Tensor dense_table = Table(p.dense), sparse_table = Table(p.sparse);
  ExpectRowsEqual(dense_table, sparse_table, {2, 5, 9}, exact);
  for (int64_t row = 0; row < kRows; ++row) {
    if (row == 2 || row == 5 || row == 9) {
      EXPECT_FALSE(torch::equal(sparse_table[row], before[row])) << "row " << row << " did not move";
    } else {
      EXPECT_TRUE(torch::equal(sparse_table[row], before[row])) << "untouched row " << row << " moved";
    }
  }
  torch::Tensor dense_head = p.dense->head->weight.detach().cpu();
  torch::Tensor sparse_head = p.sparse->head->weight.detach().cpu();
  EXPECT_TRUE(exact ? torch::equal(dense_head, sparse_head)
                    : torch::allclose(dense_head, sparse_head, 1e-5, 1e-6));
}

TEST(SparseRowAmsGradTest, OneStepIsTheDenseStepOnTheUsedRowsAndLeavesTheOthers) {
  ExpectOneStepMatchesDense(torch::kCPU, /*on_device_step=*/false, /*exact=*/true);
}

TEST(SparseRowAmsGradTest, OneStepWithTheStepCountOnTheDevice) {
  ExpectOneStepMatchesDense(torch::kCPU, /*on_device_step=*/true, /*exact=*/true);
}

TEST(SparseRowAmsGradTest, OneStepOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // On CUDA the dense step is torch's fused kernel: equal up to rounding.
  ExpectOneStepMatchesDense(torch::Device(torch::kCUDA, 0), /*on_device_step=*/true,
                            /*exact=*/false);
}

// Rows used at every step never differ from the dense run: the dense update of a row that never
// had a gradient is zero, so only the lazy moments of rows skipped *between* uses can differ.
TEST(SparseRowAmsGradTest, RowsUsedAtEveryStepFollowTheDenseRunStepForStep) {
  Pair p(torch::kCPU);
  FlatAmsGrad dense(p.dense->parameters(), 0.02, false, {}, kBeta1);
  FlatAmsGrad sparse(p.sparse->parameters(), 0.02, false, {p.sparse->encoder.get()}, kBeta1);
  for (int step = 0; step < 25; ++step) {
    std::vector<int64_t> rows = {1, 4, 7, 10, 13};
    rows.push_back(1 + 3 * (step % 5));  // one of them twice
    StepBoth(p, dense, sparse, rows, torch::kCPU);
  }
  EXPECT_EQ(sparse.steps(), 25);
  EXPECT_TRUE(torch::equal(Table(p.dense), Table(p.sparse)));
  EXPECT_TRUE(torch::equal(p.dense->head->bias.detach(), p.sparse->head->bias.detach()));
}

// A row skipped by a step is neither read nor written (its moments wait, "lazy"); without a
// first moment the dense update leaves it in place too, so the tables stay equal.
TEST(SparseRowAmsGradTest, ARowSkippedByAStepIsNotWritten) {
  Pair p(torch::kCPU);
  FlatAmsGrad dense(p.dense->parameters(), 0.05, false, {}, kBeta1);
  FlatAmsGrad sparse(p.sparse->parameters(), 0.05, false, {p.sparse->encoder.get()}, kBeta1);
  StepBoth(p, dense, sparse, {3, 8}, torch::kCPU);
  const torch::Tensor after_first = Table(p.sparse);
  ExpectRowsEqual(Table(p.dense), after_first, {3, 8}, true);
  StepBoth(p, dense, sparse, {8}, torch::kCPU);
  EXPECT_TRUE(torch::equal(Table(p.sparse)[3], after_first[3]));
  EXPECT_FALSE(torch::equal(Table(p.sparse)[8], after_first[8]));
  EXPECT_TRUE(torch::equal(Table(p.dense), Table(p.sparse)));
}

TEST(SparseRowAmsGradTest, TheTableTakesGradientsAgainAfterTheOptimiser) {
  Pair p(torch::kCPU);
  {
    FlatAmsGrad sparse(p.sparse->parameters(), 0.05, false, {p.sparse->encoder.get()});
    EXPECT_FALSE(p.sparse->encoder->table().requires_grad());
  }
  EXPECT_TRUE(p.sparse->encoder->table().requires_grad());
  EXPECT_TRUE(p.sparse->encoder->gathers().empty());
  torch::Tensor rows = torch::tensor(std::vector<int64_t>{1, 2}, torch::kLong);
  p.sparse->Loss(rows, torch::zeros({2}, torch::kLong)).backward();
  EXPECT_TRUE(p.sparse->encoder->table().grad().defined());
}

TEST(SparseRowAmsGradTest, NoGradientPassesRecordNothing) {
  Pair p(torch::kCPU);
  FlatAmsGrad sparse(p.sparse->parameters(), 0.05, false, {p.sparse->encoder.get()});
  {
    torch::NoGradGuard no_grad;
    p.sparse->encoder->forward(torch::arange(kRows, torch::kLong));
  }
  EXPECT_TRUE(p.sparse->encoder->gathers().empty());
}

TEST(SparseRowAmsGradTest, AnEncoderOfFeaturesHasNoTable) {
  RowEncoder features(10, 4, 3);
  EXPECT_THROW(SparseRowAmsGrad(*features, 0.1), std::invalid_argument);
}

}  // namespace
}  // namespace verity::models::neural
