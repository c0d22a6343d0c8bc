// Replay simulation of assignment: a crowdsourcing dataset of shared/datasets
// replayed as a live crowd against a running Verity server, to measure how
// accurate the server's posteriors are after each share of the dataset's
// labels has been bought under each assignment policy.
//
// Protocol of one replay (RunReplay), for one policy and one seed:
//   1. A fresh project gets the dataset's classes, the ReplaySettings (with
//      AssignmentSettings.policy set to the policy) and every labelled item of
//      the dataset (AddItems). By default without gold: the server never sees
//      the truth. With ReplayOptions::gold_every = n > 0, every n-th scored
//      item (SplitProjectGold) is added with its gold class as project gold
//      (control items, as a platform would have) and is no longer scored. The
//      server offers gold items only to annotators with fewer labels than
//      AssignmentSettings.gold_items_for_new_annotators, so that setting
//      decides how many gold labels the crowd gives.
//   2. Arrival: at each step one annotator is drawn uniformly at random
//      (std::mt19937_64 seeded with the seed) among those still in the crowd.
//      An annotator is in the crowd while some item they labelled in the
//      dataset has not yet been asked of them.
//   3. The annotator asks for work: SuggestItems(k = 1, candidate_items = the
//      items they labelled in the dataset and have not answered yet). The
//      suggested item is answered with their label from the dataset
//      (SubmitAnnotations). An empty answer means the server has nothing for
//      them: they leave the crowd.
//   4. The replay stops when the budget (the largest checkpoint) is bought,
//      or when the crowd is empty (everyone answered all they could, or the
//      server suggested nothing to any of them).
//   5. At each budget checkpoint the server's posteriors of the scored items
//      are read (GetPosteriors) and their MAP labels (the server breaks ties
//      by the lowest class index) are compared with gold. If a background fit
//      is running at that moment, the reading waits for it to finish (at most
//      ReplayOptions::fit_wait) so that it does not depend on whether a fit
//      that had already started was swapped in a millisecond earlier or later.
//      Checkpoints never reached (the replay stopped early) are recorded with
//      the final state and the labels actually bought.
//
// Scored items follow shared/datasets/README.md: gold items with at least one
// label in the dataset, less the project gold (gold_every). Items not labelled
// yet in the replay still count; the server's posterior for them is its class
// prior.
//
// Cold fits. The full-data references (RunFullDataReference) and, with
// ReplayOptions::cold_fit_at_checkpoints, the shadow scores of a replay fit a
// given set of labels from scratch in a project of their own: the project is
// created with majority vote, the labels are submitted, and then (for any
// other method) the method is switched to the wanted one (the replay's; auto
// when its settings leave the method unset), so that its first fit sees every
// label and starts cold (from majority vote), as
// `models/eval` would, rather than warm-starting from fits of fewer labels.
// The score is read once a fit of the wanted method has seen every label.
//
// Why shadow scores: a replay's live posteriors come from a chain of fits,
// each warm-started from the previous one as the labels arrive. The shadow
// score of the same labels separates what the policy bought (the labels)
// from what the live chain made of them.
//
// Everything touching the server goes through the ReplayServer interface;
// GrpcReplayServer implements it with a VerityClient, tests with a fake.
//
// Thread safety: the pure functions are thread-safe. A ReplayCrowd is a plain
// value (not synchronized). RunReplay and RunFullDataReference use the server
// from the calling thread only.

#ifndef VERITY_CLIENT_REPLAY_SIMULATION_H_
#define VERITY_CLIENT_REPLAY_SIMULATION_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/verity_client.h"
#include "models/csv_dataset.h"
#include "verity/v1/assignment.pb.h"
#include "verity/v1/models.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::client {

// What a simulation run measures: a replay under one assignment policy, or a
// full-data reference fit with one truth method.
struct SimulationPolicy {
  // "random", "uniform", "uncertainty", "information_gain" (replays) or
  // "all_ds", "all_mv" (references).
  std::string name;
  bool is_reference = false;
  // For replays.
  v1::AssignmentPolicy policy = v1::ASSIGNMENT_POLICY_UNSPECIFIED;
  // For references.
  v1::TruthMethod method = v1::TRUTH_METHOD_UNSPECIFIED;
};

