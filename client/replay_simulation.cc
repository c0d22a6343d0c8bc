#include "client/replay_simulation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace verity::client {
namespace {

struct PolicyName {
  const char* name;
  bool is_reference;
  v1::AssignmentPolicy policy;
  v1::TruthMethod method;
};

constexpr PolicyName kPolicyNames[] = {
    {"random", false, v1::ASSIGNMENT_POLICY_RANDOM, v1::TRUTH_METHOD_UNSPECIFIED},
    {"uniform", false, v1::ASSIGNMENT_POLICY_UNIFORM,
     v1::TRUTH_METHOD_UNSPECIFIED},
    {"uncertainty", false, v1::ASSIGNMENT_POLICY_UNCERTAINTY,
     v1::TRUTH_METHOD_UNSPECIFIED},
    {"information_gain", false, v1::ASSIGNMENT_POLICY_INFORMATION_GAIN,
     v1::TRUTH_METHOD_UNSPECIFIED},
    {"all_ds", true, v1::ASSIGNMENT_POLICY_UNSPECIFIED,
     v1::TRUTH_METHOD_DAWID_SKENE},
    {"all_mv", true, v1::ASSIGNMENT_POLICY_UNSPECIFIED,
     v1::TRUTH_METHOD_MAJORITY_VOTE},
};

std::string KnownPolicyNames() {
  std::vector<std::string> names;
  for (const PolicyName& p : kPolicyNames) names.push_back(p.name);
  return absl::StrJoin(names, ", ");
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, status.message()));
}

// "0.1" → "10%", "0.125" → "12.5%".
std::string Percent(double fraction) {
  return absl::StrFormat("%g%%", std::round(fraction * 1e6) / 1e4);
}

// The dataset's items that have at least one label, ascending.
std::vector<int32_t> LabelledItems(const models::CsvDataset& dataset) {
  std::vector<bool> labelled(dataset.num_items(), false);
  for (const models::Annotation& a : dataset.annotations) {
    labelled[a.item] = true;
  }
  std::vector<int32_t> items;
  for (int32_t i = 0; i < dataset.num_items(); ++i) {
    if (labelled[i]) items.push_back(i);
  }
  return items;
}

std::vector<std::string> ItemIds(const models::CsvDataset& dataset,
                                 absl::Span<const int32_t> items) {
  std::vector<std::string> ids;
  ids.reserve(items.size());
  for (int32_t i : items) ids.push_back(dataset.item_ids[i]);
  return ids;
}

// Creates `name` with the dataset's classes and `settings`, and adds every
// labelled item; only the items of `gold` (dense indices) carry their gold
// class: the server must not see the truth of the others.
absl::Status CreateReplayProject(ReplayServer& server,
                                 const models::CsvDataset& dataset,
                                 const std::string& name,
                                 const v1::ProjectSettings& settings,
                                 absl::Span<const int32_t> gold) {
  v1::Project project;
  project.set_name(name);
  for (const std::string& c : dataset.class_names) project.add_classes(c);
  *project.mutable_settings() = settings;
  absl::Status created = server.CreateProject(project);
  if (!created.ok()) {
    return Annotate(created, absl::StrCat("CreateProject ", name, ": "));
  }
  const absl::flat_hash_set<int32_t> is_gold(gold.begin(), gold.end());
  std::vector<v1::Item> items;
  for (int32_t i : LabelledItems(dataset)) {
    v1::Item& item = items.emplace_back();
    item.set_id(dataset.item_ids[i]);
    if (is_gold.contains(i)) item.set_gold_label(dataset.gold[i]);
  }
  absl::Status added = server.AddItems(name, items);
  if (!added.ok()) return Annotate(added, absl::StrCat("AddItems ", name, ": "));
  return absl::OkStatus();
}

