// feature_eval: the neural models with item features, as the CrowdLayer and CoNAL papers
// evaluate them: train on the crowd labels of the train split, report the accuracy of the
// truth network h(x) on the test split (items without labels, so their posterior is h(x)).
// Baselines: the same h (feature projection + 2-layer MLP, AMSGrad, 3,000 steps) trained on
// majority-vote and on Dawid-Skene posteriors of the train items.
//
//   bazel build //models/neural:feature_eval
//   bazel-bin/models/neural/feature_eval --data=../shared/datasets/labelme
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "models/csv.h"
#include "models/csv_dataset.h"
#include "models/neural/crowd_net.h"
#include "models/truth_model_factory.h"

ABSL_FLAG(std::string, data, "", "A shared/datasets folder with features.csv and splits.csv.");
ABSL_FLAG(std::string, methods, "lia,crowdlayer,trace_reg,conal,cmm", "Neural methods to train.");
ABSL_FLAG(int, steps, 0, "Optimiser steps (0: the models' default).");
ABSL_FLAG(int, threads, 2, "LibTorch threads.");

namespace {

using verity::models::CsvDataset;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) text.append(buffer, n);
  std::fclose(f);
  return text;
}

int Die(const absl::Status& s) {
  std::fprintf(stderr, "feature_eval: %s\n", s.ToString().c_str());
  return 1;
}

