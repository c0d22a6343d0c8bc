// Per-project quotas (ProjectLimits in proto/verity/v1/projects.proto): the server's defaults,
// a project's overrides, and the check every growing call makes before it writes.
#ifndef VERITY_SERVER_API_PROJECT_QUOTA_H_
#define VERITY_SERVER_API_PROJECT_QUOTA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {

struct ProjectQuota {
  int64_t max_items = 10'000'000;
  int64_t max_annotators = 1'000'000;
  int64_t max_labels = 100'000'000;
  // Annotators × K²: every truth model keeps a dense K×K confusion (or its counts) per
  // annotator, so this bounds their memory, fit time and stored size.
  int64_t max_confusion_cells = 16'000'000;
};

// A project's limits: its settings' non-zero overrides, else `defaults`.
ProjectQuota EffectiveQuota(const v1::ProjectSettings& settings, const ProjectQuota& defaults);

// What a project holds, or what a call would add to it.
struct ProjectGrowth {
  int64_t items = 0;
  int64_t annotators = 0;
  int64_t labels = 0;
};

// OK when `current` plus `added` stays within `quota`; otherwise RESOURCE_EXHAUSTED naming the
// first limit passed, its value and the current size, e.g. "project limit max_items (1000,
// settings.limits or --max_items_per_project) would be passed: the project has 998 items and
// this call adds 5".
// `num_classes` is the project's K (for max_confusion_cells).
absl::Status CheckProjectQuota(const ProjectQuota& quota, const ProjectGrowth& current,
                               const ProjectGrowth& added, int32_t num_classes);

}  // namespace verity::server

#endif  // VERITY_SERVER_API_PROJECT_QUOTA_H_
