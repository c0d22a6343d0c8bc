// Bad inputs: a table of malformed requests to every v1 service, each sent over a real gRPC
// channel to an in-process VerityServer on a real (embedded) PostgreSQL, each with the status
// code it must get and a substring of the message that names the offending field.
//
// Ingest reports problems in its acks rather than in the stream status: a whole-batch failure
// (BatchAck.error_code) is read as that code, a per-annotation rejection as INVALID_ARGUMENT
// with the rejection's reason (the rest of the batch is still written).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {
namespace {

using ::testing::HasSubstr;

// The project every row but the project-creation ones talks to: 2 classes, item features of
// dimension 4, annotator features of dimension 2, one labelled item "i1" by annotator "w1".
constexpr char kProject[] = "bad-input";
constexpr int kItemDim = 4;
constexpr int kAnnotatorDim = 2;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

// What one call answered: the status code and its message.
struct Outcome {
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message;
};

Outcome FromStatus(const grpc::Status& status) {
  return {status.error_code(), status.error_message()};
}

struct Stubs {
  std::unique_ptr<v1::ProjectService::Stub> projects;
  std::unique_ptr<v1::IngestService::Stub> ingest;
  std::unique_ptr<v1::TruthService::Stub> truth;
  std::unique_ptr<v1::ModelService::Stub> models;
  std::unique_ptr<v1::AssignmentService::Stub> assignment;
  std::unique_ptr<v1::KeyService::Stub> keys;
};

// --- One helper per RPC: send the request, return the outcome. ---

Outcome CreateProject(const Stubs& s, const v1::Project& project) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::CreateProjectRequest request;
  *request.mutable_project() = project;
  v1::CreateProjectResponse response;
  return FromStatus(s.projects->CreateProject(&context, request, &response));
}

Outcome GetProject(const Stubs& s, const std::string& name) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetProjectRequest request;
  request.set_project(name);
  v1::GetProjectResponse response;
  return FromStatus(s.projects->GetProject(&context, request, &response));
}

Outcome UpdateSettings(const Stubs& s, const std::string& name,
                       const v1::ProjectSettings& settings) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::UpdateProjectSettingsRequest request;
  request.set_project(name);
  *request.mutable_settings() = settings;
  v1::UpdateProjectSettingsResponse response;
  return FromStatus(s.projects->UpdateProjectSettings(&context, request, &response));
}

Outcome AddItems(const Stubs& s, const v1::AddItemsRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::AddItemsResponse response;
  return FromStatus(s.projects->AddItems(&context, request, &response));
}

Outcome AddAnnotators(const Stubs& s, const v1::AddAnnotatorsRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::AddAnnotatorsResponse response;
  return FromStatus(s.projects->AddAnnotators(&context, request, &response));
}

Outcome CreateKey(const Stubs& s, const v1::CreateKeyRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::CreateKeyResponse response;
  return FromStatus(s.keys->CreateKey(&context, request, &response));
}

Outcome RevokeKey(const Stubs& s, const std::string& key_id) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::RevokeKeyRequest request;
  request.set_key_id(key_id);
  v1::RevokeKeyResponse response;
  return FromStatus(s.keys->RevokeKey(&context, request, &response));
}

// Sends the batches on one stream; the outcome of the last batch's ack (see the file comment).
Outcome Submit(const Stubs& s, const std::vector<v1::AnnotationBatch>& batches) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = s.ingest->SubmitAnnotations(&context);
  for (const v1::AnnotationBatch& b : batches) {
    if (!stream->Write(b)) break;
  }
  stream->WritesDone();
  std::vector<v1::BatchAck> acks;
  v1::BatchAck ack;
  while (stream->Read(&ack)) acks.push_back(ack);
  grpc::Status status = stream->Finish();
  if (!status.ok()) return FromStatus(status);
  if (acks.size() != batches.size()) {
    return {grpc::StatusCode::UNKNOWN, absl::StrCat(acks.size(), " acks for ", batches.size(),
                                                    " batches")};
  }
  const v1::BatchAck& last = acks.back();
  if (last.error_code() != 0) {
    return {static_cast<grpc::StatusCode>(last.error_code()), last.error_message()};
  }
  if (last.rejections_size() > 0) {
    return {grpc::StatusCode::INVALID_ARGUMENT, last.rejections(0).reason()};
  }
  return {};
}

// Sends one batch on its own stream and reads its ack into `ack`; fails if the stream does.
::testing::AssertionResult SubmitOne(const Stubs& s, const v1::AnnotationBatch& batch,
                                     v1::BatchAck* ack) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = s.ingest->SubmitAnnotations(&context);
  if (!stream->Write(batch)) return ::testing::AssertionFailure() << "the write failed";
  stream->WritesDone();
  const bool acked = stream->Read(ack);
  grpc::Status status = stream->Finish();
  if (!status.ok()) return ::testing::AssertionFailure() << status.error_message();
  if (!acked) return ::testing::AssertionFailure() << "no ack";
  return ::testing::AssertionSuccess();
}

Outcome GetPosteriors(const Stubs& s, const v1::GetPosteriorsRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetPosteriorsResponse response;
  return FromStatus(s.truth->GetPosteriors(&context, request, &response));
}

Outcome ListPosteriors(const Stubs& s, int32_t page_size, const std::string& page_token) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::ListPosteriorsRequest request;
  request.set_project(kProject);
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  v1::ListPosteriorsResponse response;
  return FromStatus(s.truth->ListPosteriors(&context, request, &response));
}

Outcome GetAnnotatorProfiles(const Stubs& s, const v1::GetAnnotatorProfilesRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetAnnotatorProfilesResponse response;
  return FromStatus(s.truth->GetAnnotatorProfiles(&context, request, &response));
}

Outcome GetModelStatus(const Stubs& s, const std::string& name) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetModelStatusRequest request;
  request.set_project(name);
  v1::GetModelStatusResponse response;
  return FromStatus(s.models->GetModelStatus(&context, request, &response));
}

Outcome ListModelVersions(const Stubs& s, int32_t limit) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::ListModelVersionsRequest request;
  request.set_project(kProject);
  request.set_limit(limit);
  v1::ListModelVersionsResponse response;
  return FromStatus(s.models->ListModelVersions(&context, request, &response));
}

Outcome TrainModel(const Stubs& s, const std::string& name) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::TrainModelRequest request;
  request.set_project(name);
  v1::TrainModelResponse response;
  return FromStatus(s.models->TrainModel(&context, request, &response));
}

Outcome SuggestItems(const Stubs& s, const v1::SuggestItemsRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::SuggestItemsResponse response;
  return FromStatus(s.assignment->SuggestItems(&context, request, &response));
}

