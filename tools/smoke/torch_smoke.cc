#include <torch/torch.h>
#include <iostream>
int main() { std::cout << torch::ones({2, 2}).sum().item<float>() << "\n"; }
