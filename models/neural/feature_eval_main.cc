// feature_eval: the neural models with item features, under one protocol for every learner
// (docs/EVALUATION.md, "With item features"). Each learner trains a truth network h(x) on the
// crowd labels of the train split and is scored on the test split's gold (test items carry no
// labels in training, so their answer is h(x)):
//   - learners: the end-to-end crowd models (--methods) and two baselines, the same h trained on
//     the soft majority vote (h_mv) and on Dawid-Skene posteriors (h_ds) of the train items;
//     h is the models' feature truth network (RowEncoder + 2-layer head, TruthModelOptions::
//     Neural feature_*), trained with AMSGrad on minibatches sized so an epoch has as many
//     steps as the models' epochs over the labels;
//   - the same budget: --steps optimiser steps, with a checkpoint every --checkpoint_every;
//   - the same model selection, never on test gold: when the project has gold items in a
//     `valid` split, the checkpoint and the hyper-parameters with the best accuracy of h there
//     (ties: higher mean log h(gold)); otherwise a fixed --heldout_fraction of the labelled
//     train items is held out of training (for every learner) and the score is the mean over
//     them of log Σ_k h(x)[k] Π_(a, y) π_a[k, y], the likelihood of their crowd labels under
//     h and the Dawid-Skene confusions π fitted on the training labels — one criterion that
//     depends on h only;
//   - the same grid for every learner: --widths × --dropouts × --learning_rates ×
//     --weight_decays (the baselines' decay as the models': weight matrices only), and × the
//     method's λ (--trace_lambdas, --conal_lambdas) for trace_reg and conal;
//   - --seeds seeds per grid point. The checkpoint is chosen per seed (early stopping), the
//     grid point by the mean selection score over seeds; the table gives the test accuracy of
//     the chosen grid point, mean ± standard error over the seeds.
//
//   bazel build -c opt //models/neural:feature_eval
//   bazel-bin/models/neural/feature_eval --data=../shared/datasets/labelme
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "models/csv.h"
#include "models/csv_dataset.h"
#include "models/neural/crowd_net.h"
#include "models/neural/neural_truth_model.h"
#include "models/truth_model_factory.h"

ABSL_FLAG(std::string, data, "", "A shared/datasets folder with features.csv and splits.csv.");
ABSL_FLAG(std::string, methods, "h_mv,h_ds,crowdlayer,trace_reg,conal",
          "Learners: h_mv, h_ds (baselines) and neural methods (crowdlayer, trace_reg, conal, "
          "lia, cmm).");
ABSL_FLAG(int, steps, 1000, "Optimiser steps of every learner.");
ABSL_FLAG(int, checkpoint_every, 25, "Steps between checkpoints (model selection).");
ABSL_FLAG(int, seeds, 5, "Seeds 1..seeds per grid point.");
ABSL_FLAG(std::string, widths, "128", "Grid: truth network widths (feature_width).");
ABSL_FLAG(std::string, dropouts, "0,0.5", "Grid: dropout rates (feature_dropout).");
ABSL_FLAG(std::string, learning_rates, "0.001,0.01", "Grid: learning rates.");
ABSL_FLAG(std::string, trace_lambdas, "0.01,0.1", "Grid: trace_reg's λ.");
ABSL_FLAG(
    std::string, conal_lambdas, "0.00059,0.059",
    "Grid: conal's λ (on the mean distance over annotators: 5.9e-4 is the paper's 1e-5 on its sum "
    "over LabelMe's 59 annotators).");
ABSL_FLAG(double, heldout_fraction, 0.2,
          "Without a valid split: fraction of labelled train items held out for selection.");
ABSL_FLAG(std::string, weight_decays, "0",
          "Grid: decoupled weight decay of the truth network's weight matrices "
          "(TruthModelOptions::Neural::weight_decay), for the baselines too.");
ABSL_FLAG(int, threads, 1, "LibTorch threads.");

