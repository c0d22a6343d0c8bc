// neural_epoch_benchmark: the training cost of one epoch of each neural truth model (lia,
// crowdlayer, trace_reg, conal, cmm) on simulated crowds, on the CPU or a GPU. A benchmark
// binary, not a test: docs/PERFORMANCE.md has the commands and the figures.
//
//   bazel build -c opt //bench:neural_epoch_benchmark
//   bazel-out/k8-opt/bin/bench/neural_epoch_benchmark [--methods=lia,cmm] [--sizes=50k,500k,5m]
//       [--device=cpu|cuda|cuda:N|auto] [--threads=2] [--epochs=1] [--batch_size=0]
//       [--sparse_embeddings=true] [--bandwidth_gbs=3350] [--format=markdown]
//
// On a machine with PyTorch and no Bazel (a GPU worker), tools/gpu/build.sh builds it against
// the LibTorch inside the torch package.
//
// Sizes are those of //bench:fit_benchmark: 50k = 10,000 items × 5 labels, 300 annotators;
// 500k = 100,000 × 5, 300; 5m = 1,000,000 × 5, 3,000; or ITEMSxLABELSxANNOTATORS. K = --classes.
//
// What one "epoch" is, per model (each fit runs --epochs of them, plus what the model always
// adds around them):
//   trace_reg, crowdlayer, conal: one pass of minibatches over every label.
//   lia: one EM iteration, i.e. an M-step pass over every label and an E-step over every label;
//        the fit adds the marginal-likelihood fine-tuning pass, so `passes` counts it too.
//   cmm: one EM iteration: closed-form E and M steps over the items, and an M-step of h over
//        one pass of minibatches of the labelled items. cmm runs three per configured EM
//        iteration, so --epochs is rounded up to a multiple of 3.
// Columns: "batch" is the minibatch (--batch_size or the device's default), "train s"
// FitReport::training_seconds (device work waited for), "init s" the part of it a cold fit
// spends once before its passes (FitReport::initialisation_seconds: the Dawid-Skene posteriors
// lia and crowdlayer start from, cmm's K-means restarts), "steps" the optimiser steps, "passes"
// steps / steps of one pass (cmm: over the items), "s/pass" (train s − init s) / passes, "floor ms" the
// time one pass needs at --bandwidth_gbs to move the bytes it must move at the least
// (FloorBytesPerPass), "x floor" s/pass over that floor, "fit s" the whole Fit (label tensors,
// training, export of the tables to the CPU and the log-likelihood pass), and "accuracy" the
// fitted posteriors against the simulated truth.
// Peak host memory is the process's VmHWM after the configuration (one process, so it only
// grows). A GPU run first fits a small crowd once to warm CUDA up (context, kernels, caching
// allocator) outside the figures.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/random_crowd.h"
#include "models/annotation_matrix.h"
#include "models/neural/device.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

ABSL_FLAG(std::string, methods, "lia,crowdlayer,trace_reg,conal,cmm",
          "comma-separated neural truth models");
ABSL_FLAG(std::string, sizes, "50k,500k,5m",
          "comma-separated sizes: 50k, 500k, 5m or ITEMSxLABELSxANNOTATORS");
ABSL_FLAG(int, classes, 5, "number of classes K");
ABSL_FLAG(std::string, device, "auto", "TruthModelOptions::Neural::device: cpu, cuda, cuda:N, auto");
ABSL_FLAG(int, threads, 2, "TruthModelOptions::num_threads (CPU threads of LibTorch)");
ABSL_FLAG(int, epochs, 1, "epochs per fit (see the file comment for what an epoch is)");
ABSL_FLAG(int, batch_size, 0,
          "TruthModelOptions::Neural::batch_size, in labels; 0 = the device's default "
          "(1,024 on the CPU, 8,192 on CUDA; the learning rate follows the square-root rule)");
ABSL_FLAG(bool, sparse_embeddings, true,
          "TruthModelOptions::Neural::sparse_embeddings: update only the embedding rows a step "
          "uses (false: the whole tables, the dense AMSGrad)");
ABSL_FLAG(double, bandwidth_gbs, 3350,
          "memory bandwidth in GB/s for the floor column (default: an H100 SXM's HBM3)");
