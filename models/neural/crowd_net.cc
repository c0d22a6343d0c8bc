#include "models/neural/crowd_net.h"

#include <string>

namespace verity::models::neural {

torch::nn::Sequential MakeMlp(int64_t in, int64_t hidden, int64_t out, int layers) {
  torch::nn::Sequential mlp;
  int64_t width = in;
  for (int l = 0; l + 1 < layers; ++l) {
    mlp->push_back(torch::nn::Linear(width, hidden));
    mlp->push_back(torch::nn::ReLU());
    width = hidden;
  }
  mlp->push_back(torch::nn::Linear(width, out));
  return mlp;
}

void CopyOverlappingParameters(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto copy = [](const torch::OrderedDict<std::string, torch::Tensor>& source,
                 torch::OrderedDict<std::string, torch::Tensor>& target) {
    for (auto& item : target) {
      const torch::Tensor* old = source.find(item.key());
      if (old == nullptr) continue;
      torch::Tensor& now = item.value();
      if (old->sizes() == now.sizes()) {
        now.copy_(old->to(now.device()));
        continue;
      }
      if (old->dim() != now.dim() || old->dim() == 0) continue;
      bool rest_equal = true;
      for (int64_t d = 1; d < old->dim(); ++d) rest_equal &= old->size(d) == now.size(d);
      if (!rest_equal) continue;
      const int64_t rows = std::min(old->size(0), now.size(0));
      now.narrow(0, 0, rows).copy_(old->narrow(0, 0, rows).to(now.device()));
    }
  };
  auto from_params = from.named_parameters();
  auto to_params = to.named_parameters();
  copy(from_params, to_params);
  auto from_buffers = from.named_buffers();
  auto to_buffers = to.named_buffers();
  copy(from_buffers, to_buffers);
}

}  // namespace verity::models::neural
