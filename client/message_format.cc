#include "client/message_format.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/csv_input.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace verity::client {
namespace {

struct MethodEntry {
  v1::TruthMethod method;
  const char* name;
};

constexpr MethodEntry kMethods[] = {
    {v1::TRUTH_METHOD_MAJORITY_VOTE, "mv"},
    {v1::TRUTH_METHOD_DAWID_SKENE, "ds"},
    {v1::TRUTH_METHOD_ONE_COIN, "one_coin"},
    {v1::TRUTH_METHOD_GLAD, "glad"},
    {v1::TRUTH_METHOD_LIA, "lia"},
    {v1::TRUTH_METHOD_CROWDLAYER, "crowdlayer"},
    {v1::TRUTH_METHOD_TRACE_REG, "trace_reg"},
    {v1::TRUTH_METHOD_CONAL, "conal"},
    {v1::TRUTH_METHOD_CMM, "cmm"},
    {v1::TRUTH_METHOD_WAWA, "wawa"},
    {v1::TRUTH_METHOD_ZERO_BASED_SKILL, "zero_based_skill"},
    {v1::TRUTH_METHOD_KOS, "kos"},
    {v1::TRUTH_METHOD_MACE, "mace"},
    {v1::TRUTH_METHOD_BWA, "bwa"},
    {v1::TRUTH_METHOD_IBCC, "ibcc"},
    {v1::TRUTH_METHOD_EBCC, "ebcc"},
    {v1::TRUTH_METHOD_MMSR, "mmsr"},
    {v1::TRUTH_METHOD_AUTO, "auto"},
};

struct PolicyEntry {
  v1::AssignmentPolicy policy;
  const char* name;
};

constexpr PolicyEntry kPolicies[] = {
    {v1::ASSIGNMENT_POLICY_INFORMATION_GAIN, "information_gain"},
    {v1::ASSIGNMENT_POLICY_UNCERTAINTY, "uncertainty"},
    {v1::ASSIGNMENT_POLICY_UNIFORM, "uniform"},
    {v1::ASSIGNMENT_POLICY_RANDOM, "random"},
};

struct RoleEntry {
  v1::Role role;
  const char* name;
};

constexpr RoleEntry kRoles[] = {
    {v1::ROLE_READER, "reader"},
    {v1::ROLE_WRITER, "writer"},
    {v1::ROLE_ADMIN, "admin"},
};

JsonValue TimestampJson(const google::protobuf::Timestamp& timestamp) {
  std::optional<std::string> text = FormatTimestamp(timestamp);
  return text.has_value() ? JsonValue(*text) : JsonValue();
}

JsonValue ModelSettingsJson(const v1::ModelSettings& model) {
  JsonValue json = JsonValue::Object();
  json.Set("method", MethodName(model.method()))
      .Set("confusion_smoothing", model.confusion_smoothing())
      .Set("prior_smoothing", model.prior_smoothing())
      .Set("max_iterations", model.max_iterations())
      .Set("tolerance", model.tolerance())
      .Set("refit_min_new_labels", model.refit_min_new_labels())
      .Set("refit_new_label_fraction", model.refit_new_label_fraction())
      .Set("calibration", model.calibration());
  return json;
}

JsonValue ProjectLimitsJson(const v1::ProjectLimits& limits) {
  JsonValue json = JsonValue::Object();
  json.Set("max_items", limits.max_items())
      .Set("max_annotators", limits.max_annotators())
      .Set("max_labels", limits.max_labels())
      .Set("max_confusion_cells", limits.max_confusion_cells())
      .Set("max_feature_values", limits.max_feature_values())
      .Set("max_revisions", limits.max_revisions());
  return json;
}

JsonValue AssignmentSettingsJson(const v1::AssignmentSettings& assignment) {
  JsonValue json = JsonValue::Object();
  json.Set("min_labels_per_item", assignment.min_labels_per_item())
      .Set("max_labels_per_item", assignment.max_labels_per_item())
      .Set("confidence_target", assignment.confidence_target())
      .Set("lease_seconds", assignment.lease_seconds())
      .Set("policy", PolicyName(assignment.policy()))
      .Set("gold_items_for_new_annotators",
           assignment.gold_items_for_new_annotators());
  return json;
}

// The members of ApiKeyJson, appended to the object `json`.
void SetApiKeyMembers(const v1::ApiKey& key, JsonValue& json) {
  JsonValue projects = JsonValue::Array();
  for (const std::string& project : key.projects()) projects.Append(project);
  json.Set("key_id", key.key_id())
      .Set("name", key.name())
      .Set("role", RoleName(key.role()))
      .Set("projects", std::move(projects))
      .Set("created_at", TimestampJson(key.created_at()))
      .Set("revoked_at", TimestampJson(key.revoked_at()))
      .Set("created_by", key.created_by());
}

}  // namespace

std::string MethodName(v1::TruthMethod method) {
  if (method == v1::TRUTH_METHOD_UNSPECIFIED) return "default";
  for (const MethodEntry& entry : kMethods) {
    if (entry.method == method) return entry.name;
  }
  return absl::StrCat("unknown(", static_cast<int>(method), ")");
}