// Parses a comma-separated list of the names above, in the given order.
// INVALID_ARGUMENT names an unknown or repeated name, or an empty list.
absl::StatusOr<std::vector<SimulationPolicy>> ParsePolicies(
    absl::string_view list);

// One budget checkpoint: a share of the dataset's labels and the number of
// labels it is.
struct BudgetCheckpoint {
  double fraction = 0;
  int64_t labels = 0;
};

// Parses comma-separated budget fractions ("0.1,0.2,1"), each in (0, 1].
// INVALID_ARGUMENT for a malformed or out-of-range value or an empty list.
absl::StatusOr<std::vector<double>> ParseBudgetFractions(absl::string_view list);

// The checkpoints of `fractions` for a dataset of total_labels labels: labels
// = round(fraction * total_labels), at least 1, sorted by fraction; a
// fraction given twice counts once. INVALID_ARGUMENT if total_labels < 1 or a
// fraction is outside (0, 1].
absl::StatusOr<std::vector<BudgetCheckpoint>> BudgetCheckpoints(
    absl::Span<const double> fractions, int64_t total_labels);

// A uniformly distributed value in [0, n) drawn from `rng` by rejection, so
// that a seed gives the same sequence with every standard library (unlike
// std::uniform_int_distribution). Precondition: n >= 1.
uint64_t UniformIndex(std::mt19937_64& rng, uint64_t n);

// The dataset's labels seen as a crowd: every annotator can be asked each item
// they labelled in the dataset, once, and answers with that label. Tracks who
// is still in the crowd (has something left to answer and has not left).
class ReplayCrowd {
 public:
  explicit ReplayCrowd(const models::CsvDataset& dataset);

  int64_t total_labels() const { return total_labels_; }
  int64_t answered() const { return answered_; }
  // Annotators still in the crowd.
  int32_t num_present() const { return static_cast<int32_t>(present_.size()); }
  bool is_present(int32_t annotator) const {
    return position_[annotator] >= 0;
  }

  // A present annotator, uniformly at random. Precondition: num_present() > 0.
  int32_t DrawAnnotator(std::mt19937_64& rng) const;

  // The items `annotator` labelled in the dataset and has not answered yet,
  // as dense item indices in dataset order.
  std::vector<int32_t> RemainingItems(int32_t annotator) const;

  // Records that `annotator` answered `item` and returns their dataset label.
  // An annotator with nothing left leaves the crowd. NOT_FOUND if they have no
  // label for the item or answered it already.
  absl::StatusOr<int32_t> Answer(int32_t annotator, int32_t item);

  // `annotator` leaves the crowd (the server had nothing for them). No effect
  // if they already left.
  void Leave(int32_t annotator);

 private:
  // Per annotator: (item, label) not yet answered, in dataset order.
  std::vector<std::vector<std::pair<int32_t, int32_t>>> remaining_;
  // Present annotators (any order) and each annotator's index in present_,
  // -1 once gone: O(1) draws and removals.
  std::vector<int32_t> present_;
  std::vector<int32_t> position_;
  int64_t total_labels_ = 0;
  int64_t answered_ = 0;
};

// Dense indices of the items scored against gold: gold class >= 0 and at
// least one label in the dataset, ascending.
std::vector<int32_t> ScoredItems(const models::CsvDataset& dataset);

// The scored items split into project gold and the items still scored, for a
// replay with `seed`: with gold_every = n > 0 the items at positions p of
// `scored` (ascending, as ScoredItems gives them) with p % n == seed % n are
// gold, the others stay scored (so about 1/n of them are gold, a different
// share for each seed, reproducible outside this code). n = 0: no gold.
struct ProjectGoldSplit {
  std::vector<int32_t> gold;
  std::vector<int32_t> scored;
};
ProjectGoldSplit SplitProjectGold(absl::Span<const int32_t> scored,
                                  int32_t gold_every, uint64_t seed);