Outcome SuggestAnnotators(const Stubs& s, const v1::SuggestAnnotatorsRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::SuggestAnnotatorsResponse response;
  return FromStatus(s.assignment->SuggestAnnotators(&context, request, &response));
}

// --- Request builders: a valid request, then the row spoils one field. ---

// A fresh name per call, so that a row the server wrongly accepted cannot turn the next
// CreateProject row into ALREADY_EXISTS.
std::string FreshProjectName() {
  static std::atomic<int> next{0};
  return absl::StrCat("fresh-", next++);
}

v1::Project NewProject(const std::string& name = FreshProjectName()) {
  v1::Project p;
  p.set_name(name);
  p.add_classes("no");
  p.add_classes("yes");
  return p;
}

v1::Project NewProjectWithSettings(const std::function<void(v1::ProjectSettings&)>& spoil) {
  v1::Project p = NewProject();
  spoil(*p.mutable_settings());
  return p;
}

v1::AddItemsRequest Items(int n) {
  v1::AddItemsRequest request;
  request.set_project(kProject);
  for (int i = 0; i < n; ++i) request.add_items()->set_id(absl::StrCat("item-", i));
  return request;
}

v1::AddItemsRequest OneItem(const std::function<void(v1::Item&)>& spoil) {
  v1::AddItemsRequest request = Items(1);
  spoil(*request.mutable_items(0));
  return request;
}

v1::AddItemsRequest ItemWithFeatures(std::vector<float> features) {
  return OneItem([&](v1::Item& item) {
    for (float f : features) item.add_features(f);
  });
}

v1::AddAnnotatorsRequest Annotators(int n) {
  v1::AddAnnotatorsRequest request;
  request.set_project(kProject);
  for (int i = 0; i < n; ++i) request.add_annotators()->set_id(absl::StrCat("annotator-", i));
  return request;
}

v1::AnnotationBatch Batch(int n) {
  v1::AnnotationBatch batch;
  batch.set_batch_id(1);
  batch.set_project(kProject);
  for (int i = 0; i < n; ++i) {
    v1::Annotation* a = batch.add_annotations();
    a->set_item(absl::StrCat("item-", i));
    a->set_annotator("w1");
    a->set_label(0);
  }
  return batch;
}

v1::AnnotationBatch OneAnnotation(const std::function<void(v1::Annotation&)>& spoil) {
  v1::AnnotationBatch batch = Batch(1);
  spoil(*batch.mutable_annotations(0));
  return batch;
}

v1::GetPosteriorsRequest PosteriorsOf(std::vector<std::string> items) {
  v1::GetPosteriorsRequest request;
  request.set_project(kProject);
  for (std::string& id : items) request.add_items(std::move(id));
  return request;
}

v1::SuggestItemsRequest SuggestItemsFor(const std::string& annotator, int32_t k) {
  v1::SuggestItemsRequest request;
  request.set_project(kProject);
  request.set_annotator(annotator);
  request.set_k(k);
  return request;
}

v1::SuggestAnnotatorsRequest SuggestAnnotatorsFor(const std::string& item, int32_t k) {
  v1::SuggestAnnotatorsRequest request;
  request.set_project(kProject);
  request.set_item(item);
  request.set_k(k);
  return request;
}

std::vector<std::string> ManyIds(int n) {
  std::vector<std::string> ids;
  ids.reserve(n);
  for (int i = 0; i < n; ++i) ids.push_back(absl::StrCat("x", i));
  return ids;
}

// --- The table. ---

struct BadInput {
  std::string name;  // The test's name: [A-Za-z0-9_].
  std::function<Outcome(const Stubs&)> call;
  grpc::StatusCode code;
  std::string message;  // A substring of the answer; names the offending field.
};

std::ostream& operator<<(std::ostream& os, const BadInput& row) { return os << row.name; }

using C = grpc::StatusCode;

