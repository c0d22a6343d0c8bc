// eval: fits truth models on datasets in the shared/datasets format and
// prints, per dataset and method, the accuracy and macro-F1 of their MAP
// labels against the gold labels, the expected calibration error (10 bins)
// and log-loss of their posteriors, the EM iterations and the fit time.
//
//   bazel run //models:eval -- --data ../shared/datasets/product
//       [--methods mv,ds]
//   bazel run //models:eval -- --datasets ../shared/datasets [name ...]
//       [--redundancy=3 --repeats=10 --seed=1] [--threads=2]
//       [--format=markdown]
//
// --data names one dataset folder; --datasets a folder of dataset folders,
// of which the named ones (all those holding a labels.csv if none is named)
// are evaluated. Relative paths are taken from the directory `bazel run` was
// started in. --methods defaults to every method CreateTruthModel knows.
//
// Scoring follows shared/datasets/README.md (see models/evaluation.h): gold
// items with at least one label, most probable class, lowest index on ties.
// ECE and log-loss are over the same items (definitions in
// ClassificationScores).
// Fits are unsupervised and cold: gold is used only for scoring.
//
// --one_more_label_fraction=F (with --redundancy=R): each item keeps R + 1
// labels with probability F, for partly redundant data.
// --redundancy=R keeps a uniformly random subset of at most R labels of
// every item (as in the redundancy experiments of Platanios et al.,
// "Learning from Imperfect Annotations"). --repeats=N fits every method N
// times and prints mean ± standard error over the repeats: repeat j uses
// seed --seed + j both for its subsample (every method sees the same
// subsamples) and for the neural models' initialisation and minibatch order
// (TruthModelOptions::Neural::seed). Without --redundancy every repeat sees
// all labels, so only the neural models' scores vary between repeats (the
// EM methods are deterministic: their standard error is 0).

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "models/annotation_matrix.h"
#include "models/calibrated_truth_model.h"
#include "models/csv_dataset.h"
#include "models/evaluation.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

ABSL_FLAG(std::string, data, "", "one dataset folder");
ABSL_FLAG(std::string, datasets, "",
          "a folder of dataset folders; positional arguments name the ones "
          "to evaluate (default: all)");
ABSL_FLAG(std::string, methods, "",
          "comma-separated truth models (default: all known methods)");
ABSL_FLAG(int, redundancy, 0,
          "keep at most this many random labels per item (0: all labels)");
ABSL_FLAG(double, one_more_label_fraction, 0,
          "with --redundancy=R, each item keeps R + 1 labels with this probability "
          "(partly redundant data, e.g. --redundancy=1 --one_more_label_fraction=0.1)");
ABSL_FLAG(int, repeats, 1,
          "fits of every method (random draws with --redundancy; neural "
          "seeds); mean ± standard error");
ABSL_FLAG(int64_t, seed, 1,
          "seed of the first repeat; repeat j uses seed + j for its draw and "
          "the neural models' seed");
ABSL_FLAG(int, threads, verity::models::TruthModelOptions().num_threads,
          "TruthModelOptions::num_threads of every fit");
ABSL_FLAG(std::string, format, "text", "text or markdown");
ABSL_FLAG(std::string, f1_class, "",
          "also print the F1 of one class: the first of these comma-separated "
          "class names that a dataset has (e.g. --f1_class=same,positive for "
          "the positive-class F1 that Zheng et al. report); '-' where a "
          "dataset has none of them");
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
ABSL_FLAG(double, tolerance, verity::models::TruthModelOptions().tolerance,
          "TruthModelOptions::tolerance");
ABSL_FLAG(std::string, calibration,
          verity::models::TruthModelOptions().calibration,
          "TruthModelOptions::calibration (auto or none)");
ABSL_FLAG(bool, calibration_report, false,
          "instead of the usual table, one row per dataset and method with "
          "the accuracy, ECE and log-loss of the uncalibrated (inner) and "
          "calibrated posteriors of the same fit, and the calibration map "
          "(issue 18); with --gold_fraction, the gold-calibration simulation");
