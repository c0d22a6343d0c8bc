// Per-project quotas (ProjectLimits in proto/verity/v1/projects.proto): the server's defaults,
// a project's overrides, and the check every growing call makes before it writes.
#ifndef VERITY_SERVER_API_PROJECT_QUOTA_H_
#define VERITY_SERVER_API_PROJECT_QUOTA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "verity/v1/common.pb.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {

struct ProjectQuota {
  int64_t max_items = 10'000'000;
  int64_t max_annotators = 1'000'000;
  int64_t max_labels = 100'000'000;
  // Annotators × K², for the truth models that keep a dense K×K matrix per annotator (the
  // neural ones; see DenseConfusionCellsPerAnnotator): it bounds their memory, fit time and
  // stored size. The classical models keep per annotator only the confusion columns of the
  // labels it gave, which grow with the labels and need no such budget.
  int64_t max_confusion_cells = 16'000'000;
  // Items × item_feature_dim + annotators × annotator_feature_dim: the server keeps a dense
  // feature row for every item and annotator of a project with features (LiveProject), given
  // or not, so this bounds that memory (4 bytes a value).
  int64_t max_feature_values = 268'435'456;
  // Revised and stale labels kept in history (storage: annotation_history), which a live label
  // count does not see: a writer flipping one label back and forth adds a row each time.
  int64_t max_revisions = 100'000'000;
};

// A project's limits: its settings' non-zero overrides, else `defaults`.
ProjectQuota EffectiveQuota(const v1::ProjectSettings& settings, const ProjectQuota& defaults);

// What a project holds, or what a call would add to it.
struct ProjectGrowth {
  int64_t items = 0;
  int64_t annotators = 0;
  int64_t labels = 0;
  int64_t revisions = 0;  // Labels kept in history: revised or stale.
};

// OK when `current` plus `added` stays within `quota`; otherwise RESOURCE_EXHAUSTED naming the
// first limit passed, its value and the current size, e.g. "project limit max_items (1000,
// settings.limits or --max_items_per_project) would be passed: the project has 998 items and
// this call adds 5".
// `cells_per_annotator` is DenseConfusionCellsPerAnnotator of the project (for
// max_confusion_cells); `item_feature_dim` and `annotator_feature_dim` are the project's (for
// max_feature_values).
absl::Status CheckProjectQuota(const ProjectQuota& quota, const ProjectGrowth& current,
                               const ProjectGrowth& added, int64_t cells_per_annotator,
                               int64_t item_feature_dim = 0, int64_t annotator_feature_dim = 0);

// OK when `requested` raises none of `allowed`'s limits; otherwise PERMISSION_DENIED naming
// the first limit raised, e.g. "settings.limits.max_items: 20000000 is above this project's
// limit 10000000; only an admin key valid for every project can raise a limit". Checked for
// the callers whose key is scoped to projects: such an admin may lower its projects' limits,
// or keep them, but raising one would let a key for one project take what the server's
// defaults hold back for every tenant. `allowed` is the project's current limits (the
// server's defaults for a new project).
// `sent`, when given, is the limits the caller sent (whose 0 means the server's default): a
// refusal of a 0 says so.
absl::Status CheckLimitsNotRaised(const ProjectQuota& requested, const ProjectQuota& allowed,
                                  const v1::ProjectLimits* sent = nullptr);

// The confusion cells a project's truth model keeps densely per annotator: K² for the neural
// methods (lia, crowdlayer, trace_reg, conal, cmm: a K×K matrix or its parameters per
// annotator) and ibcc (a K×K Dirichlet per annotator, whatever labels it gave), 10 K² for
// ebcc (one K×K Dirichlet per annotator and subtype, 10 subtypes), 0 for mv, ds, one_coin, glad, wawa, zero_based_skill, kos and
// mace, bwa, mmsr, whose per-annotator state grows with the annotator's labels, and auto (the
// default method, which chooses among the classical ones; it considers ebcc only while ebcc's
// dense state is within AutoTruthModel::kMaxEbccCells, 4,000,000 cells).
int64_t DenseConfusionCellsPerAnnotator(v1::TruthMethod method, int32_t num_classes);

// OK when a project of `num_annotators` annotators may use `method` under `quota`; otherwise
// RESOURCE_EXHAUSTED naming max_confusion_cells, the cells the method would keep, and the
// limit (for a settings change to a method with dense confusions).
absl::Status CheckMethodFitsQuota(const ProjectQuota& quota, v1::TruthMethod method,
                                  int32_t num_classes, int64_t num_annotators);

}  // namespace verity::server

#endif  // VERITY_SERVER_API_PROJECT_QUOTA_H_
