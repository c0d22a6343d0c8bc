// LiveProject: one project's in-memory state in the server — its labels, id maps, the current
// model version and the immutable snapshot that queries read.
//
// Writers: the ingest pipeline (RegisterOwnCommit and PublishCommitted, after each COMMIT), the
// project service (ApplyItems, SetSettings), the training scheduler (Refit, AdoptVersion) and,
// with several server replicas, the replica follower (ApplyFollowed, ApplyStoredEntities). They serialise
// on mu_; PublishCommitted, which changes only the snapshot, holds it shared. After every write the project publishes a new ProjectSnapshot with one pointer store;
// a snapshot is never modified once published, so readers that hold one finish on it.
//
// Queries never wait for a writer's work: they read the snapshot, and resolve external ids
// under ids_mu_, which writers hold only while they register a new id (not while they apply
// a batch or republish every posterior after a refit, both under mu_).
//
// Invariant: the published posteriors equal models::AllPosteriors(snapshot model, current
// labels, gold). Online updates recompute a touched item from all its live labels with the
// current model; a refit recomputes every item. Because the current model is always the
// latest persisted model version (or majority vote before the first fit), a restarted server
// that loads that version and the live labels serves exactly the same posteriors.
//
// Thread-safety: all public methods are thread-safe.
#ifndef VERITY_SERVER_STATE_LIVE_PROJECT_H_
#define VERITY_SERVER_STATE_LIVE_PROJECT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "models/annotation_matrix.h"
#include "models/incremental_annotation_matrix.h"
#include "models/truth_model.h"
#include "server/state/lease_book.h"
#include "server/state/posterior_table.h"
#include "storage/annotation_store.h"
#include "storage/item_store.h"
#include "storage/lease_store.h"
#include "storage/model_version_store.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {

// What readers see: the model that produced the posteriors and the posteriors themselves.
struct ProjectSnapshot {
  std::shared_ptr<const models::TruthModel> model;
  int32_t model_version = 0;     // 0: no fit yet (majority vote).
  int64_t model_watermark = 0;   // Newest annotation seq the model's fit saw.
  // The stored record of version model_version without its parameters (GetModelStatus answers
  // from it, without the database); null for version 0.
  std::shared_ptr<const storage::ModelVersionRecord> version_metadata;
  PosteriorTable posteriors;

  explicit ProjectSnapshot(int32_t num_classes) : posteriors(num_classes) {}
  // A copy to publish changes from; its class prior is computed again from its own posteriors.
  ProjectSnapshot(const ProjectSnapshot& other);
  ProjectSnapshot& operator=(const ProjectSnapshot&) = delete;

  // The current class prior (truth.proto: AnnotatorProfile.accuracy weighs a confusion's
  // diagonal by it): the mean posterior of the items that have labels in this snapshot, in item
  // order; uniform when none has. Computed on the first call, O(items × classes), and kept:
  // call it only once the snapshot is published (immutable). One state of the project gives
  // the same prior whether online updates or a restart's full recompute reached it (before,
  // the prior was the one of the last full recompute, so labels that arrived after a fit moved
  // every annotator's accuracy at the next restart).
  const std::vector<double>& ClassPrior() const;

 private:
  mutable absl::once_flag class_prior_once_;
  mutable std::vector<double> class_prior_;
};

// One annotation after COMMIT, as the ingest pipeline hands it over.
struct CommittedLabel {
  int32_t item_index;
  absl::string_view item_id;
  int32_t annotator_index;
  absl::string_view annotator_id;
  int32_t label;
  int64_t seq;
  // false for an acknowledged duplicate: nothing to do but register ids, unless memory does
  // not hold this label with this seq (see RegisterCommitted).
  bool changed;
};

// An item whose gold label or existence changed (AddItems).
struct ItemChange {
  int32_t item_index;
  std::string item_id;
  std::optional<int32_t> gold_label;  // Set: new gold label; unset: gold unchanged.
  std::optional<double> priority;     // Set: new assignment priority.
  // Set: the item's features (identity().item_feature_dim values, validated by the caller).
  std::optional<std::vector<float>> features = std::nullopt;
};

