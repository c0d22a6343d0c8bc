#include "server/api/project_quota.h"

#include "absl/strings/str_cat.h"

namespace verity::server {

ProjectQuota EffectiveQuota(const v1::ProjectSettings& settings, const ProjectQuota& defaults) {
  const v1::ProjectLimits& limits = settings.limits();
  ProjectQuota quota = defaults;
  if (limits.max_items() > 0) quota.max_items = limits.max_items();
  if (limits.max_annotators() > 0) quota.max_annotators = limits.max_annotators();
  if (limits.max_labels() > 0) quota.max_labels = limits.max_labels();
  if (limits.max_confusion_cells() > 0) quota.max_confusion_cells = limits.max_confusion_cells();
  if (limits.max_feature_values() > 0) quota.max_feature_values = limits.max_feature_values();
  if (limits.max_revisions() > 0) quota.max_revisions = limits.max_revisions();
  return quota;
}

absl::Status CheckProjectQuota(const ProjectQuota& quota, const ProjectGrowth& current,
                               const ProjectGrowth& added, int64_t cells_per_annotator,
                               int64_t item_feature_dim, int64_t annotator_feature_dim) {
  auto feature_values = [&](const ProjectGrowth& g) {
    return g.items * item_feature_dim + g.annotators * annotator_feature_dim;
  };
  const struct {
    const char* limit;
    const char* flag;
    const char* noun;
    int64_t max, now, more;
  } checks[] = {
      {"max_items", "--max_items_per_project", "items", quota.max_items, current.items,
       added.items},
      {"max_annotators", "--max_annotators_per_project", "annotators", quota.max_annotators,
       current.annotators, added.annotators},
      {"max_labels", "--max_labels_per_project", "labels", quota.max_labels, current.labels,
       added.labels},
      {"max_confusion_cells", "--max_confusion_cells_per_project",
       "dense confusion cells (annotators x classes^2)", quota.max_confusion_cells,
       current.annotators * cells_per_annotator, added.annotators * cells_per_annotator},
      {"max_feature_values", "--max_feature_values_per_project",
       "feature values (items x item_feature_dim + annotators x annotator_feature_dim)",
       quota.max_feature_values, feature_values(current), feature_values(added)},
      {"max_revisions", "--max_revisions_per_project",
       "revised or stale labels kept in history", quota.max_revisions, current.revisions,
       added.revisions},
  };
  for (const auto& c : checks) {
    if (c.more > 0 && c.now + c.more > c.max) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "project limit ", c.limit, " (", c.max, ", settings.limits.", c.limit, " or ", c.flag,
          ") would be passed: the project has ", c.now, " ", c.noun, " and this call adds ",
          c.more, "; nothing of it was written"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLimitsNotRaised(const ProjectQuota& requested, const ProjectQuota& allowed,
                                  const v1::ProjectLimits* sent) {
  const v1::ProjectLimits none;
  const v1::ProjectLimits& given = sent != nullptr ? *sent : none;
  const struct {
    const char* limit;
    int64_t requested, allowed;
    bool sent_zero;
  } limits[] = {
      {"max_items", requested.max_items, allowed.max_items, given.max_items() == 0},
      {"max_annotators", requested.max_annotators, allowed.max_annotators,
       given.max_annotators() == 0},
      {"max_labels", requested.max_labels, allowed.max_labels, given.max_labels() == 0},
      {"max_confusion_cells", requested.max_confusion_cells, allowed.max_confusion_cells,
       given.max_confusion_cells() == 0},
      {"max_feature_values", requested.max_feature_values, allowed.max_feature_values,
       given.max_feature_values() == 0},
      {"max_revisions", requested.max_revisions, allowed.max_revisions,
       given.max_revisions() == 0},
  };
  for (const auto& l : limits) {
    if (l.requested > l.allowed) {
      return absl::PermissionDeniedError(absl::StrCat(
          "settings.limits.", l.limit, ": ",
          sent != nullptr && l.sent_zero
              ? absl::StrCat("0 (the server's default, ", l.requested, ")")
              : absl::StrCat(l.requested),
          " is above this project's limit ", l.allowed,
          "; only an admin key valid for every project can raise a limit (settings are "
          "replaced whole: send the project's limits to keep them)"));
    }
  }
  return absl::OkStatus();
}

int64_t DenseConfusionCellsPerAnnotator(v1::TruthMethod method, int32_t num_classes) {
  switch (method) {
    case v1::TRUTH_METHOD_LIA:
    case v1::TRUTH_METHOD_CROWDLAYER:
    case v1::TRUTH_METHOD_TRACE_REG:
    case v1::TRUTH_METHOD_CONAL:
    case v1::TRUTH_METHOD_CMM:
    case v1::TRUTH_METHOD_IBCC:
      return static_cast<int64_t>(num_classes) * num_classes;
    case v1::TRUTH_METHOD_EBCC:
      // models/ebcc.h: a K x K Dirichlet per annotator for each of its
      // EbccModel::kSubtypes (10) subtypes of each class.
      return int64_t{10} * num_classes * num_classes;
    default:
      return 0;
  }
}

absl::Status CheckMethodFitsQuota(const ProjectQuota& quota, v1::TruthMethod method,
                                  int32_t num_classes, int64_t num_annotators) {
  const int64_t cells = num_annotators * DenseConfusionCellsPerAnnotator(method, num_classes);
  if (cells <= quota.max_confusion_cells) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "project limit max_confusion_cells (", quota.max_confusion_cells,
      ", settings.limits.max_confusion_cells or --max_confusion_cells_per_project) would be "
      "passed: settings.model.method ",
      v1::TruthMethod_Name(method), " keeps a dense ", num_classes, "x", num_classes,
      " confusion per annotator, ", cells, " cells for the project's ", num_annotators,
      " annotators; the settings were not changed"));
}

}  // namespace verity::server
