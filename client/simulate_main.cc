// verity_simulate: replays a crowdsourcing dataset of shared/datasets as a live
// crowd against a running Verity server, once per assignment policy and seed,
// and reports the accuracy of the server's posteriors on gold after each
// budget fraction of the dataset's labels (see client/replay_simulation.h for
// the protocol and docs/ASSIGNMENT.md for results).
//
//   bazel-bin/client/verity_simulate --server=localhost:50099
//       --data=../shared/datasets/bluebirds --seeds=3
//       --out_csv=/tmp/bluebirds.csv
//
// Every run creates its own project, "<project_prefix>-<dataset>-<policy>-s<seed>"
// (references: without the seed), so a server can hold many runs; the
// default prefix carries the start time. Rows are appended to --out_csv as
// each run ends; the mean over seeds is printed on stdout at the end, one
// Markdown table per dataset. Progress goes to stderr.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/progress.h"
#include "client/replay_simulation.h"
#include "client/verity_client.h"
#include "models/csv_dataset.h"

ABSL_FLAG(std::string, server, "localhost:50051",
          "Verity server host:port, or several replicas of one database: a:1,b:2");
ABSL_FLAG(std::string, data, "",
          "dataset folder in the shared/datasets format (classes.txt, "
          "labels.csv, gold.csv)");
ABSL_FLAG(std::string, policies,
          "random,uniform,uncertainty,information_gain,all_ds,all_mv",
          "comma-separated: replays under the assignment policies random, "
          "uniform, uncertainty, information_gain; full-data references "
          "all_ds, all_mv (every label, Dawid-Skene or majority vote)");
ABSL_FLAG(int, seeds, 3, "replays per policy, with seeds first_seed, ...");
ABSL_FLAG(int, first_seed, 1, "seed of the first replay of each policy");
ABSL_FLAG(std::string, budget_fractions, "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1",
          "shares of the dataset's labels at which accuracy is read; the "
          "largest is the budget");
ABSL_FLAG(std::string, out_csv, "",
          "write dataset,policy,seed,labels,fraction,accuracy rows here");
ABSL_FLAG(std::string, project_prefix, "",
          "prefix of the project names (default: sim-<start time>)");
ABSL_FLAG(std::string, method, "ds",
          "truth method of the replay projects: ds or mv");
ABSL_FLAG(std::string, calibration, "",
          "ModelSettings.calibration of the replay projects: auto or none "
          "(empty: the server's default, auto)");
ABSL_FLAG(double, confidence_target, 0,
          "AssignmentSettings.confidence_target of the replay projects (0: "
          "items are never resolved by confidence)");
ABSL_FLAG(int, min_labels_per_item, 1, "AssignmentSettings.min_labels_per_item");
ABSL_FLAG(int, max_labels_per_item, 0,
          "AssignmentSettings.max_labels_per_item (0: unlimited)");
ABSL_FLAG(int, gold_every, 0,
          "0: the server never sees the truth. n > 0: every n-th scored item "
          "(offset seed mod n; client/replay_simulation.h, SplitProjectGold) is "
          "added as project gold and not scored");
ABSL_FLAG(int, gold_items_for_new_annotators, 0,
          "AssignmentSettings.gold_items_for_new_annotators: an annotator with fewer labels "
          "is sent project gold first (without it the server never offers gold items)");
ABSL_FLAG(absl::Duration, fit_wait, absl::Seconds(60),
          "at a checkpoint, wait at most this long for a running fit to end");
