// fit_benchmark: times truth-model fits on simulated crowds (or on one
// dataset folder) and prints, per method × data size × K × thread count:
// the cold fit time, EM iterations, time per iteration, peak memory, and
// the time of a warm-started refit after a small fraction of new labels
// compared with the cold fit. A benchmark binary, not a test: run it by hand
// (docs/PERFORMANCE.md has the command and the figures).
//
//   bazel run //bench:fit_benchmark -- [--methods=mv,ds] [--sizes=50k,500k,5m]
//       [--classes=2,5] [--threads=1,2] [--incremental_fraction=0.01]
//       [--format=markdown]
//   bazel run //bench:fit_benchmark -- --data=DIR   (a shared/datasets folder)
//
// Sizes: 50k = 10,000 items × 5 labels, 300 annotators; 500k = 100,000 × 5,
// 300 annotators (the shape of the reference Python measurement in
// docs/PERFORMANCE.md); 5m = 1,000,000 × 5, 3,000 annotators; or
// ITEMSxLABELSxANNOTATORS, e.g. 200000x5x1000. Crowds come from
// bench/random_crowd.h with --seed, so every method sees the same data.
//
// Every configuration runs in a fresh child process (fork), so its memory
// figures are its own:
//   1. generate the crowd and build the AnnotationMatrix;
//   2. cold Fit (timed); "peak MiB" is the process's VmHWM right after it,
//      i.e. the high-water mark of data + matrix + fit; "fit +MiB" is the
//      fit's own high-water mark above the resident size before it (the
//      mark is reset through /proc/self/clear_refs just before the fit);
//   3. accuracy of the fitted posteriors against the true classes;
//   4. incremental refit: a new model is fitted cold on the first
//      (1 − f) of the labels in item order (so the last f of the items are
//      new), then a copy of it is refitted warm-started on all labels
//      (timed), as the server refits a clone of the published model.
//      "warm/full" is that refit's time over the cold fit's time of step 2,
//      "warm acc" the refitted posteriors' accuracy. With
//      --refit_max_iterations=N the refit is bounded to N EM iterations.
// Time per iteration is the cold fit time divided by its iterations (the
// majority-vote initialisation pass of a cold start is included, as in the
// reference measurement's total/iterations, and computed from the median
// fit time). "min s" is the fastest cold fit, "cpu s" the median CPU time of
// the process during the cold fit (all threads): on a shared machine they
// show what contention added. Fit and refit times are the median of --runs
// runs (a fresh model, or a fresh Clone() of the base model,
// each time); iterations and memory are those of the first run. A
// configuration that runs past --timeout_s is killed and reported as such.

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
#include "absl/strings/str_split.h"
#include "bench/random_crowd.h"
#include "models/annotation_matrix.h"
#include "models/csv_dataset.h"
#include "models/evaluation.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

ABSL_FLAG(std::string, methods, "",
          "comma-separated truth models (default: all known methods)");
ABSL_FLAG(std::string, sizes, "50k,500k,5m",
          "comma-separated sizes: 50k, 500k, 5m or ITEMSxLABELSxANNOTATORS");
ABSL_FLAG(std::string, classes, "2,5", "comma-separated numbers of classes");
ABSL_FLAG(std::string, threads, "1,2",
          "comma-separated TruthModelOptions::num_threads values");
ABSL_FLAG(std::string, data, "",
          "benchmark this shared/datasets folder instead of simulated crowds "
          "(--sizes and --classes are then ignored)");
ABSL_FLAG(double, incremental_fraction, 0.01,
          "fraction of labels (the last items) that are new for the warm "
          "refit; 0 skips the refit");
ABSL_FLAG(int, refit_max_iterations, 0,
          "max_iterations of the warm refit (0: the same as the cold fit); "
          "the refit model is then restored from the base model's "
          "serialization");
ABSL_FLAG(uint64_t, seed, 1, "seed of the simulated crowds");
ABSL_FLAG(int, max_iterations,
          verity::models::TruthModelOptions().max_iterations,
          "TruthModelOptions::max_iterations");
ABSL_FLAG(double, tolerance, verity::models::TruthModelOptions().tolerance,
          "TruthModelOptions::tolerance");
ABSL_FLAG(int, runs, 3,
          "time the cold fit and the warm refit this many times each (fresh "
          "model / fresh clone every time) and report the median");
ABSL_FLAG(int, timeout_s, 300, "kill a configuration after this many seconds");
ABSL_FLAG(std::string, format, "text", "text or markdown");
ABSL_FLAG(int, neural_steps, 0,
          "neural models: optimiser steps of a fit (TruthModelOptions::Neural::steps; lia: per "
          "EM iteration times --neural_em_iterations); 0 = the model's default. labels / 1024 "
          "steps is one epoch");