ABSL_FLAG(bool, cuda_graphs, true,
          "TruthModelOptions::Neural::cuda_graphs: replay training steps from CUDA graphs on CUDA");
ABSL_FLAG(uint64_t, seed, 1, "seed of the simulated crowds (the models use their default seed)");
ABSL_FLAG(double, learning_rate, verity::models::TruthModelOptions().neural.featureless_learning_rate,
          "TruthModelOptions::Neural::featureless_learning_rate, the rate of these crowds (no "
          "features; at 1,024 labels, scaled by the batch's rule)");
ABSL_FLAG(bool, featureless_em, verity::models::TruthModelOptions().neural.featureless_em,
          "TruthModelOptions::Neural::featureless_em (crowdlayer and trace_reg by EM; false: the "
          "papers' losses)");
ABSL_FLAG(double, trace_lambda, verity::models::TruthModelOptions().neural.trace_lambda,
          "TruthModelOptions::Neural::trace_lambda (trace_reg)");
ABSL_FLAG(double, conal_lambda,
          verity::models::TruthModelOptions().neural.featureless_conal_lambda,
          "TruthModelOptions::Neural::featureless_conal_lambda, conal's λ on these crowds (no "
          "features)");
ABSL_FLAG(double, ds_start_fraction, verity::models::TruthModelOptions().neural.ds_start_fraction,
          "TruthModelOptions::Neural::ds_start_fraction (crowdlayer, conal; 0: the papers' start)");
ABSL_FLAG(double, heldout_label_fraction,
          verity::models::TruthModelOptions().neural.heldout_label_fraction,
          "TruthModelOptions::Neural::heldout_label_fraction (labels held out to choose the "
          "checkpoint a fit keeps; 0: the last step)");
ABSL_FLAG(std::string, format, "text", "text or markdown");