std::vector<BadInput> BadInputs() {
  const C kInvalid = C::INVALID_ARGUMENT;
  return {
      // ProjectService.CreateProject: names, classes, dimensions, settings.
      {"CreateProjectEmptyName",
       [](const Stubs& s) { return CreateProject(s, NewProject("")); }, kInvalid,
       "project: name must not be empty"},
      {"CreateProjectNameWithSpace",
       [](const Stubs& s) { return CreateProject(s, NewProject("my project")); }, kInvalid,
       "project: name may only contain [A-Za-z0-9._-]"},
      {"CreateProjectNameWithSlash",
       [](const Stubs& s) { return CreateProject(s, NewProject("../etc")); }, kInvalid,
       "project: name may only contain"},
      {"CreateProjectNameNonAscii",
       [](const Stubs& s) { return CreateProject(s, NewProject("caf\xc3\xa9")); }, kInvalid,
       "project: name may only contain"},
      {"CreateProjectNameTooLong",
       [](const Stubs& s) { return CreateProject(s, NewProject(std::string(129, 'p'))); },
       kInvalid, "project: name is longer than 128 bytes"},
      {"CreateProjectNoProjectAtAll",
       [](const Stubs& s) { return CreateProject(s, v1::Project()); }, kInvalid,
       "project: name must not be empty"},
      {"CreateProjectOneClass",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.clear_classes();
         p.add_classes("only");
         return CreateProject(s, p);
       },
       kInvalid, "project.classes: has 1 classes; need 2 to 256"},
      {"CreateProjectTooManyClasses",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.clear_classes();
         for (int k = 0; k < 257; ++k) p.add_classes(absl::StrCat("c", k));
         return CreateProject(s, p);
       },
       kInvalid, "project.classes: has 257 classes"},
      {"CreateProjectDuplicateClass",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.add_classes("no");
         return CreateProject(s, p);
       },
       kInvalid, "project.classes[2]: duplicate class \"no\""},
      {"CreateProjectEmptyClassName",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.set_classes(1, "");
         return CreateProject(s, p);
       },
       kInvalid, "project.classes[1]: must be 1 to 128 bytes"},
      {"CreateProjectClassNameTooLong",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.set_classes(0, std::string(129, 'c'));
         return CreateProject(s, p);
       },
       kInvalid, "project.classes[0]: must be 1 to 128 bytes"},
      {"CreateProjectClassNameControlCharacter",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.set_classes(0, "n\no");
         return CreateProject(s, p);
       },
       kInvalid, "project.classes[0]: contains a control character"},
      {"CreateProjectNegativeItemFeatureDim",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.set_item_feature_dim(-1);
         return CreateProject(s, p);
       },
       kInvalid, "project.item_feature_dim: must be in [0, 65536]"},
      {"CreateProjectHugeAnnotatorFeatureDim",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.set_annotator_feature_dim(65537);
         return CreateProject(s, p);
       },
       kInvalid, "project.annotator_feature_dim: must be in [0, 65536]"},
      {"CreateProjectUnknownMethod",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_method(static_cast<v1::TruthMethod>(42));
         }));
       },
       kInvalid, "settings.model.method: unknown method"},
      // kos (Karger-Oh-Shah) is for binary tasks only (common.proto): a project of 3 classes
      // with it would accept labels and then fail every fit.
      {"CreateProjectKosWithThreeClasses",
       [](const Stubs& s) {
         v1::Project p = NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_method(v1::TRUTH_METHOD_KOS);
         });
         p.add_classes("maybe");
         return CreateProject(s, p);
       },
       kInvalid, "settings.model.method: kos is for binary tasks only; the project has 3 classes"},
      {"UpdateSettingsKosOnAThreeClassProject",
       [](const Stubs& s) {
         v1::Project p = NewProject();
         p.add_classes("maybe");
         if (Outcome created = CreateProject(s, p); created.code != grpc::StatusCode::OK) {
           return created;
         }
         v1::ProjectSettings settings;
         settings.mutable_model()->set_method(v1::TRUTH_METHOD_KOS);
         return UpdateSettings(s, p.name(), settings);
       },
       kInvalid, "settings.model.method: kos is for binary tasks only; the project has 3 classes"},
      {"CreateProjectNaNConfusionSmoothing",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_confusion_smoothing(std::nan(""));
         }));
       },
       kInvalid, "settings.model.confusion_smoothing"},
      {"CreateProjectNegativePriorSmoothing",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_prior_smoothing(-1);
         }));
       },
       kInvalid, "settings.model.prior_smoothing"},
      {"CreateProjectHugeMaxIterations",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_max_iterations(100001);
         }));
       },
       kInvalid, "settings.model.max_iterations: must be in [0, 100000]"},
      {"CreateProjectToleranceOne",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_tolerance(1.0);
         }));
       },
       kInvalid, "settings.model.tolerance: must be in [0, 1)"},
      {"CreateProjectNegativeRefitMinNewLabels",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_refit_min_new_labels(-1);
         }));
       },
       kInvalid, "settings.model.refit_min_new_labels"},
      {"CreateProjectInfiniteRefitFraction",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_refit_new_label_fraction(
               std::numeric_limits<double>::infinity());
         }));
       },
       kInvalid, "settings.model.refit_new_label_fraction"},
      {"CreateProjectNegativeMinLabelsPerItem",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_assignment()->set_min_labels_per_item(-1);
         }));
       },
       kInvalid, "settings.assignment.min_labels_per_item: must be >= 0"},
      {"CreateProjectNegativeMaxLabelsPerItem",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_assignment()->set_max_labels_per_item(-3);
         }));
       },
       kInvalid, "settings.assignment.max_labels_per_item: must be >= 0"},
      {"CreateProjectMaxLabelsBelowMin",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_assignment()->set_min_labels_per_item(5);
           settings.mutable_assignment()->set_max_labels_per_item(3);
         }));
       },
       kInvalid, "settings.assignment.max_labels_per_item: must be >= min_labels_per_item"},
      // projects.proto: ProjectLimits are 0 (the server's default) or a positive limit; the
      // message says ">= 0", so -1 is as wrong as -2.
      {"CreateProjectMaxConfusionCellsMinusOne",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_limits()->set_max_confusion_cells(-1);
         }));
       },
       kInvalid, "settings.limits.max_confusion_cells: must be >= 0"},
      {"CreateProjectNegativeMaxItems",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_limits()->set_max_items(-1);
         }));
       },
       kInvalid, "settings.limits.max_items: must be >= 0"},
      {"CreateProjectNegativeMaxAnnotators",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_limits()->set_max_annotators(-1);
         }));
       },
       kInvalid, "settings.limits.max_annotators: must be >= 0"},
      {"CreateProjectNegativeMaxLabels",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_limits()->set_max_labels(-1);
         }));
       },
       kInvalid, "settings.limits.max_labels: must be >= 0"},
      {"CreateProjectNegativeConfusionSmoothing",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_confusion_smoothing(-0.5);
         }));
       },
       kInvalid, "settings.model.confusion_smoothing"},
      {"CreateProjectNegativeMaxIterations",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_max_iterations(-1);
         }));
       },
       kInvalid, "settings.model.max_iterations: must be in [0, 100000]"},
      {"CreateProjectNegativeTolerance",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_tolerance(-0.1);
         }));
       },
       kInvalid, "settings.model.tolerance: must be in [0, 1)"},
      {"CreateProjectNegativeRefitFraction",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_model()->set_refit_new_label_fraction(-1);
         }));
       },
       kInvalid, "settings.model.refit_new_label_fraction"},
      {"CreateProjectNaNConfidenceTarget",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_assignment()->set_confidence_target(std::nan(""));
         }));
       },
       kInvalid, "settings.assignment.confidence_target: must be in [0, 1]"},
      {"CreateProjectConfidenceTargetAboveOne",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_assignment()->set_confidence_target(1.5);
         }));
       },
       kInvalid, "settings.assignment.confidence_target: must be in [0, 1]"},
      {"CreateProjectNegativeLeaseSeconds",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_assignment()->set_lease_seconds(-60);
         }));
       },
       kInvalid, "settings.assignment.lease_seconds"},
      {"CreateProjectUnknownAssignmentPolicy",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_assignment()->set_policy(static_cast<v1::AssignmentPolicy>(99));
         }));
       },
       kInvalid, "settings.assignment.policy: unknown policy"},
      {"CreateProjectNegativeGoldItemsForNewAnnotators",
       [](const Stubs& s) {
         return CreateProject(s, NewProjectWithSettings([](v1::ProjectSettings& settings) {
           settings.mutable_assignment()->set_gold_items_for_new_annotators(-1);
         }));
       },
       kInvalid, "settings.assignment.gold_items_for_new_annotators: must be >= 0"},
      {"CreateProjectNameTaken",
       [](const Stubs& s) { return CreateProject(s, NewProject(kProject)); },
       C::ALREADY_EXISTS, "project \"bad-input\" already exists"},

      // GetProject / UpdateProjectSettings.
      {"GetProjectUnknown", [](const Stubs& s) { return GetProject(s, "no-such-project"); },
       C::NOT_FOUND, "project \"no-such-project\" does not exist"},
      {"GetProjectBadName", [](const Stubs& s) { return GetProject(s, "a;drop table"); },
       kInvalid, "project: name may only contain"},
      {"UpdateSettingsNegativeConfidenceTarget",
       [](const Stubs& s) {
         v1::ProjectSettings settings;
         settings.mutable_assignment()->set_confidence_target(-0.1);
         return UpdateSettings(s, kProject, settings);
       },
       kInvalid, "settings.assignment.confidence_target"},
      // projects.proto: a change of model.method to a dense one (lia: K² cells per annotator)
      // that the project's annotators already pass is refused. One annotator × 2² = 4 > 1.
      {"UpdateSettingsToADenseMethodPastMaxConfusionCells",
       [](const Stubs& s) {
         const v1::Project p = NewProject();
         if (Outcome created = CreateProject(s, p); created.code != grpc::StatusCode::OK) {
           return created;
         }
         v1::AnnotationBatch batch;
         batch.set_batch_id(1);
         batch.set_project(p.name());
         v1::Annotation* a = batch.add_annotations();
         a->set_item("i1");
         a->set_annotator("w1");
         a->set_label(1);
         if (Outcome submitted = Submit(s, {batch}); submitted.code != grpc::StatusCode::OK) {
           return submitted;
         }
         v1::ProjectSettings settings;
         settings.mutable_model()->set_method(v1::TRUTH_METHOD_LIA);
         settings.mutable_limits()->set_max_confusion_cells(1);
         return UpdateSettings(s, p.name(), settings);
       },
       C::RESOURCE_EXHAUSTED, "project limit max_confusion_cells (1"},
      {"UpdateSettingsUnknownProject",
       [](const Stubs& s) { return UpdateSettings(s, "no-such-project", {}); }, C::NOT_FOUND,
       "project \"no-such-project\" does not exist"},

      // ProjectService.AddItems / AddAnnotators.
      {"AddItemsEmptyId", [](const Stubs& s) {
         return AddItems(s, OneItem([](v1::Item& item) { item.set_id(""); }));
       },
       kInvalid, "items[0].id: must not be empty"},
      {"AddItemsIdTooLong", [](const Stubs& s) {
         v1::AddItemsRequest request = Items(2);
         request.mutable_items(1)->set_id(std::string(257, 'i'));
         return AddItems(s, request);
       },
       kInvalid, "items[1].id: is 257 bytes, more than the limit of 256"},
      {"AddItemsIdWithATab", [](const Stubs& s) {
         return AddItems(s, OneItem([](v1::Item& item) { item.set_id("item\tone"); }));
       },
       kInvalid, "items[0].id: contains byte 0x9 (a control character) at offset 4"},
      {"AddItemsIdWithDel", [](const Stubs& s) {
         return AddItems(s, OneItem([](v1::Item& item) { item.set_id("\xc3\xa9t\xc3\xa9\x7f"); }));
       },
       kInvalid, "items[0].id: contains byte 0x7f (a control character) at offset 5"},
      {"AddItemsIdWithNul", [](const Stubs& s) {
         return AddItems(s, OneItem([](v1::Item& item) { item.set_id(std::string("a\0b", 3)); }));
       },
       kInvalid, "items[0].id: contains byte 0x0"},
      {"AddItemsTooFewFeatures",
       [](const Stubs& s) { return AddItems(s, ItemWithFeatures({1, 2, 3})); }, kInvalid,
       "items[0].features: has 3 values; the project's dimension is 4"},
      {"AddItemsTooManyFeatures",
       [](const Stubs& s) { return AddItems(s, ItemWithFeatures({1, 2, 3, 4, 5})); }, kInvalid,
       "items[0].features: has 5 values"},
      {"AddItemsNaNFeature",
       [](const Stubs& s) { return AddItems(s, ItemWithFeatures({0, 0, kNaN, 0})); }, kInvalid,
       "items[0].features: value 2 is not finite"},
      {"AddItemsInfiniteFeature",
       [](const Stubs& s) { return AddItems(s, ItemWithFeatures({-kInf, 0, 0, 0})); }, kInvalid,
       "items[0].features: value 0 is not finite"},
      {"AddItemsGoldLabelOutOfRange", [](const Stubs& s) {
         return AddItems(s, OneItem([](v1::Item& item) { item.set_gold_label(2); }));
       },
       kInvalid, "items[0].gold_label: 2 out of range [0, 2)"},
      {"AddItemsNegativeGoldLabel", [](const Stubs& s) {
         return AddItems(s, OneItem([](v1::Item& item) { item.set_gold_label(-1); }));
       },
       kInvalid, "items[0].gold_label: -1 out of range"},
      {"AddItemsNaNPriority", [](const Stubs& s) {
         return AddItems(s, OneItem([](v1::Item& item) { item.set_priority(std::nan("")); }));
       },
       kInvalid, "items[0].priority: not finite"},
      {"AddItemsInfinitePriority", [](const Stubs& s) {
         return AddItems(s, OneItem([](v1::Item& item) { item.set_priority(kInf); }));
       },
       kInvalid, "items[0].priority: not finite"},
      {"AddItemsTooMany", [](const Stubs& s) { return AddItems(s, Items(10001)); }, kInvalid,
       "items: 10001 items; the limit is 10000"},
      {"AddItemsUnknownProject",
       [](const Stubs& s) {
         v1::AddItemsRequest request = Items(1);
         request.set_project("no-such-project");
         return AddItems(s, request);
       },
       C::NOT_FOUND, "project \"no-such-project\" does not exist"},
      {"AddItemsMessageOverSixteenMiB",
       [](const Stubs& s) {
         // 5M floats = 20 MB: refused by the server's message size limit before any handler.
         v1::AddItemsRequest request = Items(1);
         request.mutable_items(0)->mutable_features()->Resize(5'000'000, 0.0f);
         return AddItems(s, request);
       },
       C::RESOURCE_EXHAUSTED, "larger than max"},
      {"AddAnnotatorsWrongFeatureDim",
       [](const Stubs& s) {
         v1::AddAnnotatorsRequest request = Annotators(1);
         request.mutable_annotators(0)->add_features(0.5f);
         return AddAnnotators(s, request);
       },
       kInvalid, "annotators[0].features: has 1 values; the project's dimension is 2"},
      {"AddAnnotatorsInfiniteFeature",
       [](const Stubs& s) {
         v1::AddAnnotatorsRequest request = Annotators(1);
         request.mutable_annotators(0)->add_features(0.5f);
         request.mutable_annotators(0)->add_features(kInf);
         return AddAnnotators(s, request);
       },
       kInvalid, "annotators[0].features: value 1 is not finite"},
      {"AddAnnotatorsIdWithTab",
       [](const Stubs& s) {
         v1::AddAnnotatorsRequest request = Annotators(3);
         request.mutable_annotators(2)->set_id("w\t2");
         return AddAnnotators(s, request);
       },
       kInvalid, "annotators[2].id: contains byte 0x9"},
      {"AddAnnotatorsTooMany", [](const Stubs& s) { return AddAnnotators(s, Annotators(10001)); },
       kInvalid, "annotators: 10001 annotators; the limit is 10000"},

      // IngestService.SubmitAnnotations: whole-batch errors and per-annotation rejections.
      {"SubmitLabelOutOfRange",
       [](const Stubs& s) {
         return Submit(s, {OneAnnotation([](v1::Annotation& a) { a.set_label(2); })});
       },
       kInvalid, "annotations[0].label: 2 out of range [0, 2)"},
      {"SubmitNegativeLabel",
       [](const Stubs& s) {
         return Submit(s, {OneAnnotation([](v1::Annotation& a) { a.set_label(-7); })});
       },
       kInvalid, "annotations[0].label: -7 out of range"},
      {"SubmitEmptyItem",
       [](const Stubs& s) {
         return Submit(s, {OneAnnotation([](v1::Annotation& a) { a.set_item(""); })});
       },
       kInvalid, "annotations[0].item: must not be empty"},
      {"SubmitAnnotatorTooLong",
       [](const Stubs& s) {
         return Submit(
             s, {OneAnnotation([](v1::Annotation& a) { a.set_annotator(std::string(300, 'w')); })});
       },
       kInvalid, "annotations[0].annotator: is 300 bytes"},
      {"SubmitClientTimeBeyondYear9999",
       [](const Stubs& s) {
         return Submit(s, {OneAnnotation([](v1::Annotation& a) {
                         a.mutable_client_time()->set_seconds(10'000'000'000'000);
                       })});
       },
       kInvalid, "annotations[0].client_time"},
      {"SubmitClientTimeNegativeNanos",
       [](const Stubs& s) {
         return Submit(s, {OneAnnotation([](v1::Annotation& a) {
                         a.mutable_client_time()->set_seconds(1'700'000'000);
                         a.mutable_client_time()->set_nanos(-1);
                       })});
       },
       kInvalid, "annotations[0].client_time"},
      {"SubmitOversizeBatch", [](const Stubs& s) { return Submit(s, {Batch(10001)}); }, kInvalid,
       "annotations: batch has 10001 annotations; the limit is 10000"},
      {"SubmitFirstBatchWithoutProject",
       [](const Stubs& s) {
         v1::AnnotationBatch batch = Batch(1);
         batch.clear_project();
         return Submit(s, {batch});
       },
       kInvalid, "project: required on the first batch of a stream"},
      {"SubmitUnknownProject",
       [](const Stubs& s) {
         v1::AnnotationBatch batch = Batch(1);
         batch.set_project("no-such-project");
         return Submit(s, {batch});
       },
       C::NOT_FOUND, "project \"no-such-project\" does not exist"},
      {"SubmitBadProjectNameOnLaterBatch",
       [](const Stubs& s) {
         v1::AnnotationBatch second = Batch(1);
         second.set_batch_id(2);
         second.set_project("bad name");
         return Submit(s, {Batch(1), second});
       },
       kInvalid, "project: name may only contain"},

      // TruthService.
      {"GetPosteriorsNoItems", [](const Stubs& s) { return GetPosteriors(s, PosteriorsOf({})); },
       kInvalid, "items: need 1 to 10000 item ids, got 0"},
      {"GetPosteriorsTooManyItems",
       [](const Stubs& s) { return GetPosteriors(s, PosteriorsOf(ManyIds(10001))); }, kInvalid,
       "items: need 1 to 10000 item ids, got 10001"},
      {"GetPosteriorsUnknownItem",
       [](const Stubs& s) { return GetPosteriors(s, PosteriorsOf({"i1", "nope"})); },
       C::NOT_FOUND, "items[1]: item \"nope\" not found"},
      // docs/SECURITY.md: a malformed id is INVALID_ARGUMENT naming its field, as everywhere
      // else, not NOT_FOUND (it cannot name any item).
      {"GetPosteriorsEmptyItemId",
       [](const Stubs& s) { return GetPosteriors(s, PosteriorsOf({"i1", ""})); }, kInvalid,
       "items[1]: must not be empty"},
      {"GetPosteriorsItemIdWithANewline",
       [](const Stubs& s) { return GetPosteriors(s, PosteriorsOf({"a\nb"})); }, kInvalid,
       "items[0]: contains byte 0xa"},
      {"GetPosteriorsOverlongItemId",
       [](const Stubs& s) { return GetPosteriors(s, PosteriorsOf({std::string(257, 'x')})); },
       kInvalid, "items[0]: is 257 bytes"},
      {"GetPosteriorsEmptyProject",
       [](const Stubs& s) {
         v1::GetPosteriorsRequest request = PosteriorsOf({"i1"});
         request.clear_project();
         return GetPosteriors(s, request);
       },
       kInvalid, "project: name must not be empty"},
      {"ListPosteriorsNegativePageSize", [](const Stubs& s) { return ListPosteriors(s, -1, ""); },
       kInvalid, "page_size: must be in [0, 10000]"},
      {"ListPosteriorsHugePageSize",
       [](const Stubs& s) {
         return ListPosteriors(s, std::numeric_limits<int32_t>::max(), "");
       },
       kInvalid, "page_size: must be in [0, 10000]"},
      {"ListPosteriorsGarbagePageToken", [](const Stubs& s) { return ListPosteriors(s, 10, "abc"); },
       kInvalid, "page_token: not a token this server issued"},
      {"ListPosteriorsNegativePageToken", [](const Stubs& s) { return ListPosteriors(s, 10, "-5"); },
       kInvalid, "page_token"},
      // Tokens are issued as decimal digits only: a sign or white space was never issued.
      {"ListPosteriorsSignedPageToken", [](const Stubs& s) { return ListPosteriors(s, 10, "+0"); },
       kInvalid, "page_token: not a token this server issued"},
      {"ListPosteriorsSpacedPageToken", [](const Stubs& s) { return ListPosteriors(s, 10, " 0"); },
       kInvalid, "page_token: not a token this server issued"},
      {"ListPosteriorsOverflowingPageToken",
       [](const Stubs& s) { return ListPosteriors(s, 10, "99999999999999999999"); }, kInvalid,
       "page_token"},
      {"GetAnnotatorProfilesUnknownAnnotator",
       [](const Stubs& s) {
         v1::GetAnnotatorProfilesRequest request;
         request.set_project(kProject);
         request.add_annotators("w1");
         request.add_annotators("ghost");
         return GetAnnotatorProfiles(s, request);
       },
       C::NOT_FOUND, "annotators[1]: annotator \"ghost\" not found"},
      {"GetAnnotatorProfilesAnnotatorIdWithASpace",
       [](const Stubs& s) {
         v1::GetAnnotatorProfilesRequest request;
         request.set_project(kProject);
         request.add_annotators("w1");
         request.add_annotators("a\x1f b");
         return GetAnnotatorProfiles(s, request);
       },
       kInvalid, "annotators[1]: contains byte 0x1f"},
      {"GetAnnotatorProfilesTooMany",
       [](const Stubs& s) {
         v1::GetAnnotatorProfilesRequest request;
         request.set_project(kProject);
         for (std::string& id : ManyIds(10001)) request.add_annotators(std::move(id));
         return GetAnnotatorProfiles(s, request);
       },
       kInvalid, "annotators: at most 10000 ids"},
      // truth.proto: page_size 1 to 10,000 (0 = 1,000), and page_token only without ids.
      {"GetAnnotatorProfilesNegativePageSize",
       [](const Stubs& s) {
         v1::GetAnnotatorProfilesRequest request;
         request.set_project(kProject);
         request.set_page_size(-1);
         return GetAnnotatorProfiles(s, request);
       },
       kInvalid, "page_size: must be in [0, 10000]"},
      {"GetAnnotatorProfilesPageSizeTooLarge",
       [](const Stubs& s) {
         v1::GetAnnotatorProfilesRequest request;
         request.set_project(kProject);
         request.set_page_size(10001);
         return GetAnnotatorProfiles(s, request);
       },
       kInvalid, "page_size: must be in [0, 10000]"},
      {"GetAnnotatorProfilesPageTokenWithIds",
       [](const Stubs& s) {
         v1::GetAnnotatorProfilesRequest request;
         request.set_project(kProject);
         request.add_annotators("w1");
         request.set_page_token("1");
         return GetAnnotatorProfiles(s, request);
       },
       kInvalid, "page_token: only without annotator ids"},
      {"GetAnnotatorProfilesSignedPageToken",
       [](const Stubs& s) {
         v1::GetAnnotatorProfilesRequest request;
         request.set_project(kProject);
         request.set_page_token("+1");
         return GetAnnotatorProfiles(s, request);
       },
       kInvalid, "page_token: not a token this server issued"},
      {"GetAnnotatorProfilesUnknownConfusionDetail",
       [](const Stubs& s) {
         v1::GetAnnotatorProfilesRequest request;
         request.set_project(kProject);
         request.set_confusion_detail(static_cast<v1::ConfusionDetail>(7));
         return GetAnnotatorProfiles(s, request);
       },
       kInvalid, "confusion_detail: unknown value"},

      // ModelService.
      {"GetModelStatusNameTooLong",
       [](const Stubs& s) { return GetModelStatus(s, std::string(200, 'm')); }, kInvalid,
       "project: name is longer than 128 bytes"},
      {"ListModelVersionsNegativeLimit", [](const Stubs& s) { return ListModelVersions(s, -1); },
       kInvalid, "limit: must be in [0, 1000]"},
      {"ListModelVersionsLimitTooLarge", [](const Stubs& s) { return ListModelVersions(s, 1001); },
       kInvalid, "limit: must be in [0, 1000]"},
      {"TrainModelUnknownProject", [](const Stubs& s) { return TrainModel(s, "no-such-project"); },
       C::NOT_FOUND, "project \"no-such-project\" does not exist"},
      // models.proto: TrainModel on a project without labels is FAILED_PRECONDITION.
      {"TrainModelWithoutLabels",
       [](const Stubs& s) {
         const v1::Project p = NewProject();
         if (Outcome created = CreateProject(s, p); created.code != grpc::StatusCode::OK) {
           return created;
         }
         return TrainModel(s, p.name());
       },
       C::FAILED_PRECONDITION, "has no labels to fit yet"},

      // AssignmentService.
      {"SuggestItemsKZero", [](const Stubs& s) { return SuggestItems(s, SuggestItemsFor("w1", 0)); },
       kInvalid, "k: 0 not in [1, 1000]"},
      {"SuggestItemsKNegative",
       [](const Stubs& s) { return SuggestItems(s, SuggestItemsFor("w1", -5)); }, kInvalid,
       "k: -5 not in [1, 1000]"},
      {"SuggestItemsKTooLarge",
       [](const Stubs& s) { return SuggestItems(s, SuggestItemsFor("w1", 1001)); }, kInvalid,
       "k: 1001 not in [1, 1000]"},
      {"SuggestItemsEmptyAnnotator",
       [](const Stubs& s) { return SuggestItems(s, SuggestItemsFor("", 5)); }, kInvalid,
       "annotator: must not be empty"},
      {"SuggestItemsTooManyCandidates",
       [](const Stubs& s) {
         v1::SuggestItemsRequest request = SuggestItemsFor("w1", 5);
         for (std::string& id : ManyIds(100001)) request.add_candidate_items(std::move(id));
         return SuggestItems(s, request);
       },
       kInvalid, "candidate_items: at most 100000 ids"},
      {"SuggestItemsUnknownProject",
       [](const Stubs& s) {
         v1::SuggestItemsRequest request = SuggestItemsFor("w1", 5);
         request.set_project("no-such-project");
         return SuggestItems(s, request);
       },
       C::NOT_FOUND, "project \"no-such-project\" does not exist"},
      {"SuggestAnnotatorsEmptyItem",
       [](const Stubs& s) { return SuggestAnnotators(s, SuggestAnnotatorsFor("", 3)); }, kInvalid,
       "item: must not be empty"},
      {"SuggestAnnotatorsUnknownItem",
       [](const Stubs& s) { return SuggestAnnotators(s, SuggestAnnotatorsFor("ghost", 3)); },
       C::NOT_FOUND, "item \"ghost\" not found in project bad-input"},
      {"SuggestAnnotatorsUnknownProject",
       [](const Stubs& s) {
         v1::SuggestAnnotatorsRequest request = SuggestAnnotatorsFor("i1", 3);
         request.set_project("no-such-project");
         return SuggestAnnotators(s, request);
       },
       C::NOT_FOUND, "project \"no-such-project\" does not exist"},
      {"SuggestAnnotatorsKTooLarge",
       [](const Stubs& s) { return SuggestAnnotators(s, SuggestAnnotatorsFor("i1", 5000)); },
       kInvalid, "k: 5000 not in [1, 1000]"},
      {"SuggestAnnotatorsBadCandidate",
       [](const Stubs& s) {
         v1::SuggestAnnotatorsRequest request = SuggestAnnotatorsFor("i1", 3);
         request.add_candidates("w1");
         request.add_candidates("has\ttab");
         return SuggestAnnotators(s, request);
       },
       kInvalid, "candidates[1]: contains byte 0x9"},
      // KeyService (authentication is off here, so every call is an admin's).
      {"CreateKeyWithoutRole",
       [](const Stubs& s) { return CreateKey(s, v1::CreateKeyRequest()); }, kInvalid,
       "role: required"},
      {"CreateKeyForAnInvalidProjectName",
       [](const Stubs& s) {
         v1::CreateKeyRequest request;
         request.set_role(v1::ROLE_READER);
         request.add_projects("no spaces allowed");
         return CreateKey(s, request);
       },
       kInvalid, "projects[0]: name may only contain"},
      {"CreateKeyWithALongName",
       [](const Stubs& s) {
         v1::CreateKeyRequest request;
         request.set_role(v1::ROLE_READER);
         request.set_name(std::string(257, 'n'));
         return CreateKey(s, request);
       },
       kInvalid, "name: longer than 256 bytes"},
      {"RevokeKeyWithAnIdOf65Characters",
       [](const Stubs& s) { return RevokeKey(s, std::string(65, 'a')); }, kInvalid,
       "key_id: required, at most 64 characters"},
      {"RevokeKeyWithoutId", [](const Stubs& s) { return RevokeKey(s, ""); }, kInvalid,
       "key_id: required"},
      {"RevokeUnknownKey", [](const Stubs& s) { return RevokeKey(s, "0123456789abcdef"); },
       C::NOT_FOUND, "no API key 0123456789abcdef"},
  };
}