// Summary for GetModelStatus / GetProject.
struct ProjectCounts {
  int64_t num_items = 0;
  int64_t num_annotators = 0;
  int64_t num_labels = 0;
  // Revised and stale labels kept in history, as of the load or this server's latest commit
  // to the project (each commit reports the count over every replica's commits).
  int64_t num_revisions = 0;
  int64_t labels_since_version = 0;
  bool training = false;
};

// What listings show of a project: the web console's project list and the per-project
// gauges. LiveProject::Summary() of a loaded project; the registry keeps one for a project the
// memory budget unloads, so that it stays listed with what it showed then.
struct ProjectSummary {
  std::string name;
  std::vector<std::string> classes;
  ProjectCounts counts;
  v1::TruthMethod method = v1::TRUTH_METHOD_UNSPECIFIED;  // The settings' (unset: ds).
  int32_t model_version = 0;
  std::string model_method;   // The served version's method.
  std::string chosen_method;  // auto: the method it chose for the served version, else empty.
  std::string choice_reason;  // auto: why.
};

class LiveProject {
 public:
  static constexpr double kMaxWarmStartGrowth = 2.0;

  struct Identity {
    int64_t project_id;
    std::string name;
    std::vector<std::string> classes;
    int32_t item_feature_dim = 0;
    int32_t annotator_feature_dim = 0;
    absl::Time created_at;
  };

  // The state of a project as stored: what Load reads from PostgreSQL.
  struct StoredState {
    std::vector<std::string> item_ids;          // by item index
    std::vector<int32_t> gold;                  // by item index, -1 = none
    std::vector<double> priority;               // by item index (empty = all 0)
    std::vector<std::string> annotator_ids;     // by annotator index
    // Row-major by item index, identity.item_feature_dim per item (zeros where unknown);
    // empty when the project has no item features.
    std::vector<float> item_features;
    // The same for annotators (identity.annotator_feature_dim per annotator).
    std::vector<float> annotator_features;
    // By annotator index: whether features were given (empty: none were).
    std::vector<bool> annotator_has_features;
    struct Label { int32_t item, annotator, label; int64_t seq; };
    std::vector<Label> labels;
    std::optional<storage::ModelVersionRecord> latest_version;
    std::vector<storage::LeaseRecord> open_leases;
    // The project's change_seq read before the items and annotators above
    // (storage/project_changes.h).
    int64_t change_seq = 0;
    // Rows of the project's annotation_history (storage::ProjectRecord::history_rows).
    int64_t history_rows = 0;
  };

  // Builds the live state from stored state; restores the latest model version's parameters
  // (INTERNAL if they do not restore) and computes every posterior.
  static absl::StatusOr<std::unique_ptr<LiveProject>> Create(Identity identity,
                                                             v1::ProjectSettings settings,
                                                             StoredState stored);

  const Identity& identity() const { return identity_; }
  int32_t num_classes() const { return static_cast<int32_t>(identity_.classes.size()); }

  v1::ProjectSettings settings() const ABSL_LOCKS_EXCLUDED(mu_);
  void SetSettings(v1::ProjectSettings settings) ABSL_LOCKS_EXCLUDED(mu_);

  // The current snapshot; never null.
  std::shared_ptr<const ProjectSnapshot> snapshot() const ABSL_LOCKS_EXCLUDED(snapshot_mu_);

  // Applies committed annotations (in commit order) and publishes the new posteriors of the
  // items they touch: RegisterCommitted, then PublishCommitted.
  void ApplyCommitted(absl::Span<const CommittedLabel> labels) ABSL_LOCKS_EXCLUDED(mu_);

  // The two halves of ApplyCommitted, which the ingest pipeline runs on different threads so
  // that the posterior update of one group overlaps the next group's transaction.
  // RegisterCommitted records the ids and labels (what IngestHints and a refit read) and
  // returns the items whose posteriors changed (ascending). A duplicate whose label (or seq)
  // memory does not hold is applied like a new label: the database already had it from a
  // transaction whose outcome the pipeline never learnt (the connection broke during COMMIT,
  // the client resent). PublishCommitted recomputes those items (and any item added since
  // the last snapshot) and publishes the snapshot. Between the two, the labels are committed
  // but not yet in the served posteriors: the pipeline acks a batch only after
  // PublishCommitted.
  std::vector<int32_t> RegisterCommitted(absl::Span<const CommittedLabel> labels)
      ABSL_LOCKS_EXCLUDED(mu_);
  void PublishCommitted(absl::Span<const int32_t> touched) ABSL_LOCKS_EXCLUDED(mu_);

