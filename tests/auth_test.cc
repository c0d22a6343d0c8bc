// The authorization matrix: every RPC of every verity.v1 service, called over a real gRPC
// channel against a real server (authentication on) and PostgreSQL, with no key, a wrong key,
// a reader, a writer and an admin key scoped to one project, and an admin key of every project,
// each on the key's own project and on another. Each call must end with the code the documented
// policy gives (proto/verity/v1/keys.proto's Role comments, README.md's key section), written
// out by hand below (kDocumentedPolicy): nothing here is read from the server's own table.
// Calls that are refused must leave no trace.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/verity_client.h"
#include "pqxx/pqxx"
#include "server/testing/http_get.h"
#include "server/verity_server.h"
#include "tests/health_check.h"
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

constexpr char kProject[] = "alpha";
constexpr char kOtherProject[] = "beta";
// Names a CreateProject call may give a new project: those in the scoped keys' project lists
// (the keys' own), and those outside them.
constexpr char kOwnNewProjectPrefix[] = "alpha-own-new-";
constexpr int kOwnNewProjects = 8;
constexpr char kOtherNewProjectPrefix[] = "beta-other-new-";

// Who calls, as the matrix's columns. Reader, writer and scoped admin hold keys scoped to
// kProject (and the kOwnNewProjects names); kAdmin is the bootstrap key, valid everywhere;
// kOtherProjectAdmin is scoped to kOtherProject only.
enum class Caller {
  kNoKey,
  kWrongKey,
  kReader,
  kWriter,
  kScopedAdmin,
  kAdmin,
  kOtherProjectAdmin
};
constexpr Caller kEveryCaller[] = {Caller::kNoKey,       Caller::kWrongKey, Caller::kReader,
                                   Caller::kWriter,      Caller::kScopedAdmin, Caller::kAdmin,
                                   Caller::kOtherProjectAdmin};

// Which project a call names: the scoped keys' own (kProject), or another (kOtherProject).
enum class Target { kOwnProject, kOtherProject };

// The documented policy, by hand. The role each RPC needs, and what it scopes by: the project
// the request names, no project at all (KeyService: a key valid for every project is needed),
// or none with the answer filtered (ListProjects).
enum class NeededRole { kReader = 1, kWriter = 2, kAdmin = 3 };
enum class Scope { kNamedProject, kEveryProjectKey, kFiltered };
struct DocumentedRule {
  const char* method;
  NeededRole role;
  Scope scope;
};
constexpr DocumentedRule kDocumentedPolicy[] = {
    {"/verity.v1.ProjectService/CreateProject", NeededRole::kAdmin, Scope::kNamedProject},
    {"/verity.v1.ProjectService/GetProject", NeededRole::kReader, Scope::kNamedProject},
    {"/verity.v1.ProjectService/ListProjects", NeededRole::kReader, Scope::kFiltered},
    {"/verity.v1.ProjectService/UpdateProjectSettings", NeededRole::kAdmin, Scope::kNamedProject},
    {"/verity.v1.ProjectService/AddItems", NeededRole::kWriter, Scope::kNamedProject},
    {"/verity.v1.ProjectService/AddAnnotators", NeededRole::kWriter, Scope::kNamedProject},
    {"/verity.v1.IngestService/SubmitAnnotations", NeededRole::kWriter, Scope::kNamedProject},
    {"/verity.v1.TruthService/GetPosteriors", NeededRole::kReader, Scope::kNamedProject},
    {"/verity.v1.TruthService/ListPosteriors", NeededRole::kReader, Scope::kNamedProject},
    {"/verity.v1.TruthService/GetAnnotatorProfiles", NeededRole::kReader, Scope::kNamedProject},
    {"/verity.v1.ModelService/GetModelStatus", NeededRole::kReader, Scope::kNamedProject},
    {"/verity.v1.ModelService/ListModelVersions", NeededRole::kReader, Scope::kNamedProject},
    {"/verity.v1.ModelService/TrainModel", NeededRole::kWriter, Scope::kNamedProject},
    {"/verity.v1.AssignmentService/SuggestItems", NeededRole::kWriter, Scope::kNamedProject},
    {"/verity.v1.AssignmentService/SuggestAnnotators", NeededRole::kReader, Scope::kNamedProject},
    {"/verity.v1.KeyService/CreateKey", NeededRole::kAdmin, Scope::kEveryProjectKey},
    {"/verity.v1.KeyService/ListKeys", NeededRole::kAdmin, Scope::kEveryProjectKey},
    {"/verity.v1.KeyService/RevokeKey", NeededRole::kAdmin, Scope::kEveryProjectKey},
};