// One PostgreSQL and one server per test suite: rows are refused, so they do not disturb each
// other.
class ServerFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pg_ = TestPostgres::Start("verity-bad-input").release();
    ASSERT_NE(pg_, nullptr);

    server::VerityServer::Options options = TestServerOptions(pg_->url(), 2);
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials());
    stubs_ = new Stubs{v1::ProjectService::NewStub(channel), v1::IngestService::NewStub(channel),
                       v1::TruthService::NewStub(channel), v1::ModelService::NewStub(channel),
                       v1::AssignmentService::NewStub(channel), v1::KeyService::NewStub(channel)};

    v1::Project project = NewProject(kProject);
    project.set_item_feature_dim(kItemDim);
    project.set_annotator_feature_dim(kAnnotatorDim);
    Outcome created = CreateProject(*stubs_, project);
    ASSERT_EQ(created.code, grpc::StatusCode::OK) << created.message;
    v1::AnnotationBatch seed = Batch(0);
    v1::Annotation* a = seed.add_annotations();
    a->set_item("i1");
    a->set_annotator("w1");
    a->set_label(1);
    Outcome seeded = Submit(*stubs_, {seed});
    ASSERT_EQ(seeded.code, grpc::StatusCode::OK) << seeded.message;
  }

  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Shutdown();
    delete stubs_;
    stubs_ = nullptr;
    delete server_;
    server_ = nullptr;
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override { ASSERT_NE(stubs_, nullptr) << "the server did not start"; }

  static const Stubs& stubs() { return *stubs_; }

 private:
  static TestPostgres* pg_;
  static server::VerityServer* server_;
  static Stubs* stubs_;
};