ABSL_FLAG(double, gold_fraction, 0.0,
          "with --calibration_report: pass this random fraction of the scored "
          "items to Fit as project gold (one draw per repeat, seed + j) and "
          "score only the other items");
ABSL_FLAG(double, conal_lambda,
          verity::models::TruthModelOptions().neural.conal_lambda,
          "TruthModelOptions::Neural::conal_lambda (conal over item features)");
ABSL_FLAG(double, featureless_conal_lambda,
          verity::models::TruthModelOptions().neural.featureless_conal_lambda,
          "TruthModelOptions::Neural::featureless_conal_lambda (conal without features)");
ABSL_FLAG(double, heldout_label_fraction,
          verity::models::TruthModelOptions().neural.heldout_label_fraction,
          "TruthModelOptions::Neural::heldout_label_fraction (neural early stopping)");
ABSL_FLAG(int, neural_steps, verity::models::TruthModelOptions().neural.steps,
          "TruthModelOptions::Neural::steps (0: scaled with the data)");
ABSL_FLAG(double, neural_weight_decay, verity::models::TruthModelOptions().neural.weight_decay,
          "TruthModelOptions::Neural::weight_decay");
ABSL_FLAG(double, neural_learning_rate, verity::models::TruthModelOptions().neural.learning_rate,
          "TruthModelOptions::Neural::learning_rate");
ABSL_FLAG(double, featureless_learning_rate,
          verity::models::TruthModelOptions().neural.featureless_learning_rate,
          "TruthModelOptions::Neural::featureless_learning_rate");
ABSL_FLAG(bool, featureless_em, verity::models::TruthModelOptions().neural.featureless_em,
          "TruthModelOptions::Neural::featureless_em");
ABSL_FLAG(double, trace_lambda,
          verity::models::TruthModelOptions().neural.trace_lambda,
          "TruthModelOptions::Neural::trace_lambda");
ABSL_FLAG(int, lia_latent_dim, verity::models::TruthModelOptions().neural.lia_latent_dim,
          "TruthModelOptions::Neural::lia_latent_dim (lia over features)");
ABSL_FLAG(int, featureless_lia_latent_dim,
          verity::models::TruthModelOptions().neural.featureless_lia_latent_dim,
          "TruthModelOptions::Neural::featureless_lia_latent_dim (lia without features)");
ABSL_FLAG(int, neural_em_iterations, verity::models::TruthModelOptions().neural.em_iterations,
          "TruthModelOptions::Neural::em_iterations (lia and cmm)");

namespace verity::models {
namespace {

// `bazel run` starts the binary in its runfiles tree; resolve relative paths
// against the directory the user ran bazel from.
std::string ResolvePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
      dir != nullptr && *dir != '\0') {
    return absl::StrCat(dir, "/", path);
  }
  return path;
}

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> ListDatasets(const std::string& root) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(root.c_str())) {
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (IsFile(absl::StrCat(root, "/", name, "/labels.csv"))) {
        names.push_back(name);
      }
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct Dataset {
  std::string name;
  std::string path;
};

// A printed table: text (aligned columns) or GitHub markdown.
class Table {
 public:
  explicit Table(std::vector<std::string> header)
      : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  void Print(bool markdown) const {
    if (markdown) {
      std::printf("| %s |\n", absl::StrJoin(header_, " | ").c_str());
      std::printf("|%s\n", Separator().c_str());
      for (const auto& row : rows_) {
        std::printf("| %s |\n", absl::StrJoin(row, " | ").c_str());
      }
      return;
    }
    std::vector<size_t> width(header_.size(), 0);
    for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size(); ++c) {
        width[c] = std::max(width[c], Utf8Length(row[c]));
      }
    }
    PrintTextRow(header_, width);
    for (const auto& row : rows_) PrintTextRow(row, width);
  }

 private:
  std::string Separator() const {
    std::string s;
    for (size_t c = 0; c < header_.size(); ++c) {
      absl::StrAppend(&s, c < 2 ? "---|" : "---:|");
    }
    return s;
  }

  // Display width of `s`: counts code points, not bytes ("±" is two bytes).
  static size_t Utf8Length(const std::string& s) {
    size_t n = 0;
    for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
    return n;
  }

  // The first two columns (dataset, method) left-aligned, numbers right.
  static void PrintTextRow(const std::vector<std::string>& row,
                           const std::vector<size_t>& width) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - Utf8Length(row[c]), ' ');
      if (c > 0) line += "  ";
      line += c < 2 ? row[c] + pad : pad + row[c];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  }

  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "0.9381", or "0.9381 ± 0.0012" over several draws.
