#include "server/assignment/item_assigner.h"

#include <algorithm>
#include <optional>
#include <cmath>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "server/state/information_gain.h"

namespace verity::server {
namespace {
// The INFORMATION_GAIN score divides the one-step expected entropy reduction by 1 + the labels
// already on the item (live + leased). The one-step gain assumes the item's labels are
// independent given its class; on items that good annotators keep disagreeing on (hard or
// ambiguous items, which Dawid-Skene does not model), the posterior stays near uniform and the
// plain gain keeps sending labels there, each of which changes little. The discount spreads the
// budget: in the replay simulations (docs/ASSIGNMENT.md) it raised the accuracy on bluebirds at
// 10-40 % of the labels by 2-17 points and on rte did not lower it anywhere by more than one item.
double LabelDiscount(int32_t labels_on_item) { return 1.0 / (1.0 + labels_on_item); }

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser: a cheap, well-spread tie-breaker.
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Labels the annotator has given in the project (0 for one the project has never seen): under
// rules.gold_items_for_new_annotators they are first sent gold items.
int32_t KnownLabels(LiveProject& project, int32_t annotator) {
  return annotator >= 0 ? project.AnnotatorLabelCount(annotator) : 0;
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

std::vector<double> AnnotatorScoringConfusion(const LiveProject& project,
                                              const ProjectSnapshot& snapshot, int32_t annotator) {
  std::vector<double> confusion = project.ConfusionPredictedFromFeatures(snapshot, annotator);
  if (confusion.empty()) confusion = ScoringConfusion(snapshot, annotator);
  return confusion;
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
  // projects.proto: "a gold item is always resolved" (its class is known).
  if (posteriors.is_gold(item)) return true;
  const int32_t labels = posteriors.num_labels(item);
  if (rules.max_labels > 0 && labels + outstanding >= rules.max_labels) return true;
  return rules.confidence_target > 0 && labels >= std::max(rules.min_labels, 1) &&
         Confidence(posteriors.probabilities(item)) >= rules.confidence_target;
}

namespace {

// Per-annotator constants that make the gain of an item cheap: I(Z;Y) = H(Y) − Σ_k p_k H(C_k),
// and two upper bounds of it:
//   - the strong data-processing bound I(Z;Y) ≤ η·H(p), with η the Dobrushin coefficient of C
//     (the largest total-variation distance between two rows): tight for confident items, and
//     needs only the item's entropy;
//   - for any distribution r of the label, Σ_z p_z KL(C_z ‖ r) = I(Z;Y) + KL(q ‖ r) ≥ I(Z;Y),
//     with q the label's marginal under p. With r the marginal under a uniform p the bound is
//     exact at uniform p, so tight for uncertain items, and it is linear in p (no logarithm).
struct GainKernel {
  int32_t k;
  std::vector<double> confusion;
  std::vector<double> row_entropy;
  std::vector<double> kl_to_mean;  // KL(C_z ‖ r), r = the column means of C
  double eta = 1.0;

  explicit GainKernel(std::vector<double> c, int32_t classes) : k(classes), confusion(std::move(c)) {
    row_entropy.resize(k);
    eta = 0;
    for (int32_t r = 0; r < k; ++r) {
      row_entropy[r] = Entropy(absl::MakeConstSpan(confusion.data() + r * k, k));
      for (int32_t q = r + 1; q < k; ++q) {
        double tv = 0;
        for (int32_t y = 0; y < k; ++y) tv += std::abs(confusion[r * k + y] - confusion[q * k + y]);
        eta = std::max(eta, tv / 2);
      }
    }
    std::vector<double> mean(k, 0.0);
    for (int32_t z = 0; z < k; ++z) {
      for (int32_t y = 0; y < k; ++y) mean[y] += confusion[z * k + y] / k;
    }
    kl_to_mean.assign(k, 0.0);
    for (int32_t z = 0; z < k; ++z) {
      for (int32_t y = 0; y < k; ++y) {
        const double c_zy = confusion[z * k + y];
        if (c_zy > 0) kl_to_mean[z] += c_zy * std::log(c_zy / mean[y]);
      }
    }
  }

  // Σ_z p_z KL(C_z ‖ r) ≥ Gain(p), with a margin for rounding (the two are equal at uniform p).
  double LinearBound(absl::Span<const double> p) const {
    double bound = 0;
    for (int32_t z = 0; z < k; ++z) bound += p[z] * kl_to_mean[z];
    return bound * (1 + 1e-9) + 1e-12;
  }

  double Gain(absl::Span<const double> p) const {
    double conditional = 0, marginal_entropy = 0;
    for (int32_t z = 0; z < k; ++z) conditional += p[z] * row_entropy[z];
    for (int32_t y = 0; y < k; ++y) {
      double py = 0;
      for (int32_t z = 0; z < k; ++z) py += p[z] * confusion[z * k + y];
      if (py > 0) marginal_entropy -= py * std::log(py);
    }
    return std::max(0.0, marginal_entropy - conditional);
  }
};

}  // namespace

std::vector<ItemSuggestion> RankItemsForAnnotator(
    LiveProject& project, const ProjectSnapshot& snapshot, const AssignmentRules& rules,
    int32_t annotator, int32_t k, const std::optional<std::vector<int32_t>>& candidates,
    absl::Time now, uint64_t seed) {
  std::vector<ItemSuggestion> result;
  if (k <= 0) return result;
  const PosteriorTable& table = snapshot.posteriors;
  const GainKernel kernel(AnnotatorScoringConfusion(project, snapshot, annotator),
                          table.num_classes());
  // Outstanding leases per item: dense for a scan of every item; for a candidate list, only
  // the candidates' (the book may hold leases on every item, and the list is short under the
  // assignment lock).
  std::vector<int32_t> dense_leases;
  absl::flat_hash_map<int32_t, int32_t> candidate_leases;
  if (candidates.has_value()) {
    const std::vector<int32_t> counts = project.leases().OutstandingOn(*candidates, now);
    for (size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] > 0) candidate_leases[(*candidates)[i]] = counts[i];
    }
  } else {
    dense_leases.assign(table.num_items(), 0);
    project.leases().ForEachOutstanding(now, [&](int32_t item, int32_t n) {
      if (item >= 0 && item < table.num_items()) dense_leases[item] = n;
    });
  }
  auto outstanding = [&](int32_t item) -> int32_t {
    if (!candidates.has_value()) return dense_leases[item];
    auto it = candidate_leases.find(item);
    return it == candidate_leases.end() ? 0 : it->second;
  };
  auto available = [&](int32_t item) {
    return !project.HasLabelled(item, annotator) &&
           !(annotator >= 0 && project.leases().Has(item, annotator, now));
  };
  auto suggestion = [&](int32_t item) {
    absl::Span<const double> p = table.probabilities(item);
    return ItemSuggestion{item, kernel.Gain(p), ProbabilityCorrect(p, kernel.confusion),
                          outstanding(item)};
  };

