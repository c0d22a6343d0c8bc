// Cross-tenant probe: every RPC that names a project, called over a real gRPC channel against a
// real server (authentication on) and PostgreSQL with keys scoped to one project ("alpha"),
// naming another tenant's project ("beta") or one that does not exist.
//
// What is promised (docs/SECURITY.md "Who is trusted", README.md's key section, keys.proto):
// a valid key used outside its projects fails PERMISSION_DENIED; a scoped key "Cannot: Touch
// other projects" (admin), "see another project's name or data" (reader), and a refused call
// writes nothing. So a key of alpha asking about beta must get PERMISSION_DENIED, and the
// answer must not depend on what beta holds: whether an item or annotator exists there, or
// whether beta exists at all. Per-key limits are per key: --max_calls_per_key counts unary
// calls, and streams have their own limit (--max_streams_per_key).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/verity_server.h"
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

constexpr char kOwn[] = "alpha";            // The scoped keys' project.
constexpr char kOther[] = "beta";           // Another tenant's project.
constexpr char kAbsent[] = "gamma-absent";  // No project of that name exists.
// What each project holds: one item, one annotator, one label of that pair.
constexpr char kOwnItem[] = "a-item";
constexpr char kOwnAnnotator[] = "a-annotator";
constexpr char kOtherItem[] = "b-item";
constexpr char kOtherAnnotator[] = "b-annotator";
// Ids that no project holds.
constexpr char kMissingItem[] = "no-item";
constexpr char kMissingAnnotator[] = "no-annotator";
constexpr char kTraceItem[] = "trace-item";
constexpr char kTraceAnnotator[] = "trace-annotator";

enum class NeededRole { kReader = 1, kWriter = 2, kAdmin = 3 };

// A call's outcome: for SubmitAnnotations, the batch's ack (error_code, error_message) when the
// stream itself ends OK. answer_bytes: the encoded size of the response message the client
// received (0 for SubmitAnnotations, whose acks are its answer).
struct Outcome {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;
  size_t answer_bytes = 0;
};

Outcome FromStatus(const grpc::Status& status, const google::protobuf::Message& answer) {
  return Outcome{status.error_code(), status.error_message(), answer.ByteSizeLong()};
}

// One RPC with a request naming `project`, `item` and `annotator` where the request has them.
using ProjectCall = std::function<Outcome(const std::string& key, const std::string& project,
                                          const std::string& item, const std::string& annotator)>;

// The role each RPC needs, by hand from docs/SECURITY.md's table (reader: GetProject, posteriors,
// profiles, model status and versions, SuggestAnnotators; writer: also SubmitAnnotations,
// AddItems, AddAnnotators, SuggestItems, TrainModel; admin: CreateProject, settings).
struct ProjectRpc {
  const char* name;
  NeededRole role;
  ProjectCall call;
};

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

class CrossTenantTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    postgres_ = TestPostgres::Start("verity-cross-tenant").release();
    ASSERT_NE(postgres_, nullptr);
    admin_key_file_ = new std::string(postgres_->dir() + "/admin.key");
    auto started = server::VerityServer::Start(Options());
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
    channel_ = new std::shared_ptr<grpc::Channel>(Channel(server_->port()));
    admin_ = new std::string(ReadFirstLine(*admin_key_file_));
    ASSERT_TRUE(absl::StartsWith(*admin_, "vk_"));
    for (const auto& [project, item, annotator] :
         {std::tuple<const char*, const char*, const char*>{kOwn, kOwnItem, kOwnAnnotator},
          {kOther, kOtherItem, kOtherAnnotator}}) {
      v1::CreateProjectRequest create;
      create.mutable_project()->set_name(project);
      create.mutable_project()->add_classes("no");
      create.mutable_project()->add_classes("yes");
      v1::CreateProjectResponse created;
      grpc::ClientContext context;
      Authorize(context, *admin_);
      ASSERT_TRUE(
          v1::ProjectService::NewStub(*channel_)->CreateProject(&context, create, &created).ok());
      const Outcome labelled = SubmitOne(*channel_, *admin_, project, item, annotator);
      ASSERT_EQ(labelled.code, grpc::StatusCode::OK) << labelled.message;
    }
    reader_ = new std::string(CreateKey(v1::ROLE_READER));
    writer_ = new std::string(CreateKey(v1::ROLE_WRITER));
    scoped_admin_ = new std::string(CreateKey(v1::ROLE_ADMIN));
    other_at_start_ = new std::string(OtherProjectState());
  }

  static void TearDownTestSuite() {
    delete channel_;
    if (server_ != nullptr) server_->Shutdown();
    delete server_;
    delete postgres_;
  }

  static server::VerityServer::Options Options() {
    server::VerityServer::Options options = TestServerOptions(postgres_->url(), 4);
    options.auth.enabled = true;
    options.auth.admin_key_file = *admin_key_file_;
    return options;
  }

  static std::shared_ptr<grpc::Channel> Channel(int port) {
    return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                               grpc::InsecureChannelCredentials());
  }

  // Sends `key` ("" = none).
  static void Authorize(grpc::ClientContext& context, const std::string& key) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
  }

  // A key of `role` valid for `projects` (empty: every project).
  static std::string CreateKey(v1::Role role, const std::vector<std::string>& projects = {kOwn}) {
    v1::CreateKeyRequest request;
    request.set_role(role);
    request.set_name("cross_tenant_test");
    for (const std::string& project : projects) request.add_projects(project);
    v1::CreateKeyResponse response;
    grpc::ClientContext context;
    Authorize(context, *admin_);
    const grpc::Status status =
        v1::KeyService::NewStub(*channel_)->CreateKey(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.secret_key();
  }

  // One batch of one label (item, annotator, 1) on a fresh stream: the batch's ack as an
  // Outcome, or the stream's status when it fails.
  static Outcome SubmitOne(const std::shared_ptr<grpc::Channel>& channel, const std::string& key,
                           const std::string& project, const std::string& item,
                           const std::string& annotator) {
    grpc::ClientContext context;
    Authorize(context, key);
    auto stream = v1::IngestService::NewStub(channel)->SubmitAnnotations(&context);
    v1::AnnotationBatch batch;
    batch.set_batch_id(1);
    batch.set_project(project);
    v1::Annotation* a = batch.add_annotations();
    a->set_item(item);
    a->set_annotator(annotator);
    a->set_label(1);
    stream->Write(batch);
    stream->WritesDone();
    v1::BatchAck ack;
    const bool acked = stream->Read(&ack);
    const grpc::Status status = stream->Finish();
    if (!status.ok()) return Outcome{status.error_code(), status.error_message()};
    if (!acked) return Outcome{grpc::StatusCode::UNKNOWN, "no ack"};
    return Outcome{static_cast<grpc::StatusCode>(ack.error_code()), ack.error_message()};
  }

  // Every RPC that names a project, each with a request that succeeds on the key's own project.
  static std::vector<ProjectRpc> ProjectRpcs() {
    std::vector<ProjectRpc> rpcs;
    auto projects = [] { return v1::ProjectService::NewStub(*channel_); };
    auto truth = [] { return v1::TruthService::NewStub(*channel_); };
    auto models = [] { return v1::ModelService::NewStub(*channel_); };
    auto assignment = [] { return v1::AssignmentService::NewStub(*channel_); };
    using S = const std::string&;
    rpcs.push_back({"CreateProject", NeededRole::kAdmin, [=](S key, S project, S, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::CreateProjectRequest r;
                      r.mutable_project()->set_name(project);
                      r.mutable_project()->add_classes("a");
                      r.mutable_project()->add_classes("b");
                      v1::CreateProjectResponse out;
                      return FromStatus(projects()->CreateProject(&c, r, &out), out);
                    }});
    rpcs.push_back({"GetProject", NeededRole::kReader, [=](S key, S project, S, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::GetProjectRequest r;
                      r.set_project(project);
                      v1::GetProjectResponse out;
                      return FromStatus(projects()->GetProject(&c, r, &out), out);
                    }});
    rpcs.push_back({"UpdateProjectSettings", NeededRole::kAdmin, [=](S key, S project, S, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::UpdateProjectSettingsRequest r;
                      r.set_project(project);
                      v1::UpdateProjectSettingsResponse out;
                      return FromStatus(projects()->UpdateProjectSettings(&c, r, &out), out);
                    }});
    rpcs.push_back({"AddItems", NeededRole::kWriter, [=](S key, S project, S item, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::AddItemsRequest r;
                      r.set_project(project);
                      r.add_items()->set_id(item);
                      v1::AddItemsResponse out;
                      return FromStatus(projects()->AddItems(&c, r, &out), out);
                    }});
    rpcs.push_back({"AddAnnotators", NeededRole::kWriter, [=](S key, S project, S, S annotator) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::AddAnnotatorsRequest r;
                      r.set_project(project);
                      r.add_annotators()->set_id(annotator);
                      v1::AddAnnotatorsResponse out;
                      return FromStatus(projects()->AddAnnotators(&c, r, &out), out);
                    }});
    rpcs.push_back(
        {"SubmitAnnotations", NeededRole::kWriter, [=](S key, S project, S item, S annotator) {
           return SubmitOne(*channel_, key, project, item, annotator);
         }});
    rpcs.push_back({"GetPosteriors", NeededRole::kReader, [=](S key, S project, S item, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::GetPosteriorsRequest r;
                      r.set_project(project);
                      r.add_items(item);
                      v1::GetPosteriorsResponse out;
                      return FromStatus(truth()->GetPosteriors(&c, r, &out), out);
                    }});
    rpcs.push_back({"ListPosteriors", NeededRole::kReader, [=](S key, S project, S, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::ListPosteriorsRequest r;
                      r.set_project(project);
                      r.set_page_size(1);
                      v1::ListPosteriorsResponse out;
                      return FromStatus(truth()->ListPosteriors(&c, r, &out), out);
                    }});
    rpcs.push_back(
        {"GetAnnotatorProfiles", NeededRole::kReader, [=](S key, S project, S, S annotator) {
           grpc::ClientContext c;
           Authorize(c, key);
           v1::GetAnnotatorProfilesRequest r;
           r.set_project(project);
           r.add_annotators(annotator);
           v1::GetAnnotatorProfilesResponse out;
           return FromStatus(truth()->GetAnnotatorProfiles(&c, r, &out), out);
         }});
    rpcs.push_back({"GetModelStatus", NeededRole::kReader, [=](S key, S project, S, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::GetModelStatusRequest r;
                      r.set_project(project);
                      v1::GetModelStatusResponse out;
                      return FromStatus(models()->GetModelStatus(&c, r, &out), out);
                    }});
    rpcs.push_back({"ListModelVersions", NeededRole::kReader, [=](S key, S project, S, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::ListModelVersionsRequest r;
                      r.set_project(project);
                      v1::ListModelVersionsResponse out;
                      return FromStatus(models()->ListModelVersions(&c, r, &out), out);
                    }});
    rpcs.push_back({"TrainModel", NeededRole::kWriter, [=](S key, S project, S, S) {
                      grpc::ClientContext c;
                      Authorize(c, key);
                      v1::TrainModelRequest r;
                      r.set_project(project);
                      v1::TrainModelResponse out;
                      return FromStatus(models()->TrainModel(&c, r, &out), out);
                    }});
    rpcs.push_back(
        {"SuggestItems", NeededRole::kWriter, [=](S key, S project, S item, S annotator) {
           grpc::ClientContext c;
           Authorize(c, key);
           v1::SuggestItemsRequest r;
           r.set_project(project);
           r.set_annotator(annotator);
           r.set_k(1);
           r.add_candidate_items(item);
           v1::SuggestItemsResponse out;
           return FromStatus(assignment()->SuggestItems(&c, r, &out), out);
         }});
    rpcs.push_back(
        {"SuggestAnnotators", NeededRole::kReader, [=](S key, S project, S item, S annotator) {
           grpc::ClientContext c;
           Authorize(c, key);
           v1::SuggestAnnotatorsRequest r;
           r.set_project(project);
           r.set_item(item);
           r.set_k(1);
           r.add_candidates(annotator);
           v1::SuggestAnnotatorsResponse out;
           return FromStatus(assignment()->SuggestAnnotators(&c, r, &out), out);
         }});
    return rpcs;
  }

  // The scoped keys that hold `role` or more, with their names.
  static std::vector<std::pair<std::string, std::string>> KeysWith(NeededRole role) {
    std::vector<std::pair<std::string, std::string>> keys;
    if (role <= NeededRole::kReader) keys.emplace_back("reader", *reader_);
    if (role <= NeededRole::kWriter) keys.emplace_back("writer", *writer_);
    keys.emplace_back("admin of alpha", *scoped_admin_);
    return keys;
  }

  // kOther as the admin of every project sees it: its description (counts and settings; the
  // creation time and name too) and its model versions.
  static std::string OtherProjectState() {
    v1::GetProjectRequest get;
    get.set_project(kOther);
    v1::GetProjectResponse project;
    grpc::ClientContext get_context;
    Authorize(get_context, *admin_);
    const grpc::Status got =
        v1::ProjectService::NewStub(*channel_)->GetProject(&get_context, get, &project);
    EXPECT_TRUE(got.ok()) << got.error_message();
    v1::ListModelVersionsRequest list;
    list.set_project(kOther);
    v1::ListModelVersionsResponse versions;
    grpc::ClientContext list_context;
    Authorize(list_context, *admin_);
    const grpc::Status listed =
        v1::ModelService::NewStub(*channel_)->ListModelVersions(&list_context, list, &versions);
    EXPECT_TRUE(listed.ok()) << listed.error_message();
    return project.project().DebugString() + versions.DebugString();
  }

  static TestPostgres* postgres_;
  static std::string* admin_key_file_;
  static server::VerityServer* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  static std::string* admin_;
  static std::string* reader_;
  static std::string* writer_;
  static std::string* scoped_admin_;
  static std::string* other_at_start_;  // OtherProjectState() once the suite set it up.
};

