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

}  // namespace
}  // namespace verity::server