  // New annotators are calibrated on gold items first.
  const int32_t known_labels = KnownLabels(project, annotator);
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
    // Higher priority first (projects.proto, Item.priority), then the least labelled.
    struct GoldCandidate {
      double priority;
      int32_t labels;  // Labels + outstanding leases.
      int32_t item;
    };
    std::vector<GoldCandidate> ordered;
    for (int32_t item : gold) {
      if (item >= table.num_items()) continue;
      ordered.push_back({table.priority(item), table.num_labels(item) + outstanding(item), item});
    }
    std::sort(ordered.begin(), ordered.end(), [](const GoldCandidate& a, const GoldCandidate& b) {
      if (a.priority != b.priority) return a.priority > b.priority;
      if (a.labels != b.labels) return a.labels < b.labels;
      return a.item < b.item;
    });
    const int32_t wanted = std::min(k, rules.gold_items_for_new_annotators - known_labels);
    for (const GoldCandidate& candidate : ordered) {
      const int32_t item = candidate.item;
      if (static_cast<int32_t>(result.size()) >= wanted) break;
      if (available(item)) result.push_back(suggestion(item));
    }
  }
  const size_t want = static_cast<size_t>(k) - result.size();
  if (want == 0) return result;

  // One pass over the candidates keeping the best `want` in a min-heap (worst on top). An
  // item is scored exactly only if its bound can beat the current worst, and checked for
  // availability (a lock) only if its exact key does.
  std::vector<Candidate> best;
  auto worse = [](const Candidate& a, const Candidate& b) { return Less(b, a); };
  // η·(entropy × discount) bounds the discounted gain; the margin covers the rounding of the
  // exact gain (the bound is tight for a perfect annotator). Non-decreasing in its argument,
  // so a range's bound stays above its items'.
  const double eta_with_margin = kernel.eta * (1 + 1e-9);
  auto gain_bound = [&](double discounted_entropy) {
    return eta_with_margin * discounted_entropy + 1e-12;
  };
  const bool gain_policy = rules.policy == v1::ASSIGNMENT_POLICY_INFORMATION_GAIN;
  auto consider = [&](int32_t item) {
    if (item < 0 || item >= table.num_items() || table.is_gold(item)) return;
    const int32_t leased = outstanding(item);
    Candidate c{table.priority(item), 0, 0, item};
    switch (rules.policy) {
      case v1::ASSIGNMENT_POLICY_UNIFORM:
        c.primary = -static_cast<double>(table.num_labels(item) + leased);
        break;
      case v1::ASSIGNMENT_POLICY_RANDOM:
        c.primary = 0;
        break;
      case v1::ASSIGNMENT_POLICY_UNCERTAINTY:
        c.primary = table.entropy(item);
        break;
      default:
        // Upper bound of the (discounted) gain, from entropy × discount computed as ScanBounds
        // and the table's column compute it, so that theirs is never below an item's.
        c.primary = gain_bound(table.entropy(item) * LabelDiscount(table.num_labels(item) + leased));
        break;
    }
    const bool full = best.size() == want;
    // Cheap rejection first: most items cannot beat the current worst of the best.
    if (full && std::tie(c.priority, c.primary) < std::tie(best.front().priority, best.front().primary)) {
      return;
    }
    if (IsResolved(table, item, leased, rules)) return;
    c.tie = Mix(seed ^ static_cast<uint64_t>(item));
    if (full && !Less(best.front(), c)) return;
    if (gain_policy) {
      absl::Span<const double> p = table.probabilities(item);
      const double discount = LabelDiscount(table.num_labels(item) + leased);
      if (full) {  // The second, linear bound, before any logarithm.
        c.primary = std::min(c.primary, kernel.LinearBound(p) * discount);
        if (!Less(best.front(), c)) return;
      }
      c.primary = kernel.Gain(p) * discount;
      if (full && !Less(best.front(), c)) return;
    }
    if (!available(item)) return;
    for (const ItemSuggestion& s : result) {
      if (s.item == item) return;
    }
    best.push_back(c);
    std::push_heap(best.begin(), best.end(), worse);
    if (best.size() > want) {
      std::pop_heap(best.begin(), best.end(), worse);
      best.pop_back();
    }
  };
  // The largest key any item of a range (chunk or block) can have, from its bounds: priority
  // first, then the bound of `primary` above (leases only lower it, so they are left out).
  auto range_best = [&](const PosteriorTable::ScanBounds& b) {
    double primary = 0;
    switch (rules.policy) {
      case v1::ASSIGNMENT_POLICY_UNIFORM:
        primary = -static_cast<double>(b.min_num_labels);
        break;
      case v1::ASSIGNMENT_POLICY_RANDOM:
        primary = 0;
        break;
      case v1::ASSIGNMENT_POLICY_UNCERTAINTY:
        primary = b.max_entropy;
        break;
      default:
        primary = gain_bound(b.max_discounted_entropy);
        break;
    }
    return std::make_pair(b.max_priority, primary);
  };
  if (candidates.has_value()) {
    for (int32_t item : *candidates) consider(item);
  } else {
    // Whole chunks, then blocks, are skipped once `best` is full and their best key is below
    // the worst kept (strictly: an equal key can still win on the tie-breaker). The result is
    // the same as considering every item.
    auto cannot_win = [&](const PosteriorTable::ScanBounds& bounds) {
      return best.size() == want &&
             range_best(bounds) < std::make_pair(best.front().priority, best.front().primary);
    };
    for (int32_t chunk = 0; chunk < table.num_chunks(); ++chunk) {
      if (cannot_win(table.chunk_bounds(chunk))) continue;
      for (int32_t block = 0; block < PosteriorTable::kBlocksPerChunk; ++block) {
        const int32_t begin =
            chunk * PosteriorTable::kChunkItems + block * PosteriorTable::kBlockItems;
        if (begin >= table.num_items()) break;
        if (cannot_win(table.block_bounds(chunk, block))) continue;
        const int32_t end = std::min(table.num_items(), begin + PosteriorTable::kBlockItems);
        if (!gain_policy) {
          for (int32_t item = begin; item < end; ++item) consider(item);
          continue;
        }
        // The gain bound with the item's leases left out, read from the chunk's columns: never
        // below the bound consider() computes, and most items stop here.
        const PosteriorTable::ChunkColumns columns = table.chunk_columns(chunk);
        const int32_t first = chunk * PosteriorTable::kChunkItems;
        for (int32_t item = begin; item < end; ++item) {
          if (best.size() == want) {
            const Candidate& worst = best.front();
            const double priority = columns.priority[item - first];
            if (priority < worst.priority ||
                (priority == worst.priority &&
                 gain_bound(columns.discounted_entropy[item - first]) < worst.primary)) {
              continue;
            }
          }
          consider(item);
        }
      }
    }
  }
  std::sort(best.begin(), best.end(), worse);  // best first
  for (const Candidate& c : best) result.push_back(suggestion(c.item));
  return result;
}

