// How the `verity` CLI renders API messages for machines: the JSON objects of
// `--output=json` and `export --format=jsonl`, the records of `export
// --format=csv`, and the names it uses for enum values (methods, policies).
//
// Conventions of every JSON object here: snake_case keys named as the proto
// fields; labels as class names ("label": "true") with the index beside it
// where useful ("label_index": 1); probabilities and confusion matrices keyed
// by class name in class order; timestamps as RFC 3339 UTC strings, null when
// unset; methods and policies by their CLI names ("ds", "uncertainty",
// "default" when unset); 64-bit counts as JSON numbers.
//
// Thread safety: every function is pure.

#ifndef VERITY_CLIENT_MESSAGE_FORMAT_H_
#define VERITY_CLIENT_MESSAGE_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/json_value.h"
#include "google/protobuf/timestamp.pb.h"
#include "verity/v1/assignment.pb.h"
#include "verity/v1/common.pb.h"
#include "verity/v1/keys.pb.h"
#include "verity/v1/models.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::client {

// "mv", "ds", "one_coin", ...; "default" for TRUTH_METHOD_UNSPECIFIED;
// "unknown(N)" for a value this client does not know.
std::string MethodName(v1::TruthMethod method);
// The method of a CLI name; nullopt for an unknown name.
std::optional<v1::TruthMethod> MethodFromName(absl::string_view name);
// The names MethodFromName accepts, in enum order ("mv", "ds", ...).
std::vector<std::string> MethodNames();

// "information_gain", "uncertainty", "uniform", "random"; "default" for
// ASSIGNMENT_POLICY_UNSPECIFIED; "unknown(N)" otherwise.
std::string PolicyName(v1::AssignmentPolicy policy);
// Also accepts "default" (ASSIGNMENT_POLICY_UNSPECIFIED).
std::optional<v1::AssignmentPolicy> PolicyFromName(absl::string_view name);
std::vector<std::string> PolicyNames();

// "reader", "writer", "admin"; "unspecified" for ROLE_UNSPECIFIED;
// "unknown(N)" otherwise.
std::string RoleName(v1::Role role);
// The role of a CLI name (one of RoleNames()); nullopt otherwise.
std::optional<v1::Role> RoleFromName(absl::string_view name);
std::vector<std::string> RoleNames();

// "2023-11-14T22:13:20.000Z"; nullopt for an unset (zero) timestamp.
std::optional<std::string> FormatTimestamp(
    const google::protobuf::Timestamp& timestamp);

// classes[index], or the index as text when it is out of range.
std::string ClassName(absl::Span<const std::string> classes, int32_t index);

// {"name","classes","item_feature_dim","annotator_feature_dim","method",
//  "settings":{"model":{...},"assignment":{...},"limits":{...}},"created_at",
//  "num_items","num_annotators","num_labels"}; settings hold every field, 0 or
// "" meaning the server default.
JsonValue ProjectJson(const v1::Project& project);

// {"version","method","watermark","num_labels","log_likelihood",
//  "iterations","duration_ms","created_at"}.
JsonValue ModelVersionJson(const v1::ModelVersion& version);

// {"project","method","num_labels","labels_since_version","training",
//  "current_version": ModelVersionJson or null}.
JsonValue ModelStatusJson(absl::string_view project,
                          const v1::GetModelStatusResponse& status);

// {"item","label","label_index","confidence","probabilities":{class: p},
//  "num_labels","model_version","includes_newer_labels","is_gold"}.
JsonValue PosteriorJson(const v1::Posterior& posterior,
                        absl::Span<const std::string> classes);

// {"annotator","num_labels","accuracy","confusion":{true class: {answered
// class: p}}}; confusion is null when the server sent no valid K-by-K
// matrix.
JsonValue AnnotatorProfileJson(const v1::AnnotatorProfile& profile,
                               absl::Span<const std::string> classes);

// {"item","score","p_correct","lease_expires_at"}.
JsonValue ItemSuggestionJson(const v1::ItemSuggestion& suggestion);
// {"annotator","score","p_correct"}.
JsonValue AnnotatorSuggestionJson(const v1::AnnotatorSuggestion& suggestion);

// {"key_id","name","role","projects","created_at","revoked_at","created_by"};
// projects is [] for a key valid for every project, revoked_at null while the
// key is valid, created_by "" for the bootstrap admin key.
JsonValue ApiKeyJson(const v1::ApiKey& key);

// {"secret_key", then the fields of ApiKeyJson}: the key's text, which the
// server shows only in this response, beside its description.
JsonValue CreatedKeyJson(const v1::CreateKeyResponse& created);

// The CSV columns of `export --format=csv`: item, label, label_index,
// confidence, p_<class> per class, num_labels, model_version,
// includes_newer_labels, is_gold.
std::vector<std::string> PosteriorExportHeader(
    absl::Span<const std::string> classes);
// One record under that header; numbers in their shortest exact form,
// booleans as true/false, item and label spreadsheet-safe (SpreadsheetSafeCell
// in client/csv_input.h: a leading ' before = + - @ tab CR ', signed numbers
// aside).
std::vector<std::string> PosteriorExportFields(
    const v1::Posterior& posterior, absl::Span<const std::string> classes);

}  // namespace verity::client

#endif  // VERITY_CLIENT_MESSAGE_FORMAT_H_