namespace {

using verity::models::AnnotationMatrix;
using verity::models::CsvDataset;
using verity::models::TruthModelOptions;
using verity::models::neural::CrowdNet;

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

std::vector<double> ParseList(const std::string& flag) {
  std::vector<double> values;
  for (absl::string_view v : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    double x;
    if (absl::SimpleAtod(v, &x)) values.push_back(x);
  }
  return values;
}

torch::Tensor AsIndex(const std::vector<int64_t>& rows) {
  return torch::tensor(rows, torch::kLong);
}

// Model selection: a score of h's log-probabilities on the selection items (higher is better,
// compared as a pair: first, then second).
using Score = std::pair<double, double>;
using Scorer = std::function<Score(const torch::Tensor& log_h)>;

// The best checkpoint of one training run.
struct RunResult {
  Score score{-INFINITY, -INFINITY};
  double test_accuracy = 0;
  int64_t step = 0;
};

// Everything a run needs: which items select and score, and how.
struct Protocol {
  int32_t num_classes = 0;
  torch::Tensor selection_items, test_items;
  std::vector<int32_t> test_gold;
  Scorer score;
  // Called at each checkpoint with the log h of the selection items and of the test items.
  void Checkpoint(int64_t step, const torch::Tensor& log_h_selection,
                  const torch::Tensor& log_h_test, RunResult& result) const {
    const Score s = score(log_h_selection);
    if (s <= result.score) return;
    torch::Tensor predicted = log_h_test.argmax(1).to(torch::kCPU);
    const int64_t* p = predicted.data_ptr<int64_t>();
    int64_t correct = 0;
    for (size_t t = 0; t < test_gold.size(); ++t) correct += p[t] == test_gold[t];
    result = {s, static_cast<double>(correct) / test_gold.size(), step};
  }
};

struct GridPoint {
  int width;
  double dropout, learning_rate, lambda, weight_decay;
};

// A baseline: the models' feature truth network trained on soft targets of the train items.
RunResult TrainBaseline(const Protocol& protocol, const std::vector<float>& features, int64_t dim,
                        const torch::Tensor& targets, const std::vector<int64_t>& train,
                        int64_t batch, const GridPoint& g, int64_t seed, int64_t steps,
                        int64_t every) {
  torch::manual_seed(seed);
  const int64_t n = targets.size(0);
  verity::models::neural::FeatureEncoderOptions encoder_options;
  TruthModelOptions defaults;
  encoder_options.layers = defaults.neural.feature_layers;
  encoder_options.batch_norm = defaults.neural.feature_batch_norm;
  encoder_options.dropout = g.dropout;
  verity::models::neural::RowEncoder encoder(n, g.width, dim, encoder_options);
  torch::Tensor x =
      torch::from_blob(const_cast<float*>(features.data()), {n, dim}, torch::kFloat).clone();
  encoder->SetFeatures((x - x.mean(0)) / x.std(0, /*unbiased=*/false).clamp_min(1e-6));
  torch::nn::Sequential head =
      verity::models::neural::MakeMlp(g.width, g.width, protocol.num_classes, 2);
  auto log_h = [&](const torch::Tensor& items) {
    return torch::log_softmax(head->forward(encoder->forward(items)), 1);
  };
  std::vector<torch::Tensor> parameters = encoder->parameters();
  for (const torch::Tensor& t : head->parameters()) parameters.push_back(t);
  torch::optim::Adam optimizer(parameters,
                               torch::optim::AdamOptions(g.learning_rate).amsgrad(true));
  const torch::Tensor train_idx = AsIndex(train);
  const int64_t m = train_idx.size(0);
  RunResult result;
  torch::Tensor order;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t start = (s * batch) % m;
    if (start < batch) order = train_idx.index_select(0, torch::randperm(m, torch::kLong));
    torch::Tensor idx = order.narrow(0, start, std::min(batch, m - start));
    encoder->train();
    head->train();
    torch::Tensor loss = -(targets.index_select(0, idx) * log_h(idx)).sum(1).mean();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    if (g.weight_decay > 0) {  // as TruthModelOptions::Neural::weight_decay: weight matrices only
      torch::NoGradGuard no_grad;
      for (torch::Tensor& t : parameters) {
        if (t.dim() == 2) t.mul_(std::max(0.0, 1.0 - g.learning_rate * g.weight_decay));
      }
    }
    if ((s + 1) % every == 0) {
      torch::NoGradGuard no_grad;
      encoder->eval();
      head->eval();
      protocol.Checkpoint(s + 1, log_h(protocol.selection_items), log_h(protocol.test_items),
                          result);
    }
  }
  return result;
}