Shortlist ShortlistItems(LiveProject& project, const AssignmentRules& rules, int32_t annotator,
                         int32_t k, const std::optional<std::vector<int32_t>>& candidates,
                         absl::Time now, uint64_t seed) {
  Shortlist shortlist;
  shortlist.snapshot = project.snapshot();
  const int32_t known_labels = KnownLabels(project, annotator);
  if (k <= 0 || rules.gold_items_for_new_annotators > known_labels) {
    return shortlist;
  }
  shortlist.size = 3 * k + 16;
  shortlist.items = RankItemsForAnnotator(project, *shortlist.snapshot, rules, annotator,
                                          shortlist.size, candidates, now, seed);
  return shortlist;
}

std::vector<ItemSuggestion> RankFromShortlist(LiveProject& project, const Shortlist& shortlist,
                                              const AssignmentRules& rules, int32_t annotator,
                                              int32_t k,
                                              const std::optional<std::vector<int32_t>>& candidates,
                                              absl::Time now, uint64_t seed) {
  // A snapshot published meanwhile (labels committed, leases they released) changes the
  // scores in ways the short list does not bound: rank everything on the new one.
  const std::shared_ptr<const ProjectSnapshot> current = project.snapshot();
  if (shortlist.size == 0 || current != shortlist.snapshot) {
    return RankItemsForAnnotator(project, *current, rules, annotator, k, candidates, now, seed);
  }
  std::vector<int32_t> items;
  items.reserve(shortlist.items.size());
  for (const ItemSuggestion& s : shortlist.items) items.push_back(s.item);
  // The items that kept their score and eligibility: the same lease count (a lease for this
  // annotator raises it too) and still not labelled by this annotator. A short list shorter
  // than asked for holds every item that was eligible.
  const std::vector<int32_t> leases_now = project.leases().OutstandingOn(items, now);
  int64_t unchanged = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (leases_now[i] == shortlist.items[i].leases_when_ranked &&
        !project.HasLabelled(items[i], annotator)) {
      ++unchanged;
    }
  }
  const bool complete = static_cast<int32_t>(shortlist.items.size()) < shortlist.size;
  if (!complete && unchanged < k) {
    return RankItemsForAnnotator(project, *current, rules, annotator, k, candidates, now, seed);
  }
  return RankItemsForAnnotator(project, *current, rules, annotator, k, items, now, seed);
}