ABSL_FLAG(bool, neural_featureless_em, verity::models::TruthModelOptions().neural.featureless_em,
          "TruthModelOptions::Neural::featureless_em (crowdlayer and trace_reg by generalised EM on "
          "these featureless crowds; false: the papers' losses)");
ABSL_FLAG(int, neural_em_iterations, verity::models::TruthModelOptions().neural.em_iterations,
          "neural models: lia's EM iterations (cmm runs 3x this many)");

namespace verity::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time of the whole process (all threads), in seconds.
double ProcessCpuSeconds() {
  timespec ts;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The median (the mean of the two middle values for an even count).
double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

using Size = CrowdSize;

struct Config {
  std::string method;
  std::optional<Size> size;  // empty: --data
  int32_t num_classes = 0;   // 0 with --data
  int threads = 1;
};

// Sent by the child over a pipe; plain data only.
struct Result {
  bool ok = false;
  char error[480] = {};
  int64_t labels = 0;
  int32_t items = 0;
  int32_t annotators = 0;
  int32_t num_classes = 0;
  double generate_seconds = 0;
  double build_seconds = 0;
  double fit_seconds = 0;
  double fit_cpu_seconds = 0;
  double fit_min_seconds = 0;
  int32_t iterations = 0;
  bool converged = false;
  double peak_mib = 0;
  double fit_extra_mib = 0;
  double accuracy = 0;
  bool has_refit = false;
  int64_t new_labels = 0;
  double base_fit_seconds = 0;
  double warm_seconds = 0;
  int32_t warm_iterations = 0;
  bool warm_converged = false;
  double warm_accuracy = 0;
};

// A "VmHWM:" / "VmRSS:" line of /proc/self/status, in MiB; 0 if absent.
double ProcStatusMib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      return std::strtod(line.c_str() + key.size(), nullptr) / 1024.0;
    }
  }
  return 0;
}

// Resets VmHWM to the current VmRSS (Linux >= 4.0). Returns false if the
// kernel refused, in which case "fit +MiB" is not measured.
bool ResetPeakRss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

void SetError(Result& r, const std::string& message) {
  r.ok = false;
  std::snprintf(r.error, sizeof(r.error), "%s", message.c_str());
}