  // Several server replicas write one project. Memory stays the database's live labels as of
  // one seq, applied_seq(): every commit that drew a seq <= applied_seq() is applied, whichever
  // replica made it, and no label is applied over a newer one of its pair. (Seq order is commit
  // order within a project; see storage/annotation_store.h.)
  int64_t applied_seq() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many leading item and annotator indices have their ids registered: a catch-up read
  // needs ids only from there on.
  std::pair<int32_t, int32_t> KnownIdPrefixes() const ABSL_LOCKS_EXCLUDED(ids_mu_);

  // RegisterCommitted for this server's own commit of the project, which drew the seqs `drawn`
  // (nullopt when it drew none: duplicates only). Returns nullopt, applying nothing, when
  // another writer's commit lies between applied_seq() and drawn->first: the caller then applies
  // the labels since applied_seq() (storage::AnnotationStore::ReadLabelsSince, ApplyFollowed)
  // and calls again, which registers only what that read did not cover.
  std::optional<std::vector<int32_t>> RegisterOwnCommit(
      absl::Span<const CommittedLabel> labels, std::optional<storage::DrawnSeqs> drawn)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The fallback when that read failed (PostgreSQL unreachable): applies the own commit anyway,
  // so that it is served, leaves applied_seq() where it was, and makes ApplyFollowed refuse
  // reads that do not include this commit (they would take its pairs back to older labels).
  std::vector<int32_t> RegisterOwnCommitOutOfOrder(
      absl::Span<const CommittedLabel> labels, std::optional<storage::DrawnSeqs> drawn)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Items, annotators and settings that another replica wrote (storage/project_changes.h):
  // followed_change_seq() is the project's change_seq that memory reflects. A writer of this
  // server calls NoteOwnChange with the change_seq its write got, after applying it to memory
  // under write_order_mu(): when it directly follows, memory is still current and no re-read
  // is needed.
  int64_t followed_change_seq() const ABSL_LOCKS_EXCLUDED(mu_);
  void NoteOwnChange(int64_t change_seq) ABSL_LOCKS_EXCLUDED(mu_);
  // Applies the stored state of the project's items, annotators and settings where memory
  // differs (new items, gold labels, priorities, item and annotator features, annotators,
  // settings), as of `change_seq` (read before them). Whatever equals memory is no change: it
  // makes no refit due. The caller holds write_order_mu(), so that no own write interleaves.
  // Returns whether anything changed.
  bool ApplyStoredEntities(const v1::ProjectSettings& settings,
                           absl::Span<const storage::ItemRecord> items,
                           absl::Span<const storage::AnnotatorRecord> annotators,
                           int64_t change_seq) ABSL_LOCKS_EXCLUDED(mu_);

  // Applies a catch-up read (the labels with seq > applied_seq() when it was read, from any
  // writer) and publishes the items it changed. A read older than what memory holds is
  // ignored. Returns whether any item changed.
  bool ApplyFollowed(const storage::LabelsSince& since) ABSL_LOCKS_EXCLUDED(mu_);

  // What this project knows about `writes` (all of this project), for
  // storage::AnnotationStore::CommitAnnotations: the registered index of each
  // item and annotator (-1 if unknown), whether the pair has no live label,
  // and how many items and annotators are registered; all read under one lock.
  // Exact when the ingest committer calls it, because only the committer adds
  // labels (RegisterCommitted); ids registered by other writers after they
  // commit make the counts lag the database, which the store checks.
  storage::WriteHints IngestHints(absl::Span<const storage::AnnotationWrite> writes) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Held by ProjectRegistry across a settings or item change's PostgreSQL write and its memory
  // update, so that concurrent changes reach memory in the database's commit order.
  absl::Mutex& write_order_mu() ABSL_LOCK_RETURNED(write_order_mu_) { return write_order_mu_; }