TestPostgres* ServerFixture::pg_ = nullptr;
server::VerityServer* ServerFixture::server_ = nullptr;
Stubs* ServerFixture::stubs_ = nullptr;

class BadInputTest : public ServerFixture, public ::testing::WithParamInterface<BadInput> {};
class RefusedWriteTest : public ServerFixture {};

TEST_P(BadInputTest, IsRefusedWithTheExpectedCodeNamingTheField) {
  const BadInput& row = GetParam();
  Outcome outcome = row.call(stubs());
  EXPECT_EQ(outcome.code, row.code) << "message: " << outcome.message;
  EXPECT_THAT(outcome.message, HasSubstr(row.message));
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputTest, ::testing::ValuesIn(BadInputs()),
                         [](const ::testing::TestParamInfo<BadInput>& info) {
                           return info.param.name;
                         });

TEST(BadInputTableTest, HasAtLeastThirtyRowsWithUniqueNames) {
  std::vector<BadInput> rows = BadInputs();
  EXPECT_GE(rows.size(), 30u);
  std::set<std::string> names;
  for (const BadInput& row : rows) EXPECT_TRUE(names.insert(row.name).second) << row.name;
}

// The other side of the table: settings at the inclusive ends of their documented ranges are
// accepted. projects.proto: confidence_target is in [0, 1]; a project's name is 1-128
// characters of [A-Za-z0-9._-]; max_labels_per_item is a cap and min_labels_per_item a floor,
// so both at 3 asks for exactly 3 labels per item (the error for max below min says
// "must be >= min_labels_per_item"); common.proto: kos is for binary tasks.
TEST_F(RefusedWriteTest, SettingsAtTheEndsOfTheirRangesAreAccepted) {
  auto accepted = [&](const std::string& what, const v1::Project& project) {
    Outcome created = CreateProject(stubs(), project);
    EXPECT_EQ(created.code, grpc::StatusCode::OK) << what << ": " << created.message;
  };
  accepted("min = max labels per item",
           NewProjectWithSettings([](v1::ProjectSettings& settings) {
             settings.mutable_assignment()->set_min_labels_per_item(3);
             settings.mutable_assignment()->set_max_labels_per_item(3);
           }));
  accepted("confidence_target 1", NewProjectWithSettings([](v1::ProjectSettings& settings) {
             settings.mutable_assignment()->set_confidence_target(1.0);
           }));
  accepted("kos on two classes", NewProjectWithSettings([](v1::ProjectSettings& settings) {
             settings.mutable_model()->set_method(v1::TRUTH_METHOD_KOS);
           }));
  accepted("dots and underscores", NewProject("a.b_C-9"));
  accepted("128 characters", NewProject(std::string(128, 'n')));
}

