// AnnotationStore: the ingest write path and the live-label reads.
//
// There is one live label per (project, item, annotator). Resending the live
// label is acknowledged as kDuplicate: no new version, but a client_time later
// than the live label's (or the only one) becomes the live label's, since the
// annotator gave that answer again then. A different label is a
// revision (kRevised): the previous row is copied to annotation_history, the
// revision counter goes up and the row takes a new `seq`. Except that when
// both the live label and the new one carry a client_time and the new one's
// is older (a late retry of an old batch), the new label is kStale: it goes
// to annotation_history only and the live label stays. Without both
// client_times (or with equal ones), commit order decides: the later wins. `seq` comes from
// the project's counter (projects.next_seq) and is the watermark model
// versions record; it is ordered within a project, not across projects.
//
// CommitAnnotations is built for the server's group-commit pipeline, which
// merges the batches of many streams into one call: the whole call is one
// transaction with a fixed, small number of set-based statements (COPY for
// the new rows, array parameters for the rest, no per-row round trips), and
// its results exist only once COMMIT succeeded, so "acknowledged" means
// "durable". A caller that keeps the project's ids and labels in memory (the
// server) passes WriteHints, which let the call skip the reads that resolve
// ids and find live rows: new labels of new pairs become a plain append.
//
// Ordering guarantee: a commit holds the row lock of every project it writes
// (see storage/entity_index.h) from before it draws seq values until COMMIT.
// Commits to one project are therefore serialised and seq order equals commit
// order per project: a snapshot that contains a label with seq s of a project
// contains every label of that project with a smaller seq. Reading "labels
// with seq > watermark" after loading a model version thus misses nothing.
// This relies on every writer of `annotations` going through this class.
//
// Thread-safety: all methods are thread-safe; concurrent commits to different
// projects proceed in parallel. The pool must outlive the store.
#ifndef VERITY_STORAGE_ANNOTATION_STORE_H_
#define VERITY_STORAGE_ANNOTATION_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "storage/connection_pool.h"

namespace verity {
namespace storage {

struct AnnotationWrite {
  int64_t project_id = 0;
  std::string item_id;       // External id; the item is created on first use.
  std::string annotator_id;  // External id; created on first use.
  int32_t label = 0;         // In [0, K) for the project's K classes.
  std::optional<absl::Time> client_time;  // When the client says it labelled.
};

enum class WriteOutcome {
  kAccepted,   // First label of this annotator for this item.
  kDuplicate,  // Same as the live label: no new version (a later client_time is kept).
  kRevised,    // Replaced a different live label (kept in history).
  // A different label with an older client_time than the live label's: kept
  // in history only; the live label stays.
  kStale,
};

struct WriteResult {
  WriteOutcome outcome = WriteOutcome::kAccepted;
  int32_t item_index = 0;
  int32_t annotator_index = 0;
  // The live row's label and seq after this write: the write's label except
  // for kStale; for kDuplicate and kStale the seq is the existing one.
  int32_t label = 0;
  int64_t seq = 0;
};

// What a caller already knows about one write from the state it keeps in
// memory. Hints only let CommitAnnotations skip reads; see there for how each
// claim is checked.
struct KnownWrite {
  // The item's index, or -1 if the caller does not know the id. A known index
  // must be the one the database gave the id (indices never change).
  int32_t item_index = -1;
  int32_t annotator_index = -1;  // The same for the annotator.
  // True: the caller knows that (item, annotator) has no live label.
  bool unlabelled = false;
};

// How many items and annotators of a project the caller knows (it knows the
// ids of indices 0..num_items-1 and 0..num_annotators-1).
struct KnownEntities {
  int64_t project_id = 0;
  int32_t num_items = 0;
  int32_t num_annotators = 0;
};

struct WriteHints {
  std::vector<KnownWrite> writes;       // One per write, in the same order.
  // The projects of the writes; a project listed several times counts with
  // its smallest numbers, one not listed as knowing nothing.
  std::vector<KnownEntities> projects;
};

// A bound on one project's annotation_history rows (projects.history_rows) that a commit must
// keep: the project's max_revisions. Checked in the UPDATE that adds the commit's rows to the
// count, under the project's lock, so it holds across every server writing the project.
struct HistoryLimit {
  int64_t project_id = 0;
  int64_t max_rows = 0;  // <= 0: no bound.
};

// The seqs one CommitAnnotations call drew for one project: first .. last, every one of them
// this transaction's (accepted, revised and stale writes each draw one). A project whose writes
// were all duplicates draws none and is not listed.
struct DrawnSeqs {
  int64_t project_id = 0;
  int64_t first = 0;
  int64_t last = 0;
  // The project's annotation_history rows after the commit (projects.history_rows): every
  // replica's revised and stale labels so far.
  int64_t history_rows = 0;
};

// A live label with its ids, as another server replica committed it (ReadLabelsSince).
struct FollowedLabel {
  int32_t item_index = 0;
  std::string item_id;
  int32_t annotator_index = 0;
  std::string annotator_id;
  int32_t label = 0;
  int64_t seq = 0;
};

// What ReadLabelsSince read: the live labels with seq > after_seq, by ascending seq, and a seq
// through which they are complete: every commit of the project that drew a seq <= drawn_through
// is reflected in `labels` (or in labels <= after_seq, which the caller already holds).
struct LabelsSince {
  std::vector<FollowedLabel> labels;
  int64_t drawn_through = 0;
  // The project's annotation_history rows (projects.history_rows) when drawn_through was read:
  // every replica's revised and stale labels of the commits through it, at least.
  int64_t history_rows = 0;
};

struct LiveAnnotation {
  int32_t item_index = 0;
  int32_t annotator_index = 0;
  int32_t label = 0;
  int64_t seq = 0;
};

class AnnotationStore {
 public:
  explicit AnnotationStore(ConnectionPool* pool) : pool_(pool) {}