TestPostgres* CrossTenantTest::postgres_ = nullptr;
std::string* CrossTenantTest::admin_key_file_ = nullptr;
server::VerityServer* CrossTenantTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* CrossTenantTest::channel_ = nullptr;
std::string* CrossTenantTest::admin_ = nullptr;
std::string* CrossTenantTest::reader_ = nullptr;
std::string* CrossTenantTest::writer_ = nullptr;
std::string* CrossTenantTest::scoped_admin_ = nullptr;
std::string* CrossTenantTest::other_at_start_ = nullptr;

// The requests are sound: on the key's own project each call passes authorization (OK; for
// CreateProject, ALREADY_EXISTS: alpha exists), so a refusal below is about the project alone.
TEST_F(CrossTenantTest, EachCallIsServedOnTheKeysOwnProject) {
  for (const ProjectRpc& rpc : ProjectRpcs()) {
    for (const auto& [who, key] : KeysWith(rpc.role)) {
      const Outcome own = rpc.call(key, kOwn, kOwnItem, kOwnAnnotator);
      const grpc::StatusCode expected = std::string(rpc.name) == "CreateProject"
                                            ? grpc::StatusCode::ALREADY_EXISTS
                                            : grpc::StatusCode::OK;
      EXPECT_EQ(own.code, expected) << rpc.name << " by " << who << ": " << own.message;
    }
  }
}

