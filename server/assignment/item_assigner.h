// Assignment ranking: which open items an annotator should label next, and which annotators
// should label an item next (ARCHITECTURE.md, "Assignment").
//
// Every suggestion carries the expected information gain of the label (expected reduction of
// the item's posterior entropy, server/state/information_gain.h) and the predicted probability that
// the annotator answers correctly, from the item's current posterior and the annotator's
// predicted confusion matrix under the project's current model version. The ranking itself
// follows the project's policy:
//   INFORMATION_GAIN  highest expected gain for this annotator (competence-aware)
//   UNCERTAINTY       highest posterior entropy, ignoring who asks
//   UNIFORM           fewest labels (live + leased) first
//   RANDOM            uniformly random
// Items of higher client priority always come first; ties are broken at random.
//
// Eligibility (dynamic overlap): an item is not suggested when the annotator labelled it or
// holds a lease on it, when it is a gold item (its truth is known; gold items are only sent to
// new annotators, see below), or when it is resolved: labels + outstanding leases reached the
// maximum, or confidence reached the target with at least the minimum labels.
//
// New annotators: when gold_items_for_new_annotators = N > 0, an annotator with fewer than N
// labels is sent gold items they have not labelled first (fewest labels first), so that their
// competence is learned quickly.
//
// Cost: one pass over the candidate items (posterior entropy, label counts and priority are
// precomputed in the snapshot) keeping the best k in a heap. An item is scored exactly only if
// an upper bound of its score (gain ≤ η·entropy) can beat the k-th best so far, and a whole
// chunk of the posterior table is skipped when its precomputed bounds cannot
// (PosteriorTable::ScanBounds).
//
// Concurrency: suggestions must see each other's leases, so rank-then-lease is serialised per
// project with LiveProject::assignment_mutex(). RankAndLeaseItems holds that lock only for a
// short list: it ranks the best 3k + 16 items without the lock, then, under it, re-ranks just
// those with the leases as they are by then. A lease added meanwhile only lowers an item's
// score (or makes it ineligible), so while at least k of the short list kept their lease
// counts and eligibility, no item outside it can enter the top k: the result is that of a full
// ranking under the lock. Otherwise, or when a new snapshot was published meanwhile, it ranks
// everything again under the lock. Leases that expired or were released between the two
// halves (without a new snapshot) may be missed, as if they had ended just after the call;
// they only ever free slots.
//
// Thread-safety: the functions read the snapshot (immutable) and the project's thread-safe
// accessors.
#ifndef VERITY_SERVER_ASSIGNMENT_ITEM_ASSIGNER_H_
#define VERITY_SERVER_ASSIGNMENT_ITEM_ASSIGNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/state/live_project.h"
#include "storage/lease_store.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {

// AssignmentSettings with the documented defaults applied.
struct AssignmentRules {
  v1::AssignmentPolicy policy = v1::ASSIGNMENT_POLICY_INFORMATION_GAIN;
  int32_t min_labels = 1;
  int32_t max_labels = 0;         // 0 = unlimited
  double confidence_target = 0;   // 0 = never resolved by confidence
  absl::Duration lease = absl::Seconds(600);
  int32_t gold_items_for_new_annotators = 0;

  static AssignmentRules FromSettings(const v1::AssignmentSettings& settings);
};

struct ItemSuggestion {
  int32_t item;
  double gain;       // Expected entropy reduction (nats).
  double p_correct;  // Predicted probability of a correct label.
  int32_t leases_when_ranked = 0;  // Outstanding leases on the item that the ranking counted.
};

struct AnnotatorSuggestion {
  int32_t candidate;  // Position in the candidates span.
  double gain;
  double p_correct;
};

// Accuracy assumed for every annotator before the project's first fit (when the model has
// no parameters): confusion = kPriorAccuracy on the diagonal, the rest spread evenly.
inline constexpr double kPriorAccuracy = 0.7;

// The confusion matrix the scores use for `annotator` (see kPriorAccuracy).
std::vector<double> ScoringConfusion(const ProjectSnapshot& snapshot, int32_t annotator);

// The confusion both SuggestItems and SuggestAnnotators score `annotator` with: for one outside
// the fit who was given features, the one the model predicts from them (lia), as
// GetAnnotatorProfiles serves it; else ScoringConfusion.
std::vector<double> AnnotatorScoringConfusion(const LiveProject& project,
                                              const ProjectSnapshot& snapshot, int32_t annotator);