// Fraction of `items` whose posterior's map_label equals the item's gold
// class; `posteriors` are the server's answers for `items`, in that order.
// INTERNAL if a posterior names another item than asked, INVALID_ARGUMENT if
// the sizes differ or items is empty.
absl::StatusOr<double> AccuracyOnGold(absl::Span<const v1::Posterior> posteriors,
                                      absl::Span<const int32_t> items,
                                      const models::CsvDataset& dataset);

// One line of the output CSV.
struct SimulationRow {
  std::string dataset;
  std::string policy;
  int64_t seed = 0;      // 0 for references.
  int64_t labels = 0;    // Labels bought when the accuracy was read.
  double fraction = 0;   // The checkpoint's budget fraction.
  double accuracy = 0;
};

inline constexpr absl::string_view kSimulationCsvHeader =
    "dataset,policy,seed,labels,fraction,accuracy";
// One CSV line (no newline), accuracy with 6 decimals.
std::string FormatSimulationRow(const SimulationRow& row);

// Mean over seeds of the rows of one (dataset, policy, fraction).
struct SummaryCell {
  std::string dataset;
  std::string policy;
  double fraction = 0;
  double mean_labels = 0;
  double mean_accuracy = 0;
  int64_t runs = 0;
};

// Groups rows by (dataset, policy, fraction) and averages them; cells in order
// of first appearance of their (dataset, policy), then by fraction.
std::vector<SummaryCell> Summarize(absl::Span<const SimulationRow> rows);

// A Markdown table per dataset: one row per policy (in order of appearance),
// one column per budget fraction, ascending, headed by the fraction and the
// mean labels of the first cell that has it; mean accuracy with 4 decimals; a
// reference shows its one value in the column of its fraction (1.0) and ""
// elsewhere.
std::string FormatSummaryTables(absl::Span<const SummaryCell> cells);

// The server operations a replay uses. Implemented over gRPC by
// GrpcReplayServer; tests use a fake.
class ReplayServer {
 public:
  virtual ~ReplayServer() = default;
  virtual absl::Status CreateProject(const v1::Project& project) = 0;
  virtual absl::Status AddItems(absl::string_view project,
                                absl::Span<const v1::Item> items) = 0;
  virtual absl::StatusOr<std::vector<v1::ItemSuggestion>> SuggestItems(
      absl::string_view project, absl::string_view annotator, int32_t k,
      absl::Span<const std::string> candidate_items) = 0;
  // OK only if every annotation was accepted as a new live label.
  virtual absl::Status SubmitLabels(
      absl::string_view project,
      absl::Span<const v1::Annotation> annotations) = 0;
  virtual absl::StatusOr<std::vector<v1::Posterior>> GetPosteriors(
      absl::string_view project, absl::Span<const std::string> items) = 0;
  virtual absl::StatusOr<v1::GetModelStatusResponse> GetModelStatus(
      absl::string_view project) = 0;
  virtual absl::Status UpdateProjectSettings(
      absl::string_view project, const v1::ProjectSettings& settings) = 0;
};

// ReplayServer over a VerityClient (which must outlive it).
class GrpcReplayServer final : public ReplayServer {
 public:
  explicit GrpcReplayServer(const VerityClient& client) : client_(client) {}

  absl::Status CreateProject(const v1::Project& project) override;
  absl::Status AddItems(absl::string_view project,
                        absl::Span<const v1::Item> items) override;
  absl::StatusOr<std::vector<v1::ItemSuggestion>> SuggestItems(
      absl::string_view project, absl::string_view annotator, int32_t k,
      absl::Span<const std::string> candidate_items) override;
  absl::Status SubmitLabels(
      absl::string_view project,
      absl::Span<const v1::Annotation> annotations) override;
  absl::StatusOr<std::vector<v1::Posterior>> GetPosteriors(
      absl::string_view project, absl::Span<const std::string> items) override;
  absl::StatusOr<v1::GetModelStatusResponse> GetModelStatus(
      absl::string_view project) override;
  absl::Status UpdateProjectSettings(
      absl::string_view project, const v1::ProjectSettings& settings) override;