std::string CallerName(Caller caller) {
  switch (caller) {
    case Caller::kNoKey: return "no key";
    case Caller::kWrongKey: return "wrong key";
    case Caller::kReader: return "reader";
    case Caller::kWriter: return "writer";
    case Caller::kScopedAdmin: return "admin of the project";
    case Caller::kAdmin: return "admin of every project";
    case Caller::kOtherProjectAdmin: return "other project's admin";
  }
  return "?";
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string TargetName(Target target) {
  return target == Target::kOwnProject ? "its own project" : "another project";
}

// Calls one RPC with an API key ("" = none) on a target project; returns its status. For
// SubmitAnnotations, a batch refused in its ack (error_code) comes back as that code.
using RpcCall = std::function<grpc::Status(const std::string& key, Target target)>;

class AuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    postgres_ = TestPostgres::Start("verity-auth").release();
    ASSERT_NE(postgres_, nullptr);
    admin_key_file_ = new std::string(postgres_->dir() + "/admin.key");
    server_ = StartServer().release();
    ASSERT_NE(server_, nullptr);
    channel_ = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
    keys_ = new std::map<Caller, std::string>();
    (*keys_)[Caller::kAdmin] = ReadFirstLine(*admin_key_file_);
    ASSERT_TRUE(absl::StartsWith((*keys_)[Caller::kAdmin], "vk_"));

    // The projects, a label in the project, and the keys of the other columns.
    for (const char* name : {kProject, kOtherProject}) {
      v1::CreateProjectRequest create;
      create.mutable_project()->set_name(name);
      create.mutable_project()->add_classes("no");
      create.mutable_project()->add_classes("yes");
      v1::CreateProjectResponse created;
      grpc::ClientContext context;
      Authorize(context, (*keys_)[Caller::kAdmin]);
      ASSERT_TRUE(v1::ProjectService::NewStub(*channel_)->CreateProject(&context, create, &created)
                      .ok());
    }
    std::vector<std::string> own = {kProject};
    for (int i = 0; i < kOwnNewProjects; ++i) own.push_back(absl::StrCat(kOwnNewProjectPrefix, i));
    (*keys_)[Caller::kReader] = CreateKey(v1::ROLE_READER, own);
    (*keys_)[Caller::kWriter] = CreateKey(v1::ROLE_WRITER, own);
    (*keys_)[Caller::kScopedAdmin] = CreateKey(v1::ROLE_ADMIN, own);
    (*keys_)[Caller::kOtherProjectAdmin] = CreateKey(v1::ROLE_ADMIN, {kOtherProject});
    // The reader's id with another secret.
    std::string wrong = (*keys_)[Caller::kReader];
    wrong.back() = wrong.back() == '0' ? '1' : '0';
    (*keys_)[Caller::kWrongKey] = wrong;
    const std::string victim = CreateKey(v1::ROLE_READER, {});
    victim_key_id_ = new std::string(victim.substr(3, 16));
    for (const char* project : {kProject, kOtherProject}) {
      v1::BatchAck ack;
      ASSERT_TRUE(Submit((*keys_)[Caller::kAdmin], "seed", &ack, project).ok());
      ASSERT_EQ(ack.accepted(), 1);
    }
  }

  static void TearDownTestSuite() {
    delete channel_;
    if (server_ != nullptr) server_->Shutdown();
    delete server_;
    delete postgres_;
  }

  // A server of the suite's database with authentication on and no background refits; tests
  // that start one of their own change what they need.
  static server::VerityServer::Options ServerOptions() {
    server::VerityServer::Options options = TestServerOptions(postgres_->url(), 2);
    options.auth.enabled = true;
    options.auth.admin_key_file = *admin_key_file_;
    return options;
  }

  static std::unique_ptr<server::VerityServer> StartServer() {
    server::VerityServer::Options options = ServerOptions();
    options.pool_size = 4;
    auto started = server::VerityServer::Start(options);
    EXPECT_TRUE(started.ok()) << started.status();
    return started.ok() ? *std::move(started) : nullptr;
  }

  static void Authorize(grpc::ClientContext& context, const std::string& key) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
  }

  static std::string CreateKey(v1::Role role, std::vector<std::string> projects) {
    v1::CreateKeyRequest request;
    request.set_role(role);
    request.set_name("auth_test");
    for (const std::string& p : projects) request.add_projects(p);
    v1::CreateKeyResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    grpc::Status status = v1::KeyService::NewStub(*channel_)->CreateKey(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.secret_key();
  }

  // On a server with --max_calls_per_key=1: `key` submits a label to `item` (so that the
  // project's fit is not current), then its TrainModel is held inside the fit while
  // `while_held` runs against the server's channel; afterwards the fit ends, TrainModel
  // succeeds, and the key's next call is served.
  static void WhileAKeysOnlyCallIsHeld(
      const std::string& key, const std::string& item,
      const std::function<void(std::shared_ptr<grpc::Channel>)>& while_held) {
    v1::BatchAck seeded;
    ASSERT_TRUE(Submit(key, item, &seeded).ok());
    absl::Mutex mu;
    bool fit_started = false;
    bool release_fit = false;
    server::VerityServer::Options options = ServerOptions();
    options.max_calls_per_key = 1;
    options.training.before_fit_for_testing = [&](const server::LiveProject&) {
      absl::MutexLock lock(&mu);
      fit_started = true;
      mu.Await(absl::Condition(&release_fit));
    };
    auto limited = server::VerityServer::Start(options);
    ASSERT_TRUE(limited.ok()) << limited.status();
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*limited)->port()),
                                       grpc::InsecureChannelCredentials());
    grpc::Status train_status;
    std::thread train([&] {
      v1::TrainModelRequest request;
      request.set_project(kProject);
      v1::TrainModelResponse response;
      grpc::ClientContext context;
      Authorize(context, key);
      train_status = v1::ModelService::NewStub(channel)->TrainModel(&context, request, &response);
    });
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&fit_started));
    }
    while_held(channel);
    {
      absl::MutexLock lock(&mu);
      release_fit = true;
    }
    train.join();
    EXPECT_TRUE(train_status.ok()) << train_status.error_message();
    const grpc::Status after = GetOwnProject(channel, key);
    EXPECT_TRUE(after.ok()) << after.error_message();
    (*limited)->Shutdown();
  }

  // GetProject(kProject) with `key` over `channel`.
  static grpc::Status GetOwnProject(const std::shared_ptr<grpc::Channel>& channel,
                                    const std::string& key) {
    v1::GetProjectRequest request;
    request.set_project(kProject);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, key);
    return v1::ProjectService::NewStub(channel)->GetProject(&context, request, &response);
  }

  // Revokes `key` (its text) through KeyService with the admin key; the response's key record.
  static grpc::Status Revoke(const std::string& key, v1::RevokeKeyResponse* revoked) {
    v1::RevokeKeyRequest request;
    request.set_key_id(key.substr(3, 16));
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    return v1::KeyService::NewStub(*channel_)->RevokeKey(&context, request, revoked);
  }

  // Sends a batch of one label on an open stream and reads its ack; false if the stream ended.
  static bool SendOne(grpc::ClientReaderWriter<v1::AnnotationBatch, v1::BatchAck>& stream,
                      uint64_t id, const std::string& annotator, v1::BatchAck* ack) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(id);
    batch.set_project(kProject);
    v1::Annotation* a = batch.add_annotations();
    a->set_item(absl::StrCat(annotator, "-", id));
    a->set_annotator(annotator);
    a->set_label(1);
    return stream.Write(batch) && stream.Read(ack);
  }

  // One batch of one label by `annotator` on `project`, over a fresh stream.
  static grpc::Status Submit(const std::string& key, const std::string& annotator,
                             v1::BatchAck* ack, const std::string& project = kProject) {
    grpc::ClientContext context;
    Authorize(context, key);
    auto stream = v1::IngestService::NewStub(*channel_)->SubmitAnnotations(&context);
    v1::AnnotationBatch batch;
    batch.set_batch_id(1);
    batch.set_project(project);
    v1::Annotation* a = batch.add_annotations();
    a->set_item("item-1");
    a->set_annotator(annotator);
    a->set_label(1);
    stream->Write(batch);
    stream->WritesDone();
    const bool got_ack = stream->Read(ack);
    grpc::Status status = stream->Finish();
    if (status.ok() && got_ack && ack->error_code() != 0) {
      return grpc::Status(static_cast<grpc::StatusCode>(ack->error_code()), ack->error_message());
    }
    return status;
  }

  // Every RPC, each with a request that succeeds when the caller may make it.
  static std::string ProjectOf(Target target) {
    return target == Target::kOwnProject ? kProject : kOtherProject;
  }

  static std::map<std::string, RpcCall> Calls() {
    std::map<std::string, RpcCall> calls;
    auto projects = [] { return v1::ProjectService::NewStub(*channel_); };
    auto truth = [] { return v1::TruthService::NewStub(*channel_); };
    auto models = [] { return v1::ModelService::NewStub(*channel_); };
    auto assignment = [] { return v1::AssignmentService::NewStub(*channel_); };
    auto keys = [] { return v1::KeyService::NewStub(*channel_); };
    calls["/verity.v1.ProjectService/CreateProject"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      // A new project each call: one the scoped keys list, or one outside their lists.
      static std::atomic<int> next_own{0};
      static std::atomic<int> next_other{0};
      v1::CreateProjectRequest r;
      r.mutable_project()->set_name(
          target == Target::kOwnProject
              ? absl::StrCat(kOwnNewProjectPrefix, next_own++ % kOwnNewProjects)
              : absl::StrCat(kOtherNewProjectPrefix, next_other++));
      r.mutable_project()->add_classes("a");
      r.mutable_project()->add_classes("b");
      v1::CreateProjectResponse out;
      return projects()->CreateProject(&c, r, &out);
    };
    calls["/verity.v1.ProjectService/GetProject"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::GetProjectRequest r;
      r.set_project(ProjectOf(target));
      v1::GetProjectResponse out;
      return projects()->GetProject(&c, r, &out);
    };
    calls["/verity.v1.ProjectService/ListProjects"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::ListProjectsResponse out;
      return projects()->ListProjects(&c, v1::ListProjectsRequest(), &out);
    };
    calls["/verity.v1.ProjectService/UpdateProjectSettings"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::UpdateProjectSettingsRequest r;
      r.set_project(ProjectOf(target));
      v1::UpdateProjectSettingsResponse out;
      return projects()->UpdateProjectSettings(&c, r, &out);
    };
    calls["/verity.v1.ProjectService/AddItems"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::AddItemsRequest r;
      r.set_project(ProjectOf(target));
      r.add_items()->set_id("item-2");
      v1::AddItemsResponse out;
      return projects()->AddItems(&c, r, &out);
    };
    calls["/verity.v1.ProjectService/AddAnnotators"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::AddAnnotatorsRequest r;
      r.set_project(ProjectOf(target));
      r.add_annotators()->set_id("annotator-2");
      v1::AddAnnotatorsResponse out;
      return projects()->AddAnnotators(&c, r, &out);
    };
    calls["/verity.v1.IngestService/SubmitAnnotations"] = [=](const std::string& key, Target target) {
      v1::BatchAck ack;
      return Submit(key, "annotator-4", &ack, ProjectOf(target));
    };
    calls["/verity.v1.TruthService/GetPosteriors"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::GetPosteriorsRequest r;
      r.set_project(ProjectOf(target));
      r.add_items("item-1");
      v1::GetPosteriorsResponse out;
      return truth()->GetPosteriors(&c, r, &out);
    };
    calls["/verity.v1.TruthService/ListPosteriors"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::ListPosteriorsRequest r;
      r.set_project(ProjectOf(target));
      v1::ListPosteriorsResponse out;
      return truth()->ListPosteriors(&c, r, &out);
    };
    calls["/verity.v1.TruthService/GetAnnotatorProfiles"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::GetAnnotatorProfilesRequest r;
      r.set_project(ProjectOf(target));
      v1::GetAnnotatorProfilesResponse out;
      return truth()->GetAnnotatorProfiles(&c, r, &out);
    };
    calls["/verity.v1.ModelService/GetModelStatus"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::GetModelStatusRequest r;
      r.set_project(ProjectOf(target));
      v1::GetModelStatusResponse out;
      return models()->GetModelStatus(&c, r, &out);
    };
    calls["/verity.v1.ModelService/ListModelVersions"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::ListModelVersionsRequest r;
      r.set_project(ProjectOf(target));
      v1::ListModelVersionsResponse out;
      return models()->ListModelVersions(&c, r, &out);
    };
    calls["/verity.v1.ModelService/TrainModel"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::TrainModelRequest r;
      r.set_project(ProjectOf(target));
      v1::TrainModelResponse out;
      return models()->TrainModel(&c, r, &out);
    };
    calls["/verity.v1.AssignmentService/SuggestItems"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::SuggestItemsRequest r;
      r.set_project(ProjectOf(target));
      r.set_annotator("annotator-3");
      r.set_k(1);
      v1::SuggestItemsResponse out;
      return assignment()->SuggestItems(&c, r, &out);
    };
    calls["/verity.v1.AssignmentService/SuggestAnnotators"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::SuggestAnnotatorsRequest r;
      r.set_project(ProjectOf(target));
      r.set_item("item-1");
      r.set_k(1);
      v1::SuggestAnnotatorsResponse out;
      return assignment()->SuggestAnnotators(&c, r, &out);
    };
    calls["/verity.v1.KeyService/CreateKey"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::CreateKeyRequest r;
      r.set_role(v1::ROLE_READER);
      r.add_projects(kProject);
      v1::CreateKeyResponse out;
      return keys()->CreateKey(&c, r, &out);
    };
    calls["/verity.v1.KeyService/ListKeys"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::ListKeysResponse out;
      return keys()->ListKeys(&c, v1::ListKeysRequest(), &out);
    };
    calls["/verity.v1.KeyService/RevokeKey"] = [=](const std::string& key, Target target) {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::RevokeKeyRequest r;
      r.set_key_id(*victim_key_id_);  // Revoking it again is a no-op that answers OK.
      v1::RevokeKeyResponse out;
      return keys()->RevokeKey(&c, r, &out);
    };
    return calls;
  }

  // What the documented policy says `caller` gets from `method` on `target`.
  static grpc::StatusCode Expected(const DocumentedRule& rule, Caller caller, Target target) {
    if (caller == Caller::kNoKey || caller == Caller::kWrongKey) {
      return grpc::StatusCode::UNAUTHENTICATED;
    }
    if (caller == Caller::kAdmin) return grpc::StatusCode::OK;
    const NeededRole held = caller == Caller::kReader   ? NeededRole::kReader
                            : caller == Caller::kWriter ? NeededRole::kWriter
                                                        : NeededRole::kAdmin;
    if (held < rule.role) return grpc::StatusCode::PERMISSION_DENIED;
    switch (rule.scope) {
      case Scope::kEveryProjectKey: return grpc::StatusCode::PERMISSION_DENIED;  // All scoped.
      case Scope::kFiltered: return grpc::StatusCode::OK;
      case Scope::kNamedProject: {
        // Whether the project the call names is in the key's list. The scoped keys list
        // kProject and the own new names; kOtherProjectAdmin lists only kOtherProject, and no
        // key lists the other new names of CreateProject.
        const bool creates = absl::EndsWith(rule.method, "/CreateProject");
        const bool in_scope = caller == Caller::kOtherProjectAdmin
                                  ? !creates && target == Target::kOtherProject
                                  : target == Target::kOwnProject;
        return in_scope ? grpc::StatusCode::OK : grpc::StatusCode::PERMISSION_DENIED;
      }
    }
    return grpc::StatusCode::UNKNOWN;
  }

  static TestPostgres* postgres_;
  static std::string* admin_key_file_;
  static server::VerityServer* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  static std::map<Caller, std::string>* keys_;
  static std::string* victim_key_id_;
};