// Test accuracy of an MLP h on the features trained on soft targets of the train items.
double TrainedClassifierAccuracy(const torch::Tensor& features, const torch::Tensor& targets,
                                 const std::vector<int64_t>& train, const std::vector<int64_t>& test,
                                 const std::vector<int32_t>& gold, int64_t steps) {
  torch::manual_seed(1);
  const int64_t k = targets.size(1);
  // The same shape as the models' h: a ReLU projection of the features, then a 2-layer MLP.
  torch::nn::Linear projection(features.size(1), 16);
  torch::nn::Sequential mlp = verity::models::neural::MakeMlp(16, 16, k, 2);
  auto h = [&](const torch::Tensor& in) { return mlp->forward(torch::relu(projection->forward(in))); };
  std::vector<torch::Tensor> parameters = projection->parameters();
  for (const torch::Tensor& t : mlp->parameters()) parameters.push_back(t);
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(1e-3).amsgrad(true));
  torch::Tensor train_idx = torch::tensor(train, torch::kLong);
  const int64_t batch = std::min<int64_t>(1024, train_idx.size(0));
  for (int64_t s = 0; s < steps; ++s) {
    torch::Tensor idx = train_idx.index_select(0, torch::randint(train_idx.size(0), {batch}, torch::kLong));
    torch::Tensor loss = -(targets.index_select(0, idx) *
                           torch::log_softmax(h(features.index_select(0, idx)), 1))
                              .sum(1)
                              .mean();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  torch::NoGradGuard no_grad;
  torch::Tensor predicted =
      h(features.index_select(0, torch::tensor(test, torch::kLong))).argmax(1);
  int64_t correct = 0;
  for (size_t t = 0; t < test.size(); ++t) correct += predicted[t].item<int64_t>() == gold[test[t]];
  return static_cast<double>(correct) / test.size();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  torch::set_num_threads(absl::GetFlag(FLAGS_threads));
  const std::string dir = absl::GetFlag(FLAGS_data);
  absl::StatusOr<CsvDataset> data = verity::models::ReadCsvDataset(dir);
  if (!data.ok()) return Die(data.status());
  const int32_t n = data->num_items(), k = data->num_classes();

  // features.csv → rows in dense item order (standardised by the models themselves).
  absl::StatusOr<std::string> text = ReadText(dir + "/features.csv");
  if (!text.ok()) return Die(text.status());
  int32_t dim = 0;
  std::vector<float> features;
  std::vector<bool> has_features(n, false);
  absl::Status parsed = verity::models::ForEachCsvRecord(
      *text, [&](int64_t line, absl::Span<const std::string> f) -> absl::Status {
        if (line == 1) {
          dim = static_cast<int32_t>(f.size()) - 1;
          features.assign(static_cast<size_t>(n) * dim, 0.0f);
          return absl::OkStatus();
        }
        auto it = data->item_index.find(f[0]);
        if (it == data->item_index.end()) return absl::OkStatus();  // no labels, no gold
        for (int32_t c = 0; c < dim; ++c) {
          if (!absl::SimpleAtof(f[c + 1], &features[static_cast<size_t>(it->second) * dim + c])) {
            return absl::InvalidArgumentError(absl::StrCat("features.csv:", line, ": bad number"));
          }
        }
        has_features[it->second] = true;
        return absl::OkStatus();
      });
  if (!parsed.ok()) return Die(parsed);
  absl::StatusOr<std::string> splits_text = ReadText(dir + "/splits.csv");
  if (!splits_text.ok()) return Die(splits_text.status());
  std::vector<std::string> split(n);
  parsed = verity::models::ForEachCsvRecord(
      *splits_text, [&](int64_t line, absl::Span<const std::string> f) -> absl::Status {
        if (line == 1) return absl::OkStatus();
        auto it = data->item_index.find(f[0]);
        if (it != data->item_index.end()) split[it->second] = f[1];
        return absl::OkStatus();
      });
  if (!parsed.ok()) return Die(parsed);

  // Crowd labels of train items only; test items are scored on h(x).
  std::vector<verity::models::Annotation> train_labels;
  for (const auto& a : data->annotations) {
    if (split[a.item] == "train") train_labels.push_back(a);
  }
  auto matrix = verity::models::AnnotationMatrix::Build(n, data->num_annotators(), k, train_labels);
  if (!matrix.ok()) return Die(matrix.status());
  std::vector<int64_t> train, test;
  for (int32_t i = 0; i < n; ++i) {
    if (split[i] == "train" && !matrix->LabelsOfItem(i).empty()) train.push_back(i);
    if (split[i] == "test" && data->gold[i] >= 0 && has_features[i]) test.push_back(i);
  }
  std::printf("%s: %d features, %zu train items with labels, %zu test items, %zu labels\n",
              dir.c_str(), dim, train.size(), test.size(), train_labels.size());
  std::printf("| h trained on | test accuracy | fit s |\n|---|---:|---:|\n");

  verity::models::TruthModelOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  options.neural.device = "cpu";
  if (absl::GetFlag(FLAGS_steps) > 0) options.neural.steps = absl::GetFlag(FLAGS_steps);
  const int64_t baseline_steps = absl::GetFlag(FLAGS_steps) > 0 ? absl::GetFlag(FLAGS_steps) : 3000;

  // Baselines: soft majority vote and Dawid-Skene posteriors of the train items.
  torch::Tensor x = torch::from_blob(features.data(), {n, dim}, torch::kFloat).clone();
  x = (x - x.mean(0)) / x.std(0).clamp_min(1e-6);
  for (const char* method : {"mv", "ds"}) {
    auto model = verity::models::CreateTruthModel(method, k, options);
    if (!model.ok() || !(*model)->Fit(*matrix, {}, false).ok()) return Die(absl::InternalError(method));
    std::vector<double> posteriors = verity::models::AllPosteriors(**model, *matrix, {});
    std::vector<float> as_float(posteriors.begin(), posteriors.end());
    torch::Tensor targets = torch::from_blob(as_float.data(), {n, k}, torch::kFloat).clone();
    const auto start = std::chrono::steady_clock::now();
    const double accuracy = TrainedClassifierAccuracy(x, targets, train, test, data->gold, baseline_steps);
    std::printf("| %s posteriors | %.4f | %.1f |\n", method, accuracy,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const std::vector<std::string> methods =
      absl::StrSplit(absl::GetFlag(FLAGS_methods), ',', absl::SkipEmpty());
  for (const std::string& method : methods) {
    auto model = verity::models::CreateTruthModel(method, k, options);
    if (!model.ok()) return Die(model.status());
    if (absl::Status s = (*model)->SetItemFeatures(dim, features); !s.ok()) return Die(s);
    auto report = (*model)->Fit(*matrix, {}, false);
    if (!report.ok()) return Die(report.status());
    int64_t correct = 0;
    std::vector<double> p(k);
    for (int64_t i : test) {
      (*model)->ItemPosteriorForItem(static_cast<int32_t>(i), {}, -1, absl::MakeSpan(p));
      correct += std::max_element(p.begin(), p.end()) - p.begin() == data->gold[i];
    }
    std::printf("| %s (end to end) | %.4f | %.1f |\n", method.c_str(),
                static_cast<double>(correct) / test.size(), report->seconds);
    std::fflush(stdout);
  }
  return 0;
}
