// TrainingStep: eager steps on the CPU; on a GPU build with CUDA graphs, replayed steps, and a
// loss that reads a device value on the host (which cannot be captured) detected during the
// warm-up, its loop staying eager and training.
#include "models/neural/training_step.h"

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "models/neural/flat_amsgrad.h"

namespace verity::models::neural {
namespace {

constexpr int64_t kBatch = 64;

struct Problem {
  torch::nn::Linear layer{nullptr};
  torch::Tensor inputs, targets;
  torch::Tensor Loss(const torch::Tensor& rows) {
    return torch::cross_entropy_loss(layer->forward(inputs.index_select(0, rows)),
                                     targets.index_select(0, rows));
  }
};

Problem MakeProblem(torch::Device device) {
  torch::manual_seed(5);
  Problem p;
  p.layer = torch::nn::Linear(8, 3);
  p.layer->to(device);
  p.inputs = torch::randn({512, 8}).to(device);
  p.targets = p.inputs.narrow(1, 0, 3).argmax(1);  // learnable
  return p;
}

// Runs `steps` full batches and returns the loss over all rows before and after.
std::pair<float, float> Train(Problem& p, TrainingStep& step, int steps, torch::Device device) {
  torch::Tensor all = torch::arange(512, torch::TensorOptions(torch::kLong).device(device));
  const float before = p.Loss(all).item<float>();
  for (int s = 0; s < steps; ++s) {
    step.Run(torch::randperm(512, torch::TensorOptions(torch::kLong).device(device)).narrow(0, 0, kBatch));
  }
  return {before, p.Loss(all).item<float>()};
}

TEST(TrainingStepTest, EagerStepsTrainOnTheCpu) {
  Problem p = MakeProblem(torch::kCPU);
  FlatAmsGrad optimizer(p.layer->parameters(), 0.05);
  TrainingStep step(optimizer, [&p](const torch::Tensor& rows) { return p.Loss(rows); }, kBatch,
                    /*use_graph=*/true);
  const int64_t replays = TrainingStep::GraphReplays();
  auto [before, after] = Train(p, step, 60, torch::kCPU);
  EXPECT_LT(after, 0.7 * before);
  EXPECT_EQ(optimizer.steps(), 60);
  EXPECT_FALSE(step.replaying());
  EXPECT_EQ(TrainingStep::GraphReplays(), replays);
}

// A step clears the gradient before the loss's backward pass (training_step.h), so that each
// update follows its own batch's gradient. With the loss w · Σ rows, a step on row 1 leaves w's
// gradient at 1 and a step on row -1 then at -1 (0 had the two accumulated).
TEST(TrainingStepTest, EachStepTakesOnlyItsOwnBatchsGradient) {
  torch::Tensor w = torch::zeros({1}, torch::requires_grad());
  FlatAmsGrad optimizer({w}, 0.01);
  TrainingStep step(
      optimizer, [&w](const torch::Tensor& rows) { return (w * rows.to(torch::kFloat)).sum(); },
      /*batch_size=*/1, /*use_graph=*/false);
  step.Run(torch::tensor({int64_t{1}}));
  ASSERT_TRUE(w.grad().defined());
  EXPECT_FLOAT_EQ(w.grad().item<float>(), 1.0f);
  step.Run(torch::tensor({int64_t{-1}}));
  EXPECT_FLOAT_EQ(w.grad().item<float>(), -1.0f);
}

TEST(TrainingStepTest, CudaGraphReplayAndALossThatCannotBeCaptured) {
  if (!torch::cuda::is_available() || !CudaGraphsCompiledIn()) {
    GTEST_SKIP() << "needs a CUDA device and a build with CUDA graphs";
  }
  const torch::Device cuda(torch::kCUDA, 0);
  {
    Problem p = MakeProblem(cuda);
    FlatAmsGrad optimizer(p.layer->parameters(), 0.05, /*on_device_step=*/true);
    TrainingStep step(optimizer, [&p](const torch::Tensor& rows) { return p.Loss(rows); },
                      kBatch, /*use_graph=*/true);
    const int64_t replays = TrainingStep::GraphReplays();
    auto [before, after] = Train(p, step, 60, cuda);
    EXPECT_LT(after, 0.7 * before);
    EXPECT_TRUE(step.replaying());
    EXPECT_EQ(TrainingStep::GraphReplays(), replays + 60 - 3);  // all but the warm-up steps
  }
  {
    // item() waits for the device, which a captured graph cannot: the warm-up steps detect it
    // and the loop stays eager, training as usual.
    Problem p = MakeProblem(cuda);
    FlatAmsGrad optimizer(p.layer->parameters(), 0.05, /*on_device_step=*/true);
    TrainingStep step(
        optimizer,
        [&p](const torch::Tensor& rows) {
          torch::Tensor loss = p.Loss(rows);
          return loss * (loss.item<float>() > -1.0f ? 1.0 : 2.0);
        },
        kBatch, /*use_graph=*/true);
    const int64_t replays = TrainingStep::GraphReplays();
    auto [before, after] = Train(p, step, 60, cuda);
    EXPECT_LT(after, 0.7 * before);
    EXPECT_EQ(optimizer.steps(), 60);
    EXPECT_FALSE(step.replaying());
    EXPECT_EQ(TrainingStep::GraphReplays(), replays);
  }
  {
    // The next loop of the process is captured again.
    Problem p = MakeProblem(cuda);
    FlatAmsGrad optimizer(p.layer->parameters(), 0.05, /*on_device_step=*/true);
    TrainingStep step(optimizer, [&p](const torch::Tensor& rows) { return p.Loss(rows); },
                      kBatch, /*use_graph=*/true);
    Train(p, step, 10, cuda);
    EXPECT_TRUE(step.replaying());
  }
}

}  // namespace
}  // namespace verity::models::neural