std::vector<ItemSuggestion> RankAndLeaseItems(LiveProject& project, const AssignmentRules& rules,
                                              int32_t annotator, int32_t k,
                                              const std::optional<std::vector<int32_t>>& candidates,
                                              absl::Time now, absl::Time expires, uint64_t seed) {
  const Shortlist shortlist = ShortlistItems(project, rules, annotator, k, candidates, now, seed);
  absl::MutexLock lock(&project.assignment_mutex());
  std::vector<ItemSuggestion> ranked =
      RankFromShortlist(project, shortlist, rules, annotator, k, candidates, now, seed);
  for (const ItemSuggestion& s : ranked) project.leases().Add(s.item, annotator, expires);
  return ranked;
}

absl::StatusOr<std::vector<ItemSuggestion>> RankAndClaimItems(
    LiveProject& project, storage::LeaseStore& leases, const AssignmentRules& rules,
    int32_t annotator, int32_t k, const std::optional<std::vector<int32_t>>& candidates,
    absl::Time now, absl::Time expires, uint64_t seed) {
  const Shortlist shortlist = ShortlistItems(project, rules, annotator, k, candidates, now, seed);
  absl::MutexLock lock(&project.assignment_mutex());
  std::vector<ItemSuggestion> ranked;
  absl::StatusOr<int64_t> seen = leases.ClaimLeases(
      project.identity().project_id, project.lease_claims_seen(), now,
      [&](const std::vector<storage::LeaseRecord>& claimed_by_others) {
        for (const storage::LeaseRecord& l : claimed_by_others) {
          project.leases().Add(l.item_index, l.annotator_index, l.expires_at);
        }
        // Leases just added change the short list's lease counts: RankFromShortlist sees that
        // and ranks everything again.
        ranked = RankFromShortlist(project, shortlist, rules, annotator, k, candidates, now, seed);
        std::vector<storage::LeaseRecord> chosen;
        chosen.reserve(ranked.size());
        for (const ItemSuggestion& s : ranked) chosen.push_back({s.item, annotator, expires});
        return chosen;
      });
  if (!seen.ok()) return seen.status();
  project.set_lease_claims_seen(*seen);
  for (const ItemSuggestion& s : ranked) project.leases().Add(s.item, annotator, expires);
  return ranked;
}