  // Registers items added through AddItems and applies gold changes.
  void ApplyItems(absl::Span<const ItemChange> items) ABSL_LOCKS_EXCLUDED(mu_);

  // Registers annotators added through AddAnnotators (index, external id).
  void RegisterAnnotators(absl::Span<const std::pair<int32_t, std::string>> annotators)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sets an annotator's features (identity().annotator_feature_dim values, validated by the
  // caller), used from the next fit on.
  void SetAnnotatorFeatures(int32_t annotator, const std::vector<float>& features)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The confusion `snapshot`'s model predicts for `annotator` from the features it was given
  // (TruthModel::AnnotatorConfusionFromFeatures: lia, for an annotator outside the fit); empty
  // when the annotator was given no features or the model makes no such prediction.
  std::vector<double> ConfusionPredictedFromFeatures(const ProjectSnapshot& snapshot,
                                                     int32_t annotator) const ABSL_LOCKS_EXCLUDED(mu_);

  // Id lookups take ids_mu_ only (see the file comment).
  std::optional<int32_t> FindItem(absl::string_view item_id) const ABSL_LOCKS_EXCLUDED(ids_mu_);
  // FindItem of each id, under one acquisition of the lock.
  std::vector<std::optional<int32_t>> FindItems(absl::Span<const absl::string_view> item_ids) const
      ABSL_LOCKS_EXCLUDED(ids_mu_);
  std::optional<int32_t> FindAnnotator(absl::string_view annotator_id) const
      ABSL_LOCKS_EXCLUDED(ids_mu_);
  // External ids of items [first, first + count) (clipped to the known items).
  std::vector<std::string> ItemIds(int32_t first, int32_t count) const
      ABSL_LOCKS_EXCLUDED(ids_mu_);
  std::vector<std::string> AnnotatorIds() const ABSL_LOCKS_EXCLUDED(ids_mu_);
  // External ids of annotators [first, first + count) (clipped to the known annotators), and
  // how many there are: a page without copying every id.
  struct AnnotatorIdPage {
    std::vector<std::string> ids;
    int64_t total = 0;
  };
  AnnotatorIdPage AnnotatorIds(int64_t first, int32_t count) const ABSL_LOCKS_EXCLUDED(ids_mu_);
  int32_t AnnotatorLabelCount(int32_t annotator) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `annotator` has a live label on `item` (false for out-of-range indices).
  bool HasLabelled(int32_t item, int32_t annotator) const ABSL_LOCKS_EXCLUDED(mu_);
  // The live label of `annotator` on `item`, if any (nullopt for out-of-range indices).
  std::optional<int32_t> LiveLabelOf(int32_t item, int32_t annotator) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Gold items, ascending.
  std::vector<int32_t> GoldItems() const ABSL_LOCKS_EXCLUDED(mu_);