// A key of alpha naming beta gets PERMISSION_DENIED from every RPC that names a project, for
// every role that could make the call on alpha, and the answer is the same, word for word,
// whether beta holds the item and annotator the call names or not; a project that does not
// exist gets the same answer but for its name.
TEST_F(CrossTenantTest, AnotherTenantsProjectIsRefusedAlikeWhateverItHolds) {
  for (const ProjectRpc& rpc : ProjectRpcs()) {
    for (const auto& [who, key] : KeysWith(rpc.role)) {
      const std::string where = absl::StrCat(rpc.name, " by ", who);
      const Outcome held = rpc.call(key, kOther, kOtherItem, kOtherAnnotator);
      const Outcome missing = rpc.call(key, kOther, kMissingItem, kMissingAnnotator);
      const Outcome absent = rpc.call(key, kAbsent, kOtherItem, kOtherAnnotator);
      EXPECT_EQ(held.code, grpc::StatusCode::PERMISSION_DENIED) << where << ": " << held.message;
      EXPECT_EQ(held.answer_bytes, 0u) << where;
      EXPECT_EQ(missing.code, held.code) << where << ": " << missing.message;
      EXPECT_EQ(missing.message, held.message) << where;
      EXPECT_EQ(absent.code, held.code) << where << ": " << absent.message;
      EXPECT_EQ(absl::StrReplaceAll(absent.message, {{kAbsent, kOther}}), held.message) << where;
    }
  }
}