// The body of one configuration, run in the child.
Result RunConfig(const Config& config, const models::TruthModelOptions& base,
                 const std::string& data_dir, double fraction, uint64_t seed,
                 int runs, int refit_max_iterations) {
  Result r;
  models::TruthModelOptions options = base;
  options.num_threads = config.threads;

  Clock::time_point start = Clock::now();
  std::vector<models::Annotation> annotations;
  std::vector<int32_t> truth;
  if (config.size.has_value()) {
    RandomCrowdSpec spec;
    spec.num_items = config.size->items;
    spec.labels_per_item = config.size->labels_per_item;
    spec.num_annotators = config.size->annotators;
    spec.num_classes = config.num_classes;
    spec.seed = seed;
    absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(spec);
    if (!crowd.ok()) {
      SetError(r, crowd.status().ToString());
      return r;
    }
    r.items = crowd->num_items;
    r.annotators = crowd->num_annotators;
    r.num_classes = crowd->num_classes;
    annotations = std::move(crowd->annotations);
    truth = std::move(crowd->truth);
  } else {
    absl::StatusOr<models::CsvDataset> csv = models::ReadCsvDataset(data_dir);
    if (!csv.ok()) {
      SetError(r, csv.status().ToString());
      return r;
    }
    r.items = csv->num_items();
    r.annotators = csv->num_annotators();
    r.num_classes = csv->num_classes();
    // Item order, so that "the last items" are the new ones.
    annotations = std::move(csv->annotations);
    std::stable_sort(annotations.begin(), annotations.end(),
                     [](const models::Annotation& a,
                        const models::Annotation& b) { return a.item < b.item; });
    truth = std::move(csv->gold);
  }
  r.generate_seconds = SecondsSince(start);
  r.labels = static_cast<int64_t>(annotations.size());

  start = Clock::now();
  absl::StatusOr<models::AnnotationMatrix> full = models::AnnotationMatrix::Build(
      r.items, r.annotators, r.num_classes, annotations);
  if (!full.ok()) {
    SetError(r, full.status().ToString());
    return r;
  }
  r.build_seconds = SecondsSince(start);

  absl::StatusOr<std::unique_ptr<models::TruthModel>> model =
      models::CreateTruthModel(config.method, r.num_classes, options);
  if (!model.ok()) {
    SetError(r, model.status().ToString());
    return r;
  }
  const double peak_before_fit = ProcStatusMib("VmHWM:");
  const bool reset = ResetPeakRss();
  const double rss_before_fit = ProcStatusMib("VmRSS:");
  std::vector<double> fit_seconds, fit_cpu_seconds;
  for (int run = 0; run < runs; ++run) {
    if (run > 0) {
      model = models::CreateTruthModel(config.method, r.num_classes, options);
    }
    const double cpu_start = ProcessCpuSeconds();
    start = Clock::now();
    absl::StatusOr<models::FitReport> report =
        (*model)->Fit(*full, /*gold=*/{}, /*warm_start=*/false);
    fit_seconds.push_back(SecondsSince(start));
    fit_cpu_seconds.push_back(ProcessCpuSeconds() - cpu_start);
    if (!report.ok()) {
      SetError(r, report.status().ToString());
      return r;
    }
    if (run == 0) {
      // Memory of the first fit only: later ones reuse freed pages.
      const double peak_of_fit = ProcStatusMib("VmHWM:");
      r.peak_mib = std::max(peak_before_fit, peak_of_fit);
      r.fit_extra_mib = reset ? peak_of_fit - rss_before_fit : -1;
      r.iterations = report->iterations;
      r.converged = report->converged;
    }
  }
  r.fit_seconds = Median(fit_seconds);
  r.fit_min_seconds = *std::min_element(fit_seconds.begin(), fit_seconds.end());
  r.fit_cpu_seconds = Median(fit_cpu_seconds);
  r.accuracy = models::ScorePosteriors(
                   models::AllPosteriors(**model, *full, /*gold=*/{}), *full,
                   truth)
                   .accuracy;
  model->reset();

  if (fraction > 0) {
    const size_t base_labels =
        static_cast<size_t>(annotations.size() * (1.0 - fraction));
    r.has_refit = true;
    r.new_labels = static_cast<int64_t>(annotations.size() - base_labels);
    absl::StatusOr<models::AnnotationMatrix> base_matrix =
        models::AnnotationMatrix::Build(
            r.items, r.annotators, r.num_classes,
            absl::MakeConstSpan(annotations.data(), base_labels));
    absl::StatusOr<std::unique_ptr<models::TruthModel>> incremental =
        models::CreateTruthModel(config.method, r.num_classes, options);
    if (!base_matrix.ok() || !incremental.ok()) {
      SetError(r, "cannot build the base matrix or model");
      return r;
    }
    start = Clock::now();
    absl::StatusOr<models::FitReport> base_report =
        (*incremental)->Fit(*base_matrix, /*gold=*/{}, /*warm_start=*/false);
    r.base_fit_seconds = SecondsSince(start);
    if (!base_report.ok()) {
      SetError(r, base_report.status().ToString());
      return r;
    }
    models::TruthModelOptions refit_options = options;
    if (refit_max_iterations > 0) {
      refit_options.max_iterations = refit_max_iterations;
    }
    std::vector<double> warm_seconds;
    std::unique_ptr<models::TruthModel> refitted;
    for (int run = 0; run < runs; ++run) {
      // As the server does: refit a copy of the published model (a clone,
      // or a model with the refit options restored from its serialization).
      if (refit_max_iterations > 0) {
        absl::StatusOr<std::unique_ptr<models::TruthModel>> copy =
            models::CreateTruthModel(config.method, r.num_classes,
                                     refit_options);
        if (!copy.ok()) {
          SetError(r, copy.status().ToString());
          return r;
        }
        if (absl::Status s = (*copy)->Restore((*incremental)->Serialize());
            !s.ok()) {
          SetError(r, s.ToString());
          return r;
        }
        refitted = *std::move(copy);
      } else {
        refitted = (*incremental)->Clone();
      }
      start = Clock::now();
      absl::StatusOr<models::FitReport> warm =
          refitted->Fit(*full, /*gold=*/{}, /*warm_start=*/true);
      warm_seconds.push_back(SecondsSince(start));
      if (!warm.ok()) {
        SetError(r, warm.status().ToString());
        return r;
      }
      r.warm_iterations = warm->iterations;
      r.warm_converged = warm->converged;
    }
    r.warm_accuracy =
        models::ScorePosteriors(
            models::AllPosteriors(*refitted, *full, /*gold=*/{}), *full, truth)
            .accuracy;
    r.warm_seconds = Median(warm_seconds);
  }
  r.ok = true;
  return r;
}