std::string FormatMean(const MeanWithError& m) {
  std::string s = absl::StrFormat("%.4f", m.mean);
  if (m.count > 1) {
    absl::StrAppend(&s, " ± ", absl::StrFormat("%.4f", m.standard_error));
  }
  return s;
}

struct Settings {
  std::vector<std::string> methods;
  TruthModelOptions options;
  int redundancy = 0;
  double one_more_label_fraction = 0;
  int repeats = 1;
  uint64_t seed = 1;
  std::vector<std::string> f1_classes;  // empty: no per-class F1 column
  double gold_fraction = 0.0;
};

// --calibration_report: per method, one fit with calibration "auto"; the
// inner model's posteriors (raw) and the served ones (calibrated) scored on
// the same items. With gold_fraction > 0, repeat r passes a random
// gold_fraction of the scored items (seed + r) to Fit as gold and scores only
// the others.
absl::Status EvaluateCalibration(const Dataset& dataset, const Settings& settings,
                                 Table& table) {
  absl::StatusOr<CsvDataset> csv = ReadCsvDataset(dataset.path);
  if (!csv.ok()) return csv.status();
  for (const std::string& method : settings.methods) {
    std::vector<double> acc_raw, acc_cal, ece_raw, ece_cal, ll_raw, ll_cal, tau;
    int64_t scored = 0;
    std::string source;
    for (int r = 0; r < settings.repeats; ++r) {
      std::vector<Annotation> annotations =
          settings.redundancy > 0
              ? SubsampleLabelsPerItem(csv->annotations, csv->num_items(),
                                       settings.redundancy, settings.seed + r,
                                       settings.one_more_label_fraction)
              : csv->annotations;
      absl::StatusOr<AnnotationMatrix> matrix =
          AnnotationMatrix::Build(csv->num_items(), csv->num_annotators(),
                                  csv->num_classes(), annotations);
      if (!matrix.ok()) return matrix.status();
      std::vector<int32_t> fit_gold;
      std::vector<int32_t> score_gold = csv->gold;
      if (settings.gold_fraction > 0) {
        fit_gold.assign(csv->gold.size(), -1);
        std::mt19937_64 rng(settings.seed + r);
        std::uniform_real_distribution<double> u(0.0, 1.0);
        for (size_t i = 0; i < csv->gold.size(); ++i) {
          if (csv->gold[i] < 0 || matrix->LabelsOfItem(static_cast<int32_t>(i)).empty()) continue;
          if (u(rng) < settings.gold_fraction) {
            fit_gold[i] = csv->gold[i];
            score_gold[i] = -1;
          }
        }
      }
      TruthModelOptions options = settings.options;
      options.calibration = "auto";
      options.neural.seed = settings.seed + r;
      absl::StatusOr<std::unique_ptr<TruthModel>> model =
          CreateTruthModel(method, csv->num_classes(), options);
      if (!model.ok()) return model.status();
      absl::StatusOr<FitReport> fit = (*model)->Fit(*matrix, fit_gold, /*warm_start=*/false);
      if (!fit.ok()) {
        return absl::Status(fit.status().code(),
                            absl::StrCat(method, ": ", fit.status().message()));
      }
      const auto& calibrated = dynamic_cast<const CalibratedTruthModel&>(**model);
      const ClassificationScores raw = ScorePosteriors(
          AllPosteriors(calibrated.inner(), *matrix, fit_gold), *matrix, score_gold);
      const ClassificationScores cal =
          ScorePosteriors(AllPosteriors(calibrated, *matrix, fit_gold), *matrix, score_gold);
      scored = raw.items;
      acc_raw.push_back(raw.accuracy);
      acc_cal.push_back(cal.accuracy);
      ece_raw.push_back(raw.ece);
      ece_cal.push_back(cal.ece);
      ll_raw.push_back(raw.log_loss);
      ll_cal.push_back(cal.log_loss);
      tau.push_back(calibrated.calibration().temperature);
      const std::string s =
          calibrated.calibration().temperature == 1.0
              ? std::string(CalibrationSourceName(calibrated.calibration().source))
              : absl::StrCat(std::string(CalibrationSourceName(calibrated.calibration().source)), ":",
                             calibrated.calibration().kind ==
                                     CalibrationMapKind::kTopLabelTemperature
                                 ? "top"
                                 : "full");
      if (source.empty()) {
        source = s;
      } else if (source.find(s) == std::string::npos) {
        absl::StrAppend(&source, "/", s);
      }
    }
    table.AddRow({dataset.name, method, absl::StrCat(scored),
                  FormatMean(MeanAndStandardError(acc_raw)),
                  FormatMean(MeanAndStandardError(acc_cal)),
                  FormatMean(MeanAndStandardError(ece_raw)),
                  FormatMean(MeanAndStandardError(ece_cal)),
                  FormatMean(MeanAndStandardError(ll_raw)),
                  FormatMean(MeanAndStandardError(ll_cal)),
                  FormatMean(MeanAndStandardError(tau)), source});
  }
  return absl::OkStatus();
}