// README.md: a call without a valid key is refused UNAUTHENTICATED, one outside the key's role
// PERMISSION_DENIED. A refused call carries no answer either: no key, a key with a wrong
// secret, and each scoped key below the RPC's role get the refusal and an empty response
// message, on the key's own project, from every RPC that names a project and from KeyService.
TEST_F(CrossTenantTest, ARefusedCallCarriesNoAnswer) {
  std::string wrong = *reader_;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  for (const ProjectRpc& rpc : ProjectRpcs()) {
    std::vector<std::pair<std::string, std::string>> refused = {{"no key", ""},
                                                                {"wrong secret", wrong}};
    if (rpc.role > NeededRole::kReader) refused.emplace_back("reader", *reader_);
    if (rpc.role > NeededRole::kWriter) refused.emplace_back("writer", *writer_);
    for (const auto& [who, key] : refused) {
      const Outcome outcome = rpc.call(key, kOwn, kOwnItem, kOwnAnnotator);
      const grpc::StatusCode expected = key == *reader_ || key == *writer_
                                            ? grpc::StatusCode::PERMISSION_DENIED
                                            : grpc::StatusCode::UNAUTHENTICATED;
      EXPECT_EQ(outcome.code, expected) << rpc.name << " by " << who << ": " << outcome.message;
      EXPECT_EQ(outcome.answer_bytes, 0u) << rpc.name << " by " << who;
    }
  }
  for (const std::string& key : {std::string(), wrong, *reader_, *writer_, *scoped_admin_}) {
    v1::ListKeysResponse listed;
    grpc::ClientContext list;
    Authorize(list, key);
    EXPECT_FALSE(
        v1::KeyService::NewStub(*channel_)->ListKeys(&list, v1::ListKeysRequest(), &listed).ok());
    EXPECT_EQ(listed.keys_size(), 0);
    v1::CreateKeyRequest request;
    request.set_role(v1::ROLE_ADMIN);
    v1::CreateKeyResponse created;
    grpc::ClientContext create;
    Authorize(create, key);
    EXPECT_FALSE(v1::KeyService::NewStub(*channel_)->CreateKey(&create, request, &created).ok());
    EXPECT_EQ(created.ByteSizeLong(), 0u);
  }
}

// The refused calls write nothing: beta's counts, settings and model versions are as they were
// once the suite set it up (none of AddItems, AddAnnotators, SubmitAnnotations, SuggestItems'
// annotator registration, TrainModel or UpdateProjectSettings reached it, here or in the tests
// before), and CreateProject made no project.
TEST_F(CrossTenantTest, RefusedCallsLeaveAnotherTenantsProjectAsItWas) {
  for (const ProjectRpc& rpc : ProjectRpcs()) {
    for (const auto& [who, key] : KeysWith(rpc.role)) {
      rpc.call(key, kOther, kOtherItem, kOtherAnnotator);
      rpc.call(key, kOther, kTraceItem, kTraceAnnotator);
      rpc.call(key, kAbsent, kTraceItem, kTraceAnnotator);
    }
  }
  EXPECT_EQ(OtherProjectState(), *other_at_start_);
  v1::GetProjectRequest get;
  get.set_project(kAbsent);
  v1::GetProjectResponse response;
  grpc::ClientContext context;
  Authorize(context, *admin_);
  EXPECT_EQ(
      v1::ProjectService::NewStub(*channel_)->GetProject(&context, get, &response).error_code(),
      grpc::StatusCode::NOT_FOUND);
}

