#include "server/item_assigner.h"

#include <algorithm>
#include <tuple>

#include "server/information_gain.h"

namespace verity::server {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser: a cheap, well-spread tie-breaker.
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double Confidence(absl::Span<const double> p) { return *std::max_element(p.begin(), p.end()); }

// Ranking key of a candidate; larger is better. `primary` is an upper bound of the exact
// score (equal to it except for INFORMATION_GAIN, where it is the entropy).
struct Candidate {
  double priority;
  double primary;
  uint64_t tie;
  int32_t item;
};

bool Less(const Candidate& a, const Candidate& b) {
  return std::tie(a.priority, a.primary, a.tie) < std::tie(b.priority, b.primary, b.tie);
}

}  // namespace

std::vector<double> ScoringConfusion(const ProjectSnapshot& snapshot, int32_t annotator) {
  if (snapshot.model->has_parameters()) return snapshot.model->AnnotatorConfusion(annotator);
  // Before the first fit every confusion is uniform and every gain would be 0. Assume a
  // modest, symmetric competence instead, so the score still prefers uncertain items.
  const int32_t k = snapshot.posteriors.num_classes();
  std::vector<double> c(static_cast<size_t>(k) * k, (1.0 - kPriorAccuracy) / (k - 1));
  for (int32_t i = 0; i < k; ++i) c[i * k + i] = kPriorAccuracy;
  return c;
}

AssignmentRules AssignmentRules::FromSettings(const v1::AssignmentSettings& s) {
  AssignmentRules rules;
  if (s.policy() != v1::ASSIGNMENT_POLICY_UNSPECIFIED) rules.policy = s.policy();
  if (s.min_labels_per_item() > 0) rules.min_labels = s.min_labels_per_item();
  rules.max_labels = s.max_labels_per_item();
  rules.confidence_target = s.confidence_target();
  if (s.lease_seconds() > 0) rules.lease = absl::Seconds(s.lease_seconds());
  rules.gold_items_for_new_annotators = s.gold_items_for_new_annotators();
  return rules;
}

bool IsResolved(const PosteriorTable& posteriors, int32_t item, int32_t outstanding,
                const AssignmentRules& rules) {
  const int32_t labels = posteriors.num_labels(item);
  if (rules.max_labels > 0 && labels + outstanding >= rules.max_labels) return true;
  return rules.confidence_target > 0 && labels >= std::max(rules.min_labels, 1) &&
         Confidence(posteriors.probabilities(item)) >= rules.confidence_target;
}

