// FlatAmsGrad against torch::optim::Adam(amsgrad=true): the same network, initialisation and
// minibatches must give the same parameters, step after step.
#include "models/neural/flat_amsgrad.h"

#include <vector>

#include <torch/torch.h>

#include "gtest/gtest.h"

namespace verity::models::neural {
namespace {

// An embedding table (whose gradient autograd builds densely from the rows a batch uses) and
// a two-layer MLP: the parameter kinds of the neural truth models.
struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    embedding = register_module("embedding", torch::nn::Embedding(50, 8));
    hidden = register_module("hidden", torch::nn::Linear(8, 16));
    out = register_module("out", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(const torch::Tensor& rows) {
    return torch::log_softmax(out->forward(torch::relu(hidden->forward(embedding->forward(rows)))), 1);
  }
  torch::nn::Embedding embedding{nullptr};
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};
TORCH_MODULE(TinyNet);

// Trains two copies of TinyNet on `device` for 40 steps, one with torch's AMSGrad and one with
// FlatAmsGrad(on_device_step), and compares their parameters.
void ExpectSameTrainingAsTorch(torch::Device device, bool on_device_step) {
  torch::manual_seed(7);
  TinyNet reference;
  TinyNet flat;
  {
    torch::NoGradGuard no_grad;
    auto from = reference->parameters();
    auto to = flat->parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  reference->to(device);
  flat->to(device);
  torch::optim::Adam adam(reference->parameters(), torch::optim::AdamOptions(0.01).amsgrad(true));
  FlatAmsGrad optimizer(flat->parameters(), 0.01, on_device_step);
  EXPECT_EQ(optimizer.on_device_step(), on_device_step);

  for (int step = 0; step < 40; ++step) {
    // Batches that use only some of the embedding rows.
    torch::Tensor rows = torch::randint(0, 25 + step % 25, {32}, torch::kLong).to(device);
    torch::Tensor targets = torch::randint(0, 3, {32}, torch::kLong).to(device);
    adam.zero_grad();
    torch::nll_loss(reference->forward(rows), targets).backward();
    adam.step();
    optimizer.ZeroGrad();
    torch::nll_loss(flat->forward(rows), targets).backward();
    optimizer.Step();
  }
  EXPECT_EQ(optimizer.steps(), 40);
  auto expected = reference->parameters();
  auto actual = flat->parameters();
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::allclose(actual[i], expected[i], /*rtol=*/1e-4, /*atol=*/1e-5))
        << "parameter " << i << " differs by "
        << (actual[i] - expected[i]).abs().max().item<float>();
  }
  // The parameters moved away from their initialisation (the comparison is not vacuous).
  torch::manual_seed(7);
  TinyNet initial;
  EXPECT_GT((reference->out->weight.detach().to(torch::kCPU) - initial->out->weight)
                .abs().max().item<float>(),
            1e-3);
}

TEST(FlatAmsGradTest, MatchesTorchAmsGradStepForStep) {
  ExpectSameTrainingAsTorch(torch::kCPU, /*on_device_step=*/false);
}

TEST(FlatAmsGradTest, OnDeviceStepMatchesTorchAmsGrad) {
  ExpectSameTrainingAsTorch(torch::kCPU, /*on_device_step=*/true);
}

// On a GPU the on-device step is torch's fused kernel in CUDA builds.
TEST(FlatAmsGradTest, OnDeviceStepMatchesTorchAmsGradOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectSameTrainingAsTorch(torch::Device(torch::kCUDA, 0), /*on_device_step=*/true);
  ExpectSameTrainingAsTorch(torch::Device(torch::kCUDA, 0), /*on_device_step=*/false);
}

TEST(FlatAmsGradTest, ParametersMoveAndGradientsAreDroppedAfterwards) {
  torch::manual_seed(3);
  TinyNet net;
  torch::Tensor before = net->out->weight.detach().clone();
  {
    FlatAmsGrad optimizer(net->parameters(), 0.05);
    for (int step = 0; step < 5; ++step) {
      optimizer.ZeroGrad();
      torch::nll_loss(net->forward(torch::arange(10)), torch::zeros({10}, torch::kLong)).backward();
      optimizer.Step();
    }
    EXPECT_TRUE(net->out->weight.grad().defined());
  }
  EXPECT_GT((net->out->weight - before).abs().max().item<float>(), 1e-3);
  EXPECT_FALSE(net->out->weight.grad().defined());
  // The network still trains with an ordinary optimiser afterwards.
  torch::optim::SGD sgd(net->parameters(), 0.1);
  sgd.zero_grad();
  torch::nll_loss(net->forward(torch::arange(10)), torch::zeros({10}, torch::kLong)).backward();
  sgd.step();
  EXPECT_TRUE(net->out->weight.grad().defined());
}

TEST(FlatAmsGradTest, RejectsParametersOfMixedTypes) {
  std::vector<torch::Tensor> parameters = {torch::zeros({2}, torch::kFloat).requires_grad_(),
                                           torch::zeros({2}, torch::kDouble).requires_grad_()};
  EXPECT_THROW(FlatAmsGrad(parameters, 0.1), std::invalid_argument);
}

}  // namespace
}  // namespace verity::models::neural