// ingest.proto: each batch names its project or continues the stream's last admitted one; a
// batch whose key is not valid for its project is refused (PERMISSION_DENIED) and changes
// nothing. On one stream of a writer of alpha, a batch naming beta and one naming a project
// that does not exist are refused alike, neither reaches beta, and the next batch that leaves
// its project out still goes to alpha.
TEST_F(CrossTenantTest, AStreamsBatchesForAnotherTenantAreRefusedAlikeAndTheStreamStaysOnItsOwn) {
  grpc::ClientContext context;
  Authorize(context, *writer_);
  auto stream = v1::IngestService::NewStub(*channel_)->SubmitAnnotations(&context);
  auto send = [&](uint64_t id, const std::string& project, const std::string& item) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(id);
    batch.set_project(project);
    v1::Annotation* a = batch.add_annotations();
    a->set_item(item);
    a->set_annotator("streaming-annotator");
    a->set_label(0);
    v1::BatchAck ack;
    EXPECT_TRUE(stream->Write(batch) && stream->Read(&ack)) << "batch " << id;
    return ack;
  };
  const v1::BatchAck own = send(1, kOwn, kOwnItem);
  EXPECT_EQ(own.error_code(), 0) << own.error_message();
  const v1::BatchAck other = send(2, kOther, kOtherItem);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED) << other.error_message();
  const v1::BatchAck absent = send(3, kAbsent, kOtherItem);
  EXPECT_EQ(absent.error_code(), other.error_code()) << absent.error_message();
  EXPECT_EQ(absl::StrReplaceAll(absent.error_message(), {{kAbsent, kOther}}),
            other.error_message());
  const v1::BatchAck continued = send(4, "", "streamed-item");
  EXPECT_EQ(continued.error_code(), 0) << continued.error_message();
  EXPECT_EQ(continued.accepted(), 1);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());

  EXPECT_EQ(OtherProjectState(), *other_at_start_);
  // Alpha holds both admitted labels of the annotator: batches 1 and 4.
  v1::GetAnnotatorProfilesRequest request;
  request.set_project(kOwn);
  request.add_annotators("streaming-annotator");
  v1::GetAnnotatorProfilesResponse response;
  grpc::ClientContext get;
  Authorize(get, *admin_);
  const grpc::Status status =
      v1::TruthService::NewStub(*channel_)->GetAnnotatorProfiles(&get, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.profiles_size(), 1);
  EXPECT_EQ(response.profiles(0).num_labels(), 2);
}