// SplitProjectGold of the dataset's scored items for options.gold_every;
// INVALID_ARGUMENT for a negative gold_every or one that leaves nothing
// scored.
absl::StatusOr<ProjectGoldSplit> CheckedGoldSplit(
    const models::CsvDataset& dataset, const ReplayOptions& options,
    uint64_t seed) {
  if (options.gold_every < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gold_every is ", options.gold_every, "; need >= 0 (0: no gold)"));
  }
  ProjectGoldSplit split =
      SplitProjectGold(ScoredItems(dataset), options.gold_every, seed);
  if (options.gold_every > 0 && split.scored.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gold_every = ", options.gold_every, " leaves no item of ",
        options.dataset_name, " to score"));
  }
  return split;
}

void Sleep(const ReplayOptions& options, absl::Duration d) {
  if (options.sleep) {
    options.sleep(d);
  } else {
    absl::SleepFor(d);
  }
}

// Reads the accuracy of the scored items, after waiting (at most
// options.fit_wait) for a running fit to end.
absl::StatusOr<double> ReadAccuracy(ReplayServer& server,
                                    const models::CsvDataset& dataset,
                                    const ReplayOptions& options,
                                    const std::string& project,
                                    absl::Span<const int32_t> scored,
                                    absl::Span<const std::string> scored_ids) {
  absl::Duration waited;
  while (waited < options.fit_wait) {
    absl::StatusOr<v1::GetModelStatusResponse> status =
        server.GetModelStatus(project);
    if (!status.ok()) {
      return Annotate(status.status(),
                      absl::StrCat("GetModelStatus ", project, ": "));
    }
    if (!status->training()) break;
    Sleep(options, options.poll_interval);
    waited += options.poll_interval;
  }
  absl::StatusOr<std::vector<v1::Posterior>> posteriors =
      server.GetPosteriors(project, scored_ids);
  if (!posteriors.ok()) {
    return Annotate(posteriors.status(),
                    absl::StrCat("GetPosteriors ", project, ": "));
  }
  return AccuracyOnGold(*posteriors, scored, dataset);
}

// The method a project created now with `settings` fits: UNSPECIFIED is auto,
// which the server stores for it (projects.proto, ModelSettings.method).
v1::TruthMethod EffectiveMethod(const v1::ProjectSettings& settings) {
  return settings.model().method() == v1::TRUTH_METHOD_UNSPECIFIED
             ? v1::TRUTH_METHOD_AUTO
             : settings.model().method();
}

// The accuracy on split.scored of a cold fit with `method` of `annotations`,
// in a new project `name` with split.gold as gold (see "Cold fits" in the
// header).
absl::StatusOr<double> ColdFitAccuracy(
    ReplayServer& server, const models::CsvDataset& dataset,
    const ReplayOptions& options, const std::string& name,
    v1::TruthMethod method, absl::Span<const v1::Annotation> annotations,
    const ProjectGoldSplit& split) {
  v1::ProjectSettings settings = options.settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  VERITY_RETURN_IF_ERROR(
      CreateReplayProject(server, dataset, name, settings, split.gold));
  if (!annotations.empty()) {
    absl::Status submitted = server.SubmitLabels(name, annotations);
    if (!submitted.ok()) {
      return Annotate(submitted, absl::StrCat("SubmitAnnotations ", name, ": "));
    }
  }
  if (method != v1::TRUTH_METHOD_MAJORITY_VOTE) {
    settings.mutable_model()->set_method(method);
    absl::Status updated = server.UpdateProjectSettings(name, settings);
    if (!updated.ok()) {
      return Annotate(updated,
                      absl::StrCat("UpdateProjectSettings ", name, ": "));
    }
  }
  const int64_t total = static_cast<int64_t>(annotations.size());
  absl::Duration waited;
  while (total > 0) {
    absl::StatusOr<v1::GetModelStatusResponse> status =
        server.GetModelStatus(name);
    if (!status.ok()) {
      return Annotate(status.status(),
                      absl::StrCat("GetModelStatus ", name, ": "));
    }
    if (status->has_current_version() &&
        status->current_version().method() == method &&
        status->current_version().num_labels() == total &&
        status->labels_since_version() == 0 && !status->training()) {
      break;
    }
    if (waited >= options.reference_fit_timeout) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no ", v1::TruthMethod_Name(method), " fit of ", name, " saw all ",
          total, " labels within ",
          absl::FormatDuration(options.reference_fit_timeout),
          " (labels since the current version: ",
          status->labels_since_version(), ")"));
    }
    Sleep(options, options.poll_interval);
    waited += options.poll_interval;
  }
  ReplayOptions no_wait = options;
  no_wait.fit_wait = absl::ZeroDuration();
  return ReadAccuracy(server, dataset, no_wait, name, split.scored,
                      ItemIds(dataset, split.scored));
}

}  // namespace