namespace verity::bench {
namespace {

using Clock = std::chrono::steady_clock;

using Size = CrowdSize;

// VmHWM of this process in MiB (0 if /proc is not there).
double PeakRssMib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return 0;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

// The minibatch of the fits: --batch_size, or the device's default (truth_model.h).
int64_t BatchSize() {
  if (absl::GetFlag(FLAGS_batch_size) > 0) return absl::GetFlag(FLAGS_batch_size);
  absl::StatusOr<torch::Device> device = models::neural::ResolveDevice(absl::GetFlag(FLAGS_device));
  return device.ok() && device->is_cuda() ? models::TruthModelOptions::Neural::kCudaBatchSize
                                          : models::TruthModelOptions::Neural::kCpuBatchSize;
}

// The bandwidth floor of one pass (see the file comment): the bytes a pass must move at the
// least, in fp32 with the default sizes (d = embedding_dim). Per label: its item, annotator,
// class and permutation index (4 int64, 32 B); its item's embedding row read (4d) and, for the
// sparse update, that row's weights and two second moments read and written (6 × 4d); the
// annotator side: an embedding row the same way (lia, conal: 28d) and/or a K×K confusion read
// and its gradient written (crowdlayer, trace_reg, conal: 8K²). cmm's pass is over items: the
// item row (28d) and its posterior (4K). Activations are not counted: a fused kernel keeps them
// on chip.
double FloorBytesPerPass(const std::string& method, int64_t labels, int64_t items, int64_t k) {
  const double d = models::TruthModelOptions().neural.embedding_dim;
  if (method == "cmm") return static_cast<double>(items) * (28 * d + 4 * k + 8);
  double per_label = 32 + 28 * d;
  if (method == "lia" || method == "conal") per_label += 28 * d;
  if (method != "lia") per_label += 8.0 * k * k;
  return per_label * static_cast<double>(labels);
}

// The options of one fit of `epochs` epochs (see the file comment).
models::TruthModelOptions EpochOptions(const std::string& method, int64_t num_labels,
                                       int64_t num_items, int epochs) {
  models::TruthModelOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  options.neural.device = absl::GetFlag(FLAGS_device);
  options.neural.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.neural.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  options.neural.sparse_embeddings = absl::GetFlag(FLAGS_sparse_embeddings);
  options.neural.featureless_learning_rate = absl::GetFlag(FLAGS_learning_rate);
  options.neural.featureless_em = absl::GetFlag(FLAGS_featureless_em);
  options.neural.trace_lambda = absl::GetFlag(FLAGS_trace_lambda);
  options.neural.featureless_conal_lambda = absl::GetFlag(FLAGS_conal_lambda);
  options.neural.ds_start_fraction = absl::GetFlag(FLAGS_ds_start_fraction);
  options.neural.heldout_label_fraction = absl::GetFlag(FLAGS_heldout_label_fraction);
  const int64_t batch = BatchSize();
  if (method == "cmm") {
    // cmm runs 3 EM iterations per configured one, each of steps / iterations steps over
    // minibatches of labelled items (every item of these crowds is labelled): --epochs is
    // rounded up to a multiple of 3.
    options.neural.em_iterations = (epochs + 2) / 3;
    options.neural.steps =
        static_cast<int>(3 * options.neural.em_iterations * ((num_items + batch - 1) / batch));
  } else if (method == "lia") {
    // em_iterations M-steps of steps / em_iterations steps each, then one fine-tuning pass.
    options.neural.em_iterations = epochs;
    options.neural.steps = static_cast<int>(epochs * ((num_labels + batch - 1) / batch));
  } else {
    options.neural.steps = static_cast<int>(epochs * ((num_labels + batch - 1) / batch));
  }
  return options;
}

void Print(const std::vector<std::string>& cells, bool markdown) {
  std::string line;
  for (size_t c = 0; c < cells.size(); ++c) {
    if (markdown) {
      absl::StrAppend(&line, "| ", cells[c], " ");
    } else {
      absl::StrAppend(&line, c == 0 ? absl::StrFormat("%-11s", cells[c])
                                    : absl::StrFormat("%12s", cells[c]));
    }
  }
  if (markdown) line += "|";
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Times one epoch of each neural truth model (see the source).");
  absl::ParseCommandLine(argc, argv);
  const bool markdown = absl::GetFlag(FLAGS_format) == "markdown";
  if (!markdown && absl::GetFlag(FLAGS_format) != "text") {
    std::fprintf(stderr, "--format must be text or markdown\n");
    return 2;
  }
  const int epochs = absl::GetFlag(FLAGS_epochs);
  if (epochs < 1) {
    std::fprintf(stderr, "--epochs must be >= 1\n");
    return 2;
  }
  std::vector<std::string> methods = absl::StrSplit(absl::GetFlag(FLAGS_methods), ',',
                                                    absl::SkipEmpty());
  std::vector<Size> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    std::optional<Size> size = ParseCrowdSize(s);
    if (!size.has_value()) {
      std::fprintf(stderr, "--sizes: bad size %s\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(*size);
  }
  for (const std::string& m : methods) {
    absl::StatusOr<std::unique_ptr<models::TruthModel>> probe =
        models::CreateTruthModel(m, 2, models::TruthModelOptions());
    if (!probe.ok()) {
      std::fprintf(stderr, "--methods: %s\n", probe.status().ToString().c_str());
      return 2;
    }
  }

  std::printf("# %u hardware threads, load average %s; device %s (CUDA graphs %s), %d LibTorch "
              "threads, K = %d, batch %lld, %d epoch(s) per fit, crowd seed %llu, embeddings %s\n",
              std::thread::hardware_concurrency(), LoadAverage().c_str(),
              absl::GetFlag(FLAGS_device).c_str(),
              absl::GetFlag(FLAGS_cuda_graphs) ? "on when built with them" : "off",
              absl::GetFlag(FLAGS_threads),
              absl::GetFlag(FLAGS_classes), static_cast<long long>(BatchSize()), epochs,
              static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)),
              absl::GetFlag(FLAGS_sparse_embeddings) ? "sparse" : "dense");

  // Warm-up: the first CUDA fit pays for the context and the kernels' first launches.
  if (absl::GetFlag(FLAGS_device) != "cpu") {
    RandomCrowdSpec spec;
    spec.num_items = 2000;
    spec.num_annotators = 50;
    spec.num_classes = absl::GetFlag(FLAGS_classes);
    absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(spec);
    if (crowd.ok()) {
      absl::StatusOr<models::AnnotationMatrix> matrix =
          models::AnnotationMatrix::Build(crowd->num_items, crowd->num_annotators,
                                           crowd->num_classes, crowd->annotations);
      for (const std::string& m : methods) {
        if (!matrix.ok()) break;
        absl::StatusOr<std::unique_ptr<models::TruthModel>> model = models::CreateTruthModel(
            m, crowd->num_classes, EpochOptions(m, matrix->num_labels(), crowd->num_items, 1));
        if (model.ok()) (void)(*model)->Fit(*matrix, {}, false);
      }
    }
  }