std::optional<v1::TruthMethod> MethodFromName(absl::string_view name) {
  for (const MethodEntry& entry : kMethods) {
    if (entry.name == name) return entry.method;
  }
  return std::nullopt;
}

std::vector<std::string> MethodNames() {
  std::vector<std::string> names;
  for (const MethodEntry& entry : kMethods) names.push_back(entry.name);
  return names;
}

std::string PolicyName(v1::AssignmentPolicy policy) {
  if (policy == v1::ASSIGNMENT_POLICY_UNSPECIFIED) return "default";
  for (const PolicyEntry& entry : kPolicies) {
    if (entry.policy == policy) return entry.name;
  }
  return absl::StrCat("unknown(", static_cast<int>(policy), ")");
}

std::optional<v1::AssignmentPolicy> PolicyFromName(absl::string_view name) {
  if (name == "default") return v1::ASSIGNMENT_POLICY_UNSPECIFIED;
  for (const PolicyEntry& entry : kPolicies) {
    if (entry.name == name) return entry.policy;
  }
  return std::nullopt;
}

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const PolicyEntry& entry : kPolicies) names.push_back(entry.name);
  names.push_back("default");
  return names;
}

std::string RoleName(v1::Role role) {
  if (role == v1::ROLE_UNSPECIFIED) return "unspecified";
  for (const RoleEntry& entry : kRoles) {
    if (entry.role == role) return entry.name;
  }
  return absl::StrCat("unknown(", static_cast<int>(role), ")");
}

std::optional<v1::Role> RoleFromName(absl::string_view name) {
  for (const RoleEntry& entry : kRoles) {
    if (entry.name == name) return entry.role;
  }
  return std::nullopt;
}

std::vector<std::string> RoleNames() {
  std::vector<std::string> names;
  for (const RoleEntry& entry : kRoles) names.push_back(entry.name);
  return names;
}