TestPostgres* AuthTest::postgres_ = nullptr;
std::string* AuthTest::admin_key_file_ = nullptr;
server::VerityServer* AuthTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* AuthTest::channel_ = nullptr;
std::map<Caller, std::string>* AuthTest::keys_ = nullptr;
std::string* AuthTest::victim_key_id_ = nullptr;

TEST_F(AuthTest, EveryRpcAnswersEachKindOfCallerAsTheDocumentedPolicySays) {
  const std::map<std::string, RpcCall> calls = Calls();
  // The matrix covers every served method: the documented table lists 18, the matrix calls
  // each, and //server/auth:rpc_policy_test checks that the server serves no other.
  ASSERT_EQ(calls.size(), std::size(kDocumentedPolicy));
  int cells = 0;
  for (const DocumentedRule& rule : kDocumentedPolicy) {
    auto call = calls.find(rule.method);
    ASSERT_NE(call, calls.end()) << rule.method << " is not in the matrix";
    for (Caller caller : kEveryCaller) {
      for (Target target : {Target::kOwnProject, Target::kOtherProject}) {
        const grpc::Status status =
            call->second(caller == Caller::kNoKey ? "" : (*keys_)[caller], target);
        const grpc::StatusCode expected = Expected(rule, caller, target);
        EXPECT_EQ(status.error_code(), expected)
            << rule.method << " by " << CallerName(caller) << " on " << TargetName(target)
            << ": " << status.error_message();
        if (expected == grpc::StatusCode::PERMISSION_DENIED) {
          // The message says why: the role, or the project / the scope.
          EXPECT_TRUE(absl::StrContains(status.error_message(), "needs") ||
                      absl::StrContains(status.error_message(), "not valid for project"))
              << rule.method << " by " << CallerName(caller) << ": " << status.error_message();
        }
        ++cells;
      }
    }
  }
  EXPECT_EQ(cells, 18 * 7 * 2);
}

TEST_F(AuthTest, AWriterCannotChangeSettingsAndAReaderCannotWrite) {
  // The two lines of the documented policy most worth a name of their own.
  const std::map<std::string, RpcCall> calls = Calls();
  EXPECT_EQ(calls.at("/verity.v1.ProjectService/UpdateProjectSettings")(
                    (*keys_)[Caller::kWriter], Target::kOwnProject)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(calls.at("/verity.v1.IngestService/SubmitAnnotations")((*keys_)[Caller::kReader],
                                                                     Target::kOwnProject)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

// docs/SECURITY.md and ProjectLimits: a project's limits above the server's defaults take an
// admin key valid for every project. An admin scoped to the project may keep or lower them
// (what it keeps may be what a global admin raised), never raise them, on create or update.
TEST_F(AuthTest, OnlyAnAdminOfEveryProjectCanRaiseAProjectsLimits) {
  constexpr char kLimited[] = "alpha-limits";
  constexpr char kLimitedNew[] = "alpha-limits-new";
  const std::string scoped_admin = CreateKey(v1::ROLE_ADMIN, {kLimited, kLimitedNew});
  const int64_t default_items = ServerOptions().project_quota.max_items;
  auto create = [&](const std::string& key, const char* name, int64_t max_items) {
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(name);
    request.mutable_project()->add_classes("a");
    request.mutable_project()->add_classes("b");
    request.mutable_project()->mutable_settings()->mutable_limits()->set_max_items(max_items);
    v1::CreateProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, key);
    return v1::ProjectService::NewStub(*channel_)->CreateProject(&context, request, &response);
  };
  auto update = [&](const std::string& key, int64_t max_items) {
    v1::UpdateProjectSettingsRequest request;
    request.set_project(kLimited);
    request.mutable_settings()->mutable_limits()->set_max_items(max_items);
    v1::UpdateProjectSettingsResponse response;
    grpc::ClientContext context;
    Authorize(context, key);
    return v1::ProjectService::NewStub(*channel_)->UpdateProjectSettings(&context, request, &response);
  };
  auto max_items_now = [&]() {
    v1::GetProjectRequest request;
    request.set_project(kLimited);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    EXPECT_TRUE(v1::ProjectService::NewStub(*channel_)->GetProject(&context, request, &response).ok());
    return response.project().settings().limits().max_items();
  };

  // Creating: above the default is refused and creates nothing; at the default it is created.
  grpc::Status raised = create(scoped_admin, kLimitedNew, default_items + 1);
  EXPECT_EQ(raised.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(raised.error_message(), "settings.limits.max_items"))
      << raised.error_message();
  ASSERT_TRUE(create(scoped_admin, kLimited, default_items).ok());
  ASSERT_TRUE(create((*keys_)[Caller::kAdmin], kLimitedNew, 0).ok())
      << "the refused create left the project behind";

  // Updating: lowering is allowed, raising back is not; the global admin may raise it.
  ASSERT_TRUE(update(scoped_admin, 1000).ok());
  raised = update(scoped_admin, 1001);
  EXPECT_EQ(raised.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(raised.error_message(), "settings.limits.max_items: 1001"))
      << raised.error_message();
  EXPECT_EQ(max_items_now(), 1000);
  // 0 means the server's default, which is above 1000: a raise too.
  raised = update(scoped_admin, 0);
  EXPECT_EQ(raised.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(raised.error_message(),
                                absl::StrCat("settings.limits.max_items: 0 (the server's default, ",
                                             default_items, ") is above this project's limit 1000")))
      << raised.error_message();
  EXPECT_EQ(max_items_now(), 1000);
  ASSERT_TRUE(update((*keys_)[Caller::kAdmin], 2 * default_items).ok());
  // What the global admin raised the scoped admin may keep (a settings change that repeats the
  // limits), or lower, but not raise further; 0 means the default, which is lower.
  EXPECT_TRUE(update(scoped_admin, 2 * default_items).ok());
  EXPECT_EQ(update(scoped_admin, 2 * default_items + 1).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(max_items_now(), 2 * default_items);
  EXPECT_TRUE(update(scoped_admin, 0).ok());
  EXPECT_EQ(max_items_now(), 0);
}

TEST_F(AuthTest, RefusedCallsLeaveNoTrace) {
  v1::BatchAck ack;
  EXPECT_EQ(Submit((*keys_)[Caller::kReader], "intruder", &ack).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Submit((*keys_)[Caller::kOtherProjectAdmin], "intruder", &ack).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Submit("", "intruder", &ack).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // No label of "intruder" reached the project.
  v1::GetAnnotatorProfilesRequest request;
  request.set_project(kProject);
  request.add_annotators("intruder");
  v1::GetAnnotatorProfilesResponse response;
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kAdmin]);
  grpc::Status status =
      v1::TruthService::NewStub(*channel_)->GetAnnotatorProfiles(&context, request, &response);
  EXPECT_TRUE(status.ok() ? response.profiles_size() == 0 || response.profiles(0).num_labels() == 0
                          : status.error_code() == grpc::StatusCode::NOT_FOUND)
      << status.error_message();
}

TEST_F(AuthTest, AScopedKeyListsOnlyItsProjects) {
  v1::ListProjectsResponse response;
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kOtherProjectAdmin]);
  ASSERT_TRUE(
      v1::ProjectService::NewStub(*channel_)
          ->ListProjects(&context, v1::ListProjectsRequest(), &response)
          .ok());
  ASSERT_EQ(response.projects_size(), 1);
  EXPECT_EQ(response.projects(0).name(), kOtherProject);
}

TEST_F(AuthTest, ABatchThatLeavesOutItsProjectContinuesTheLastAdmittedOne) {
  // A writer of kProject: its batch for kOtherProject is refused, and a following batch with
  // no project continues kProject (the stream's last admitted project), not the refused one.
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kWriter]);
  auto stream = v1::IngestService::NewStub(*channel_)->SubmitAnnotations(&context);
  auto send = [&](uint64_t id, const std::string& project, v1::BatchAck* ack) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(id);
    batch.set_project(project);
    v1::Annotation* a = batch.add_annotations();
    a->set_item(absl::StrCat("continued-", id));
    a->set_annotator("continuing");
    a->set_label(0);
    return stream->Write(batch) && stream->Read(ack);
  };
  v1::BatchAck ack;
  ASSERT_TRUE(send(1, kProject, &ack));
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  ASSERT_TRUE(send(2, kOtherProject, &ack));
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::PERMISSION_DENIED) << ack.error_message();
  ASSERT_TRUE(send(3, "", &ack));
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 1);
  stream->WritesDone();
  while (stream->Read(&ack)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  // Where batch 3 went, asked with the admin key: kProject has its item, the refused project
  // has not (were it written there, a writer of one project would have written another).
  auto has_item = [&](const std::string& project, const std::string& item) {
    grpc::ClientContext get;
    Authorize(get, (*keys_)[Caller::kAdmin]);
    v1::GetPosteriorsRequest request;
    request.set_project(project);
    request.add_items(item);
    v1::GetPosteriorsResponse response;
    const grpc::Status status =
        v1::TruthService::NewStub(*channel_)->GetPosteriors(&get, request, &response);
    EXPECT_TRUE(status.ok() || status.error_code() == grpc::StatusCode::NOT_FOUND)
        << status.error_message();
    return status.ok();
  };
  EXPECT_TRUE(has_item(kProject, "continued-3"));
  EXPECT_FALSE(has_item(kOtherProject, "continued-3"));
  EXPECT_FALSE(has_item(kOtherProject, "continued-2"));
}