  // Open assignment leases. A committed label of (item, annotator) releases its lease.
  LeaseBook& leases() { return leases_; }
  // Serialises a suggestion's ranking and leasing within the project, so that concurrent
  // suggestions see each other's leases.
  absl::Mutex& assignment_mutex() { return assignment_mu_; }
  // Several replicas: the newest lease claim (storage::LeaseStore::ClaimLeases) this server
  // has read into leases(). Read and set under assignment_mutex().
  int64_t lease_claims_seen() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(assignment_mu_) {
    return lease_claims_seen_;
  }
  void set_lease_claims_seen(int64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(assignment_mu_) {
    lease_claims_seen_ = seq;
  }
  ProjectCounts Counts() const ABSL_LOCKS_EXCLUDED(mu_);
  ProjectSummary Summary() const ABSL_LOCKS_EXCLUDED(mu_);

  // What the project holds in memory, estimated from its sizes: 24 bytes per label, 200 + 32·K
  // per item and 100 + 16·K² per annotator (docs/PERFORMANCE.md, "Server memory per label":
  // 467 MiB in use for 5M labels, 1M items, K = 5, against 480 MiB estimated), plus 4 bytes
  // per feature value held (a dense row per item and annotator where the project has features).
  int64_t EstimatedBytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // When a call last used the project (ProjectRegistry::Get); for evicting idle projects.
  void MarkUsed(absl::Time now) { last_used_ = absl::ToUnixMicros(now); }
  absl::Time last_used() const { return absl::FromUnixMicros(last_used_.load()); }

  // Whether a refit is due (never while a fit runs or without labels): the labels changed
  // since the last fit reach max(refit_min_new_labels, refit_new_label_fraction * labels), or
  // any changed and `max_staleness` passed since the last fit, or a version exists and the
  // configured method differs from its model's (before the first version the served model is
  // the majority-vote placeholder, and the label rules above decide). After a failed Refit,
  // none is due for 1 s, doubling with each failure in a row up to `max_staleness`, so that a
  // project whose fit keeps failing (mmsr past its annotator limit) is not refitted back to
  // back; a stored version or a change of the model settings ends the back-off.
  bool RefitDue(absl::Time now, absl::Duration max_staleness) const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the current model version was fit on exactly today's inputs, so that a fit now
  // would repeat it: a version exists, no fit runs, and since that fit no label, item, gold
  // label, feature or model setting changed (a priority is not read by the fit; a value set
  // again unchanged is no change) and the configured method is the
  // version's. (After a restart only labels are known to the stored version: item changes made
  // before the restart and not yet fit count as current.)
  bool FitIsCurrent() const ABSL_LOCKS_EXCLUDED(mu_);

  // Fits the configured method on the current labels (consolidated into CSR arrays off the
  // lock; only rows changed since the last fit are copied under it), persists the result as a new model version through
  // `versions`, then publishes it with every posterior recomputed (labels committed during the
  // fit included). On error nothing is published.
  //
  // Warm start: the fit starts from the current model when the method is the same and the
  // labels have grown less than kMaxWarmStartGrowth times since the last fit from scratch
  // (not the last fit: chained warm starts must not creep past it; each version stores that
  // fit's label count, ModelVersionRecord::scratch_num_labels, for a restart); otherwise
  // it starts from scratch (majority-vote first E-step). EM from a model fitted on a small
  // early sample can stay in a poor local optimum (e.g. two classes swapped) that a fit from
  // scratch on the larger data avoids; refitting from scratch each time the data doubles keeps
  // the cost amortised O(1) per label. Callers run at most one Refit per project at
  // a time (the training scheduler does); one called while another runs is refused with
  // FAILED_PRECONDITION and stores nothing.
  struct RefitResult {
    storage::ModelVersionRecord version;
    // Wall time of each phase, for the log and benchmarks.
    double consolidate_ms = 0;  // labels into CSR arrays (off the lock)
    double fit_ms = 0;
    double outputs_ms = 0;      // posteriors and profiles of the version
    double persist_ms = 0;      // SaveModelVersion
    double publish_ms = 0;      // every posterior recomputed and swapped in (under the lock)
  };
  //
  // A version adopted while the fit ran (AdoptVersion: a replica follower, notified of this
  // fit's own stored version or of a newer one) is not published over: the result is still
  // the version this fit stored, which is then served only if it is the adopted one.
  //
  // `job`: the training job this fit runs for (a worker process); the version is stored only if
  // the worker still owns the job, which it ends in the same transaction (ABORTED otherwise).
  absl::StatusOr<RefitResult> Refit(
      storage::ModelVersionStore& versions,
      std::optional<storage::ModelVersionRecord::JobOwnership> job = std::nullopt)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Serves `version` (fitted elsewhere, e.g. by a worker process) if it is newer than the
  // current one: restores its parameters off the lock, then recomputes and publishes every
  // posterior. Returns whether it was adopted; a version never goes backwards. INTERNAL if the
  // parameters do not restore.
  absl::StatusOr<bool> AdoptVersion(const storage::ModelVersionRecord& version)
      ABSL_LOCKS_EXCLUDED(mu_);
  int32_t model_version() const ABSL_LOCKS_EXCLUDED(mu_);

  // Test hook: Refit calls it, off the lock, right after its version is stored and before it
  // is published: where a replica follower, notified of the stored version, may adopt it (or a
  // newer one) first.
  void SetAfterVersionStoredForTesting(
      std::function<void(const storage::ModelVersionRecord&)> hook) {
    after_version_stored_for_testing_ = std::move(hook);
  }

 private:
  friend class LiveProjectTestPeer;

  LiveProject(Identity identity, v1::ProjectSettings settings);
  // What a restored model may hold: this project's items, annotators and feature sizes.
  models::TruthModel::RestoreBounds RestoreBoundsLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Labels a version with `watermark` and `num_labels` did not see, counted toward the next
  // refit (see the definition).
  int64_t ChangesAfterVersionLocked(int64_t watermark, int64_t num_labels) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Recomputes one item's posterior from its live labels into `builder`.
  void RecomputeItem(const models::TruthModel& model, int32_t item,
                     PosteriorTable::Builder& builder) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Recomputes every item with `model` and publishes the result as the new snapshot.
  // `version`: the stored version `model` was restored or fitted from; null for version 0
  // (majority vote before a fit).
  void PublishFullRecompute(std::shared_ptr<const models::TruthModel> model,
                            const storage::ModelVersionRecord* version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes `snapshot` with the rows in `builder` (every item's), `model` and `version`'s
  // metadata, makes `model` current and publishes the snapshot.
  void PublishRecomputed(std::shared_ptr<ProjectSnapshot> snapshot, PosteriorTable::Builder builder,
                         std::shared_ptr<const models::TruthModel> model,
                         const storage::ModelVersionRecord* version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Publish(std::shared_ptr<const ProjectSnapshot> snapshot) ABSL_LOCKS_EXCLUDED(snapshot_mu_);
  int32_t EnsureItem(int32_t index, absl::string_view id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnsureAnnotator(int32_t index, absl::string_view id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live label of (item, annotator), if any. Requires a registered item.
  std::optional<int32_t> LiveLabel(int32_t item, int32_t annotator) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void SetLabel(int32_t item, int32_t annotator, int32_t label, int64_t seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RegisterCommitted's work, under mu_: labels with seq <= applied_through are only
  // registered (ids, leases), never applied.
  std::vector<int32_t> RegisterLocked(absl::Span<const CommittedLabel> labels,
                                      int64_t applied_through) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // touched_during_fit_: adds `item` unless listed; empties the list.
  void MarkTouchedDuringFit(int32_t item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearTouchedDuringFit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Identity identity_;

  mutable absl::Mutex mu_;
  // Serialises PublishCommitted, which reads under a shared mu_ (so that the committer's
  // IngestHints for the next group run meanwhile) but replaces the snapshot. Every other
  // publisher holds mu_ exclusively, which already excludes it.
  absl::Mutex commit_publish_mu_ ABSL_ACQUIRED_AFTER(mu_);
  // Guards the four id members below together with mu_: they are written with both held
  // (mu_ first), so a writer may read them under mu_ and a query under ids_mu_ alone.
  mutable absl::Mutex ids_mu_ ABSL_ACQUIRED_AFTER(mu_);
  v1::ProjectSettings settings_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> item_ids_;                       // mu_ + ids_mu_ (above)
  absl::flat_hash_map<std::string, int32_t> item_index_;    // mu_ + ids_mu_
  std::vector<int32_t> gold_ ABSL_GUARDED_BY(mu_);
  absl::Mutex write_order_mu_;  // See write_order_mu().
  std::vector<std::string> annotator_ids_;                  // mu_ + ids_mu_
  // The first item and annotator index without an id (KnownIdPrefixes); mu_ + ids_mu_.
  int32_t item_id_prefix_ = 0;
  int32_t annotator_id_prefix_ = 0;
  absl::flat_hash_map<std::string, int32_t> annotator_index_;  // mu_ + ids_mu_
  std::vector<int32_t> annotator_label_counts_ ABSL_GUARDED_BY(mu_);
  // Live labels, one per (item, annotator): the CSR arrays of the last fit plus the rows
  // changed since. A refit consolidates them without re-sorting every label.
  models::IncrementalAnnotationMatrix labels_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> item_newest_seq_ ABSL_GUARDED_BY(mu_);
  int64_t newest_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // See applied_seq().
  int64_t applied_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // ApplyFollowed ignores reads complete through less (RegisterOwnCommitOutOfOrder).
  int64_t follow_floor_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t followed_change_seq_ ABSL_GUARDED_BY(mu_) = 0;  // See followed_change_seq().
  // Labels added or revised since the current model's fit.
  int64_t changes_since_fit_ ABSL_GUARDED_BY(mu_) = 0;
  // Counts changes of the fit's other inputs (new items, gold labels, item and annotator
  // features, model settings; not priorities, which only assignment reads, nor a value set again
  // unchanged); fitted_input_generation_ is its value when the current model's fit copied them.
  int64_t input_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fitted_input_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Counts changes of the ModelSettings a model is built with (smoothings, max_iterations,
  // tolerance); served_options_generation_ is its value when the served model was built. A
  // warm start clones the served model, its options included, so a refit is warm only while
  // they are equal: otherwise the new settings would wait for a restart.
  int64_t options_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t served_options_generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_fit_time_ ABSL_GUARDED_BY(mu_);
  // Refits that failed since the last one that stored a version (or the last change of the
  // model settings), and when the last of them ended: RefitDue backs off from them.
  int failed_fits_in_a_row_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_failed_fit_time_ ABSL_GUARDED_BY(mu_);
  bool training_ ABSL_GUARDED_BY(mu_) = false;
  // While training_: the items whose labels, gold, priority or features changed since the fit
  // copied its input, each once (the mark says which are listed). Refit recomputes them under
  // the lock before publishing.
  std::vector<int32_t> touched_during_fit_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> touched_during_fit_mark_ ABSL_GUARDED_BY(mu_);
  // The model of the current snapshot (also reachable through it).
  std::shared_ptr<const models::TruthModel> model_ ABSL_GUARDED_BY(mu_);
  int32_t model_version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t model_watermark_ ABSL_GUARDED_BY(mu_) = 0;
  // Labels the last fit from scratch saw: 0 before the first fit; after a restart or an
  // adoption, the served version's scratch_num_labels (0 when not known: the next refit is
  // then from scratch).
  int64_t scratch_fit_num_labels_ ABSL_GUARDED_BY(mu_) = 0;
  // ProjectCounts::num_revisions.
  int64_t history_rows_ ABSL_GUARDED_BY(mu_) = 0;

  std::vector<double> item_priority_ ABSL_GUARDED_BY(mu_);
  // Row-major, identity_.item_feature_dim per item; empty without features. Given to the
  // model before each fit (neural models learn h(x) from them).
  std::vector<float> item_features_ ABSL_GUARDED_BY(mu_);
  std::vector<float> annotator_features_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> annotator_has_features_ ABSL_GUARDED_BY(mu_);  // by annotator index
  LeaseBook leases_;
  std::function<void(const storage::ModelVersionRecord&)> after_version_stored_for_testing_;
  absl::Mutex assignment_mu_;
  int64_t lease_claims_seen_ ABSL_GUARDED_BY(assignment_mu_) = 0;

  std::atomic<int64_t> last_used_{0};  // Unix micros; see MarkUsed.

  mutable absl::Mutex snapshot_mu_;
  std::shared_ptr<const ProjectSnapshot> snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
};

// The models:: method name of a v1 method ("mv", "ds"); UNIMPLEMENTED for methods not built.
absl::StatusOr<std::string> MethodName(v1::TruthMethod method);
v1::TruthMethod MethodFromName(absl::string_view name);
// Model hyper-parameters from project settings (zeros become models:: defaults), with the
// process's training device (SetTrainingDevice).
models::TruthModelOptions ModelOptionsFromSettings(const v1::ModelSettings& settings);
// The device the neural models of this process train on: "auto" (default), "cpu", "cuda",
// "cuda:N" (--device of verity_server and verity_worker); INVALID_ARGUMENT naming the flag for
// anything else, which changes nothing. Thread-safe.
absl::Status SetTrainingDevice(const std::string& device);

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_LIVE_PROJECT_H_