// Whether `item` is resolved under `rules` with `outstanding` leases on it. A gold item always
// is (projects.proto).
bool IsResolved(const PosteriorTable& posteriors, int32_t item, int32_t outstanding,
                const AssignmentRules& rules);

// The best k items for `annotator` (an index of the project, or -1 for an annotator the
// project has never seen), best first. `candidates`: item indices to choose from; nullopt =
// every item. `seed` drives tie-breaking and the RANDOM policy.
std::vector<ItemSuggestion> RankItemsForAnnotator(LiveProject& project,
                                                  const ProjectSnapshot& snapshot,
                                                  const AssignmentRules& rules,
                                                  int32_t annotator, int32_t k,
                                                  const std::optional<std::vector<int32_t>>& candidates,
                                                  absl::Time now, uint64_t seed);

// RankItemsForAnnotator on the project's current snapshot, atomically with leasing the result
// to `annotator` until `expires` (see "Concurrency" above); `annotator` must be an index of the
// project.
std::vector<ItemSuggestion> RankAndLeaseItems(LiveProject& project, const AssignmentRules& rules,
                                              int32_t annotator, int32_t k,
                                              const std::optional<std::vector<int32_t>>& candidates,
                                              absl::Time now, absl::Time expires, uint64_t seed);

// RankAndLeaseItems for a project that several server replicas serve: under the project's
// assignment lock here and its claim lock in PostgreSQL (storage::LeaseStore::ClaimLeases),
// first adds the leases the other replicas claimed since this one last looked, then ranks and
// claims. Two annotators asking two replicas are therefore never both sent to an item's last
// open slot. Errors are the database's; nothing is leased then.
absl::StatusOr<std::vector<ItemSuggestion>> RankAndClaimItems(
    LiveProject& project, storage::LeaseStore& leases, const AssignmentRules& rules,
    int32_t annotator, int32_t k, const std::optional<std::vector<int32_t>>& candidates,
    absl::Time now, absl::Time expires, uint64_t seed);

// For a project that several server replicas serve: adds the leases the other replicas claimed
// since this one last looked (storage::LeaseStore::ReadClaimsSince, without the claim lock),
// so that a call that counts or avoids leases without claiming any (SuggestAnnotators, the
// --max_leases_per_project check) sees them. Errors are the database's; nothing changes then.
absl::Status FollowClaimedLeases(LiveProject& project, storage::LeaseStore& leases,
                                 absl::Time now);

// The two halves of RankAndLeaseItems, exposed for tests. ShortlistItems ranks without the
// assignment lock; RankFromShortlist, called under it with the same arguments, returns what
// RankItemsForAnnotator(project, *shortlist.snapshot, ...) would return at that moment.
struct Shortlist {
  std::shared_ptr<const ProjectSnapshot> snapshot;
  // The best `size` items when ranked, or empty with `size` 0 when the annotator is still sent
  // gold items (that choice is made under the lock, as a full ranking).
  std::vector<ItemSuggestion> items;
  int32_t size = 0;
};
Shortlist ShortlistItems(LiveProject& project, const AssignmentRules& rules, int32_t annotator,
                         int32_t k, const std::optional<std::vector<int32_t>>& candidates,
                         absl::Time now, uint64_t seed);
std::vector<ItemSuggestion> RankFromShortlist(LiveProject& project, const Shortlist& shortlist,
                                              const AssignmentRules& rules, int32_t annotator,
                                              int32_t k,
                                              const std::optional<std::vector<int32_t>>& candidates,
                                              absl::Time now, uint64_t seed);

// The best k of `annotators` (indices, -1 = unknown to the project: population confusion) to
// label `item` next, by expected gain. Annotators who labelled the item or hold a lease on it
// are skipped. An annotator outside the model's fit who was given features is scored by the
// confusion the model predicts from them (LiveProject::ConfusionPredictedFromFeatures).
std::vector<AnnotatorSuggestion> RankAnnotatorsForItem(LiveProject& project,
                                                       const ProjectSnapshot& snapshot,
                                                       int32_t item, int32_t k,
                                                       absl::Span<const int32_t> annotators,
                                                       absl::Time now);

}  // namespace verity::server

#endif  // VERITY_SERVER_ASSIGNMENT_ITEM_ASSIGNER_H_
