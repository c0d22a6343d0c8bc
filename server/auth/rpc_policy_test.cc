#include "server/auth/rpc_policy.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "verity/v1/assignment.pb.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/keys.pb.h"
#include "verity/v1/models.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace verity::server {
namespace {

// Every method of every verity.v1 service, from the compiled descriptors.
std::set<std::string> ServedMethods() {
  std::set<std::string> methods;
  for (const google::protobuf::FileDescriptor* file :
       {v1::SuggestItemsRequest::descriptor()->file(), v1::AnnotationBatch::descriptor()->file(),
        v1::CreateKeyRequest::descriptor()->file(), v1::TrainModelRequest::descriptor()->file(),
        v1::CreateProjectRequest::descriptor()->file(),
        v1::GetPosteriorsRequest::descriptor()->file()}) {
    for (int s = 0; s < file->service_count(); ++s) {
      const google::protobuf::ServiceDescriptor* service = file->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        methods.insert(absl::StrCat("/", service->full_name(), "/", service->method(m)->name()));
      }
    }
  }
  return methods;
}

TEST(RpcPolicyTest, EveryServedMethodHasAPolicyAndNoPolicyNamesAnUnservedMethod) {
  const std::set<std::string> served = ServedMethods();
  EXPECT_EQ(served.size(), 18u);
  for (const std::string& method : served) {
    EXPECT_NE(FindRpcPolicy(method), nullptr) << method << " has no access policy";
    EXPECT_FALSE(IsOpenMethod(method)) << method;
  }
  for (const std::string& method : PolicyMethodNames()) {
    EXPECT_EQ(served.count(method), 1u) << method << " is not a served method";
  }
}

TEST(RpcPolicyTest, ProjectNamingPoliciesReadTheRequestsProject) {
  v1::GetPosteriorsRequest get;
  get.set_project("birds");
  EXPECT_EQ(FindRpcPolicy("/verity.v1.TruthService/GetPosteriors")->project(&get), "birds");
  v1::CreateProjectRequest create;
  create.mutable_project()->set_name("cats");
  EXPECT_EQ(FindRpcPolicy("/verity.v1.ProjectService/CreateProject")->project(&create), "cats");
  v1::AnnotationBatch batch;
  batch.set_project("dogs");
  EXPECT_EQ(FindRpcPolicy("/verity.v1.IngestService/SubmitAnnotations")->project(&batch), "dogs");
  for (const std::string& method : ServedMethods()) {
    const RpcPolicy* policy = FindRpcPolicy(method);
    ASSERT_NE(policy, nullptr);
    EXPECT_EQ(policy->scope == ProjectScope::kNamedInRequest, policy->project != nullptr)
        << method;
  }
}

TEST(RpcPolicyTest, RolesFollowTheDocumentedSplit) {
  EXPECT_EQ(FindRpcPolicy("/verity.v1.TruthService/GetPosteriors")->role, Role::kReader);
  EXPECT_EQ(FindRpcPolicy("/verity.v1.IngestService/SubmitAnnotations")->role, Role::kWriter);
  EXPECT_EQ(FindRpcPolicy("/verity.v1.ProjectService/CreateProject")->role, Role::kAdmin);
  EXPECT_EQ(FindRpcPolicy("/verity.v1.KeyService/RevokeKey")->scope, ProjectScope::kEveryProject);
  EXPECT_EQ(FindRpcPolicy("/verity.v1.Nope/Nothing"), nullptr);
  EXPECT_TRUE(IsOpenMethod("/grpc.health.v1.Health/Check"));
}

// docs/SECURITY.md: "Health and reflection pass without a key" — both reflection versions, the
// health service's streaming Watch too; nothing that merely starts like them.
TEST(RpcPolicyTest, HealthAndReflectionAreOpenAndNothingElse) {
  EXPECT_TRUE(IsOpenMethod("/grpc.health.v1.Health/Watch"));
  EXPECT_TRUE(IsOpenMethod("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"));
  EXPECT_TRUE(IsOpenMethod("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"));
  EXPECT_FALSE(IsOpenMethod("/grpc.health.v1.HealthX/Check"));
  EXPECT_FALSE(IsOpenMethod("/grpc.reflection.v2.ServerReflection/ServerReflectionInfo"));
  EXPECT_FALSE(IsOpenMethod("grpc.health.v1.Health/Check"));
  EXPECT_FALSE(IsOpenMethod(""));
}