// An end-to-end crowd model, through the TruthModel interface.
absl::StatusOr<RunResult> TrainCrowdModel(const Protocol& protocol, const std::string& method,
                                          const std::vector<float>& features, int32_t dim,
                                          const AnnotationMatrix& matrix, const GridPoint& g,
                                          int64_t seed, int64_t steps, int64_t every, int threads) {
  TruthModelOptions options;
  options.num_threads = threads;
  options.neural.device = "cpu";
  options.neural.seed = static_cast<uint64_t>(seed);
  options.neural.steps = static_cast<int>(steps);
  options.neural.feature_width = g.width;
  options.neural.feature_dropout = g.dropout;
  options.neural.learning_rate = g.learning_rate;
  options.neural.weight_decay = g.weight_decay;
  if (method == "trace_reg") options.neural.trace_lambda = g.lambda;
  if (method == "conal") options.neural.conal_lambda = g.lambda;
  // The bare model: the protocol reads the network's checkpoints, not served posteriors.
  auto model = verity::models::CreateUncalibratedTruthModel(method, protocol.num_classes, options);
  if (!model.ok()) return model.status();
  auto* neural = dynamic_cast<verity::models::neural::NeuralTruthModel*>(model->get());
  if (neural == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(method, " is not a neural method"));
  if (absl::Status s = neural->SetItemFeatures(dim, features); !s.ok()) return s;
  RunResult result;
  neural->SetCheckpointObserver(every, [&](int64_t step, CrowdNet& net) {
    if (step > steps) return;
    protocol.Checkpoint(step, net.LogPrior(protocol.selection_items),
                        net.LogPrior(protocol.test_items), result);
  });
  auto report = neural->Fit(matrix, {}, false);
  if (!report.ok()) return report.status();
  return result;
}

struct Aggregate {
  GridPoint point;
  std::vector<RunResult> runs;
  Score MeanScore() const {
    Score s{0, 0};
    for (const RunResult& r : runs) {
      s.first += r.score.first / runs.size();
      s.second += r.score.second / runs.size();
    }
    return s;
  }
};

// Whether grid point x's mean score is below y's. Mean accuracies of equal sums can differ in
// their last bits (the seeds' accuracies are added in a different order), so first scores
// within 1e-9 of each other tie and the second score decides.
bool MeanScoreBelow(const Aggregate& x, const Aggregate& y) {
  const Score a = x.MeanScore(), b = y.MeanScore();
  if (std::abs(a.first - b.first) > 1e-9) return a.first < b.first;
  return a.second < b.second;
}