// The per-call limits are inclusive (validation.h, kMaxItemsPerCall = 10,000; the table above
// refuses 10,001): AddItems, AddAnnotators, a batch and GetPosteriors of exactly 10,000 are
// accepted, in a project of their own.
TEST_F(RefusedWriteTest, CallsOfExactlyTheLimitAreAccepted) {
  const v1::Project project = NewProject();
  ASSERT_EQ(CreateProject(stubs(), project).code, grpc::StatusCode::OK);
  v1::AddItemsRequest items = Items(10000);
  items.set_project(project.name());
  Outcome outcome = AddItems(stubs(), items);
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;
  v1::AddAnnotatorsRequest annotators = Annotators(10000);
  annotators.set_project(project.name());
  outcome = AddAnnotators(stubs(), annotators);
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;
  v1::AnnotationBatch batch = Batch(10000);
  batch.set_project(project.name());
  outcome = Submit(stubs(), {batch});
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;
  std::vector<std::string> ids;
  for (int i = 0; i < 10000; ++i) ids.push_back(absl::StrCat("item-", i));
  v1::GetPosteriorsRequest posteriors = PosteriorsOf(ids);
  posteriors.set_project(project.name());
  outcome = GetPosteriors(stubs(), posteriors);
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;
}

// The other per-call limits are inclusive too (assignment.proto, truth.proto, models.proto,
// keys.proto; the table above refuses one more): SuggestItems k = 1,000 with 100,000
// candidate items, SuggestAnnotators k = 1,000 with 10,000 candidates, GetAnnotatorProfiles
// page_size = 10,000, ListModelVersions limit = 1,000 and a key name of 256 bytes.
TEST_F(RefusedWriteTest, OtherLimitsAtTheirTopAreAccepted) {
  const v1::Project project = NewProject();
  ASSERT_EQ(CreateProject(stubs(), project).code, grpc::StatusCode::OK);
  v1::AddItemsRequest items = Items(3);
  items.set_project(project.name());
  ASSERT_EQ(AddItems(stubs(), items).code, grpc::StatusCode::OK);

  v1::SuggestItemsRequest suggest_items;
  suggest_items.set_project(project.name());
  suggest_items.set_annotator("w-top");
  suggest_items.set_k(1000);
  for (int i = 0; i < 100000; ++i) suggest_items.add_candidate_items(absl::StrCat("item-", i));
  Outcome outcome = SuggestItems(stubs(), suggest_items);
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;

  v1::SuggestAnnotatorsRequest suggest_annotators;
  suggest_annotators.set_project(project.name());
  suggest_annotators.set_item("item-0");
  suggest_annotators.set_k(1000);
  for (int a = 0; a < 10000; ++a) suggest_annotators.add_candidates(absl::StrCat("w-", a));
  outcome = SuggestAnnotators(stubs(), suggest_annotators);
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;

  v1::GetAnnotatorProfilesRequest profiles;
  profiles.set_project(project.name());
  profiles.set_page_size(10000);
  outcome = GetAnnotatorProfiles(stubs(), profiles);
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;

  outcome = ListModelVersions(stubs(), 1000);
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;

  v1::CreateKeyRequest key;
  key.set_name(std::string(256, 'n'));
  key.set_role(v1::ROLE_READER);
  outcome = CreateKey(stubs(), key);
  EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;
}