// ingest.proto: the first batch of a stream must name its project. For a key limited to some
// projects that is INVALID_ARGUMENT naming `project`, as without authentication, not a
// permission error (an empty name is no project the key could be refused).
TEST_F(AuthTest, AFirstBatchWithoutAProjectIsInvalidForAScopedKeyToo) {
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kWriter]);
  auto stream = v1::IngestService::NewStub(*channel_)->SubmitAnnotations(&context);
  v1::AnnotationBatch batch;
  batch.set_batch_id(1);
  v1::Annotation* a = batch.add_annotations();
  a->set_item("unnamed");
  a->set_annotator("w");
  a->set_label(0);
  ASSERT_TRUE(stream->Write(batch));
  v1::BatchAck ack;
  ASSERT_TRUE(stream->Read(&ack));
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << ack.error_message();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "project: required on the first batch"))
      << ack.error_message();
  stream->WritesDone();
  while (stream->Read(&ack)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

// keys.proto: an ApiKey carries what CreateKey was given (name, role, projects), when it was
// created, and by which admin key; revoked_at is unset while the key is valid. ListKeys leaves
// out revoked keys unless include_revoked; RevokeKey answers the key with its revoked_at.
TEST_F(AuthTest, KeysAreDescribedAsCreatedListedAndRevoked) {
  const std::string admin_id = (*keys_)[Caller::kAdmin].substr(3, 16);
  auto expect_described = [&](const v1::ApiKey& key, const std::string& key_id) {
    EXPECT_EQ(key.key_id(), key_id);
    EXPECT_EQ(key.name(), "described");
    EXPECT_EQ(key.role(), v1::ROLE_READER);
    std::vector<std::string> projects(key.projects().begin(), key.projects().end());
    std::sort(projects.begin(), projects.end());
    EXPECT_EQ(projects, (std::vector<std::string>{kProject, kOtherProject}));
    EXPECT_TRUE(key.has_created_at());
    EXPECT_LE(std::abs(key.created_at().seconds() - absl::ToUnixSeconds(absl::Now())), 300)
        << "created_at is not the time of creation";
    EXPECT_EQ(key.created_by(), admin_id);
  };
  v1::CreateKeyRequest create;
  create.set_name("described");
  create.set_role(v1::ROLE_READER);
  create.add_projects(kProject);
  create.add_projects(kOtherProject);
  v1::CreateKeyResponse created;
  {
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    ASSERT_TRUE(v1::KeyService::NewStub(*channel_)->CreateKey(&context, create, &created).ok());
  }
  const std::string key_id = created.secret_key().substr(3, 16);
  expect_described(created.key(), key_id);
  EXPECT_FALSE(created.key().has_revoked_at());

  // The key as ListKeys describes it, or nullopt if it is not listed.
  auto listed = [&](bool include_revoked) -> std::optional<v1::ApiKey> {
    v1::ListKeysRequest request;
    request.set_include_revoked(include_revoked);
    v1::ListKeysResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    const grpc::Status status =
        v1::KeyService::NewStub(*channel_)->ListKeys(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    for (const v1::ApiKey& key : response.keys()) {
      if (key.key_id() == key_id) return key;
    }
    return std::nullopt;
  };
  std::optional<v1::ApiKey> valid = listed(false);
  ASSERT_TRUE(valid.has_value());
  expect_described(*valid, key_id);
  EXPECT_FALSE(valid->has_revoked_at());

  v1::RevokeKeyResponse revoked;
  ASSERT_TRUE(Revoke(created.secret_key(), &revoked).ok());
  expect_described(revoked.key(), key_id);
  EXPECT_TRUE(revoked.key().has_revoked_at());
  EXPECT_FALSE(listed(false).has_value()) << "a revoked key listed without include_revoked";
  std::optional<v1::ApiKey> with_revoked = listed(true);
  ASSERT_TRUE(with_revoked.has_value());
  expect_described(*with_revoked, key_id);
  EXPECT_TRUE(with_revoked->has_revoked_at());
}

// keys.proto RevokeKey: INVALID_ARGUMENT for an empty key_id or one of more than 64 characters,
// NOT_FOUND for any other unknown key_id; docs/SECURITY.md: at most 1,000 projects listed per
// API key, INVALID_ARGUMENT past it.
TEST_F(AuthTest, KeyServiceRefusesEmptyOrOverlongKeyIdsAndTooManyProjects) {
  auto revoke = [&](const std::string& key_id) {
    v1::RevokeKeyRequest request;
    request.set_key_id(key_id);
    v1::RevokeKeyResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    return v1::KeyService::NewStub(*channel_)->RevokeKey(&context, request, &response).error_code();
  };
  EXPECT_EQ(revoke(""), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(revoke(std::string(64, 'f')), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(revoke(std::string(65, 'f')), grpc::StatusCode::INVALID_ARGUMENT);

  auto create = [&](int projects) {
    v1::CreateKeyRequest request;
    request.set_role(v1::ROLE_READER);
    for (int i = 0; i < projects; ++i) request.add_projects(absl::StrCat("p", i));
    v1::CreateKeyResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    const grpc::Status status =
        v1::KeyService::NewStub(*channel_)->CreateKey(&context, request, &response);
    if (status.ok()) {
      EXPECT_EQ(revoke(response.key().key_id()), grpc::StatusCode::OK);
    }
    return status.error_code();
  };
  EXPECT_EQ(create(1000), grpc::StatusCode::OK);
  EXPECT_EQ(create(1001), grpc::StatusCode::INVALID_ARGUMENT);
}

// keys.proto KeyService: admin-only, with an admin key valid for every project. A RevokeKey
// refused to any other caller revokes nothing: the key it named still works.
TEST_F(AuthTest, ARefusedRevokeKeyRevokesNothing) {
  const std::string victim = CreateKey(v1::ROLE_READER, {kProject});
  ASSERT_TRUE(GetOwnProject(*channel_, victim).ok());
  for (Caller caller : {Caller::kNoKey, Caller::kWrongKey, Caller::kReader, Caller::kWriter,
                        Caller::kScopedAdmin, Caller::kOtherProjectAdmin}) {
    v1::RevokeKeyRequest request;
    request.set_key_id(victim.substr(3, 16));
    v1::RevokeKeyResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[caller]);
    const grpc::Status status =
        v1::KeyService::NewStub(*channel_)->RevokeKey(&context, request, &response);
    EXPECT_TRUE(status.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
                status.error_code() == grpc::StatusCode::UNAUTHENTICATED)
        << static_cast<int>(caller) << ": " << status.error_message();
    const grpc::Status still = GetOwnProject(*channel_, victim);
    EXPECT_TRUE(still.ok()) << static_cast<int>(caller)
                            << " revoked the key: " << still.error_message();
  }
}

// keys.proto ApiKey.role: an admin key is described as ROLE_ADMIN, when created and when listed.
TEST_F(AuthTest, AnAdminKeyIsDescribedAsAnAdmin) {
  v1::CreateKeyRequest create;
  create.set_role(v1::ROLE_ADMIN);
  create.add_projects(kProject);
  v1::CreateKeyResponse created;
  {
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    ASSERT_TRUE(v1::KeyService::NewStub(*channel_)->CreateKey(&context, create, &created).ok());
  }
  EXPECT_EQ(created.key().role(), v1::ROLE_ADMIN);
  v1::ListKeysResponse listed;
  {
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    ASSERT_TRUE(v1::KeyService::NewStub(*channel_)
                    ->ListKeys(&context, v1::ListKeysRequest(), &listed)
                    .ok());
  }
  int found = 0;
  for (const v1::ApiKey& key : listed.keys()) {
    if (key.key_id() != created.key().key_id()) continue;
    ++found;
    EXPECT_EQ(key.role(), v1::ROLE_ADMIN);
  }
  EXPECT_EQ(found, 1);
  v1::RevokeKeyResponse revoked;
  ASSERT_TRUE(Revoke(created.secret_key(), &revoked).ok());
}

TEST_F(AuthTest, ARevokedKeyIsRefusedAtOnce) {
  const std::string key = CreateKey(v1::ROLE_READER, {});
  auto get = [&] {
    v1::GetProjectRequest request;
    request.set_project(kProject);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, key);
    return v1::ProjectService::NewStub(*channel_)->GetProject(&context, request, &response);
  };
  ASSERT_TRUE(get().ok());
  v1::RevokeKeyResponse revoked;
  ASSERT_TRUE(Revoke(key, &revoked).ok());
  EXPECT_TRUE(revoked.key().has_revoked_at());
  EXPECT_EQ(get().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, ARevokedKeyIsRefusedOnAStreamOpenedBeforeTheRevocation) {
  const std::string key = CreateKey(v1::ROLE_WRITER, {kProject});
  grpc::ClientContext context;
  Authorize(context, key);
  auto stream = v1::IngestService::NewStub(*channel_)->SubmitAnnotations(&context);
  auto send = [&](uint64_t id, v1::BatchAck* ack) {
    return SendOne(*stream, id, "open-stream", ack);
  };
  v1::BatchAck ack;
  ASSERT_TRUE(send(1, &ack));
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();

  v1::RevokeKeyResponse revoked;
  ASSERT_TRUE(Revoke(key, &revoked).ok());

  // This server revoked it: the stream's next batch is refused at once (another server of the
  // database within --key_refresh_seconds), and none of it is written.
  ASSERT_TRUE(send(2, &ack));
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::UNAUTHENTICATED) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 0);
  stream->WritesDone();
  while (stream->Read(&ack)) {
  }
  stream->Finish();
}

TEST_F(AuthTest, ARevocationOnAnotherServerReachesAnOpenStreamWithinTheRefreshInterval) {
  const std::string key = CreateKey(v1::ROLE_WRITER, {kProject});
  // A second server of the same database (it loads the key at start), refreshing its keys
  // every second.
  constexpr absl::Duration kRefresh = absl::Seconds(1);
  server::VerityServer::Options options = ServerOptions();
  options.auth.key_refresh = kRefresh;
  auto other = server::VerityServer::Start(options);
  ASSERT_TRUE(other.ok()) << other.status();
  auto other_channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*other)->port()),
                                           grpc::InsecureChannelCredentials());

  grpc::ClientContext context;
  Authorize(context, key);
  auto stream = v1::IngestService::NewStub(other_channel)->SubmitAnnotations(&context);
  uint64_t id = 0;
  auto send = [&](v1::BatchAck* ack) {
    return SendOne(*stream, ++id, "open-stream-elsewhere", ack);
  };
  v1::BatchAck ack;
  ASSERT_TRUE(send(&ack));
  ASSERT_EQ(ack.error_code(), 0) << ack.error_message();

  // Revoked through the first server; the stream is on the second.
  v1::RevokeKeyResponse revoked;
  ASSERT_TRUE(Revoke(key, &revoked).ok());
  const absl::Time revoked_at = absl::Now();
  absl::Duration refused_after = absl::InfiniteDuration();
  while (absl::Now() - revoked_at < 10 * kRefresh) {
    ASSERT_TRUE(send(&ack));
    if (ack.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      refused_after = absl::Now() - revoked_at;
      break;
    }
    ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::cout << "refused on the other server's open stream " << absl::FormatDuration(refused_after)
            << " after the revocation (key refresh " << absl::FormatDuration(kRefresh) << ")\n";
  // Within the refresh interval, plus the time one refresh and one batch take on a loaded
  // machine.
  EXPECT_LE(refused_after, kRefresh + absl::Seconds(2));
  stream->WritesDone();
  while (stream->Read(&ack)) {
  }
  stream->Finish();
  (*other)->Shutdown();
}