absl::StatusOr<std::vector<SimulationPolicy>> ParsePolicies(
    absl::string_view list) {
  std::vector<SimulationPolicy> policies;
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view raw : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const std::string name(absl::StripAsciiWhitespace(raw));
    if (name.empty()) continue;
    const PolicyName* found = nullptr;
    for (const PolicyName& p : kPolicyNames) {
      if (name == p.name) found = &p;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown policy \"", name, "\"; known: ", KnownPolicyNames()));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy \"", name, "\" is listed twice"));
    }
    policies.push_back(
        {found->name, found->is_reference, found->policy, found->method});
  }
  if (policies.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no policy given; known: ", KnownPolicyNames()));
  }
  return policies;
}

absl::StatusOr<std::vector<double>> ParseBudgetFractions(
    absl::string_view list) {
  std::vector<double> fractions;
  for (absl::string_view raw : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const absl::string_view text = absl::StripAsciiWhitespace(raw);
    if (text.empty()) continue;
    double f = 0;
    if (!absl::SimpleAtod(text, &f) || !std::isfinite(f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("budget fraction \"", text, "\" is not a number"));
    }
    if (!(f > 0 && f <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "budget fraction ", text, " is outside (0, 1]"));
    }
    fractions.push_back(f);
  }
  if (fractions.empty()) {
    return absl::InvalidArgumentError("no budget fraction given");
  }
  return fractions;
}