// The whole table, written by hand from the documented policy: proto/verity/v1/keys.proto's
// Role comments (reader: GetProject, ListProjects, posteriors, annotator profiles, model status
// and versions, SuggestAnnotators; writer: SubmitAnnotations, AddItems, AddAnnotators,
// SuggestItems, TrainModel; admin: create projects, change their settings, manage keys),
// KeyService's "admin key valid for every project", and rpc_policy.h's scopes (ListProjects is
// filtered by its handler; CreateProject names its project in project.name).
TEST(RpcPolicyTest, EveryMethodHasTheDocumentedRoleAndScope) {
  struct Rule {
    const char* method;
    Role role;
    ProjectScope scope;
  };
  const Rule documented[] = {
      {"/verity.v1.ProjectService/CreateProject", Role::kAdmin, ProjectScope::kNamedInRequest},
      {"/verity.v1.ProjectService/GetProject", Role::kReader, ProjectScope::kNamedInRequest},
      {"/verity.v1.ProjectService/ListProjects", Role::kReader, ProjectScope::kFilteredByHandler},
      {"/verity.v1.ProjectService/UpdateProjectSettings", Role::kAdmin,
       ProjectScope::kNamedInRequest},
      {"/verity.v1.ProjectService/AddItems", Role::kWriter, ProjectScope::kNamedInRequest},
      {"/verity.v1.ProjectService/AddAnnotators", Role::kWriter, ProjectScope::kNamedInRequest},
      {"/verity.v1.IngestService/SubmitAnnotations", Role::kWriter, ProjectScope::kNamedInRequest},
      {"/verity.v1.TruthService/GetPosteriors", Role::kReader, ProjectScope::kNamedInRequest},
      {"/verity.v1.TruthService/ListPosteriors", Role::kReader, ProjectScope::kNamedInRequest},
      {"/verity.v1.TruthService/GetAnnotatorProfiles", Role::kReader,
       ProjectScope::kNamedInRequest},
      {"/verity.v1.ModelService/GetModelStatus", Role::kReader, ProjectScope::kNamedInRequest},
      {"/verity.v1.ModelService/ListModelVersions", Role::kReader, ProjectScope::kNamedInRequest},
      {"/verity.v1.ModelService/TrainModel", Role::kWriter, ProjectScope::kNamedInRequest},
      {"/verity.v1.AssignmentService/SuggestItems", Role::kWriter, ProjectScope::kNamedInRequest},
      {"/verity.v1.AssignmentService/SuggestAnnotators", Role::kReader,
       ProjectScope::kNamedInRequest},
      {"/verity.v1.KeyService/CreateKey", Role::kAdmin, ProjectScope::kEveryProject},
      {"/verity.v1.KeyService/ListKeys", Role::kAdmin, ProjectScope::kEveryProject},
      {"/verity.v1.KeyService/RevokeKey", Role::kAdmin, ProjectScope::kEveryProject},
  };
  std::set<std::string> covered;
  for (const Rule& rule : documented) {
    covered.insert(rule.method);
    const RpcPolicy* policy = FindRpcPolicy(rule.method);
    ASSERT_NE(policy, nullptr) << rule.method;
    EXPECT_EQ(policy->role, rule.role) << rule.method;
    EXPECT_EQ(policy->scope, rule.scope) << rule.method;
  }
  EXPECT_EQ(covered, ServedMethods());
}

// Each project-naming policy reads its own request's project field: a policy reading another
// request type's field would check the wrong project, or none.
TEST(RpcPolicyTest, EveryProjectNamingPolicyReadsItsOwnRequestsProject) {
  v1::GetProjectRequest get_project;
  v1::UpdateProjectSettingsRequest update;
  v1::AddItemsRequest add_items;
  v1::AddAnnotatorsRequest add_annotators;
  v1::ListPosteriorsRequest list_posteriors;
  v1::GetAnnotatorProfilesRequest profiles;
  v1::GetModelStatusRequest status;
  v1::ListModelVersionsRequest versions;
  v1::TrainModelRequest train;
  v1::SuggestItemsRequest suggest_items;
  v1::SuggestAnnotatorsRequest suggest_annotators;
  const std::pair<const char*, google::protobuf::Message*> requests[] = {
      {"/verity.v1.ProjectService/GetProject", &get_project},
      {"/verity.v1.ProjectService/UpdateProjectSettings", &update},
      {"/verity.v1.ProjectService/AddItems", &add_items},
      {"/verity.v1.ProjectService/AddAnnotators", &add_annotators},
      {"/verity.v1.TruthService/ListPosteriors", &list_posteriors},
      {"/verity.v1.TruthService/GetAnnotatorProfiles", &profiles},
      {"/verity.v1.ModelService/GetModelStatus", &status},
      {"/verity.v1.ModelService/ListModelVersions", &versions},
      {"/verity.v1.ModelService/TrainModel", &train},
      {"/verity.v1.AssignmentService/SuggestItems", &suggest_items},
      {"/verity.v1.AssignmentService/SuggestAnnotators", &suggest_annotators},
  };
  for (const auto& [method, request] : requests) {
    const google::protobuf::FieldDescriptor* field =
        request->GetDescriptor()->FindFieldByName("project");
    ASSERT_NE(field, nullptr) << method;
    request->GetReflection()->SetString(request, field, absl::StrCat("p-", method));
    const RpcPolicy* policy = FindRpcPolicy(method);
    ASSERT_NE(policy, nullptr) << method;
    ASSERT_NE(policy->project, nullptr) << method;
    EXPECT_EQ(policy->project(request), absl::StrCat("p-", method));
  }
}

}  // namespace
}  // namespace verity::server