std::string MeanSe(const std::vector<double>& v) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double square = 0;
  for (double x : v) square += (x - mean) * (x - mean);
  const double se = v.size() > 1 ? std::sqrt(square / (v.size() - 1) / v.size()) : 0;
  return absl::StrFormat("%.3f ± %.3f", mean, se);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int threads = absl::GetFlag(FLAGS_threads);
  torch::set_num_threads(threads);
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

  // Items: labelled train items train (minus a held-out part without a valid split), gold
  // valid items select, gold test items score.
  std::vector<int64_t> labelled_train, valid, test;
  for (int32_t i = 0; i < n; ++i) {
    if (!has_features[i]) continue;
    if (split[i] == "valid" && data->gold[i] >= 0) valid.push_back(i);
    if (split[i] == "test" && data->gold[i] >= 0) test.push_back(i);
  }
  absl::flat_hash_map<int32_t, int> labels_of;
  for (const auto& a : data->annotations) {
    if (split[a.item] == "train") ++labels_of[a.item];
  }
  for (int32_t i = 0; i < n; ++i) {
    if (split[i] == "train" && labels_of.contains(i) && has_features[i])
      labelled_train.push_back(i);
  }
  std::vector<int64_t> heldout;
  std::vector<bool> trains(n, false);
  if (valid.empty()) {
    std::vector<int64_t> shuffled = labelled_train;
    std::mt19937_64 rng(20240617);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    const size_t h = static_cast<size_t>(absl::GetFlag(FLAGS_heldout_fraction) * shuffled.size());
    heldout.assign(shuffled.begin(), shuffled.begin() + h);
    std::sort(heldout.begin(), heldout.end());
  }
  std::vector<bool> is_heldout(n, false);
  for (int64_t i : heldout) is_heldout[i] = true;
  std::vector<int64_t> train;
  for (int64_t i : labelled_train) {
    if (!is_heldout[i]) {
      train.push_back(i);
      trains[i] = true;
    }
  }
  std::vector<verity::models::Annotation> train_labels, heldout_labels;
  for (const auto& a : data->annotations) {
    if (trains[a.item]) train_labels.push_back(a);
    if (is_heldout[a.item]) heldout_labels.push_back(a);
  }
  auto matrix = AnnotationMatrix::Build(n, data->num_annotators(), k, train_labels);
  if (!matrix.ok()) return Die(matrix.status());
  auto heldout_matrix = AnnotationMatrix::Build(n, data->num_annotators(), k, heldout_labels);
  if (!heldout_matrix.ok()) return Die(heldout_matrix.status());

  TruthModelOptions classical;
  classical.num_threads = threads;
  auto ds = verity::models::CreateTruthModel("ds", k, classical);
  if (!ds.ok()) return Die(ds.status());
  if (auto fit = (*ds)->Fit(*matrix, {}, false); !fit.ok()) return Die(fit.status());

  Protocol protocol;
  protocol.num_classes = k;
  protocol.test_items = AsIndex(test);
  for (int64_t i : test) protocol.test_gold.push_back(data->gold[i]);
  std::string selection;
  if (!valid.empty()) {
    selection = absl::StrCat("accuracy on the ", valid.size(), " gold items of the valid split");
    protocol.selection_items = AsIndex(valid);
    std::vector<int64_t> valid_gold;
    for (int64_t i : valid) valid_gold.push_back(data->gold[i]);
    torch::Tensor gold = AsIndex(valid_gold);
    protocol.score = [gold](const torch::Tensor& log_h) {
      torch::Tensor g = gold.to(log_h.device());
      return Score{log_h.argmax(1).eq(g).to(torch::kDouble).mean().item<double>(),
                   log_h.gather(1, g.view({-1, 1})).mean().item<double>()};
    };
  } else {
    selection = absl::StrCat("likelihood of the crowd labels of ", heldout.size(),
                             " held-out train items under h and Dawid-Skene confusions");
    protocol.selection_items = AsIndex(heldout);
    // log Π_(a, y) π_a[k, y] of every held-out item: H x K.
    std::vector<float> log_labels(heldout.size() * k, 0.0f);
    for (size_t r = 0; r < heldout.size(); ++r) {
      for (const auto& e : heldout_matrix->LabelsOfItem(static_cast<int32_t>(heldout[r]))) {
        const std::vector<double> pi = (*ds)->AnnotatorConfusion(e.other);
        for (int32_t c = 0; c < k; ++c)
          log_labels[r * k + c] += std::log(std::max(pi[c * k + e.label], 1e-12));
      }
    }
    torch::Tensor log_labels_t =
        torch::from_blob(log_labels.data(), {static_cast<int64_t>(heldout.size()), k},
                         torch::kFloat)
            .clone();
    protocol.score = [log_labels_t](const torch::Tensor& log_h) {
      return Score{
          torch::logsumexp(log_h + log_labels_t.to(log_h.device()), 1).mean().item<double>(), 0};
    };
  }

  const int64_t steps = absl::GetFlag(FLAGS_steps), every = absl::GetFlag(FLAGS_checkpoint_every);
  const int seeds = absl::GetFlag(FLAGS_seeds);
  // Baseline minibatch: as many steps per epoch as the models' epochs over the labels.
  const int64_t label_batch =
      std::min<int64_t>(TruthModelOptions::Neural::kCpuBatchSize, train_labels.size());
  const int64_t steps_per_epoch =
      (static_cast<int64_t>(train_labels.size()) + label_batch - 1) / label_batch;
  const int64_t item_batch = std::max<int64_t>(
      1, (static_cast<int64_t>(train.size()) + steps_per_epoch - 1) / steps_per_epoch);
  std::printf(
      "%s: %d features, %zu train items with %zu labels, %zu held out, %zu valid gold, "
      "%zu test items; selection: %s; %lld steps, checkpoint every %lld, %d seeds\n",
      dir.c_str(), dim, train.size(), train_labels.size(), heldout.size(), valid.size(),
      test.size(), selection.c_str(), static_cast<long long>(steps), static_cast<long long>(every),
      seeds);
  std::fflush(stdout);

  std::vector<std::string> rows;
  for (absl::string_view method_view :
       absl::StrSplit(absl::GetFlag(FLAGS_methods), ',', absl::SkipEmpty())) {
    const std::string method(method_view);
    std::vector<double> lambdas = {0};
    if (method == "trace_reg") lambdas = ParseList(absl::GetFlag(FLAGS_trace_lambdas));
    if (method == "conal") lambdas = ParseList(absl::GetFlag(FLAGS_conal_lambdas));
    torch::Tensor targets;
    if (method == "h_mv" || method == "h_ds") {
      auto model = verity::models::CreateTruthModel(method == "h_mv" ? "mv" : "ds", k, classical);
      if (!model.ok()) return Die(model.status());
      if (auto fit = (*model)->Fit(*matrix, {}, false); !fit.ok()) return Die(fit.status());
      std::vector<double> posteriors = verity::models::AllPosteriors(**model, *matrix, {});
      std::vector<float> as_float(posteriors.begin(), posteriors.end());
      targets = torch::from_blob(as_float.data(), {n, k}, torch::kFloat).clone();
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<Aggregate> grid;
    for (double width : ParseList(absl::GetFlag(FLAGS_widths))) {
      for (double dropout : ParseList(absl::GetFlag(FLAGS_dropouts))) {
        for (double lr : ParseList(absl::GetFlag(FLAGS_learning_rates))) {
          for (double lambda : lambdas) {
            for (double weight_decay : ParseList(absl::GetFlag(FLAGS_weight_decays))) {
              Aggregate a{{static_cast<int>(width), dropout, lr, lambda, weight_decay}, {}};
              for (int seed = 1; seed <= seeds; ++seed) {
                if (targets.defined()) {
                  a.runs.push_back(TrainBaseline(protocol, features, dim, targets, train,
                                                 item_batch, a.point, seed, steps, every));
                } else {
                  auto run = TrainCrowdModel(protocol, method, features, dim, *matrix, a.point,
                                             seed, steps, every, threads);
                  if (!run.ok()) return Die(run.status());
                  a.runs.push_back(*run);
                }
              }
              std::vector<double> accuracies;
              for (const RunResult& r : a.runs) accuracies.push_back(r.test_accuracy);
              std::fprintf(
                  stderr,
                  "%s width=%d dropout=%g lr=%g lambda=%g weight_decay=%g: selection %.4f / "
                  "%.4f, test %s\n",
                  method.c_str(), a.point.width, dropout, lr, lambda, weight_decay,
                  a.MeanScore().first, a.MeanScore().second, MeanSe(accuracies).c_str());
              grid.push_back(std::move(a));
            }
          }
        }
      }
    }
    const Aggregate& best = *std::max_element(grid.begin(), grid.end(), MeanScoreBelow);
    std::vector<double> accuracies;
    double mean_step = 0;
    for (const RunResult& r : best.runs) {
      accuracies.push_back(r.test_accuracy);
      mean_step += static_cast<double>(r.step) / best.runs.size();
    }
    std::string chosen = absl::StrFormat("width %d, dropout %g, lr %g", best.point.width,
                                         best.point.dropout, best.point.learning_rate);
    if (method == "trace_reg" || method == "conal")
      absl::StrAppendFormat(&chosen, ", λ %g", best.point.lambda);
    absl::StrAppendFormat(&chosen, ", weight decay %g", best.point.weight_decay);
    rows.push_back(absl::StrFormat(
        "| %s | %s | %.0f | %.4f | %s | %.0f |", method, chosen, mean_step, best.MeanScore().first,
        MeanSe(accuracies),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    std::printf("%s\n", rows.back().c_str());
    std::fflush(stdout);
  }
  std::printf(
      "\n| learner | selected | mean stop step | selection score | test accuracy (mean ± s.e.) "
      "| s |\n"
      "|---|---|---:|---:|---:|---:|\n%s\n",
      absl::StrJoin(rows, "\n").c_str());
  return 0;
}