ABSL_FLAG(bool, cold_fit_at_checkpoints, false,
          "also score, at each checkpoint, a cold fit of exactly the labels "
          "bought so far in a shadow project (rows \"<policy>/cold\"; see "
          "client/replay_simulation.h)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30), "deadline of each RPC");

namespace {

using verity::client::BudgetCheckpoint;
using verity::client::ReplayOptions;
using verity::client::SimulationPolicy;
using verity::client::SimulationRow;

std::string DatasetName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

int Fail(const absl::Status& status) {
  std::cerr << "verity_simulate: " << absl::StatusCodeToString(status.code())
            << ": " << status.message() << "\n";
  return 1;
}

int Run() {
  const std::string data = absl::GetFlag(FLAGS_data);
  if (data.empty()) {
    return Fail(absl::InvalidArgumentError("--data is required"));
  }
  absl::StatusOr<verity::models::CsvDataset> dataset =
      verity::models::ReadCsvDataset(data);
  if (!dataset.ok()) return Fail(dataset.status());
  if (verity::client::ScoredItems(*dataset).empty()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(data, " has no gold item with a label to score")));
  }
  absl::StatusOr<std::vector<SimulationPolicy>> policies =
      verity::client::ParsePolicies(absl::GetFlag(FLAGS_policies));
  if (!policies.ok()) return Fail(policies.status());
  absl::StatusOr<std::vector<double>> fractions =
      verity::client::ParseBudgetFractions(absl::GetFlag(FLAGS_budget_fractions));
  if (!fractions.ok()) return Fail(fractions.status());
  const int64_t total = static_cast<int64_t>(dataset->annotations.size());
  absl::StatusOr<std::vector<BudgetCheckpoint>> checkpoints =
      verity::client::BudgetCheckpoints(*fractions, total);
  if (!checkpoints.ok()) return Fail(checkpoints.status());
  const int seeds = absl::GetFlag(FLAGS_seeds);
  if (seeds < 1) return Fail(absl::InvalidArgumentError("--seeds must be >= 1"));

  ReplayOptions options;
  options.dataset_name = DatasetName(data);
  options.project_prefix = absl::GetFlag(FLAGS_project_prefix);
  if (options.project_prefix.empty()) {
    options.project_prefix = absl::StrCat(
        "sim-", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(),
                                 absl::UTCTimeZone()));
  }
  const std::string method = absl::GetFlag(FLAGS_method);
  if (method == "ds") {
    options.settings.mutable_model()->set_method(
        verity::v1::TRUTH_METHOD_DAWID_SKENE);
  } else if (method == "mv") {
    options.settings.mutable_model()->set_method(
        verity::v1::TRUTH_METHOD_MAJORITY_VOTE);
  } else {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--method must be ds or mv, not \"", method, "\"")));
  }
  const std::string calibration = absl::GetFlag(FLAGS_calibration);
  if (!calibration.empty() && calibration != "auto" && calibration != "none") {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--calibration must be auto, none or empty, not \"", calibration, "\"")));
  }
  options.settings.mutable_model()->set_calibration(calibration);
  verity::v1::AssignmentSettings& assignment =
      *options.settings.mutable_assignment();
  assignment.set_confidence_target(absl::GetFlag(FLAGS_confidence_target));
  assignment.set_min_labels_per_item(absl::GetFlag(FLAGS_min_labels_per_item));
  assignment.set_max_labels_per_item(absl::GetFlag(FLAGS_max_labels_per_item));
  assignment.set_gold_items_for_new_annotators(
      absl::GetFlag(FLAGS_gold_items_for_new_annotators));
  options.checkpoints = *checkpoints;
  options.gold_every = absl::GetFlag(FLAGS_gold_every);
  options.fit_wait = absl::GetFlag(FLAGS_fit_wait);
  options.cold_fit_at_checkpoints = absl::GetFlag(FLAGS_cold_fit_at_checkpoints);
  options.progress_every = 25;

  std::unique_ptr<std::ofstream> csv;
  const std::string out_csv = absl::GetFlag(FLAGS_out_csv);
  if (!out_csv.empty()) {
    csv = std::make_unique<std::ofstream>(out_csv);
    if (!*csv) {
      return Fail(absl::PermissionDeniedError(
          absl::StrCat("cannot write ", out_csv)));
    }
    *csv << verity::client::kSimulationCsvHeader << "\n" << std::flush;
  }

  verity::client::ClientOptions client_options;
  client_options.deadline = absl::GetFlag(FLAGS_timeout);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = verity::client::CreateChannel(
      absl::GetFlag(FLAGS_server), verity::client::ChannelSecurity());
  if (!channel.ok()) return Fail(channel.status());
  verity::client::VerityClient client(*channel, client_options);
  verity::client::GrpcReplayServer server(client);

  std::cerr << absl::StrFormat(
      "%s: %d labels, %d items, %d annotators, %d scored items; projects "
      "%s-%s-*\n",
      options.dataset_name, total, dataset->num_items(),
      dataset->num_annotators(), verity::client::ScoredItems(*dataset).size(),
      options.project_prefix, options.dataset_name);

  std::vector<SimulationRow> rows;
  auto emit = [&](const SimulationRow& row) {
    rows.push_back(row);
    if (csv) *csv << verity::client::FormatSimulationRow(row) << "\n" << std::flush;
  };
  for (const SimulationPolicy& policy : *policies) {
    if (policy.is_reference) {
      const absl::Time start = absl::Now();
      absl::StatusOr<SimulationRow> row = verity::client::RunFullDataReference(
          server, *dataset, options, policy);
      if (!row.ok()) return Fail(row.status());
      emit(*row);
      std::cerr << absl::StrFormat(
          "%s %s: all %d labels, accuracy %.4f (%s)\n", options.dataset_name,
          policy.name, row->labels, row->accuracy,
          absl::FormatDuration(absl::Trunc(absl::Now() - start,
                                           absl::Milliseconds(1))));
      continue;
    }
    for (int s = 0; s < seeds; ++s) {
      const uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_first_seed) + s);
      verity::client::ProgressMeter::Options meter_options;
      meter_options.min_interval = absl::Seconds(1);
      verity::client::ProgressMeter meter(std::cerr,
                                          options.checkpoints.back().labels,
                                          meter_options);
      ReplayOptions run_options = options;
      run_options.on_progress =
          [&meter](const verity::client::ReplayProgress& p) {
            meter.Update(p.bought);
          };
      absl::StatusOr<verity::client::ReplayResult> result =
          verity::client::RunReplay(server, *dataset, run_options, policy, seed);
      meter.Finish();
      if (!result.ok()) return Fail(result.status());
      std::vector<std::string> accuracies, cold;
      for (const SimulationRow& row : result->rows) {
        emit(row);
        (row.policy == policy.name ? accuracies : cold)
            .push_back(absl::StrFormat("%.3f", row.accuracy));
      }
      if (!cold.empty()) {
        accuracies.push_back(
            absl::StrCat("; cold fits ", absl::StrJoin(cold, " ")));
      }
      const verity::client::ReplayStats& stats = result->stats;
      std::cerr << absl::StrFormat(
          "%s %s seed %d: %d labels in %d steps, %.1fs (%.0f labels/s), %d "
          "empty suggestions; accuracy %s\n",
          options.dataset_name, policy.name, seed, stats.bought, stats.steps,
          absl::ToDoubleSeconds(stats.elapsed),
          stats.bought / std::max(1e-9, absl::ToDoubleSeconds(stats.elapsed)),
          stats.empty_answers, absl::StrJoin(accuracies, " "));
    }
  }
  std::cout << "Mean accuracy on gold over " << seeds
            << " seed(s); columns: budget (labels bought)\n\n"
            << verity::client::FormatSummaryTables(
                   verity::client::Summarize(rows));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Replays a dataset as a crowd against a Verity server under each "
      "assignment policy and reports accuracy vs labels bought.\n"
      "  verity_simulate --server=HOST:PORT --data=DIR [--policies=...] "
      "[--seeds=N] [--budget_fractions=...] [--out_csv=FILE]");
  absl::ParseCommandLine(argc, argv);
  return Run();
}