std::vector<ItemSuggestion> RankItemsForAnnotator(
    LiveProject& project, const ProjectSnapshot& snapshot, const AssignmentRules& rules,
    int32_t annotator, int32_t k, const std::optional<std::vector<int32_t>>& candidates,
    absl::Time now, uint64_t seed) {
  const PosteriorTable& table = snapshot.posteriors;
  const std::vector<double> confusion = ScoringConfusion(snapshot, annotator);
  const absl::flat_hash_map<int32_t, int32_t> outstanding = project.leases().OutstandingPerItem(now);
  auto outstanding_on = [&](int32_t item) {
    auto it = outstanding.find(item);
    return it == outstanding.end() ? 0 : it->second;
  };
  auto available = [&](int32_t item) {
    return !project.HasLabelled(item, annotator) &&
           !(annotator >= 0 && project.leases().Has(item, annotator, now));
  };
  auto suggestion = [&](int32_t item) {
    absl::Span<const double> p = table.probabilities(item);
    return ItemSuggestion{item, ExpectedEntropyReduction(p, confusion),
                          ProbabilityCorrect(p, confusion)};
  };
  std::vector<ItemSuggestion> result;
  if (k <= 0) return result;

  // New annotators are calibrated on gold items first.
  const int32_t known_labels = annotator >= 0 ? project.AnnotatorLabelCount(annotator) : 0;
  if (rules.gold_items_for_new_annotators > known_labels) {
    std::vector<int32_t> gold = project.GoldItems();
    if (candidates.has_value()) {
      std::vector<int32_t> allowed = *candidates;
      std::sort(allowed.begin(), allowed.end());
      gold.erase(std::remove_if(gold.begin(), gold.end(),
                                [&](int32_t i) {
                                  return !std::binary_search(allowed.begin(), allowed.end(), i);
                                }),
                 gold.end());
    }
    std::vector<std::pair<int32_t, int32_t>> by_labels;  // (labels + leases, item)
    for (int32_t item : gold) {
      if (item >= table.num_items()) continue;
      by_labels.emplace_back(table.num_labels(item) + outstanding_on(item), item);
    }
    std::sort(by_labels.begin(), by_labels.end());
    const int32_t wanted = std::min(k, rules.gold_items_for_new_annotators - known_labels);
    for (const auto& [labels, item] : by_labels) {
      if (static_cast<int32_t>(result.size()) >= wanted) break;
      if (available(item)) result.push_back(suggestion(item));
    }
  }

  // Candidates: eligible items with their ranking key.
  std::vector<Candidate> heap;
  auto consider = [&](int32_t item) {
    if (item < 0 || item >= table.num_items() || table.is_gold(item)) return;
    const int32_t leased = outstanding_on(item);
    if (IsResolved(table, item, leased, rules)) return;
    Candidate c{table.priority(item), 0, Mix(seed ^ static_cast<uint64_t>(item)), item};
    switch (rules.policy) {
      case v1::ASSIGNMENT_POLICY_UNIFORM:
        c.primary = -static_cast<double>(table.num_labels(item) + leased);
        break;
      case v1::ASSIGNMENT_POLICY_RANDOM:
        c.primary = 0;
        break;
      default:  // INFORMATION_GAIN (bounded by entropy) and UNCERTAINTY.
        c.primary = table.entropy(item);
        break;
    }
    heap.push_back(c);
  };
  if (candidates.has_value()) {
    for (int32_t item : *candidates) consider(item);
  } else {
    for (int32_t item = 0; item < table.num_items(); ++item) consider(item);
  }
  std::make_heap(heap.begin(), heap.end(), Less);

  // Best-first with early stop: an item's primary key bounds its exact score.
  std::vector<std::pair<Candidate, ItemSuggestion>> best;  // exact key, descending
  const size_t want = static_cast<size_t>(k) - result.size();
  while (!heap.empty() && want > 0) {
    std::pop_heap(heap.begin(), heap.end(), Less);
    Candidate c = heap.back();
    heap.pop_back();
    if (best.size() == want && !Less(best.back().first, c)) break;
    if (!available(c.item)) continue;
    bool already = false;
    for (const ItemSuggestion& s : result) already |= s.item == c.item;
    if (already) continue;
    ItemSuggestion s = suggestion(c.item);
    if (rules.policy == v1::ASSIGNMENT_POLICY_INFORMATION_GAIN) c.primary = s.gain;
    auto pos = std::upper_bound(best.begin(), best.end(), c,
                                [](const Candidate& x, const auto& y) { return Less(y.first, x); });
    best.insert(pos, {c, s});
    if (best.size() > want) best.pop_back();
  }
  for (auto& [key, s] : best) result.push_back(s);
  return result;
}

std::vector<AnnotatorSuggestion> RankAnnotatorsForItem(LiveProject& project,
                                                       const ProjectSnapshot& snapshot,
                                                       int32_t item, int32_t k,
                                                       absl::Span<const int32_t> annotators,
                                                       absl::Time now) {
  std::vector<AnnotatorSuggestion> scored;
  if (item < 0 || item >= snapshot.posteriors.num_items() || k <= 0) return scored;
  absl::Span<const double> p = snapshot.posteriors.probabilities(item);
  for (size_t i = 0; i < annotators.size(); ++i) {
    const int32_t a = annotators[i];
    if (a >= 0 && (project.HasLabelled(item, a) || project.leases().Has(item, a, now))) continue;
    const std::vector<double> confusion = ScoringConfusion(snapshot, a);
    scored.push_back({static_cast<int32_t>(i), ExpectedEntropyReduction(p, confusion),
                      ProbabilityCorrect(p, confusion)});
  }
  auto better = [](const AnnotatorSuggestion& x, const AnnotatorSuggestion& y) {
    return std::tie(x.gain, x.p_correct) > std::tie(y.gain, y.p_correct);
  };
  const size_t n = std::min<size_t>(k, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + n, scored.end(), better);
  scored.resize(n);
  return scored;
}

}  // namespace verity::server
