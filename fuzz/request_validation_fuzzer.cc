// libFuzzer target for the request-validation and proto-to-domain conversion code of the v1
// API (server/api/validation.{h,cc}).
//
// Input: byte 0 selects the request type, bytes 1-3 the shape of the project the request is
// checked against (number of classes, item and annotator feature dimensions), the rest is the
// serialized request. Bytes that do not parse are
// skipped, as gRPC would refuse them before any handler.
//
// Each request goes through the validation calls of its handler (server/*_service.cc), in the
// handler's order, and then through the same conversions the handler applies to an accepted
// request. Besides crashes and sanitizer reports, the target aborts when
//   - a refusal is not INVALID_ARGUMENT or its message does not start with a field name, or
//   - an accepted request breaks a documented bound (checked here independently of
//     validation.cc), or its conversion leaves what the storage layer can hold (a client
//     time the annotation store refuses, by the store's own check
//     storage::ClientTimeInStoreRange; settings that do not survive the serialize/parse
//     round trip a project's settings make through the database).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/stubs/logging.h"
#include "server/api/validation.h"
#include "storage/client_time_range.h"
#include "verity/v1/assignment.pb.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::server {
namespace {

enum RequestKind : uint8_t {
  kCreateProject = 0,
  kUpdateProjectSettings,
  kAddItems,
  kAddAnnotators,
  kAnnotationBatch,
  kSuggestItems,
  kSuggestAnnotators,
  kGetPosteriors,
  kNumKinds,
};

// The project a request is checked against (what registry->Get would return).
struct ProjectShape {
  int32_t num_classes;
  int32_t item_feature_dim;
  int32_t annotator_feature_dim;
};

[[noreturn]] void Fail(absl::string_view what) {
  std::fprintf(stderr, "request_validation_fuzzer: %.*s\n", static_cast<int>(what.size()),
               what.data());
  std::abort();
}

void Require(bool condition, absl::string_view what) {
  if (!condition) Fail(what);
}

// A refusal must be INVALID_ARGUMENT and name a field first, e.g. "items[3].id: ...".
void CheckRefusal(const absl::Status& status, std::initializer_list<absl::string_view> fields) {
  Require(status.code() == absl::StatusCode::kInvalidArgument,
          absl::StrCat("refusal with code ", absl::StatusCodeToString(status.code()), ": ",
                       status.message()));
  for (absl::string_view field : fields) {
    if (absl::StartsWith(status.message(), field)) return;
  }
  Fail(absl::StrCat("refusal does not start with a field name: ", status.message()));
}

// Independent statements of the documented bounds (proto comments), for accepted requests.
bool IsProjectName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsId(const std::string& id) {
  if (id.empty() || id.size() > 256) return false;
  for (unsigned char c : id) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

bool AreFeatures(const google::protobuf::RepeatedField<float>& features, int32_t dim) {
  if (features.empty()) return true;
  if (features.size() != dim) return false;
  for (float f : features) {
    if (!std::isfinite(f)) return false;
  }
  return true;
}

void CheckAcceptedSettings(const v1::ProjectSettings& settings) {
  const v1::ModelSettings& m = settings.model();
  const v1::AssignmentSettings& a = settings.assignment();
  Require(v1::TruthMethod_IsValid(m.method()), "accepted an unknown method");
  Require(v1::AssignmentPolicy_IsValid(a.policy()), "accepted an unknown policy");
  for (double v : {m.confusion_smoothing(), m.prior_smoothing(), m.tolerance(),
                   m.refit_new_label_fraction(), a.confidence_target()}) {
    Require(std::isfinite(v) && v >= 0, "accepted a negative or non-finite setting");
  }
  Require(m.tolerance() < 1 && a.confidence_target() <= 1, "accepted a fraction above 1");
  for (int32_t v : {m.max_iterations(), m.refit_min_new_labels(), a.min_labels_per_item(),
                    a.max_labels_per_item(), a.lease_seconds(),
                    a.gold_items_for_new_annotators()}) {
    Require(v >= 0, "accepted a negative count");
  }
  Require(a.max_labels_per_item() == 0 || a.max_labels_per_item() >= a.min_labels_per_item(),
          "accepted max_labels_per_item < min_labels_per_item");
  // ProjectRegistry stores settings serialized and parses them back when it loads a project.
  v1::ProjectSettings reloaded;
  Require(reloaded.ParseFromString(settings.SerializeAsString()),
          "accepted settings do not survive the database round trip");
  Require(ValidateSettings(reloaded).ok(), "reloaded settings are refused");
}

void CreateProject(const v1::CreateProjectRequest& request) {
  const v1::Project& p = request.project();
  absl::Status s = ValidateNewProject(p);
  if (!s.ok()) {
    CheckRefusal(s, {"project", "settings."});
    return;
  }
  Require(IsProjectName(p.name()), "accepted a bad project name");
  Require(p.classes_size() >= 2 && p.classes_size() <= 256, "accepted a bad class count");
  std::set<std::string> classes;
  for (const std::string& c : p.classes()) {
    Require(!c.empty() && c.size() <= 128, "accepted a bad class name length");
    for (unsigned char ch : c) Require(ch >= 0x20 && ch != 0x7f, "accepted a control character");
    Require(classes.insert(c).second, "accepted a duplicate class");
  }
  for (int32_t dim : {p.item_feature_dim(), p.annotator_feature_dim()}) {
    Require(dim >= 0 && dim <= 65536, "accepted a bad feature dimension");
  }
  CheckAcceptedSettings(p.settings());
}

void UpdateProjectSettings(const v1::UpdateProjectSettingsRequest& request) {
  absl::Status s = ValidateProjectName(request.project());
  if (s.ok()) s = ValidateSettings(request.settings());
  if (!s.ok()) {
    CheckRefusal(s, {"project", "settings."});
    return;
  }
  Require(IsProjectName(request.project()), "accepted a bad project name");
  CheckAcceptedSettings(request.settings());
}

// ProjectServiceImpl::AddItems up to the storage call.
void AddItems(const v1::AddItemsRequest& request, const ProjectShape& project) {
  if (absl::Status s = ValidateProjectName(request.project()); !s.ok()) {
    return CheckRefusal(s, {"project"});
  }
  if (request.items_size() > ApiLimits::kMaxItemsPerCall) return;
  for (int i = 0; i < request.items_size(); ++i) {
    const v1::Item& item = request.items(i);
    const std::string field = absl::StrCat("items[", i, "]");
    if (absl::Status s = ValidateId(field + ".id", item.id()); !s.ok()) {
      return CheckRefusal(s, {field + ".id"});
    }
    if (absl::Status s =
            ValidateFeatures(field + ".features", item.features(), project.item_feature_dim);
        !s.ok()) {
      return CheckRefusal(s, {field + ".features"});
    }
    if (item.has_gold_label() &&
        (item.gold_label() < 0 || item.gold_label() >= project.num_classes)) {
      return;
    }
    if (item.has_priority() && !std::isfinite(item.priority())) return;
  }
  for (const v1::Item& item : request.items()) {
    Require(IsId(item.id()), "accepted a bad item id");
    Require(AreFeatures(item.features(), project.item_feature_dim), "accepted bad features");
  }
}

void AddAnnotators(const v1::AddAnnotatorsRequest& request, const ProjectShape& project) {
  if (absl::Status s = ValidateProjectName(request.project()); !s.ok()) {
    return CheckRefusal(s, {"project"});
  }
  if (request.annotators_size() > ApiLimits::kMaxItemsPerCall) return;
  for (int i = 0; i < request.annotators_size(); ++i) {
    const v1::Annotator& a = request.annotators(i);
    const std::string field = absl::StrCat("annotators[", i, "]");
    if (absl::Status s = ValidateId(field + ".id", a.id()); !s.ok()) {
      return CheckRefusal(s, {field + ".id"});
    }
    if (absl::Status s = ValidateFeatures(field + ".features", a.features(),
                                          project.annotator_feature_dim);
        !s.ok()) {
      return CheckRefusal(s, {field + ".features"});
    }
  }
  for (const v1::Annotator& a : request.annotators()) {
    Require(IsId(a.id()), "accepted a bad annotator id");
    Require(AreFeatures(a.features(), project.annotator_feature_dim), "accepted bad features");
  }
}

// IngestServiceImpl::SubmitAnnotations for one batch, including the client_time conversion
// to the storage layer's epoch microseconds.
void AnnotationBatch(const v1::AnnotationBatch& batch, const ProjectShape& project) {
  if (absl::Status s = ValidateBatchShape(batch); !s.ok()) return CheckRefusal(s, {"annotations"});
  Require(batch.annotations_size() <= 10000, "accepted an oversize batch");
  if (!batch.project().empty()) {
    if (absl::Status s = ValidateProjectName(batch.project()); !s.ok()) {
      return CheckRefusal(s, {"project"});
    }
  }
  for (int i = 0; i < batch.annotations_size(); ++i) {
    const v1::Annotation& a = batch.annotations(i);
    const std::string field = absl::StrCat("annotations[", i, "]");
    absl::Status s = ValidateAnnotation(field, a, project.num_classes);
    if (!s.ok()) {
      CheckRefusal(s, {field + ".item", field + ".annotator", field + ".label",
                       field + ".client_time"});
      continue;
    }
    Require(IsId(a.item()) && IsId(a.annotator()), "accepted a bad id");
    Require(a.label() >= 0 && a.label() < project.num_classes, "accepted a bad label");
    if (a.has_client_time()) {
      // The handler's conversion, then the store's own range check: a value the store refuses
      // would fail the batch's group commit.
      const absl::Time t = absl::FromUnixSeconds(a.client_time().seconds()) +
                           absl::Nanoseconds(a.client_time().nanos());
      Require(storage::ClientTimeInStoreRange(t),
              absl::StrCat("accepted a client_time the store refuses: ",
                           a.client_time().ShortDebugString()));
    }
  }
}

// AssignmentServiceImpl: the checks before the registry lookup.
void SuggestItems(const v1::SuggestItemsRequest& request) {
  absl::Status s = ValidateProjectName(request.project());
  if (s.ok()) s = ValidateId("annotator", request.annotator());
  if (!s.ok()) return CheckRefusal(s, {"project", "annotator"});
  if (request.k() < 1 || request.k() > 1000) return;
  Require(IsProjectName(request.project()) && IsId(request.annotator()), "accepted bad names");
}

void SuggestAnnotators(const v1::SuggestAnnotatorsRequest& request) {
  absl::Status s = ValidateProjectName(request.project());
  if (s.ok()) s = ValidateId("item", request.item());
  if (!s.ok()) return CheckRefusal(s, {"project", "item"});
  for (int i = 0; i < request.candidates_size(); ++i) {
    const std::string field = absl::StrCat("candidates[", i, "]");
    if (absl::Status c = ValidateId(field, request.candidates(i)); !c.ok()) {
      return CheckRefusal(c, {field});
    }
    Require(IsId(request.candidates(i)), "accepted a bad candidate");
  }
}

void GetPosteriors(const v1::GetPosteriorsRequest& request) {
  if (absl::Status s = ValidateProjectName(request.project()); !s.ok()) {
    return CheckRefusal(s, {"project"});
  }
  Require(IsProjectName(request.project()), "accepted a bad project name");
}

template <typename Request>
bool Parse(const uint8_t* data, size_t size, Request& request) {
  return request.ParseFromArray(data, static_cast<int>(size));
}

}  // namespace
}  // namespace verity::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace verity::server;  // NOLINT: the fuzz entry point only.
  namespace v1 = verity::v1;
  // Proto3 parsing logs every string field that is not UTF-8; such inputs are expected here.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  if (size < 4 || size > (1 << 20)) return 0;
  const uint8_t kind = data[0] % kNumKinds;
  // 2 to 257 classes (one beyond the limit); small dimensions so feature lengths can match.
  const ProjectShape project{2 + data[1], data[2] % 9, data[3] % 9};
  data += 4;
  size -= 4;
  switch (kind) {
    case kCreateProject: {
      v1::CreateProjectRequest r;
      if (Parse(data, size, r)) CreateProject(r);
      break;
    }
    case kUpdateProjectSettings: {
      v1::UpdateProjectSettingsRequest r;
      if (Parse(data, size, r)) UpdateProjectSettings(r);
      break;
    }
    case kAddItems: {
      v1::AddItemsRequest r;
      if (Parse(data, size, r)) AddItems(r, project);
      break;
    }
    case kAddAnnotators: {
      v1::AddAnnotatorsRequest r;
      if (Parse(data, size, r)) AddAnnotators(r, project);
      break;
    }
    case kAnnotationBatch: {
      v1::AnnotationBatch r;
      if (Parse(data, size, r)) AnnotationBatch(r, project);
      break;
    }
    case kSuggestItems: {
      v1::SuggestItemsRequest r;
      if (Parse(data, size, r)) SuggestItems(r);
      break;
    }
    case kSuggestAnnotators: {
      v1::SuggestAnnotatorsRequest r;
      if (Parse(data, size, r)) SuggestAnnotators(r);
      break;
    }
    case kGetPosteriors: {
      v1::GetPosteriorsRequest r;
      if (Parse(data, size, r)) GetPosteriors(r);
      break;
    }
    default:
      break;
  }
  return 0;
}