std::optional<std::string> FormatTimestamp(
    const google::protobuf::Timestamp& timestamp) {
  if (timestamp.seconds() == 0 && timestamp.nanos() == 0) return std::nullopt;
  const absl::Time time = absl::FromUnixSeconds(timestamp.seconds()) +
                          absl::Nanoseconds(timestamp.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
}

std::string ClassName(absl::Span<const std::string> classes, int32_t index) {
  if (index >= 0 && static_cast<size_t>(index) < classes.size()) {
    return classes[index];
  }
  return absl::StrCat(index);
}

JsonValue ProjectJson(const v1::Project& project) {
  JsonValue classes = JsonValue::Array();
  for (const std::string& name : project.classes()) classes.Append(name);
  JsonValue settings = JsonValue::Object();
  settings.Set("model", ModelSettingsJson(project.settings().model()))
      .Set("assignment",
           AssignmentSettingsJson(project.settings().assignment()))
      .Set("limits", ProjectLimitsJson(project.settings().limits()));
  JsonValue json = JsonValue::Object();
  json.Set("name", project.name())
      .Set("classes", std::move(classes))
      .Set("item_feature_dim", project.item_feature_dim())
      .Set("annotator_feature_dim", project.annotator_feature_dim())
      .Set("method", MethodName(project.settings().model().method()))
      .Set("settings", std::move(settings))
      .Set("created_at", TimestampJson(project.created_at()))
      .Set("num_items", project.num_items())
      .Set("num_annotators", project.num_annotators())
      .Set("num_labels", project.num_labels())
      .Set("num_revisions", project.num_revisions());
  return json;
}

JsonValue ModelVersionJson(const v1::ModelVersion& version) {
  JsonValue json = JsonValue::Object();
  json.Set("version", version.version())
      .Set("method", MethodName(version.method()))
      .Set("watermark", version.watermark())
      .Set("num_labels", version.num_labels())
      .Set("log_likelihood", version.log_likelihood())
      .Set("iterations", version.iterations())
      .Set("duration_ms", version.duration_ms())
      .Set("created_at", TimestampJson(version.created_at()));
  return json;
}

JsonValue ModelStatusJson(absl::string_view project,
                          const v1::GetModelStatusResponse& status) {
  JsonValue json = JsonValue::Object();
  json.Set("project", project)
      .Set("method", MethodName(status.method()))
      .Set("num_labels", status.num_labels())
      .Set("labels_since_version", status.labels_since_version())
      .Set("training", status.training())
      .Set("current_version", status.has_current_version()
                                  ? ModelVersionJson(status.current_version())
                                  : JsonValue());
  if (status.has_calibration()) {
    const v1::PosteriorCalibration& c = status.calibration();
    JsonValue calibration = JsonValue::Object();
    calibration.Set("kind", c.kind())
        .Set("temperature", c.temperature())
        .Set("source", c.source());
    if (c.source() == "gold") {
      calibration.Set("gold_items", c.gold_items())
          .Set("gold_ece_raw", c.gold_ece_raw())
          .Set("gold_ece", c.gold_ece());
    }
    json.Set("calibration", std::move(calibration));
  }
  if (!status.chosen_method().empty()) {
    json.Set("chosen_method", status.chosen_method())
        .Set("choice_reason", status.choice_reason());
  }
  return json;
}

JsonValue PosteriorJson(const v1::Posterior& posterior,
                        absl::Span<const std::string> classes) {
  JsonValue probabilities = JsonValue::Object();
  for (int c = 0; c < posterior.probabilities_size(); ++c) {
    probabilities.Set(ClassName(classes, c), posterior.probabilities(c));
  }
  JsonValue json = JsonValue::Object();
  json.Set("item", posterior.item())
      .Set("label", ClassName(classes, posterior.map_label()))
      .Set("label_index", posterior.map_label())
      .Set("confidence", posterior.confidence())
      .Set("probabilities", std::move(probabilities))
      .Set("num_labels", posterior.num_labels())
      .Set("model_version", posterior.model_version())
      .Set("includes_newer_labels", posterior.includes_newer_labels())
      .Set("is_gold", posterior.is_gold());
  // Only for methods that learn one (lia).
  if (posterior.has_difficulty()) json.Set("difficulty", posterior.difficulty());
  return json;
}

JsonValue AnnotatorProfileJson(const v1::AnnotatorProfile& profile,
                               absl::Span<const std::string> classes) {
  const v1::ConfusionMatrix& matrix = profile.confusion();
  const int k = matrix.num_classes();
  JsonValue confusion;
  if (k > 0 && matrix.probabilities_size() == k * k) {
    confusion = JsonValue::Object();
    for (int t = 0; t < k; ++t) {
      JsonValue row = JsonValue::Object();
      for (int l = 0; l < k; ++l) {
        row.Set(ClassName(classes, l), matrix.probabilities(t * k + l));
      }
      confusion.Set(ClassName(classes, t), std::move(row));
    }
  }
  JsonValue json = JsonValue::Object();
  json.Set("annotator", profile.annotator())
      .Set("num_labels", profile.num_labels())
      .Set("accuracy", profile.accuracy())
      .Set("confusion", std::move(confusion));
  // Only for methods that learn one (lia, conal).
  if (profile.embedding_size() > 0) {
    JsonValue embedding = JsonValue::Array();
    for (float v : profile.embedding()) embedding.Append(static_cast<double>(v));
    json.Set("embedding", std::move(embedding));
  }
  // Only when the competence network predicted the confusion from the annotator's features.
  if (profile.predicted_from_features()) json.Set("predicted_from_features", true);
  return json;
}

JsonValue ItemSuggestionJson(const v1::ItemSuggestion& suggestion) {
  JsonValue json = JsonValue::Object();
  json.Set("item", suggestion.item())
      .Set("score", suggestion.score())
      .Set("p_correct", suggestion.p_correct())
      .Set("lease_expires_at", TimestampJson(suggestion.lease_expires_at()));
  return json;
}

JsonValue AnnotatorSuggestionJson(const v1::AnnotatorSuggestion& suggestion) {
  JsonValue json = JsonValue::Object();
  json.Set("annotator", suggestion.annotator())
      .Set("score", suggestion.score())
      .Set("p_correct", suggestion.p_correct());
  return json;
}

JsonValue ApiKeyJson(const v1::ApiKey& key) {
  JsonValue json = JsonValue::Object();
  SetApiKeyMembers(key, json);
  return json;
}

JsonValue CreatedKeyJson(const v1::CreateKeyResponse& created) {
  JsonValue json = JsonValue::Object();
  json.Set("secret_key", created.secret_key());
  SetApiKeyMembers(created.key(), json);
  return json;
}

std::vector<std::string> PosteriorExportHeader(
    absl::Span<const std::string> classes) {
  std::vector<std::string> fields = {"item", "label", "label_index",
                                     "confidence"};
  for (const std::string& name : classes) {
    fields.push_back(absl::StrCat("p_", name));
  }
  for (const char* name :
       {"num_labels", "model_version", "includes_newer_labels", "is_gold"}) {
    fields.push_back(name);
  }
  return fields;
}

std::vector<std::string> PosteriorExportFields(
    const v1::Posterior& posterior, absl::Span<const std::string> classes) {
  std::vector<std::string> fields = {
      SpreadsheetSafeCell(posterior.item()),
      SpreadsheetSafeCell(ClassName(classes, posterior.map_label())),
      absl::StrCat(posterior.map_label()),
      FormatShortestDouble(posterior.confidence())};
  for (double p : posterior.probabilities()) {
    fields.push_back(FormatShortestDouble(p));
  }
  fields.push_back(absl::StrCat(posterior.num_labels()));
  fields.push_back(absl::StrCat(posterior.model_version()));
  fields.push_back(posterior.includes_newer_labels() ? "true" : "false");
  fields.push_back(posterior.is_gold() ? "true" : "false");
  return fields;
}

}  // namespace verity::client