  // Writes all annotations in ONE transaction (the group commit) and returns
  // one result per input, in input order, only after COMMIT succeeded. Items
  // and annotators are created on first use (dense indices, see
  // storage/entity_index.h). The same (project, item, annotator) may appear
  // several times: writes apply in input order (the later wins, unless
  // stale) and each outcome is relative to the label before it (e.g. 1, 1, 2
  // on a new pair gives kAccepted, kDuplicate, kRevised). The writes may span
  // projects. client_times are compared to the microsecond (as stored).
  //
  // With `hints` (optional; results are the same as without):
  //  - a known index is used as is;
  //  - an unknown id is created without a lookup when the caller knows as
  //    many entities as the project's counter says it has (read under the
  //    project lock), otherwise it is looked up first;
  //  - a pair whose item or annotator is created by this call, or that the
  //    caller knows to be unlabelled, is inserted without reading its live
  //    row; the other pairs' live rows are read.
  // A claim that turns out wrong (an id or a pair that exists after all)
  // fails the unique index; the call then rolls back and runs once more
  // without hints, so wrong hints cost time, never correctness.
  //
  // Validation is the caller's job, but bad input is rejected, never
  // crashed on. On any error nothing is committed. Errors: INVALID_ARGUMENT
  // for an empty id, a label outside [0, K), a client_time outside
  // [0001-01-01, 9999-12-31T23:59:59.999999] UTC (ClientTimeInStoreRange in
  // storage/client_time_range.h; the message names the input position), or
  // hints not aligned with the writes; NOT_FOUND for an unknown project;
  // UNAVAILABLE if PostgreSQL is unreachable or the connection broke during
  // COMMIT (outcome unknown; a retry is safe because resends are duplicates).
  //
  // With `drawn` (optional), it receives the seqs the committed transaction drew, one entry per
  // project that drew any. The same transaction sends NOTIFY on kLabelsChannel with each such
  // project's id as the payload: PostgreSQL delivers it to every listener once COMMIT succeeded
  // (server replicas follow each other that way, see server/replication/).
  //
  // `history_limits` (optional, one entry per bounded project): a commit that would take a
  // project's history rows past its max_rows writes nothing and fails with RESOURCE_EXHAUSTED
  // naming max_revisions, the rows held and the rows the commit adds. A commit that adds no
  // history row to a project is never refused for it.
  absl::StatusOr<std::vector<WriteResult>> CommitAnnotations(
      absl::Span<const AnnotationWrite> writes,
      const WriteHints* hints = nullptr, std::vector<DrawnSeqs>* drawn = nullptr,
      absl::Span<const HistoryLimit> history_limits = {});

  // The NOTIFY channel of CommitAnnotations.
  static constexpr char kLabelsChannel[] = "verity_labels";

  // The live labels of the project with seq > after_seq, by ascending seq; see LabelsSince for
  // drawn_through. Each carries its item's external id when its index is >= ids_from_item
  // (empty below: the caller knows those ids), and the same for annotators. NOT_FOUND for an
  // unknown project.
  absl::StatusOr<LabelsSince> ReadLabelsSince(int64_t project_id, int64_t after_seq,
                                              int32_t ids_from_item = 0,
                                              int32_t ids_from_annotator = 0);

  // Every project's newest drawn seq (projects.next_seq - 1), by project id: a cheap check of
  // which projects changed, for a follower whose notifications may have been missed.
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ListDrawnThrough();

  // The live label of every (item, annotator) of the project, by ascending
  // seq, from one snapshot (streamed from PostgreSQL in batches). With
  // `after_seq`, only labels with seq > after_seq (those newer than a model
  // version's watermark). NOT_FOUND for an unknown project.
  absl::StatusOr<std::vector<LiveAnnotation>> LoadLiveAnnotations(
      int64_t project_id, int64_t after_seq = 0);

  // Number of live labels of the project. NOT_FOUND for an unknown project.
  absl::StatusOr<int64_t> CountLiveAnnotations(int64_t project_id);

 private:
  // One transaction of CommitAnnotations (validated input).
  absl::StatusOr<std::vector<WriteResult>> CommitOnce(
      absl::Span<const AnnotationWrite> writes,
      absl::Span<const int64_t> project_ids, const WriteHints* hints,
      absl::Span<const HistoryLimit> history_limits, std::vector<DrawnSeqs>& drawn);

  ConnectionPool* const pool_;
};

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_ANNOTATION_STORE_H_
