// Checks that @libtorch//:torch compiles and links against the configured LibTorch
// (LIBTORCH_HOME, default Debian's) and computes on the CPU.
#include <torch/torch.h>

#include <gtest/gtest.h>

TEST(LibTorchLinkTest, MatrixProductOnCpu) {
  torch::Tensor a = torch::tensor({{1.0, 2.0}, {3.0, 4.0}});
  torch::Tensor b = torch::tensor({{5.0, 6.0}, {7.0, 8.0}});
  torch::Tensor c = torch::matmul(a, b);
  EXPECT_DOUBLE_EQ(c[0][0].item<double>(), 19.0);
  EXPECT_DOUBLE_EQ(c[1][1].item<double>(), 50.0);
  EXPECT_EQ(c.device().type(), torch::kCPU);
}