  Print({"method", "labels", "items", "annotators", "batch", "train s", "init s", "steps", "passes",
         "s/pass", "floor ms", "x floor", "fit s", "peak MiB", "accuracy"},
        markdown);
  if (markdown) Print(std::vector<std::string>(15, "---"), true);
  for (const Size& size : sizes) {
    RandomCrowdSpec spec;
    spec.num_items = size.items;
    spec.labels_per_item = size.labels_per_item;
    spec.num_annotators = size.annotators;
    spec.num_classes = absl::GetFlag(FLAGS_classes);
    spec.seed = absl::GetFlag(FLAGS_seed);
    absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(spec);
    if (!crowd.ok()) {
      std::fprintf(stderr, "%s: %s\n", size.name.c_str(), crowd.status().ToString().c_str());
      return 1;
    }
    absl::StatusOr<models::AnnotationMatrix> matrix = models::AnnotationMatrix::Build(
        crowd->num_items, crowd->num_annotators, crowd->num_classes, crowd->annotations);
    if (!matrix.ok()) {
      std::fprintf(stderr, "%s: %s\n", size.name.c_str(), matrix.status().ToString().c_str());
      return 1;
    }
    const int64_t labels = matrix->num_labels();
    for (const std::string& method : methods) {
      models::TruthModelOptions options = EpochOptions(method, labels, crowd->num_items, epochs);
      absl::StatusOr<std::unique_ptr<models::TruthModel>> model =
          models::CreateTruthModel(method, crowd->num_classes, options);
      if (!model.ok()) {
        std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
        return 1;
      }
      const Clock::time_point start = Clock::now();
      absl::StatusOr<models::FitReport> report = (*model)->Fit(*matrix, {}, false);
      const double fit_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (!report.ok()) {
        Print({method, absl::StrCat(labels), "fit failed: " + report.status().ToString()}, markdown);
        continue;
      }
      // Steps of one pass: over the labels, or over the items for cmm's M-step of h.
      const int64_t per_pass = method == "cmm" ? crowd->num_items : labels;
      const int64_t batch = BatchSize();
      const double passes = static_cast<double>(report->training_steps) /
                            static_cast<double>((per_pass + batch - 1) / batch);
      int64_t correct = 0;
      std::vector<double> posterior(crowd->num_classes);
      for (int32_t i = 0; i < crowd->num_items; ++i) {
        (*model)->ItemPosteriorForItem(i, matrix->LabelsOfItem(i), -1, absl::MakeSpan(posterior));
        const auto best = std::max_element(posterior.begin(), posterior.end()) - posterior.begin();
        correct += best == crowd->truth[i];
      }
      const double per_pass_seconds =
          passes > 0 ? (report->training_seconds - report->initialisation_seconds) / passes : 0.0;
      const double floor_seconds =
          FloorBytesPerPass(method, labels, crowd->num_items, crowd->num_classes) /
          (absl::GetFlag(FLAGS_bandwidth_gbs) * 1e9);
      Print({method, absl::StrCat(labels), absl::StrCat(crowd->num_items),
             absl::StrCat(crowd->num_annotators), absl::StrCat(batch),
             absl::StrFormat("%.3f", report->training_seconds),
             absl::StrFormat("%.3f", report->initialisation_seconds),
             absl::StrCat(report->training_steps), absl::StrFormat("%.2f", passes),
             absl::StrFormat("%.3f", per_pass_seconds),
             absl::StrFormat("%.3f", floor_seconds * 1e3),
             absl::StrFormat("%.0f", per_pass_seconds / floor_seconds),
             absl::StrFormat("%.3f", fit_seconds), absl::StrFormat("%.0f", PeakRssMib()),
             absl::StrFormat("%.4f", static_cast<double>(correct) / crowd->num_items)},
            markdown);
    }
  }
  return 0;
}

}  // namespace
}  // namespace verity::bench

int main(int argc, char** argv) { return verity::bench::Main(argc, argv); }