// keys.proto KeyService: "Admin-only, with an admin key valid for every project"; README.md:
// admin for "projects and settings, and keys when valid for every project". A reader or writer
// key valid for every project keeps its role: KeyService, CreateProject and
// UpdateProjectSettings refuse it, and the writer's calls refuse the reader (PERMISSION_DENIED);
// its refused RevokeKey revokes nothing and its refused CreateKey makes no key.
TEST_F(CrossTenantTest, KeysOfEveryProjectKeepTheirRole) {
  const std::string victim = CreateKey(v1::ROLE_READER);
  auto list_keys = [&](const std::string& key, v1::ListKeysResponse* out) {
    grpc::ClientContext c;
    Authorize(c, key);
    return v1::KeyService::NewStub(*channel_)->ListKeys(&c, v1::ListKeysRequest(), out);
  };
  v1::ListKeysResponse keys_before;
  ASSERT_TRUE(list_keys(*admin_, &keys_before).ok());
  for (const v1::Role role : {v1::ROLE_READER, v1::ROLE_WRITER}) {
    const std::string key = CreateKey(role, {});
    const std::string who = role == v1::ROLE_READER ? "reader" : "writer";
    v1::ListKeysResponse listed;
    EXPECT_EQ(list_keys(key, &listed).error_code(), grpc::StatusCode::PERMISSION_DENIED) << who;
    EXPECT_EQ(listed.keys_size(), 0) << who;
    {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::CreateKeyRequest r;
      r.set_role(v1::ROLE_ADMIN);
      v1::CreateKeyResponse out;
      const grpc::Status status = v1::KeyService::NewStub(*channel_)->CreateKey(&c, r, &out);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << who;
      EXPECT_EQ(out.secret_key(), "") << who;
    }
    {
      grpc::ClientContext c;
      Authorize(c, key);
      v1::RevokeKeyRequest r;
      r.set_key_id(victim.substr(3, 16));
      v1::RevokeKeyResponse out;
      EXPECT_EQ(v1::KeyService::NewStub(*channel_)->RevokeKey(&c, r, &out).error_code(),
                grpc::StatusCode::PERMISSION_DENIED)
          << who;
    }
    const NeededRole held = role == v1::ROLE_READER ? NeededRole::kReader : NeededRole::kWriter;
    for (const ProjectRpc& rpc : ProjectRpcs()) {
      if (rpc.role <= held) continue;
      const Outcome outcome = rpc.call(key, kOwn, kOwnItem, kOwnAnnotator);
      EXPECT_EQ(outcome.code, grpc::StatusCode::PERMISSION_DENIED)
          << rpc.name << " by " << who << ": " << outcome.message;
    }
  }
  // The victim key still works, and the admin lists the keys it listed plus the two made here.
  for (const ProjectRpc& rpc : ProjectRpcs()) {
    if (std::string(rpc.name) != "GetProject") continue;
    const Outcome outcome = rpc.call(victim, kOwn, kOwnItem, kOwnAnnotator);
    EXPECT_EQ(outcome.code, grpc::StatusCode::OK) << outcome.message;
  }
  v1::ListKeysResponse keys_after;
  ASSERT_TRUE(list_keys(*admin_, &keys_after).ok());
  EXPECT_EQ(keys_after.keys_size(), keys_before.keys_size() + 2);
}

// docs/SECURITY.md: --max_calls_per_key bounds the "Unary calls in flight per API key"; streams
// have their own limit (--max_streams_per_key; auth_interceptor.h). At a limit of one unary
// call, a writer holding an open SubmitAnnotations stream still gets its unary calls served,
// while the stream stays open and goes on taking batches.
TEST_F(CrossTenantTest, AnOpenStreamIsNotCountedAmongItsKeysUnaryCalls) {
  server::VerityServer::Options options = Options();
  options.max_calls_per_key = 1;
  auto started = server::VerityServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<server::VerityServer> limited = *std::move(started);
  const std::shared_ptr<grpc::Channel> channel = Channel(limited->port());
  grpc::ClientContext stream_context;
  Authorize(stream_context, *writer_);
  auto stream = v1::IngestService::NewStub(channel)->SubmitAnnotations(&stream_context);
  auto send = [&](uint64_t id) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(id);
    batch.set_project(kOwn);
    v1::Annotation* a = batch.add_annotations();
    a->set_item(kOwnItem);
    a->set_annotator(kOwnAnnotator);
    a->set_label(1);
    v1::BatchAck ack;
    EXPECT_TRUE(stream->Write(batch) && stream->Read(&ack)) << "batch " << id;
    EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  };
  send(1);
  for (int i = 0; i < 3; ++i) {
    v1::GetProjectRequest request;
    request.set_project(kOwn);
    v1::GetProjectResponse response;
    grpc::ClientContext context;
    Authorize(context, *writer_);
    const grpc::Status status =
        v1::ProjectService::NewStub(channel)->GetProject(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::OK) << status.error_message();
  }
  send(2);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  limited->Shutdown();
}

}  // namespace
}  // namespace verity::tests