// A refused AddItems writes nothing, not even the valid items before the bad one.
TEST_F(RefusedWriteTest, RefusedAddItemsWritesNoItem) {
  v1::AddItemsRequest request = Items(2);
  request.mutable_items(0)->set_id("written-only-if-all-valid");
  request.mutable_items(1)->set_gold_label(9);
  Outcome outcome = AddItems(stubs(), request);
  ASSERT_EQ(outcome.code, grpc::StatusCode::INVALID_ARGUMENT) << outcome.message;
  EXPECT_THAT(outcome.message, HasSubstr("items[1].gold_label"));
  Outcome lookup = GetPosteriors(stubs(), PosteriorsOf({"written-only-if-all-valid"}));
  EXPECT_EQ(lookup.code, grpc::StatusCode::NOT_FOUND) << lookup.message;
}

// A rejected annotation does not take the rest of its batch (or anyone else's) down: the bad
// client_time used to reach PostgreSQL and fail the whole group commit ("timestamp out of
// range"), and with it every batch committed in the same group.
TEST_F(RefusedWriteTest, RejectedAnnotationLeavesTheRestOfTheBatchWritten) {
  v1::AnnotationBatch batch = Batch(0);
  v1::Annotation* good = batch.add_annotations();
  good->set_item("kept-item");
  good->set_annotator("w2");
  good->set_label(0);
  good->mutable_client_time()->set_seconds(1'700'000'000);
  v1::Annotation* bad = batch.add_annotations();
  *bad = *good;
  bad->set_item("dropped-item");
  bad->mutable_client_time()->set_seconds(-100'000'000'000'000);

  v1::BatchAck ack;
  ASSERT_TRUE(SubmitOne(stubs(), batch, &ack));
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 1);
  EXPECT_EQ(ack.rejected(), 1);
  ASSERT_EQ(ack.rejections_size(), 1);
  EXPECT_EQ(ack.rejections(0).index(), 1);
  EXPECT_THAT(ack.rejections(0).reason(), HasSubstr("annotations[1].client_time"));
  EXPECT_EQ(GetPosteriors(stubs(), PosteriorsOf({"kept-item"})).code, grpc::StatusCode::OK);
  EXPECT_EQ(GetPosteriors(stubs(), PosteriorsOf({"dropped-item"})).code,
            grpc::StatusCode::NOT_FOUND);
}