// Evaluates every method on one dataset, adding one row per method. Returns
// the first error (unreadable dataset, failed fit).
absl::Status EvaluateDataset(const Dataset& dataset, const Settings& settings,
                             Table& table) {
  absl::StatusOr<CsvDataset> csv = ReadCsvDataset(dataset.path);
  if (!csv.ok()) return csv.status();

  // The draws, shared by all methods so that their scores are paired.
  std::vector<AnnotationMatrix> draws;
  for (int r = 0; r < settings.repeats; ++r) {
    std::vector<Annotation> annotations =
        settings.redundancy > 0
            ? SubsampleLabelsPerItem(csv->annotations, csv->num_items(),
                                     settings.redundancy, settings.seed + r,
                                     settings.one_more_label_fraction)
            : csv->annotations;
    absl::StatusOr<AnnotationMatrix> matrix =
        AnnotationMatrix::Build(csv->num_items(), csv->num_annotators(),
                                csv->num_classes(), annotations);
    if (!matrix.ok()) return matrix.status();
    draws.push_back(*std::move(matrix));
    if (settings.redundancy == 0) break;  // Every draw is the same data.
  }

  int32_t f1_class = -1;
  for (const std::string& name : settings.f1_classes) {
    const auto it = std::find(csv->class_names.begin(),
                              csv->class_names.end(), name);
    if (it != csv->class_names.end()) {
      f1_class = static_cast<int32_t>(it - csv->class_names.begin());
      break;
    }
  }

  for (const std::string& method : settings.methods) {
    std::vector<double> accuracy, macro_f1, ece, log_loss, class_f1,
        iterations, seconds;
    int64_t scored = 0;
    for (int r = 0; r < settings.repeats; ++r) {
      const AnnotationMatrix& matrix =
          draws[std::min<size_t>(r, draws.size() - 1)];
      TruthModelOptions options = settings.options;
      options.neural.seed = settings.seed + r;
      absl::StatusOr<MethodEvaluation> e =
          FitAndScore(method, options, matrix, csv->gold);
      if (!e.ok()) {
        return absl::Status(
            e.status().code(),
            absl::StrCat(method, ": ", e.status().message()));
      }
      scored = e->scores.items;
      accuracy.push_back(e->scores.accuracy);
      macro_f1.push_back(e->scores.macro_f1);
      ece.push_back(e->scores.ece);
      log_loss.push_back(e->scores.log_loss);
      if (f1_class >= 0) class_f1.push_back(e->scores.class_f1[f1_class]);
      iterations.push_back(e->fit.iterations);
      seconds.push_back(e->fit.seconds);
    }
    const MeanWithError iters = MeanAndStandardError(iterations);
    std::vector<std::string> row = {
        dataset.name,
        method,
        absl::StrCat(draws[0].num_labels()),
        absl::StrCat(scored),
        settings.redundancy == 0 ? std::string("all")
        : settings.one_more_label_fraction > 0
            ? absl::StrCat(settings.redundancy, "+", settings.one_more_label_fraction)
            : absl::StrCat(settings.redundancy),
        absl::StrCat(settings.repeats),
        FormatMean(MeanAndStandardError(accuracy)),
        FormatMean(MeanAndStandardError(macro_f1)),
        FormatMean(MeanAndStandardError(ece)),
        FormatMean(MeanAndStandardError(log_loss)),
    };
    if (!settings.f1_classes.empty()) {
      row.push_back(f1_class >= 0 ? FormatMean(MeanAndStandardError(class_f1))
                                  : "-");
    }
    row.push_back(settings.repeats > 1
                      ? absl::StrFormat("%.1f", iters.mean)
                      : absl::StrCat(static_cast<int>(iters.mean)));
    row.push_back(
        absl::StrFormat("%.2f", 1e3 * MeanAndStandardError(seconds).mean));
    table.AddRow(std::move(row));
  }
  return absl::OkStatus();
}

