#include "server/api/validation.h"

#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace verity::server {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace

absl::Status ValidateId(absl::string_view field, absl::string_view id) {
  if (id.empty()) return Invalid(field, "must not be empty");
  if (id.size() > ApiLimits::kMaxIdBytes) {
    return Invalid(field, absl::StrCat("is ", id.size(), " bytes, more than the limit of ",
                                       ApiLimits::kMaxIdBytes));
  }
  constexpr absl::string_view kRule = "; ids are UTF-8 text without control characters";
  for (size_t i = 0; i < id.size();) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c == 0x7f) {
      return Invalid(field, absl::StrCat("contains byte 0x", absl::Hex(c),
                                         " (a control character) at offset ", i, kRule));
    }
    const size_t length = verity::Utf8SequenceLength(id.substr(i));
    if (length == 0) {
      return Invalid(field, absl::StrCat("is not valid UTF-8 at offset ", i, " (byte 0x",
                                         absl::Hex(c), ")", kRule));
    }
    i += length;
  }
  return absl::OkStatus();
}

absl::Status ValidateProjectName(absl::string_view name) {
  if (name.empty()) return Invalid("project", "name must not be empty");
  if (name.size() > ApiLimits::kMaxProjectNameBytes) {
    return Invalid("project",
                   absl::StrCat("name is longer than ", ApiLimits::kMaxProjectNameBytes, " bytes"));
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return Invalid("project", "name may only contain [A-Za-z0-9._-]");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParsePageToken(absl::string_view token, int64_t max) {
  if (token.empty()) return int64_t{0};
  int64_t position = 0;
  for (char c : token) {
    // Digits only, and no value past max (checked before it could overflow).
    if (c < '0' || c > '9' || position > (max - (c - '0')) / 10) {
      return Invalid("page_token", "not a token this server issued");
    }
    position = position * 10 + (c - '0');
  }
  return position;
}

absl::Status ValidateSettings(const v1::ProjectSettings& settings) {
  const v1::ModelSettings& m = settings.model();
  if (!v1::TruthMethod_IsValid(m.method())) {
    return Invalid("settings.model.method", "unknown method");
  }
  for (auto [field, value] : {std::pair<const char*, double>{"settings.model.confusion_smoothing",
                                                             m.confusion_smoothing()},
                              {"settings.model.prior_smoothing", m.prior_smoothing()}}) {
    // Written so that NaN fails too.
    if (!(value >= 0 && value <= ApiLimits::kMaxSmoothing)) {
      return Invalid(field, absl::StrCat("must be in [0, ", ApiLimits::kMaxSmoothing, "]"));
    }
  }
  if (m.max_iterations() < 0 || m.max_iterations() > 100000) {
    return Invalid("settings.model.max_iterations", "must be in [0, 100000]");
  }
  if (!std::isfinite(m.tolerance()) || m.tolerance() < 0 || m.tolerance() >= 1) {
    return Invalid("settings.model.tolerance", "must be in [0, 1)");
  }
  if (m.refit_min_new_labels() < 0) {
    return Invalid("settings.model.refit_min_new_labels", "must be >= 0");
  }
  if (!std::isfinite(m.refit_new_label_fraction()) || m.refit_new_label_fraction() < 0) {
    return Invalid("settings.model.refit_new_label_fraction", "must be finite and >= 0");
  }
  if (!m.calibration().empty() && m.calibration() != "auto" && m.calibration() != "none") {
    return Invalid("settings.model.calibration", "must be \"\", \"auto\" or \"none\"");
  }
  const v1::ProjectLimits& limits = settings.limits();
  if (limits.max_items() < 0) return Invalid("settings.limits.max_items", "must be >= 0");
  if (limits.max_annotators() < 0) {
    return Invalid("settings.limits.max_annotators", "must be >= 0");
  }
  if (limits.max_labels() < 0) return Invalid("settings.limits.max_labels", "must be >= 0");
  if (limits.max_confusion_cells() < 0) {
    return Invalid("settings.limits.max_confusion_cells", "must be >= 0");
  }
  if (limits.max_feature_values() < 0) {
    return Invalid("settings.limits.max_feature_values", "must be >= 0");
  }
  if (limits.max_revisions() < 0) return Invalid("settings.limits.max_revisions", "must be >= 0");
  const v1::AssignmentSettings& a = settings.assignment();
  if (a.min_labels_per_item() < 0) {
    return Invalid("settings.assignment.min_labels_per_item", "must be >= 0");
  }
  if (a.max_labels_per_item() < 0) {
    return Invalid("settings.assignment.max_labels_per_item", "must be >= 0");
  }
  if (a.max_labels_per_item() > 0 && a.max_labels_per_item() < a.min_labels_per_item()) {
    return Invalid("settings.assignment.max_labels_per_item", "must be >= min_labels_per_item");
  }
  if (!std::isfinite(a.confidence_target()) || a.confidence_target() < 0 ||
      a.confidence_target() > 1) {
    return Invalid("settings.assignment.confidence_target", "must be in [0, 1]");
  }
  if (a.lease_seconds() < 0) return Invalid("settings.assignment.lease_seconds", "must be >= 0");
  // Proto3 enums are open: an unknown number parses and would silently rank like the default.
  if (!v1::AssignmentPolicy_IsValid(a.policy())) {
    return Invalid("settings.assignment.policy", absl::StrCat("unknown policy ", a.policy()));
  }
  if (a.gold_items_for_new_annotators() < 0) {
    return Invalid("settings.assignment.gold_items_for_new_annotators", "must be >= 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateNewProject(const v1::Project& project) {
  if (absl::Status s = ValidateProjectName(project.name()); !s.ok()) return s;
  const int n = project.classes_size();
  if (n < ApiLimits::kMinClasses || n > ApiLimits::kMaxClasses) {
    return Invalid("project.classes",
                   absl::StrCat("has ", n, " classes; need ", ApiLimits::kMinClasses, " to ",
                                ApiLimits::kMaxClasses));
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (int k = 0; k < n; ++k) {
    const std::string& c = project.classes(k);
    std::string field = absl::StrCat("project.classes[", k, "]");
    if (c.empty() || c.size() > ApiLimits::kMaxClassNameBytes) {
      return Invalid(field, absl::StrCat("must be 1 to ", ApiLimits::kMaxClassNameBytes, " bytes"));
    }
    for (unsigned char ch : c) {
      if (ch < 0x20 || ch == 0x7f) return Invalid(field, "contains a control character");
    }
    if (!seen.insert(c).second) return Invalid(field, absl::StrCat("duplicate class \"", c, "\""));
  }
  for (auto [field, dim] :
       {std::pair<const char*, int32_t>{"project.item_feature_dim", project.item_feature_dim()},
        {"project.annotator_feature_dim", project.annotator_feature_dim()}}) {
    if (dim < 0 || dim > ApiLimits::kMaxFeatureDim) {
      return Invalid(field, absl::StrCat("must be in [0, ", ApiLimits::kMaxFeatureDim, "]"));
    }
  }
  // ValidateSettings and ValidateMethodForClasses name fields from the settings message
  // ("settings.model.tolerance"); in a CreateProjectRequest they are under project.
  absl::Status s = ValidateSettings(project.settings());
  if (s.ok()) s = ValidateMethodForClasses(project.settings(), n);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("project.", s.message()));
  return absl::OkStatus();
}

absl::Status ValidateMethodForClasses(const v1::ProjectSettings& settings, int num_classes) {
  if (settings.model().method() == v1::TRUTH_METHOD_KOS && num_classes != 2) {
    return Invalid(
        "settings.model.method",
        absl::StrCat("kos is for binary tasks only; the project has ", num_classes, " classes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateFeatures(absl::string_view field, absl::Span<const float> features,
                              int32_t dim) {
  if (features.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(features.size()) != dim) {
    return Invalid(
        field, absl::StrCat("has ", features.size(), " values; the project's dimension is ", dim));
  }
  for (size_t i = 0; i < features.size(); ++i) {
    if (!std::isfinite(features[i])) {
      return Invalid(field, absl::StrCat("value ", i, " is not finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTimestamp(absl::string_view field, const google::protobuf::Timestamp& t) {
  if (t.seconds() < ApiLimits::kMinTimestampSeconds ||
      t.seconds() > ApiLimits::kMaxTimestampSeconds) {
    return Invalid(field, absl::StrCat("seconds ", t.seconds(),
                                       " outside [0001-01-01, 9999-12-31T23:59:59Z]"));
  }
  if (t.nanos() < 0 || t.nanos() > 999999999) {
    return Invalid(field, absl::StrCat("nanos ", t.nanos(), " outside [0, 999999999]"));
  }
  if (t.seconds() == ApiLimits::kMaxTimestampSeconds &&
      t.nanos() > ApiLimits::kMaxNanosAtMaxTimestampSeconds) {
    return Invalid(field, absl::StrCat("nanos ", t.nanos(), " after 9999-12-31T23:59:59.999999Z"));
  }
  return absl::OkStatus();
}

absl::Status ValidateAnnotation(absl::string_view field, const v1::Annotation& annotation,
                                int32_t num_classes) {
  if (absl::Status s = ValidateId(absl::StrCat(field, ".item"), annotation.item()); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateId(absl::StrCat(field, ".annotator"), annotation.annotator());
      !s.ok()) {
    return s;
  }
  if (annotation.label() < 0 || annotation.label() >= num_classes) {
    return Invalid(absl::StrCat(field, ".label"),
                   absl::StrCat(annotation.label(), " out of range [0, ", num_classes, ")"));
  }
  if (annotation.has_client_time()) {
    return ValidateTimestamp(absl::StrCat(field, ".client_time"), annotation.client_time());
  }
  return absl::OkStatus();
}

absl::Status ValidateBatchShape(const v1::AnnotationBatch& batch) {
  if (batch.annotations_size() > ApiLimits::kMaxBatchAnnotations) {
    return Invalid("annotations",
                   absl::StrCat("batch has ", batch.annotations_size(),
                                " annotations; the limit is ", ApiLimits::kMaxBatchAnnotations));
  }
  return absl::OkStatus();
}

}  // namespace verity::server