// ingest.proto, BatchAck: `rejected` counts every invalid annotation and `rejections` lists
// the first 100 in batch order, so the ack of a batch of 10,000 invalid annotations stays
// small (docs/SECURITY.md); the valid annotations among them are written.
TEST_F(RefusedWriteTest, AnAckListsTheFirstHundredRejectionsAndCountsThemAll) {
  v1::AnnotationBatch batch = Batch(10'000);
  for (int i = 0; i < batch.annotations_size(); ++i) {
    v1::Annotation* a = batch.mutable_annotations(i);
    a->set_item(absl::StrCat("many-rejected-", i));
    if (i % 1000 != 999) a->set_label(7);  // Out of range; every 1,000th stays valid.
  }
  v1::BatchAck ack;
  ASSERT_TRUE(SubmitOne(stubs(), batch, &ack));
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 10);
  EXPECT_EQ(ack.rejected(), 9'990);
  ASSERT_EQ(ack.rejections_size(), 100);
  for (int r = 0; r < ack.rejections_size(); ++r) {
    EXPECT_EQ(ack.rejections(r).index(), r) << r;  // Indices 0..99, all invalid.
    EXPECT_THAT(ack.rejections(r).reason(), HasSubstr(absl::StrCat("annotations[", r, "].label")));
  }
  EXPECT_LT(ack.ByteSizeLong(), 10'000u);
  EXPECT_EQ(GetPosteriors(stubs(), PosteriorsOf({"many-rejected-999"})).code, grpc::StatusCode::OK);
  EXPECT_EQ(GetPosteriors(stubs(), PosteriorsOf({"many-rejected-0"})).code,
            grpc::StatusCode::NOT_FOUND);
}

// truth.proto GetAnnotatorProfilesRequest.annotators: "at most 10,000 (repeats included), each
// answered once (repeats are dropped ...)": exactly 10,000 ids, all the seeded annotator w1, are
// accepted and answered with one profile (the table above refuses 10,001).
TEST_F(RefusedWriteTest, AnnotatorProfilesOfExactlyTheLimitAreAccepted) {
  v1::GetAnnotatorProfilesRequest request;
  request.set_project(kProject);
  request.set_confusion_detail(v1::CONFUSION_DETAIL_NONE);
  for (int i = 0; i < 10000; ++i) request.add_annotators("w1");
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetAnnotatorProfilesResponse response;
  const grpc::Status status = stubs().truth->GetAnnotatorProfiles(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.profiles_size(), 1);
  EXPECT_EQ(response.profiles(0).annotator(), "w1");
  EXPECT_GE(response.profiles(0).num_labels(), 1);  // The seed label, and other tests' own.
  EXPECT_EQ(response.next_page_token(), "");
}

}  // namespace
}  // namespace verity::tests