int Main(const std::vector<std::string>& positional) {
  const std::string data = absl::GetFlag(FLAGS_data);
  const std::string root = absl::GetFlag(FLAGS_datasets);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (data.empty() == root.empty()) {
    std::fprintf(stderr, "give exactly one of --data=DIR or --datasets=DIR\n");
    return 2;
  }
  if (!data.empty() && !positional.empty()) {
    std::fprintf(stderr, "dataset names are only read with --datasets\n");
    return 2;
  }
  if (format != "text" && format != "markdown") {
    std::fprintf(stderr, "--format must be text or markdown, got %s\n",
                 format.c_str());
    return 2;
  }
  Settings settings;
  settings.redundancy = absl::GetFlag(FLAGS_redundancy);
  settings.one_more_label_fraction = absl::GetFlag(FLAGS_one_more_label_fraction);
  if (!(settings.one_more_label_fraction >= 0 && settings.one_more_label_fraction <= 1) ||
      (settings.one_more_label_fraction > 0 && settings.redundancy == 0)) {
    std::fprintf(stderr, "--one_more_label_fraction must be in [0, 1], and needs --redundancy\n");
    return 2;
  }
  settings.repeats = absl::GetFlag(FLAGS_repeats);
  settings.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  if (settings.redundancy < 0 || settings.repeats < 1) {
    std::fprintf(stderr, "need --redundancy >= 0 and --repeats >= 1\n");
    return 2;
  }
  settings.options.confusion_smoothing =
      absl::GetFlag(FLAGS_confusion_smoothing);
  settings.options.population_smoothing =
      absl::GetFlag(FLAGS_population_smoothing);
  settings.options.prior_smoothing = absl::GetFlag(FLAGS_prior_smoothing);
  settings.options.max_iterations = absl::GetFlag(FLAGS_max_iterations);
  settings.options.tolerance = absl::GetFlag(FLAGS_tolerance);
  settings.options.num_threads = absl::GetFlag(FLAGS_threads);
  settings.options.calibration = absl::GetFlag(FLAGS_calibration);
  settings.gold_fraction = absl::GetFlag(FLAGS_gold_fraction);
  const bool calibration_report = absl::GetFlag(FLAGS_calibration_report);
  if (!(settings.gold_fraction >= 0 && settings.gold_fraction < 1)) {
    std::fprintf(stderr, "need 0 <= --gold_fraction < 1\n");
    return 2;
  }
  settings.options.neural.conal_lambda = absl::GetFlag(FLAGS_conal_lambda);
  settings.options.neural.featureless_conal_lambda = absl::GetFlag(FLAGS_featureless_conal_lambda);
  settings.options.neural.heldout_label_fraction = absl::GetFlag(FLAGS_heldout_label_fraction);
  settings.options.neural.featureless_em = absl::GetFlag(FLAGS_featureless_em);
  settings.options.neural.steps = absl::GetFlag(FLAGS_neural_steps);
  settings.options.neural.learning_rate = absl::GetFlag(FLAGS_neural_learning_rate);
  settings.options.neural.weight_decay = absl::GetFlag(FLAGS_neural_weight_decay);
  settings.options.neural.featureless_learning_rate = absl::GetFlag(FLAGS_featureless_learning_rate);
  settings.options.neural.trace_lambda = absl::GetFlag(FLAGS_trace_lambda);
  settings.options.neural.lia_latent_dim = absl::GetFlag(FLAGS_lia_latent_dim);
  settings.options.neural.featureless_lia_latent_dim = absl::GetFlag(FLAGS_featureless_lia_latent_dim);
  settings.options.neural.em_iterations = absl::GetFlag(FLAGS_neural_em_iterations);
  if (absl::Status s = ValidateTruthModelOptions(settings.options); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  settings.methods =
      absl::StrSplit(absl::GetFlag(FLAGS_methods), ',', absl::SkipEmpty());
  if (settings.methods.empty()) {
    for (std::string_view m : KnownTruthModelMethods()) {
      settings.methods.emplace_back(m);
    }
  }
  for (const std::string& method : settings.methods) {
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateTruthModel(method, 2, settings.options);
    if (!model.ok()) {
      std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
      return 2;
    }
  }

  std::vector<Dataset> datasets;
  if (!data.empty()) {
    datasets.push_back({BaseName(data), ResolvePath(data)});
  } else {
    const std::string dir = ResolvePath(root);
    std::vector<std::string> names = positional;
    if (names.empty()) names = ListDatasets(dir);
    if (names.empty()) {
      std::fprintf(stderr, "no dataset folder (with labels.csv) in %s\n",
                   dir.c_str());
      return 1;
    }
    for (const std::string& name : names) {
      datasets.push_back({name, absl::StrCat(dir, "/", name)});
    }
  }

  settings.f1_classes =
      absl::StrSplit(absl::GetFlag(FLAGS_f1_class), ',', absl::SkipEmpty());
  std::vector<std::string> header = {"dataset", "method", "labels", "scored",
                                     "R",       "repeats", "accuracy",
                                     "macro-F1", "ECE",     "log-loss"};
  if (!settings.f1_classes.empty()) {
    header.push_back(
        absl::StrCat("F1(", absl::StrJoin(settings.f1_classes, "/"), ")"));
  }
  header.push_back("iterations");
  header.push_back("fit ms");
  if (calibration_report) {
    header = {"dataset", "method", "scored", "acc raw", "acc cal", "ECE raw",
              "ECE cal", "log-loss raw", "log-loss cal", "tau", "map"};
  }
  Table table(std::move(header));
  int failures = 0;
  for (const Dataset& dataset : datasets) {
    absl::Status s = calibration_report
                         ? EvaluateCalibration(dataset, settings, table)
                         : EvaluateDataset(dataset, settings, table);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", dataset.name.c_str(),
                   s.ToString().c_str());
      ++failures;
    }
  }
  table.Print(format == "markdown");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace verity::models

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "eval --data=DIR | --datasets=DIR [name ...] [--methods=mv,ds] "
      "[--redundancy=R --repeats=N --seed=S] [--threads=T] "
      "[--format=text|markdown]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  return verity::models::Main(
      std::vector<std::string>(args.begin() + 1, args.end()));
}