TEST_F(AuthTest, ARevokedKeyStaysRefusedAfterTheKeyRingsRefresh) {
  // Two servers of the database, each reloading its key ring every 200 ms. A key revoked
  // through the first must stay refused on both once several reloads have run: a reload
  // must never bring a revoked key back.
  constexpr absl::Duration kRefresh = absl::Milliseconds(200);
  auto start = [&] {
    server::VerityServer::Options options = ServerOptions();
    options.auth.key_refresh = kRefresh;
    return server::VerityServer::Start(options);
  };
  auto revoking = start();
  ASSERT_TRUE(revoking.ok()) << revoking.status();
  auto other = start();
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string key = CreateKey(v1::ROLE_READER, {kProject});
  auto get = [&](const server::VerityServer& server) {
    return GetOwnProject(grpc::CreateChannel(absl::StrCat("127.0.0.1:", server.port()),
                                             grpc::InsecureChannelCredentials()),
                         key);
  };
  // Both know the key (the second after one refresh).
  absl::SleepFor(3 * kRefresh);
  ASSERT_TRUE(get(**revoking).ok());
  ASSERT_TRUE(get(**other).ok());

  v1::RevokeKeyRequest request;
  request.set_key_id(key.substr(3, 16));
  v1::RevokeKeyResponse revoked;
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kAdmin]);
  ASSERT_TRUE(v1::KeyService::NewStub(grpc::CreateChannel(
                                          absl::StrCat("127.0.0.1:", (*revoking)->port()),
                                          grpc::InsecureChannelCredentials()))
                  ->RevokeKey(&context, request, &revoked)
                  .ok());
  EXPECT_EQ(get(**revoking).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Past several refresh intervals, on both servers.
  for (int round = 0; round < 3; ++round) {
    absl::SleepFor(3 * kRefresh);
    EXPECT_EQ(get(**revoking).error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "the revoking server, round " << round;
    EXPECT_EQ(get(**other).error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "the other server, round " << round;
  }
  (*other)->Shutdown();
  (*revoking)->Shutdown();
}

// The web console on the metrics port, with authentication on: /api/ needs a key and shows
// only the projects the key may touch; a Host that is not this console's is refused.
TEST_F(AuthTest, TheConsoleNeedsAKeyAndShowsOnlyItsProjects) {
  server::VerityServer::Options options = ServerOptions();
  options.metrics_listen = "127.0.0.1:0";
  options.console_allowed_hosts = {"verity.internal"};
  auto console_server = server::VerityServer::Start(options);
  ASSERT_TRUE(console_server.ok()) << console_server.status();
  const int port = (*console_server)->metrics_port();
  ASSERT_NE(port, 0);
  auto get = [&](const std::string& path, const std::string& key,
                 const std::string& host = "127.0.0.1") {
    std::map<std::string, std::string> headers = {{"Host", host}};
    if (!key.empty()) headers["Authorization"] = "Bearer " + key;
    absl::StatusOr<testing::HttpResponse> response = testing::HttpGet(port, path, headers);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : testing::HttpResponse();
  };
  // The page carries no data and loads without a key; the data does not.
  EXPECT_EQ(get("/", "").status, 200);
  EXPECT_EQ(get("/api/projects", "").status, 401);
  EXPECT_EQ(get("/api/projects/alpha", "").status, 401);
  EXPECT_EQ(get("/api/projects/alpha/annotators", "").status, 401);
  EXPECT_EQ(get("/api/projects", (*keys_)[Caller::kWrongKey]).status, 401);
  // A reader of alpha sees alpha only.
  const std::string reader = (*keys_)[Caller::kReader];
  testing::HttpResponse list = get("/api/projects", reader);
  EXPECT_EQ(list.status, 200);
  EXPECT_TRUE(absl::StrContains(list.body, "\"name\":\"alpha\"")) << list.body;
  EXPECT_FALSE(absl::StrContains(list.body, "\"name\":\"beta\"")) << list.body;
  EXPECT_EQ(get("/api/projects/alpha", reader).status, 200);
  EXPECT_EQ(get("/api/projects/alpha/annotators", reader).status, 200);
  EXPECT_EQ(get("/api/projects/beta", reader).status, 403);
  EXPECT_EQ(get("/api/projects/beta/annotators", reader).status, 403);
  // The admin of every project sees both.
  list = get("/api/projects", (*keys_)[Caller::kAdmin]);
  EXPECT_TRUE(absl::StrContains(list.body, "\"name\":\"beta\"")) << list.body;
  // DNS rebinding: another name for 127.0.0.1 is refused, key or not; loopback names and
  // --console_allowed_hosts are answered.
  EXPECT_EQ(get("/api/projects", reader, "attacker.example:" + std::to_string(port)).status, 403);
  EXPECT_EQ(get("/", "", "attacker.example").status, 403);
  EXPECT_EQ(get("/api/projects", reader, "localhost:" + std::to_string(port)).status, 200);
  EXPECT_EQ(get("/api/projects", reader, "[::1]:" + std::to_string(port)).status, 200);
  EXPECT_EQ(get("/api/projects", reader, "Verity.Internal:" + std::to_string(port)).status, 200);
  (*console_server)->Shutdown();

  // --console=false: /metrics stays, the console is gone.
  options.console = false;
  auto metrics_only = server::VerityServer::Start(options);
  ASSERT_TRUE(metrics_only.ok()) << metrics_only.status();
  absl::StatusOr<testing::HttpResponse> metrics =
      testing::HttpGet((*metrics_only)->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(metrics->status, 200);
  absl::StatusOr<testing::HttpResponse> page =
      testing::HttpGet((*metrics_only)->metrics_port(), "/");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->status, 404);
  (*metrics_only)->Shutdown();
}

// --max_streams_per_key: one key cannot hold every ingest stream; other keys still open theirs.
// docs/SECURITY.md, --max_calls_per_key: one key's unary calls in flight are capped, so that
// one key cannot hold every gRPC thread with slow calls. A limit of 1: while the writer's
// TrainModel is held in its fit, the writer's next call is refused naming the key and the
// flag, another key's is served, and once the fit returns the writer is served again.
TEST_F(AuthTest, OneKeyCannotHoldMoreThanItsShareOfUnaryCalls) {
  const std::string writer = (*keys_)[Caller::kWriter];
  WhileAKeysOnlyCallIsHeld(writer, "calls-in-flight", [&](std::shared_ptr<grpc::Channel> channel) {
    const grpc::Status refused = GetOwnProject(channel, writer);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << refused.error_message();
    EXPECT_TRUE(absl::StrContains(refused.error_message(), "--max_calls_per_key"))
        << refused.error_message();
    EXPECT_TRUE(absl::StrContains(refused.error_message(), writer.substr(3, 16)))
        << refused.error_message();
    const grpc::Status other_key = GetOwnProject(channel, (*keys_)[Caller::kReader]);
    EXPECT_TRUE(other_key.ok()) << other_key.error_message();
  });
}

// "retry when one has returned": a call whose answer the client has is no longer in flight.
// The slot used to be freed only when gRPC destroyed the finished call, which can be after the
// client has the answer, so a client making one call at a time was sometimes refused.
TEST_F(AuthTest, ACallWhoseAnswerArrivedNoLongerCountsAgainstItsKey) {
  server::VerityServer::Options options = ServerOptions();
  options.max_calls_per_key = 1;
  auto limited = server::VerityServer::Start(options);
  ASSERT_TRUE(limited.ok()) << limited.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*limited)->port()),
                                     grpc::InsecureChannelCredentials());
  const std::string writer = (*keys_)[Caller::kWriter];
  int refused = 0;
  std::string first_refusal;
  for (int i = 0; i < 300; ++i) {
    const grpc::Status status = GetOwnProject(channel, writer);
    if (status.ok()) continue;
    if (++refused == 1) first_refusal = status.error_message();
  }
  EXPECT_EQ(refused, 0) << "of 300 calls made one at a time; first: " << first_refusal;
  (*limited)->Shutdown();
}