absl::StatusOr<std::vector<BudgetCheckpoint>> BudgetCheckpoints(
    absl::Span<const double> fractions, int64_t total_labels) {
  if (total_labels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the dataset has ", total_labels, " labels; need >= 1"));
  }
  std::vector<double> sorted(fractions.begin(), fractions.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<BudgetCheckpoint> checkpoints;
  for (double f : sorted) {
    if (!(f > 0 && f <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("budget fraction ", f, " is outside (0, 1]"));
    }
    const int64_t labels = std::max<int64_t>(
        1, std::llround(f * static_cast<double>(total_labels)));
    checkpoints.push_back({f, std::min(labels, total_labels)});
  }
  return checkpoints;
}

uint64_t UniformIndex(std::mt19937_64& rng, uint64_t n) {
  // Values at or above `limit` would make the low residues more likely.
  const uint64_t limit = std::mt19937_64::max() - std::mt19937_64::max() % n;
  while (true) {
    const uint64_t x = rng();
    if (x < limit) return x % n;
  }
}

ReplayCrowd::ReplayCrowd(const models::CsvDataset& dataset)
    : remaining_(dataset.num_annotators()),
      position_(dataset.num_annotators(), -1) {
  for (const models::Annotation& a : dataset.annotations) {
    remaining_[a.annotator].push_back({a.item, a.label});
  }
  total_labels_ = static_cast<int64_t>(dataset.annotations.size());
  for (int32_t a = 0; a < dataset.num_annotators(); ++a) {
    if (remaining_[a].empty()) continue;
    position_[a] = static_cast<int32_t>(present_.size());
    present_.push_back(a);
  }
}

int32_t ReplayCrowd::DrawAnnotator(std::mt19937_64& rng) const {
  return present_[UniformIndex(rng, present_.size())];
}

std::vector<int32_t> ReplayCrowd::RemainingItems(int32_t annotator) const {
  std::vector<int32_t> items;
  items.reserve(remaining_[annotator].size());
  for (const auto& [item, label] : remaining_[annotator]) items.push_back(item);
  return items;
}

absl::StatusOr<int32_t> ReplayCrowd::Answer(int32_t annotator, int32_t item) {
  std::vector<std::pair<int32_t, int32_t>>& remaining = remaining_[annotator];
  auto it = std::find_if(remaining.begin(), remaining.end(),
                         [item](const auto& p) { return p.first == item; });
  if (it == remaining.end()) {
    return absl::NotFoundError(
        absl::StrCat("annotator ", annotator, " has no unanswered label for item ",
                     item));
  }
  const int32_t label = it->second;
  remaining.erase(it);
  ++answered_;
  if (remaining.empty()) Leave(annotator);
  return label;
}

void ReplayCrowd::Leave(int32_t annotator) {
  const int32_t pos = position_[annotator];
  if (pos < 0) return;
  const int32_t last = present_.back();
  present_[pos] = last;
  position_[last] = pos;
  present_.pop_back();
  position_[annotator] = -1;
}

std::vector<int32_t> ScoredItems(const models::CsvDataset& dataset) {
  std::vector<int32_t> scored;
  for (int32_t i : LabelledItems(dataset)) {
    if (dataset.gold[i] >= 0) scored.push_back(i);
  }
  return scored;
}

ProjectGoldSplit SplitProjectGold(absl::Span<const int32_t> scored,
                                  int32_t gold_every, uint64_t seed) {
  ProjectGoldSplit split;
  const uint64_t offset =
      gold_every > 0 ? seed % static_cast<uint64_t>(gold_every) : 0;
  for (size_t p = 0; p < scored.size(); ++p) {
    const bool gold =
        gold_every > 0 && p % static_cast<uint64_t>(gold_every) == offset;
    (gold ? split.gold : split.scored).push_back(scored[p]);
  }
  return split;
}

absl::StatusOr<double> AccuracyOnGold(absl::Span<const v1::Posterior> posteriors,
                                      absl::Span<const int32_t> items,
                                      const models::CsvDataset& dataset) {
  if (items.empty()) return absl::InvalidArgumentError("no item to score");
  if (posteriors.size() != items.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", posteriors.size(), " posteriors for ",
                     items.size(), " items"));
  }
  int64_t correct = 0;
  for (size_t j = 0; j < items.size(); ++j) {
    const std::string& id = dataset.item_ids[items[j]];
    if (posteriors[j].item() != id) {
      return absl::InternalError(
          absl::StrCat("posterior ", j, " is of item \"", posteriors[j].item(),
                       "\"; asked for \"", id, "\""));
    }
    if (posteriors[j].map_label() == dataset.gold[items[j]]) ++correct;
  }
  return static_cast<double>(correct) / static_cast<double>(items.size());
}

std::string FormatSimulationRow(const SimulationRow& row) {
  return absl::StrFormat("%s,%s,%d,%d,%g,%.6f", row.dataset, row.policy,
                         row.seed, row.labels, row.fraction, row.accuracy);
}

std::vector<SummaryCell> Summarize(absl::Span<const SimulationRow> rows) {
  // (dataset, policy) in order of first appearance → fraction → cell.
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::map<double, SummaryCell>>
      cells;
  for (const SimulationRow& row : rows) {
    const auto key = std::make_pair(row.dataset, row.policy);
    auto [it, inserted] = cells.try_emplace(key);
    if (inserted) order.push_back(key);
    SummaryCell& cell = it->second[row.fraction];
    cell.dataset = row.dataset;
    cell.policy = row.policy;
    cell.fraction = row.fraction;
    cell.mean_labels += static_cast<double>(row.labels);
    cell.mean_accuracy += row.accuracy;
    ++cell.runs;
  }
  std::vector<SummaryCell> summary;
  for (const auto& key : order) {
    for (auto& [fraction, cell] : cells[key]) {
      cell.mean_labels /= static_cast<double>(cell.runs);
      cell.mean_accuracy /= static_cast<double>(cell.runs);
      summary.push_back(cell);
    }
  }
  return summary;
}