absl::Status FollowClaimedLeases(LiveProject& project, storage::LeaseStore& leases,
                                 absl::Time now) {
  absl::MutexLock lock(&project.assignment_mutex());
  absl::StatusOr<storage::LeaseStore::Claims> claims =
      leases.ReadClaimsSince(project.identity().project_id, project.lease_claims_seen(), now);
  if (!claims.ok()) return claims.status();
  for (const storage::LeaseRecord& l : claims->open) {
    project.leases().Add(l.item_index, l.annotator_index, l.expires_at);
  }
  project.set_lease_claims_seen(claims->newest);
  return absl::OkStatus();
}

std::vector<AnnotatorSuggestion> RankAnnotatorsForItem(LiveProject& project,
                                                       const ProjectSnapshot& snapshot,
                                                       int32_t item, int32_t k,
                                                       absl::Span<const int32_t> annotators,
                                                       absl::Time now) {
  std::vector<AnnotatorSuggestion> scored;
  if (item < 0 || item >= snapshot.posteriors.num_items() || k <= 0) return scored;
  absl::Span<const double> p = snapshot.posteriors.probabilities(item);
  // Every annotator the project does not know has the population confusion: scored once.
  std::optional<AnnotatorSuggestion> unknown;
  for (size_t i = 0; i < annotators.size(); ++i) {
    const int32_t a = annotators[i];
    if (a < 0) {
      if (!unknown.has_value()) {
        const std::vector<double> confusion = ScoringConfusion(snapshot, -1);
        unknown = AnnotatorSuggestion{0, ExpectedEntropyReduction(p, confusion),
                                      ProbabilityCorrect(p, confusion)};
      }
      scored.push_back({static_cast<int32_t>(i), unknown->gain, unknown->p_correct});
      continue;
    }
    if (project.HasLabelled(item, a) || project.leases().Has(item, a, now)) continue;
    const std::vector<double> confusion = AnnotatorScoringConfusion(project, snapshot, a);
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