TEST_F(AuthTest, OneKeyCannotOpenMoreThanItsShareOfStreams) {
  server::VerityServer::Options options = ServerOptions();
  options.max_streams_per_key = 2;
  auto limited = server::VerityServer::Start(options);
  ASSERT_TRUE(limited.ok()) << limited.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*limited)->port()),
                                     grpc::InsecureChannelCredentials());
  struct OpenStream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AnnotationBatch, v1::BatchAck>> stream;
  };
  uint64_t next_id = 0;
  auto open = [&](const std::string& key) {
    auto s = std::make_unique<OpenStream>();
    Authorize(s->context, key);
    s->stream = v1::IngestService::NewStub(channel)->SubmitAnnotations(&s->context);
    return s;
  };
  // A stream is open (holding its share) once its first batch is acked; the refused one ends
  // with the status instead.
  auto first_batch = [&](OpenStream& s, v1::BatchAck* ack) {
    return SendOne(*s.stream, ++next_id, "per-key", ack);
  };
  const std::string writer = (*keys_)[Caller::kWriter];
  std::vector<std::unique_ptr<OpenStream>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(open(writer));
    v1::BatchAck ack;
    ASSERT_TRUE(first_batch(*held.back(), &ack));
    ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
  }
  auto third = open(writer);
  v1::BatchAck ack;
  EXPECT_FALSE(first_batch(*third, &ack));
  grpc::Status refused = third->stream->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "--max_streams_per_key"))
      << refused.error_message();
  // Another key is not held back by this one's streams.
  auto other = open((*keys_)[Caller::kAdmin]);
  ASSERT_TRUE(first_batch(*other, &ack));
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  // Once one of the key's streams ends, the key may open another.
  held.push_back(std::move(other));
  held[0]->stream->WritesDone();
  while (held[0]->stream->Read(&ack)) {
  }
  EXPECT_TRUE(held[0]->stream->Finish().ok());
  auto again = open(writer);
  ASSERT_TRUE(first_batch(*again, &ack));
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  held.push_back(std::move(again));
  for (size_t i = 1; i < held.size(); ++i) {
    held[i]->stream->WritesDone();
    while (held[i]->stream->Read(&ack)) {
    }
    held[i]->stream->Finish();
  }
  (*limited)->Shutdown();
}

// IngestPipeline::Options::max_queued_annotations_per_key (docs/SECURITY.md): the batches one
// API key sends, over every project it writes to, share at most that many annotations of the
// ingest queue; past it the key's batch is refused RESOURCE_EXHAUSTED while another key's batch
// is queued. The queue is kept full by holding the annotations table locked, so that the one
// commit lane waits in its transaction and every later batch stays queued.
TEST_F(AuthTest, OneKeysBatchesOverTwoProjectsAreRefusedPastTheKeysShareOfTheQueue) {
  constexpr char kShareA[] = "key-share-a";
  constexpr char kShareB[] = "key-share-b";
  for (const char* name : {kShareA, kShareB}) {
    v1::CreateProjectRequest create;
    create.mutable_project()->set_name(name);
    create.mutable_project()->add_classes("no");
    create.mutable_project()->add_classes("yes");
    v1::CreateProjectResponse created;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    ASSERT_TRUE(
        v1::ProjectService::NewStub(*channel_)->CreateProject(&context, create, &created).ok());
  }
  // Made before the server below starts, which loads the keys and projects at its start.
  const std::string writer = CreateKey(v1::ROLE_WRITER, {kShareA, kShareB});
  const std::string& admin = (*keys_)[Caller::kAdmin];

  server::VerityServer::Options options = ServerOptions();
  options.ingest.max_queued_annotations_per_key = 2;
  options.ingest.commit_lanes = 1;
  auto limited = server::VerityServer::Start(options);
  ASSERT_TRUE(limited.ok()) << limited.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*limited)->port()),
                                     grpc::InsecureChannelCredentials());
  // The annotations the server's ingest queue holds (its gauge).
  auto queued = [&]() -> int {
    const std::string text = (*limited)->metrics().RenderText();
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::ConsumePrefix(&line, "verity_ingest_queue_annotations ")) {
        double value = 0;
        if (absl::SimpleAtod(line, &value)) return static_cast<int>(value);
      }
    }
    return -1;
  };
  // One batch of `labels` labels on its own stream; the ack (or the stream's error) comes
  // back through the future.
  struct Sent {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AnnotationBatch, v1::BatchAck>> stream;
    std::future<v1::BatchAck> ack;
  };
  int next_item = 0;
  auto send = [&](const std::string& key, const std::string& project, int labels) {
    Sent sent;
    sent.context = std::make_unique<grpc::ClientContext>();
    Authorize(*sent.context, key);
    sent.stream = v1::IngestService::NewStub(channel)->SubmitAnnotations(sent.context.get());
    v1::AnnotationBatch batch;
    batch.set_batch_id(1);
    batch.set_project(project);
    for (int i = 0; i < labels; ++i) {
      v1::Annotation* a = batch.add_annotations();
      a->set_item(absl::StrCat("share-item-", next_item++));
      a->set_annotator("share-annotator");
      a->set_label(1);
    }
    EXPECT_TRUE(sent.stream->Write(batch));
    sent.stream->WritesDone();
    auto* stream = sent.stream.get();
    sent.ack = std::async(std::launch::async, [stream] {
      v1::BatchAck ack;
      if (!stream->Read(&ack)) ack.set_error_code(-1);
      return ack;
    });
    return sent;
  };
  auto wait_until = [](const std::function<bool()>& done) {
    for (int i = 0; i < 600 && !done(); ++i) absl::SleepFor(absl::Milliseconds(50));
    return done();
  };

  std::vector<Sent> sent;
  {
    pqxx::connection connection(postgres_->url());
    pqxx::work lock(connection);
    lock.exec0("LOCK TABLE annotations IN EXCLUSIVE MODE");
    // Another key's batch takes the one lane, which then waits on the lock.
    sent.push_back(send(admin, kShareB, 1));
    ASSERT_TRUE(wait_until([&] {
      pqxx::connection probe(postgres_->url());
      pqxx::nontransaction query(probe);
      return query
                 .exec1("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND state = 'active'")[0]
                 .as<int>() > 0;
    })) << "the commit lane never waited on the held lock";
    ASSERT_EQ(queued(), 0);
    // The writer's batch of two labels on one project fills its key's share.
    sent.push_back(send(writer, kShareA, 2));
    ASSERT_TRUE(wait_until([&] { return queued() == 2; })) << queued();
    // The same key's batch on its other project is past the key's share: refused at once.
    sent.push_back(send(writer, kShareB, 1));
    const bool answered =
        sent.back().ack.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    EXPECT_TRUE(answered) << "the writer's batch past its key's share was queued ("
                          << queued() << " annotations queued), not refused";
    // Another key's batch on that project is queued: the share is the writer key's alone.
    sent.push_back(send(admin, kShareB, 1));
    EXPECT_TRUE(wait_until([&] { return queued() == (answered ? 3 : 4); })) << queued();
    EXPECT_NE(sent.back().ack.wait_for(std::chrono::milliseconds(0)),
              std::future_status::ready)
        << "another key's batch was answered while the commit was held";
  }  // The lock is released: the queued batches commit.
  std::vector<v1::BatchAck> acks;
  for (Sent& s : sent) {
    acks.push_back(s.ack.get());
    s.stream->Finish();
  }
  EXPECT_EQ(acks[0].error_code(), 0) << acks[0].error_message();
  EXPECT_EQ(acks[0].accepted(), 1);
  EXPECT_EQ(acks[1].error_code(), 0) << acks[1].error_message();
  EXPECT_EQ(acks[1].accepted(), 2);
  EXPECT_EQ(acks[2].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << acks[2].error_message();
  EXPECT_EQ(acks[2].accepted(), 0);
  EXPECT_EQ(acks[3].error_code(), 0) << acks[3].error_message();
  EXPECT_EQ(acks[3].accepted(), 1);
  // With the queue drained the key's share is free again.
  Sent again = send(writer, kShareB, 1);
  v1::BatchAck again_ack = again.ack.get();
  again.stream->Finish();
  EXPECT_EQ(again_ack.error_code(), 0) << again_ack.error_message();
  EXPECT_EQ(again_ack.accepted(), 1);
  // What was written: the refused batch left nothing.
  pqxx::connection connection(postgres_->url());
  pqxx::nontransaction query(connection);
  auto labels_of = [&](const std::string& project) {
    return query
        .exec_params1("SELECT count(*) FROM annotations a JOIN projects p USING (project_id) "
                      "WHERE p.name = $1",
                      project)[0]
        .as<int>();
  };
  EXPECT_EQ(labels_of(kShareA), 2);
  EXPECT_EQ(labels_of(kShareB), 3);
  (*limited)->Shutdown();
}