 private:
  const VerityClient& client_;
};

struct ReplayProgress {
  std::string project;
  int64_t bought = 0;  // Labels bought so far.
  int64_t budget = 0;  // Labels the replay may buy.
  int32_t present = 0; // Annotators still in the crowd.
};

struct ReplayOptions {
  // The dataset's name, written in every row (e.g. "bluebirds").
  std::string dataset_name;
  // Project names are "<project_prefix>-<dataset>-<policy>-s<seed>" (replays)
  // or "<project_prefix>-<dataset>-<policy>" (references).
  std::string project_prefix = "sim";
  // 0: no project gold. n > 0: every n-th scored item is project gold (see
  // SplitProjectGold; references use seed 0) in the replay's project and in
  // its cold-fit and reference projects, and is not scored.
  int32_t gold_every = 0;
  // Settings of every project; RunReplay sets assignment.policy, and
  // RunFullDataReference sets model.method. Default: all server defaults.
  v1::ProjectSettings settings;
  // Budget checkpoints, ascending (see BudgetCheckpoints); the last one is the
  // replay's budget. Must not be empty.
  std::vector<BudgetCheckpoint> checkpoints;
  // At a checkpoint, how long to wait for a running fit to end before reading
  // anyway. Zero: never wait.
  absl::Duration fit_wait = absl::Seconds(60);
  // At each checkpoint, also score a cold fit (see above) of exactly the
  // labels bought so far, in a shadow project "<project>-c<labels>" with the
  // replay's truth method; its rows have the policy "<policy>/cold".
  bool cold_fit_at_checkpoints = false;
  // How long a cold fit may take to see every label before the run fails with
  // DEADLINE_EXCEEDED (the server refits at least every 30 s by default).
  absl::Duration reference_fit_timeout = absl::Seconds(120);
  // Interval of the polls of GetModelStatus.
  absl::Duration poll_interval = absl::Milliseconds(20);
  // Called every progress_every labels bought and at the end. May be empty.
  std::function<void(const ReplayProgress&)> on_progress;
  int64_t progress_every = 100;
  // Sleeps between polls; empty = absl::SleepFor. Tests inject a recorder.
  std::function<void(absl::Duration)> sleep;
};

// What one replay did besides its rows.
struct ReplayStats {
  int64_t steps = 0;            // SuggestItems calls.
  int64_t bought = 0;           // Labels submitted.
  int64_t empty_answers = 0;    // Suggestions that came back empty.
  int64_t left_unserved = 0;    // Annotators who left on an empty answer
                                // while they still had candidates.
  absl::Duration elapsed;
};

struct ReplayResult {
  // One per checkpoint, ascending; with cold_fit_at_checkpoints, each live row
  // is followed by its "/cold" row.
  std::vector<SimulationRow> rows;
  ReplayStats stats;
};

// Runs the replay protocol above for `policy` (a replay, not a reference) and
// `seed`. Errors of the server calls come back with their code and a message
// naming the step; INTERNAL if the server suggests an item outside the
// candidates, several items for k = 1, or an item id the dataset lacks;
// INVALID_ARGUMENT for empty checkpoints, a reference policy, a negative
// gold_every, or a gold_every that leaves no item scored.
absl::StatusOr<ReplayResult> RunReplay(ReplayServer& server,
                                       const models::CsvDataset& dataset,
                                       const ReplayOptions& options,
                                       const SimulationPolicy& policy,
                                       uint64_t seed);

// The full-data reference for `policy` (a reference): a cold fit (see above)
// with policy.method of every label, submitted in dataset order; one row
// (fraction 1, seed 0). DEADLINE_EXCEEDED after
// options.reference_fit_timeout without a fit that saw every label.
absl::StatusOr<SimulationRow> RunFullDataReference(
    ReplayServer& server, const models::CsvDataset& dataset,
    const ReplayOptions& options, const SimulationPolicy& policy);

}  // namespace verity::client

#endif  // VERITY_CLIENT_REPLAY_SIMULATION_H_
