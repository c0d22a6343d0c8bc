// refit_benchmark: what a refit costs inside the server after a few new labels, against a fit
// from scratch of the same data, through a real server over an embedded PostgreSQL.
//
//   bazel build -c opt //bench:refit_benchmark
//   bazel-out/k8-opt/bin/bench/refit_benchmark --items=200000 --new_fraction=0.01
//
// Steps: a RandomCrowd (seeded) in shuffled label order; the first (1 - new_fraction) of the
// labels are submitted and fitted from scratch (`--method`, default ds); the rest are submitted
// and the project refit (warm start from the previous version: the incremental path); then the
// method is switched to mv and back, which forces a fit from scratch on all labels. For each
// refit it prints the wall time of the whole refit (consolidating the labels into CSR arrays,
// fitting, persisting the version with its posteriors and profiles, republishing every
// posterior), the fit alone, and EM iterations, from the model version the server stored.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_server.h"
#include "bench/random_crowd.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"

ABSL_FLAG(int, items, 200000, "Items.");
ABSL_FLAG(int, labels_per_item, 5, "Labels per item.");
ABSL_FLAG(int, annotators, 3000, "Annotators.");
ABSL_FLAG(int, classes, 5, "Classes.");
ABSL_FLAG(double, new_fraction, 0.01, "Fraction of the labels that arrive after the first fit.");
ABSL_FLAG(std::string, method, "ds", "Truth method: ds, one_coin or glad.");

namespace {

using verity::bench::CheckOrDie;

void SetMethod(const std::shared_ptr<grpc::Channel>& channel, verity::v1::TruthMethod method) {
  auto stub = verity::v1::ProjectService::NewStub(channel);
  verity::v1::UpdateProjectSettingsRequest request;
  request.set_project("bench");
  request.mutable_settings()->mutable_model()->set_method(method);
  verity::v1::UpdateProjectSettingsResponse response;
  grpc::ClientContext context;
  CheckOrDie(stub->UpdateProjectSettings(&context, request, &response), "UpdateProjectSettings");
}

// Forces a refit and prints one line: wall time, and the stored version's fit time.
void TimedRefit(verity::bench::BenchServer& bench, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = bench.server().core().scheduler->RefitDueProjectsNow(true); !s.ok()) {
    std::fprintf(stderr, "refit: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  auto stub = verity::v1::ModelService::NewStub(bench.channel());
  verity::v1::GetModelStatusRequest request;
  request.set_project("bench");
  verity::v1::GetModelStatusResponse response;
  grpc::ClientContext context;
  CheckOrDie(stub->GetModelStatus(&context, request, &response), "GetModelStatus");
  const verity::v1::ModelVersion& v = response.current_version();
  std::printf("| %s | %s | %lld | %.0f | %.0f | %d |\n", what,
              verity::v1::TruthMethod_Name(v.method()).c_str(),
              static_cast<long long>(v.num_labels()), wall_ms, v.duration_ms(), v.iterations());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  verity::bench::RandomCrowdSpec spec;
  spec.num_items = absl::GetFlag(FLAGS_items);
  spec.labels_per_item = absl::GetFlag(FLAGS_labels_per_item);
  spec.num_annotators = absl::GetFlag(FLAGS_annotators);
  spec.num_classes = absl::GetFlag(FLAGS_classes);
  auto crowd = verity::bench::GenerateRandomCrowd(spec);
  if (!crowd.ok()) {
    std::fprintf(stderr, "%s\n", crowd.status().ToString().c_str());
    return 1;
  }
  std::vector<verity::bench::BenchLabel> labels;
  labels.reserve(crowd->annotations.size());
  for (const auto& a : crowd->annotations) {
    labels.push_back({absl::StrCat("i", a.item), absl::StrCat("w", a.annotator), a.label});
  }
  std::shuffle(labels.begin(), labels.end(), std::mt19937_64(7));
  const size_t first = static_cast<size_t>(
      static_cast<double>(labels.size()) * (1.0 - absl::GetFlag(FLAGS_new_fraction)));

  auto method = verity::v1::TRUTH_METHOD_DAWID_SKENE;
  if (absl::GetFlag(FLAGS_method) == "one_coin") method = verity::v1::TRUTH_METHOD_ONE_COIN;
  if (absl::GetFlag(FLAGS_method) == "glad") method = verity::v1::TRUTH_METHOD_GLAD;

  auto bench = verity::bench::BenchServer::StartOrDie("refit-bench");
  bench->CreateProjectOrDie("bench", spec.num_classes);
  SetMethod(bench->channel(), method);
  std::printf("| refit | method | labels | refit wall ms | fit ms | EM iterations |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  bench->SubmitOrDie("bench", {labels.begin(), labels.begin() + first});
  TimedRefit(*bench, "first fit (from scratch)");
  bench->SubmitOrDie("bench", {labels.begin() + first, labels.end()});
  TimedRefit(*bench, "after new labels (warm start)");
  SetMethod(bench->channel(), verity::v1::TRUTH_METHOD_MAJORITY_VOTE);
  TimedRefit(*bench, "switch to mv");
  SetMethod(bench->channel(), method);
  TimedRefit(*bench, "same labels from scratch");
  return 0;
}