TEST_F(AuthTest, MalformedAuthorizationIsUnauthenticatedAndHealthChecksNeedNoKey) {
  for (const std::string& value :
       {std::string("Basic abc"), (*keys_)[Caller::kAdmin], std::string("Bearer nonsense")}) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", value);
    v1::ListProjectsResponse response;
    grpc::Status status = v1::ProjectService::NewStub(*channel_)->ListProjects(
        &context, v1::ListProjectsRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << value;
    EXPECT_FALSE(absl::StrContains(status.error_message(), absl::StripPrefix(value, "Bearer ")))
        << "the refusal must not echo the key: " << status.error_message();
  }
  // grpc.health.v1.Health/Check with an empty request (every service).
  absl::StatusOr<::verity::testing::Health> health = ::verity::testing::CheckHealth(*channel_, "");
  EXPECT_TRUE(health.ok()) << health.status();
}

TEST_F(AuthTest, TheBootstrapKeyIsPrivateAndMadeOnce) {
  struct stat info {};
  ASSERT_EQ(stat(admin_key_file_->c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600);
  // A second server on the same database finds the admin key and writes no other.
  const std::string before = ReadFirstLine(*admin_key_file_);
  std::unique_ptr<server::VerityServer> second = StartServer();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(ReadFirstLine(*admin_key_file_), before);
  second->Shutdown();
}

// docs/SECURITY.md: a reader "Cannot ... see another project's name or data". A key scoped to
// alpha learns nothing about which other names exist: a project that exists outside its scope
// and one that does not are refused alike, and a scoped admin creating a taken name outside
// its scope is refused for its scope, not told the name is taken.
TEST_F(AuthTest, AScopedKeyCannotTellWhichOtherProjectsExist) {
  auto get = [&](Caller caller, const std::string& project) {
    v1::GetProjectRequest request;
    request.set_project(project);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[caller]);
    return v1::ProjectService::NewStub(*channel_)->GetProject(&context, request, &response);
  };
  for (Caller caller : {Caller::kReader, Caller::kWriter, Caller::kScopedAdmin}) {
    const grpc::Status existing = get(caller, kOtherProject);
    const grpc::Status missing = get(caller, "no-such-project-anywhere");
    EXPECT_EQ(existing.error_code(), grpc::StatusCode::PERMISSION_DENIED) << CallerName(caller);
    EXPECT_EQ(missing.error_code(), existing.error_code())
        << CallerName(caller) << ": " << missing.error_message();
  }
  v1::CreateProjectRequest create;
  create.mutable_project()->set_name(kOtherProject);
  create.mutable_project()->add_classes("a");
  create.mutable_project()->add_classes("b");
  v1::CreateProjectResponse created;
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kScopedAdmin]);
  const grpc::Status taken =
      v1::ProjectService::NewStub(*channel_)->CreateProject(&context, create, &created);
  EXPECT_EQ(taken.error_code(), grpc::StatusCode::PERMISSION_DENIED) << taken.error_message();
}

// keys.proto: a key touches the projects it names; project names are case-sensitive
// ([A-Za-z0-9._-]), so a key for "alpha" is not valid for "ALPHA".
TEST_F(AuthTest, AKeysProjectsAreMatchedByExactName) {
  v1::CreateProjectRequest create;
  create.mutable_project()->set_name("ALPHA");
  create.mutable_project()->add_classes("a");
  create.mutable_project()->add_classes("b");
  v1::CreateProjectResponse created;
  {
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    const grpc::Status status =
        v1::ProjectService::NewStub(*channel_)->CreateProject(&context, create, &created);
    ASSERT_TRUE(status.ok() || status.error_code() == grpc::StatusCode::ALREADY_EXISTS);
  }
  v1::GetProjectRequest request;
  request.set_project("ALPHA");
  v1::GetProjectResponse response;
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kReader]);
  EXPECT_EQ(v1::ProjectService::NewStub(*channel_)->GetProject(&context, request, &response)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

// keys.proto: a reader's calls are queries; SuggestAnnotators "Does not lease", and unknown
// candidates "are scored once, with the population's confusion". None of a reader's calls may
// register an annotator or an item in the project (docs/SECURITY.md: a reader cannot "Write
// anything").
TEST_F(AuthTest, AReadersQueriesRegisterNothing) {
  auto counts = [&] {
    v1::GetProjectRequest request;
    request.set_project(kProject);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    EXPECT_TRUE(
        v1::ProjectService::NewStub(*channel_)->GetProject(&context, request, &response).ok());
    return std::make_pair(response.project().num_items(), response.project().num_annotators());
  };
  const auto before = counts();
  const std::string reader = (*keys_)[Caller::kReader];
  {
    v1::SuggestAnnotatorsRequest request;
    request.set_project(kProject);
    request.set_item("item-1");
    request.set_k(5);
    for (int i = 0; i < 5; ++i) request.add_candidates(absl::StrCat("reader-made-", i));
    v1::SuggestAnnotatorsResponse response;
    grpc::ClientContext context;
    Authorize(context, reader);
    const grpc::Status status =
        v1::AssignmentService::NewStub(*channel_)->SuggestAnnotators(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  {
    v1::GetPosteriorsRequest request;
    request.set_project(kProject);
    request.add_items("reader-made-item");
    v1::GetPosteriorsResponse response;
    grpc::ClientContext context;
    Authorize(context, reader);
    EXPECT_EQ(v1::TruthService::NewStub(*channel_)->GetPosteriors(&context, request, &response)
                  .error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    v1::GetAnnotatorProfilesRequest request;
    request.set_project(kProject);
    request.add_annotators("reader-made-0");
    v1::GetAnnotatorProfilesResponse response;
    grpc::ClientContext context;
    Authorize(context, reader);
    EXPECT_EQ(v1::TruthService::NewStub(*channel_)
                  ->GetAnnotatorProfiles(&context, request, &response)
                  .error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(counts(), before);
}

// docs/SECURITY.md: the console's /api/ "needs Authorization: Bearer KEY ... 401 without a
// valid key": a revoked key is not valid.
TEST_F(AuthTest, TheConsoleRefusesARevokedKey) {
  server::VerityServer::Options options = ServerOptions();
  options.metrics_listen = "127.0.0.1:0";
  auto console_server = server::VerityServer::Start(options);
  ASSERT_TRUE(console_server.ok()) << console_server.status();
  const int port = (*console_server)->metrics_port();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*console_server)->port()),
                                     grpc::InsecureChannelCredentials());
  // Made through the console's own server, which knows it at once.
  std::string key;
  {
    v1::CreateKeyRequest create;
    create.set_role(v1::ROLE_READER);
    create.add_projects(kProject);
    v1::CreateKeyResponse created;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kAdmin]);
    ASSERT_TRUE(v1::KeyService::NewStub(channel)->CreateKey(&context, create, &created).ok());
    key = created.secret_key();
  }
  auto status_of = [&](const std::string& path) {
    absl::StatusOr<testing::HttpResponse> response = testing::HttpGet(
        port, path, {{"Host", "127.0.0.1"}, {"Authorization", "Bearer " + key}});
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->status : 0;
  };
  ASSERT_EQ(status_of("/api/projects/alpha"), 200);
  // Revoked through the console's own server: at once.
  v1::RevokeKeyRequest request;
  request.set_key_id(key.substr(3, 16));
  v1::RevokeKeyResponse revoked;
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kAdmin]);
  ASSERT_TRUE(v1::KeyService::NewStub(channel)->RevokeKey(&context, request, &revoked).ok());
  EXPECT_EQ(status_of("/api/projects"), 401);
  EXPECT_EQ(status_of("/api/projects/alpha"), 401);
  EXPECT_EQ(status_of("/api/projects/alpha/annotators"), 401);
  (*console_server)->Shutdown();
}

// docs/SECURITY.md: --max_calls_per_key counts "Unary calls in flight per API key, admin keys
// included": an admin key of every project is held to it too.
TEST_F(AuthTest, AnAdminKeyIsHeldToItsShareOfUnaryCalls) {
  const std::string admin = (*keys_)[Caller::kAdmin];
  WhileAKeysOnlyCallIsHeld(admin, "admin-calls-in-flight",
                           [&](std::shared_ptr<grpc::Channel> channel) {
    grpc::ClientContext context;
    Authorize(context, admin);
    v1::ListKeysResponse keys;
    const grpc::Status refused =
        v1::KeyService::NewStub(channel)->ListKeys(&context, v1::ListKeysRequest(), &keys);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << refused.error_message();
    EXPECT_TRUE(absl::StrContains(refused.error_message(), "--max_calls_per_key"))
        << refused.error_message();
  });
}

// docs/SECURITY.md: project names are at most 128 bytes (INVALID_ARGUMENT naming the field),
// and a reader "Cannot ... see another project's name". A scoped key's unary call naming a
// 1 MiB project is refused with PERMISSION_DENIED or INVALID_ARGUMENT, in a short message: the
// refusal must not echo the name back whole (the client cannot even read such a status).
TEST_F(AuthTest, AHugeProjectNameFromAScopedKeyIsRefusedWithAShortAnswer) {
  v1::GetProjectRequest request;
  request.set_project(std::string(1 << 20, 'n'));
  v1::GetProjectResponse response;
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kReader]);
  const grpc::Status status =
      v1::ProjectService::NewStub(*channel_)->GetProject(&context, request, &response);
  EXPECT_TRUE(status.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
              status.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_code() << ": " << status.error_message().substr(0, 200);
  EXPECT_LE(status.error_message().size(), 1024u);
}

