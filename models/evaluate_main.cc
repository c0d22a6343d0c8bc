// evaluate: fits truth models on datasets in the shared/datasets format and
// prints their accuracy against the gold labels.
//
//   evaluate --datasets=/work/shared/datasets [--methods=mv,ds] [name ...]
//
// With no names, every subdirectory of --datasets holding a labels.csv is
// evaluated. Fits are unsupervised (gold is used only for scoring). Accuracy
// is over gold items with at least one label, taking the most probable class
// (the lowest class index on ties), as in the datasets' README.

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "models/csv_dataset.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

ABSL_FLAG(std::string, datasets, "", "directory holding the dataset folders");
ABSL_FLAG(std::string, methods, "mv,ds", "comma-separated truth models");
ABSL_FLAG(double, confusion_smoothing,
          verity::models::TruthModelOptions().confusion_smoothing,
          "TruthModelOptions::confusion_smoothing");
ABSL_FLAG(double, population_smoothing,
          verity::models::TruthModelOptions().population_smoothing,
          "TruthModelOptions::population_smoothing");
ABSL_FLAG(double, prior_smoothing,
          verity::models::TruthModelOptions().prior_smoothing,
          "TruthModelOptions::prior_smoothing");
ABSL_FLAG(int, max_iterations,
          verity::models::TruthModelOptions().max_iterations,
          "TruthModelOptions::max_iterations");
ABSL_FLAG(int, num_threads, verity::models::TruthModelOptions().num_threads,
          "TruthModelOptions::num_threads");

namespace verity::models {
namespace {

std::vector<std::string> ListDatasets(const std::string& root) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(root.c_str())) {
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (FILE* f = std::fopen((root + "/" + name + "/labels.csv").c_str(),
                               "r")) {
        std::fclose(f);
        names.push_back(name);
      }
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

int Run(const std::vector<std::string>& names) {
  const std::string root = absl::GetFlag(FLAGS_datasets);
  TruthModelOptions options;
  options.confusion_smoothing = absl::GetFlag(FLAGS_confusion_smoothing);
  options.population_smoothing = absl::GetFlag(FLAGS_population_smoothing);
  options.prior_smoothing = absl::GetFlag(FLAGS_prior_smoothing);
  options.max_iterations = absl::GetFlag(FLAGS_max_iterations);
  options.num_threads = absl::GetFlag(FLAGS_num_threads);
  const std::vector<std::string> methods =
      absl::StrSplit(absl::GetFlag(FLAGS_methods), ',', absl::SkipEmpty());

  std::printf("%-14s %7s %7s", "dataset", "labels", "scored");
  for (const std::string& m : methods) {
    std::printf("  %8s %5s %7s", (m + " acc").c_str(), "iters", "seconds");
  }
  std::printf("\n");
  int failures = 0;
  for (const std::string& name : names) {
    absl::StatusOr<CsvDataset> ds = ReadCsvDataset(root + "/" + name);
    if (!ds.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   ds.status().ToString().c_str());
      ++failures;
      continue;
    }
    absl::StatusOr<AnnotationMatrix> matrix = ds->ToMatrix();
    if (!matrix.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   matrix.status().ToString().c_str());
      ++failures;
      continue;
    }
    int64_t scored = 0;
    for (int32_t i = 0; i < matrix->num_items(); ++i) {
      scored += ds->gold[i] >= 0 && !matrix->LabelsOfItem(i).empty();
    }
    std::printf("%-14s %7lld %7lld", name.c_str(),
                static_cast<long long>(matrix->num_labels()),
                static_cast<long long>(scored));
    for (const std::string& method : methods) {
      absl::StatusOr<std::unique_ptr<TruthModel>> model =
          CreateTruthModel(method, ds->num_classes(), options);
      if (!model.ok()) {
        std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
        return 2;
      }
      absl::StatusOr<FitReport> report =
          (*model)->Fit(*matrix, {}, /*warm_start=*/false);
      if (!report.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(),
                     report.status().ToString().c_str());
        ++failures;
        continue;
      }
      const std::vector<double> posteriors =
          AllPosteriors(**model, *matrix, {});
      const int32_t k = ds->num_classes();
      int64_t correct = 0;
      for (int32_t i = 0; i < matrix->num_items(); ++i) {
        if (ds->gold[i] < 0 || matrix->LabelsOfItem(i).empty()) continue;
        const double* p = posteriors.data() + static_cast<size_t>(i) * k;
        correct += std::max_element(p, p + k) - p == ds->gold[i];
      }
      std::printf("  %8.4f %5d %7.3f",
                  scored == 0 ? 0.0 : static_cast<double>(correct) / scored,
                  report->iterations, report->seconds);
    }
    std::printf("\n");
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace verity::models

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_datasets).empty()) {
    std::fprintf(stderr, "--datasets is required\n");
    return 2;
  }
  std::vector<std::string> names(args.begin() + 1, args.end());
  if (names.empty()) names = verity::models::ListDatasets(
      absl::GetFlag(FLAGS_datasets));
  return verity::models::Run(names);
}