std::string FormatSummaryTables(absl::Span<const SummaryCell> cells) {
  std::vector<std::string> datasets;
  for (const SummaryCell& c : cells) {
    if (std::find(datasets.begin(), datasets.end(), c.dataset) ==
        datasets.end()) {
      datasets.push_back(c.dataset);
    }
  }
  std::string out;
  for (const std::string& dataset : datasets) {
    std::vector<double> fractions;
    // Labels of each fraction's column header: from the first cell with it.
    std::map<double, double> labels;
    std::vector<std::string> policies;
    std::map<std::pair<std::string, double>, const SummaryCell*> by_key;
    for (const SummaryCell& c : cells) {
      if (c.dataset != dataset) continue;
      if (std::find(fractions.begin(), fractions.end(), c.fraction) ==
          fractions.end()) {
        fractions.push_back(c.fraction);
      }
      labels.try_emplace(c.fraction, c.mean_labels);
      if (std::find(policies.begin(), policies.end(), c.policy) ==
          policies.end()) {
        policies.push_back(c.policy);
      }
      by_key[{c.policy, c.fraction}] = &c;
    }
    std::sort(fractions.begin(), fractions.end());
    absl::StrAppend(&out, "### ", dataset, "\n\n| policy |");
    for (double f : fractions) {
      absl::StrAppend(&out, " ", Percent(f), " (",
                      static_cast<int64_t>(std::llround(labels[f])), ") |");
    }
    absl::StrAppend(&out, "\n|---|");
    for (size_t j = 0; j < fractions.size(); ++j) absl::StrAppend(&out, "---|");
    absl::StrAppend(&out, "\n");
    for (const std::string& policy : policies) {
      absl::StrAppend(&out, "| ", policy, " |");
      for (double f : fractions) {
        auto it = by_key.find({policy, f});
        if (it == by_key.end()) {
          absl::StrAppend(&out, " |");
        } else {
          absl::StrAppend(&out, absl::StrFormat(" %.4f |",
                                                it->second->mean_accuracy));
        }
      }
      absl::StrAppend(&out, "\n");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::Status GrpcReplayServer::CreateProject(const v1::Project& project) {
  return client_.CreateProject(project).status();
}

absl::Status GrpcReplayServer::AddItems(absl::string_view project,
                                        absl::Span<const v1::Item> items) {
  return client_.AddItems(project, items).status();
}

absl::StatusOr<std::vector<v1::ItemSuggestion>> GrpcReplayServer::SuggestItems(
    absl::string_view project, absl::string_view annotator, int32_t k,
    absl::Span<const std::string> candidate_items) {
  return client_.SuggestItems(project, annotator, k, candidate_items);
}

absl::Status GrpcReplayServer::SubmitLabels(
    absl::string_view project, absl::Span<const v1::Annotation> annotations) {
  absl::StatusOr<SubmitTotals> totals =
      client_.SubmitAnnotations(project, annotations, SubmitOptions());
  if (!totals.ok()) return totals.status();
  if (totals->accepted != static_cast<int64_t>(annotations.size())) {
    std::string reason;
    if (!totals->rejections.empty()) {
      reason = absl::StrCat("; first rejection: annotation ",
                            totals->rejections[0].index, ": ",
                            totals->rejections[0].reason);
    }
    return absl::InternalError(absl::StrCat(
        "of ", annotations.size(), " new labels the server accepted ",
        totals->accepted, " (duplicate ", totals->duplicate, ", revised ",
        totals->revised, ", stale ", totals->stale, ", rejected ",
        totals->rejected, ")", reason));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Posterior>> GrpcReplayServer::GetPosteriors(
    absl::string_view project, absl::Span<const std::string> items) {
  return client_.GetPosteriors(project, items);
}

absl::StatusOr<v1::GetModelStatusResponse> GrpcReplayServer::GetModelStatus(
    absl::string_view project) {
  return client_.GetModelStatus(project);
}

absl::Status GrpcReplayServer::UpdateProjectSettings(
    absl::string_view project, const v1::ProjectSettings& settings) {
  return client_.UpdateProjectSettings(project, settings).status();
}

absl::StatusOr<ReplayResult> RunReplay(ReplayServer& server,
                                       const models::CsvDataset& dataset,
                                       const ReplayOptions& options,
                                       const SimulationPolicy& policy,
                                       uint64_t seed) {
  if (policy.is_reference) {
    return absl::InvalidArgumentError(
        absl::StrCat(policy.name, " is a full-data reference, not a replay"));
  }
  if (options.checkpoints.empty()) {
    return absl::InvalidArgumentError("no budget checkpoint");
  }
  VERITY_ASSIGN_OR_RETURN(const ProjectGoldSplit split,
                          CheckedGoldSplit(dataset, options, seed));
  const absl::Time start = absl::Now();
  const std::string project =
      absl::StrCat(options.project_prefix, "-", options.dataset_name, "-",
                   policy.name, "-s", seed);
  v1::ProjectSettings settings = options.settings;
  settings.mutable_assignment()->set_policy(policy.policy);
  VERITY_RETURN_IF_ERROR(
      CreateReplayProject(server, dataset, project, settings, split.gold));

  const std::vector<int32_t>& scored = split.scored;
  const std::vector<std::string> scored_ids = ItemIds(dataset, scored);
  ReplayCrowd crowd(dataset);
  std::mt19937_64 rng(seed);
  const int64_t budget = options.checkpoints.back().labels;
  ReplayResult result;
  size_t next_checkpoint = 0;
  // The labels bought, kept for the cold fits.
  std::vector<v1::Annotation> bought;

  auto record = [&](size_t c) -> absl::Status {
    VERITY_ASSIGN_OR_RETURN(
        double accuracy,
        ReadAccuracy(server, dataset, options, project, scored, scored_ids));
    result.rows.push_back({options.dataset_name, policy.name,
                           static_cast<int64_t>(seed), crowd.answered(),
                           options.checkpoints[c].fraction, accuracy});
    if (options.cold_fit_at_checkpoints) {
      VERITY_ASSIGN_OR_RETURN(
          double cold,
          ColdFitAccuracy(server, dataset, options,
                          absl::StrCat(project, "-c", crowd.answered()),
                          EffectiveMethod(settings), bought, split));
      result.rows.push_back({options.dataset_name,
                             absl::StrCat(policy.name, "/cold"),
                             static_cast<int64_t>(seed), crowd.answered(),
                             options.checkpoints[c].fraction, cold});
    }
    return absl::OkStatus();
  };
  auto progress = [&] {
    if (options.on_progress) {
      options.on_progress({project, crowd.answered(), budget,
                           crowd.num_present()});
    }
  };

  std::vector<std::string> candidates;
  v1::Annotation annotation;
  while (crowd.answered() < budget && crowd.num_present() > 0) {
    const int32_t annotator = crowd.DrawAnnotator(rng);
    const std::string& annotator_id = dataset.annotator_ids[annotator];
    const std::vector<int32_t> remaining = crowd.RemainingItems(annotator);
    candidates.clear();
    for (int32_t i : remaining) candidates.push_back(dataset.item_ids[i]);

    ++result.stats.steps;
    absl::StatusOr<std::vector<v1::ItemSuggestion>> suggestions =
        server.SuggestItems(project, annotator_id, 1, candidates);
    if (!suggestions.ok()) {
      return Annotate(suggestions.status(),
                      absl::StrCat("SuggestItems ", project, " for annotator ",
                                   annotator_id, " (step ", result.stats.steps,
                                   "): "));
    }
    if (suggestions->empty()) {
      ++result.stats.empty_answers;
      ++result.stats.left_unserved;
      crowd.Leave(annotator);
      continue;
    }
    if (suggestions->size() > 1) {
      return absl::InternalError(absl::StrCat(
          "SuggestItems ", project, " returned ", suggestions->size(),
          " suggestions for k = 1"));
    }
    const std::string& item_id = (*suggestions)[0].item();
    auto found = dataset.item_index.find(item_id);
    if (found == dataset.item_index.end()) {
      return absl::InternalError(
          absl::StrCat("SuggestItems ", project, " suggested item \"", item_id,
                       "\", which the dataset lacks"));
    }
    absl::StatusOr<int32_t> label = crowd.Answer(annotator, found->second);
    if (!label.ok()) {
      return absl::InternalError(absl::StrCat(
          "SuggestItems ", project, " suggested item \"", item_id,
          "\" to annotator ", annotator_id,
          ", outside the candidate items (those they can still answer)"));
    }
    annotation.set_item(item_id);
    annotation.set_annotator(annotator_id);
    annotation.set_label(*label);
    absl::Status submitted = server.SubmitLabels(project, {annotation});
    if (!submitted.ok()) {
      return Annotate(submitted, absl::StrCat("SubmitAnnotations ", project,
                                              " (label ", crowd.answered(),
                                              "): "));
    }
    if (options.cold_fit_at_checkpoints) bought.push_back(annotation);
    while (next_checkpoint < options.checkpoints.size() &&
           crowd.answered() >= options.checkpoints[next_checkpoint].labels) {
      VERITY_RETURN_IF_ERROR(record(next_checkpoint));
      ++next_checkpoint;
    }
    if (options.progress_every > 0 &&
        crowd.answered() % options.progress_every == 0) {
      progress();
    }
  }
  // Stopped before the budget: the remaining checkpoints see the final state.
  if (next_checkpoint < options.checkpoints.size()) {
    const size_t first = result.rows.size();
    VERITY_RETURN_IF_ERROR(record(next_checkpoint));
    const size_t last = result.rows.size();
    for (size_t c = next_checkpoint + 1; c < options.checkpoints.size(); ++c) {
      for (size_t r = first; r < last; ++r) {
        SimulationRow row = result.rows[r];
        row.fraction = options.checkpoints[c].fraction;
        result.rows.push_back(std::move(row));
      }
    }
  }
  progress();
  result.stats.bought = crowd.answered();
  result.stats.elapsed = absl::Now() - start;
  return result;
}

absl::StatusOr<SimulationRow> RunFullDataReference(
    ReplayServer& server, const models::CsvDataset& dataset,
    const ReplayOptions& options, const SimulationPolicy& policy) {
  if (!policy.is_reference) {
    return absl::InvalidArgumentError(
        absl::StrCat(policy.name, " is a replay policy, not a reference"));
  }
  std::vector<v1::Annotation> annotations;
  annotations.reserve(dataset.annotations.size());
  for (const models::Annotation& a : dataset.annotations) {
    v1::Annotation& annotation = annotations.emplace_back();
    annotation.set_item(dataset.item_ids[a.item]);
    annotation.set_annotator(dataset.annotator_ids[a.annotator]);
    annotation.set_label(a.label);
  }
  VERITY_ASSIGN_OR_RETURN(const ProjectGoldSplit split,
                          CheckedGoldSplit(dataset, options, /*seed=*/0));
  const std::string project = absl::StrCat(
      options.project_prefix, "-", options.dataset_name, "-", policy.name);
  VERITY_ASSIGN_OR_RETURN(double accuracy,
                          ColdFitAccuracy(server, dataset, options, project,
                                          policy.method, annotations, split));
  if (options.on_progress) {
    const int64_t n = static_cast<int64_t>(annotations.size());
    options.on_progress({project, n, n, 0});
  }
  return SimulationRow{options.dataset_name, policy.name, 0,
                       static_cast<int64_t>(annotations.size()), 1.0, accuracy};
}

}  // namespace verity::client