// The same in a SubmitAnnotations batch. ingest.proto, BatchAck: "an ack stays small whatever
// the batch held"; the ack refuses the batch with a short error_message.
TEST_F(AuthTest, AHugeProjectNameInAScopedKeysBatchIsRefusedWithAShortAck) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kWriter]);
  auto stream = v1::IngestService::NewStub(channel)->SubmitAnnotations(&context);
  v1::AnnotationBatch batch;
  batch.set_batch_id(1);
  batch.set_project(std::string(1 << 20, 'n'));
  v1::Annotation* a = batch.add_annotations();
  a->set_item("i");
  a->set_annotator("w");
  a->set_label(0);
  ASSERT_TRUE(stream->Write(batch));
  v1::BatchAck ack;
  const bool acked = stream->Read(&ack);
  stream->WritesDone();
  v1::BatchAck more;
  while (stream->Read(&more)) {
  }
  const grpc::Status finished = stream->Finish();
  ASSERT_TRUE(acked) << finished.error_code() << ": " << finished.error_message().substr(0, 200);
  EXPECT_TRUE(ack.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
              ack.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << ack.error_code();
  EXPECT_LE(ack.error_message().size(), 1024u);
}

// projects.proto: CreateProject is "INVALID_ARGUMENT on a bad name"; Project.name is "1-128
// characters of [A-Za-z0-9._-]"; docs/SECURITY.md: project names over 128 bytes get
// INVALID_ARGUMENT. A scoped key's bad name is no project it could be refused (as an empty
// stream project is not: AFirstBatchWithoutAProjectIsInvalidForAScopedKeyToo), so it gets the
// validation error naming `project`, as every other caller does.
TEST_F(AuthTest, AScopedKeysMalformedProjectNameIsInvalidNotDenied) {
  {
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name("bad name");
    request.mutable_project()->add_classes("a");
    request.mutable_project()->add_classes("b");
    v1::CreateProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kScopedAdmin]);
    const grpc::Status status =
        v1::ProjectService::NewStub(*channel_)->CreateProject(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_TRUE(absl::StartsWith(status.error_message(), "project")) << status.error_message();
  }
  {
    v1::GetProjectRequest request;
    request.set_project(std::string(129, 'n'));
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, (*keys_)[Caller::kReader]);
    const grpc::Status status =
        v1::ProjectService::NewStub(*channel_)->GetProject(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_TRUE(absl::StartsWith(status.error_message(), "project")) << status.error_message();
  }
}

// docs/SECURITY.md: an admin key scoped to projects may "create a project whose name it lists",
// and "Cannot: Touch other projects"; ListProjects answers "The projects the caller's key may
// see" (projects.proto). A scoped admin creating the projects its key lists (each with the
// allowed 256 classes of 128 bytes) must not make ListProjects fail for other keys: here the
// listing of every project passes gRPC's 16 MiB message limit and the admin of every project
// (and any unscoped reader) can no longer list at all. On a database of its own.
TEST_F(AuthTest, AScopedAdminsProjectsDoNotBreakListProjectsForOtherKeys) {
  std::unique_ptr<TestPostgres> own = TestPostgres::Start("verity-auth-list");
  ASSERT_NE(own, nullptr);
  server::VerityServer::Options options = TestServerOptions(own->url(), 4);
  options.auth.enabled = true;
  options.auth.admin_key_file = own->dir() + "/admin.key";
  auto server = server::VerityServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  const std::string admin = ReadFirstLine(own->dir() + "/admin.key");
  constexpr int kProjects = 530;
  v1::CreateKeyRequest key_request;
  key_request.set_role(v1::ROLE_ADMIN);
  for (int i = 0; i < kProjects; ++i) key_request.add_projects(absl::StrCat("wide-", i));
  v1::CreateKeyResponse key;
  {
    grpc::ClientContext context;
    Authorize(context, admin);
    ASSERT_TRUE(v1::KeyService::NewStub(channel)->CreateKey(&context, key_request, &key).ok());
  }
  auto projects = v1::ProjectService::NewStub(channel);
  for (int i = 0; i < kProjects; ++i) {
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(absl::StrCat("wide-", i));
    for (int c = 0; c < 256; ++c) {
      std::string name = absl::StrCat("class-", c, "-");
      name.resize(128, 'x');
      request.mutable_project()->add_classes(name);
    }
    v1::CreateProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, key.secret_key());
    const grpc::Status status = projects->CreateProject(&context, request, &response);
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
  }
  // projects.proto: a page at a time, in creation order, each page's projects past 1 MiB
  // ending it (a page fits a default client's 4 MiB); every project on exactly one page.
  std::vector<std::string> names;
  v1::ListProjectsRequest request;
  int pages = 0;
  do {
    grpc::ClientContext context;
    Authorize(context, admin);
    v1::ListProjectsResponse listed;
    const grpc::Status status = projects->ListProjects(&context, request, &listed);
    ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
    EXPECT_LT(listed.ByteSizeLong(), (size_t{1} << 20) + 40000);
    for (const v1::Project& p : listed.projects()) names.push_back(p.name());
    request.set_page_token(listed.next_page_token());
    ++pages;
  } while (!request.page_token().empty() && pages < 1000);
  EXPECT_GE(pages, 16);  // 530 projects of about 33 KB
  ASSERT_EQ(names.size(), static_cast<size_t>(kProjects));
  for (int i = 0; i < kProjects; ++i) EXPECT_EQ(names[i], absl::StrCat("wide-", i));
  // The client library follows the pages.
  client::ClientOptions client_options;
  client_options.api_key = admin;
  client::VerityClient verity(channel, client_options);
  absl::StatusOr<std::vector<v1::Project>> all = verity.ListProjects();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), static_cast<size_t>(kProjects));
  // A token this server did not issue.
  grpc::ClientContext context;
  Authorize(context, admin);
  request.set_page_token("not-a-token");
  v1::ListProjectsResponse refused;
  const grpc::Status status = projects->ListProjects(&context, request, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(status.error_message(), "page_token: ")) << status.error_message();
  (*server)->Shutdown();
}

// docs/SECURITY.md: "Health and reflection pass without a key"; --max_calls_per_key exists so
// that "one key cannot hold [gRPC's thread pool, --max_streams + 256 threads] with slow calls",
// and the network is trusted with "Nothing". A caller with no key at all, holding open
// reflection streams (each a server thread waiting for its first message), must not hold every
// thread either: a keyed call is still served. --max_streams=1 makes the pool 257 threads.
TEST_F(AuthTest, OpenKeylessReflectionStreamsDoNotHoldEveryServerThread) {
  server::VerityServer::Options options = ServerOptions();
  options.max_streams = 1;
  auto limited = server::VerityServer::Start(options);
  ASSERT_TRUE(limited.ok()) << limited.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*limited)->port()),
                                     grpc::InsecureChannelCredentials());
  ASSERT_TRUE(GetOwnProject(channel, (*keys_)[Caller::kReader]).ok());
  constexpr int kStreams = 400;
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncReaderWriter>> streams;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(generic.PrepareCall(
        contexts.back().get(), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        &queue));
    streams.back()->StartCall(reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  }
  void* tag = nullptr;
  bool ok = false;
  for (int started = 0; started < kStreams && queue.Next(&tag, &ok); ++started) {
  }
  absl::SleepFor(absl::Seconds(1));
  grpc::Status served;
  {
    v1::GetProjectRequest request;
    request.set_project(kProject);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    context.AddMetadata("authorization", "Bearer " + (*keys_)[Caller::kReader]);
    served = v1::ProjectService::NewStub(channel)->GetProject(&context, request, &response);
  }
  EXPECT_TRUE(served.ok()) << "a keyed call during " << kStreams
                           << " open keyless reflection streams: " << served.error_code() << " "
                           << served.error_message();
  for (auto& context : contexts) context->TryCancel();
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  (*limited)->Shutdown();
}

// ingest.proto, BatchAck: "Acks come in the order the batches were sent." A scoped writer's
// batches written back to back, one refused for its project between admitted ones (and one
// without a project after it), are acked 1, 2, 3, 4, ... in order.
TEST_F(AuthTest, AcksOfAScopedKeysRefusedBatchesComeInOrder) {
  grpc::ClientContext context;
  Authorize(context, (*keys_)[Caller::kWriter]);
  auto stream = v1::IngestService::NewStub(*channel_)->SubmitAnnotations(&context);
  constexpr int kBatches = 40;
  for (int id = 1; id <= kBatches; ++id) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(id);
    batch.set_project(id % 3 == 2 ? kOtherProject : (id % 3 == 0 ? "" : kProject));
    for (int j = 0; j < 200; ++j) {
      v1::Annotation* a = batch.add_annotations();
      a->set_item(absl::StrCat("ordered-", id, "-", j));
      a->set_annotator("ordered");
      a->set_label(j % 2);
    }
    ASSERT_TRUE(stream->Write(batch));
  }
  stream->WritesDone();
  std::vector<uint64_t> order;
  for (v1::BatchAck ack; stream->Read(&ack);) {
    order.push_back(ack.batch_id());
    if (ack.batch_id() % 3 == 2) {
      EXPECT_EQ(ack.error_code(), grpc::StatusCode::PERMISSION_DENIED) << ack.batch_id();
    } else {
      EXPECT_EQ(ack.error_code(), 0) << ack.batch_id() << ": " << ack.error_message();
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  std::vector<uint64_t> sent;
  for (int id = 1; id <= kBatches; ++id) sent.push_back(id);
  EXPECT_EQ(order, sent);
}

TEST(AuthOffTest, IsRefusedOnANameThatOnlyLooksLikeLoopback) {
  server::VerityServer::Options options;
  options.listen = "127.evil.example:0";
  options.postgres_url = "postgresql:///never-reached";
  options.transport.insecure = true;
  auto started = server::VerityServer::Start(options);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kFailedPrecondition) << started.status();
  EXPECT_TRUE(absl::StrContains(started.status().message(), "authentication"))
      << started.status();
}

TEST(AuthOffTest, IsRefusedOffLoopback) {
  server::VerityServer::Options options;
  options.listen = "0.0.0.0:0";
  options.postgres_url = "postgresql:///never-reached";
  options.transport.insecure = true;
  auto started = server::VerityServer::Start(options);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(started.status().message(), "authentication"))
      << started.status();
}

}  // namespace
}  // namespace verity::tests