// Runs RunConfig in a fresh child process; the parent stays single-threaded
// so that fork() is safe.
Result RunInChild(const Config& config, const models::TruthModelOptions& base,
                  const std::string& data_dir, double fraction, uint64_t seed,
                  int runs, int refit_max_iterations, int timeout_s) {
  int fds[2];
  Result r;
  if (::pipe(fds) != 0) {
    SetError(r, "pipe failed");
    return r;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    SetError(r, "fork failed");
    return r;
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(static_cast<unsigned>(timeout_s));
    const Result result =
        RunConfig(config, base, data_dir, fraction, seed, runs,
                  refit_max_iterations);
    const char* p = reinterpret_cast<const char*>(&result);
    size_t left = sizeof(result);
    while (left > 0) {
      const ssize_t n = ::write(fds[1], p, left);
      if (n <= 0) break;
      p += n;
      left -= static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  char* p = reinterpret_cast<char*>(&r);
  size_t got = 0;
  while (got < sizeof(r)) {
    const ssize_t n = ::read(fds[0], p + got, sizeof(r) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (got != sizeof(r)) {
    r = Result();
    if (WIFSIGNALED(status)) {
      SetError(r, WTERMSIG(status) == SIGALRM
                      ? absl::StrCat("timed out after ", timeout_s, " s")
                      : absl::StrCat("killed by signal ", WTERMSIG(status)));
    } else {
      SetError(r, "child exited without a result");
    }
  }
  return r;
}

std::vector<std::string> Columns() {
  return {"method", "K",    "labels", "items",  "annotators",
          "threads", "fit s", "min s", "cpu s", "iters", "ms/iter", "peak MiB",
          "fit +MiB", "warm refit s", "warm iters", "warm/full", "accuracy",
          "warm acc"};
}

std::vector<std::string> Row(const Config& c, const Result& r) {
  std::vector<std::string> row = {
      c.method,
      absl::StrCat(r.num_classes),
      absl::StrCat(r.labels),
      absl::StrCat(r.items),
      absl::StrCat(r.annotators),
      absl::StrCat(c.threads)};
  if (!r.ok) {
    row.push_back(absl::StrCat("error: ", r.error));
    return row;
  }
  row.push_back(absl::StrFormat("%.3f", r.fit_seconds));
  row.push_back(absl::StrFormat("%.3f", r.fit_min_seconds));
  row.push_back(absl::StrFormat("%.3f", r.fit_cpu_seconds));
  row.push_back(absl::StrCat(r.iterations, r.converged ? "" : "*"));
  row.push_back(absl::StrFormat(
      "%.2f", r.iterations > 0 ? 1e3 * r.fit_seconds / r.iterations : 0.0));
  row.push_back(absl::StrFormat("%.0f", r.peak_mib));
  row.push_back(r.fit_extra_mib >= 0 ? absl::StrFormat("%.0f", r.fit_extra_mib)
                                     : "-");
  if (r.has_refit) {
    row.push_back(absl::StrFormat("%.3f", r.warm_seconds));
    row.push_back(absl::StrCat(r.warm_iterations, r.warm_converged ? "" : "*"));
    row.push_back(absl::StrFormat(
        "%.1f%%",
        r.fit_seconds > 0 ? 100.0 * r.warm_seconds / r.fit_seconds : 0.0));
  } else {
    row.insert(row.end(), {"-", "-", "-"});
  }
  row.push_back(absl::StrFormat("%.4f", r.accuracy));
  row.push_back(r.has_refit ? absl::StrFormat("%.4f", r.warm_accuracy) : "-");
  return row;
}

void PrintRow(const std::vector<std::string>& row, bool markdown) {
  static const std::vector<int> kWidths = {8, 2, 8, 8, 10, 7, 7, 7, 7, 6,
                                           8, 8, 8, 12, 10, 9, 8, 8};
  std::string line;
  for (size_t c = 0; c < row.size(); ++c) {
    if (markdown) {
      absl::StrAppend(&line, "| ", row[c], " ");
    } else {
      const int width = c < kWidths.size() ? kWidths[c] : 0;
      absl::StrAppend(&line, c == 0 ? "" : "  ",
                      c == 0 ? absl::StrFormat("%-*s", width, row[c])
                             : absl::StrFormat("%*s", width, row[c]));
    }
  }
  if (markdown) line += "|";
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

int Main() {
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "text" && format != "markdown") {
    std::fprintf(stderr, "--format must be text or markdown\n");
    return 2;
  }
  const bool markdown = format == "markdown";
  models::TruthModelOptions options;
  options.max_iterations = absl::GetFlag(FLAGS_max_iterations);
  options.tolerance = absl::GetFlag(FLAGS_tolerance);
  options.neural.steps = absl::GetFlag(FLAGS_neural_steps);
  options.neural.em_iterations = absl::GetFlag(FLAGS_neural_em_iterations);
  options.neural.featureless_em = absl::GetFlag(FLAGS_neural_featureless_em);
  if (absl::Status s = models::ValidateTruthModelOptions(options); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  std::vector<std::string> methods =
      absl::StrSplit(absl::GetFlag(FLAGS_methods), ',', absl::SkipEmpty());
  if (methods.empty()) {
    for (std::string_view m : models::KnownTruthModelMethods()) {
      methods.emplace_back(m);
    }
  }
  std::vector<int> threads;
  for (absl::string_view t :
       absl::StrSplit(absl::GetFlag(FLAGS_threads), ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(t, &n) || n < 1) {
      std::fprintf(stderr, "--threads: bad value %s\n", std::string(t).c_str());
      return 2;
    }
    threads.push_back(n);
  }
  std::string data_dir = absl::GetFlag(FLAGS_data);
  if (!data_dir.empty() && data_dir[0] != '/') {
    if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY")) {
      data_dir = absl::StrCat(wd, "/", data_dir);
    }
  }
  std::vector<std::optional<Size>> sizes;
  std::vector<int32_t> classes;
  if (!data_dir.empty()) {
    sizes.push_back(std::nullopt);
    classes.push_back(0);
  } else {
    for (absl::string_view s :
         absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
      std::optional<Size> size = ParseCrowdSize(s);
      if (!size.has_value()) {
        std::fprintf(stderr, "--sizes: bad size %s\n", std::string(s).c_str());
        return 2;
      }
      sizes.push_back(size);
    }
    for (absl::string_view k :
         absl::StrSplit(absl::GetFlag(FLAGS_classes), ',', absl::SkipEmpty())) {
      int32_t n = 0;
      if (!absl::SimpleAtoi(k, &n) || n < 2) {
        std::fprintf(stderr, "--classes: bad value %s\n",
                     std::string(k).c_str());
        return 2;
      }
      classes.push_back(n);
    }
  }
  const int runs = absl::GetFlag(FLAGS_runs);
  const int refit_max_iterations = absl::GetFlag(FLAGS_refit_max_iterations);
  if (runs < 1) {
    std::fprintf(stderr, "--runs must be >= 1\n");
    return 2;
  }
  const double fraction = absl::GetFlag(FLAGS_incremental_fraction);
  if (!(fraction >= 0 && fraction < 1)) {
    std::fprintf(stderr, "--incremental_fraction must be in [0, 1)\n");
    return 2;
  }

  std::printf("# %s, %u hardware threads, %.1f GiB RAM, load average %s\n",
              CpuModel().c_str(), std::thread::hardware_concurrency(),
              static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                  ::sysconf(_SC_PAGE_SIZE) / (1024.0 * 1024 * 1024),
              LoadAverage().c_str());
  std::printf("# tolerance %g, max_iterations %d (refit: %d); new labels "
              "for the warm refit: %.3g%%; times are medians of %d runs\n",
              options.tolerance, options.max_iterations,
              refit_max_iterations > 0 ? refit_max_iterations
                                       : options.max_iterations,
              100 * fraction, runs);
  std::printf("# iters marked * did not converge (max_iterations reached)\n");
  PrintRow(Columns(), markdown);
  if (markdown) {
    std::vector<std::string> rule(Columns().size(), "---:");
    rule[0] = "---";
    PrintRow(rule, markdown);
  }
  int failures = 0;
  for (const std::optional<Size>& size : sizes) {
    for (int32_t k : classes) {
      for (const std::string& method : methods) {
        for (int t : threads) {
          const Config config{method, size, k, t};
          const Result r = RunInChild(config, options, data_dir, fraction,
                                      absl::GetFlag(FLAGS_seed), runs,
                                      refit_max_iterations,
                                      absl::GetFlag(FLAGS_timeout_s));
          failures += !r.ok;
          PrintRow(Row(config, r), markdown);
        }
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace verity::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fit_benchmark [--methods=mv,ds] [--sizes=50k,500k,5m] [--classes=2,5] "
      "[--threads=1,2] [--incremental_fraction=0.01] [--format=markdown] | "
      "--data=DIR");
  absl::ParseCommandLine(argc, argv);
  return verity::bench::Main();
}
