// KeyRing against a real PostgreSQL: a revoked key never comes back into the cache, and two
// servers bootstrapping one database at once mint one admin key.
#include "server/auth/key_ring.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/api/grpc_status.h"
#include "server/auth/auth_interceptor.h"
#include "server/auth/key_metadata_processor.h"
#include "storage/api_key_store.h"
#include "storage/testing/postgres_fixture.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"

namespace verity::server {
namespace {

class KeyRingTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<storage::ApiKeyStore>(&pool());
  }
  std::unique_ptr<storage::ApiKeyStore> store_;
};

TEST_F(KeyRingTest, ALoadThatReadTheKeysBeforeARevocationDoesNotBringTheKeyBack) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  auto created = ring.Create("victim", Role::kWriter, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(ring.Authenticate(created->text).ok());

  // The refresh reads the key list, then the key is revoked before the refresh installs it.
  bool revoked = false;
  ring.SetAfterListHookForTesting([&] {
    if (revoked) return;
    revoked = true;
    ASSERT_TRUE(ring.Revoke(created->record.key_id).ok());
  });
  ASSERT_TRUE(ring.Load().ok());
  ASSERT_TRUE(revoked);

  auto after = ring.Authenticate(created->text);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnauthenticated)
      << "the revoked key authenticates again: " << after.status();
}

TEST_F(KeyRingTest, ALoadThatReadTheKeysBeforeACreationKeepsTheNewKey) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  // The refresh reads the key list, then a key is created before the refresh installs it.
  std::optional<KeyRing::CreatedKey> created;
  ring.SetAfterListHookForTesting([&] {
    if (created.has_value()) return;
    auto key = ring.Create("newcomer", Role::kWriter, {}, "");
    ASSERT_TRUE(key.ok()) << key.status();
    created = *std::move(key);
  });
  ASSERT_TRUE(ring.Load().ok());
  ASSERT_TRUE(created.has_value());
  auto principal = ring.Authenticate(created->text);
  EXPECT_TRUE(principal.ok()) << "the new key was dropped: " << principal.status();
}

// key_ring.h: a key created on another server reaches this one "at once for an unknown key
// id", not only at the next periodic refresh (here an hour away).
TEST_F(KeyRingTest, AKeyCreatedOnAnotherServerAuthenticatesAtOnce) {
  std::unique_ptr<storage::ConnectionPool> other_pool = NewPool(1);
  storage::ApiKeyStore other_store(other_pool.get());
  KeyRing here(*store_, absl::Hours(1));
  KeyRing there(other_store, absl::Hours(1));
  ASSERT_TRUE(here.Load().ok());
  ASSERT_TRUE(there.Load().ok());
  // Past the one-refresh-per-second bound on unknown ids.
  absl::SleepFor(absl::Milliseconds(1100));
  auto created = there.Create("made-elsewhere", Role::kWriter, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  auto principal = here.Authenticate(created->text);
  EXPECT_TRUE(principal.ok()) << principal.status();
}

// key_ring.h Authenticate: UNAUTHENTICATED for "a wrong secret" also when the key id was
// unknown here and is found by the refresh it causes (a key created on another server).
TEST_F(KeyRingTest, AKeyFromAnotherServerWithAWrongSecretIsUnauthenticated) {
  std::unique_ptr<storage::ConnectionPool> other_pool = NewPool(1);
  storage::ApiKeyStore other_store(other_pool.get());
  KeyRing here(*store_, absl::Hours(1));
  KeyRing there(other_store, absl::Hours(1));
  ASSERT_TRUE(here.Load().ok());
  ASSERT_TRUE(there.Load().ok());
  absl::SleepFor(absl::Milliseconds(1100));  // Past the one-refresh-per-second bound.
  auto created = there.Create("made-elsewhere", Role::kAdmin, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  std::string forged = created->text;
  forged.back() = forged.back() == '0' ? '1' : '0';
  auto refused = here.Authenticate(forged);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_TRUE(here.Authenticate(created->text).ok());
}

// With the database down, a key the ring cannot check is UNAVAILABLE (retry later), not
// UNAUTHENTICATED (a wrong key); a key already in the cache still authenticates; a key that is
// not even well-formed is UNAUTHENTICATED without the database.
TEST_F(KeyRingTest, WithTheDatabaseDownUnknownKeysAreUnavailableAndCachedOnesStillWork) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  auto cached = ring.Create("cached", Role::kWriter, {}, "");
  ASSERT_TRUE(cached.ok()) << cached.status();
  // A well-formed key this ring has never seen (made, then revoked, through another ring).
  std::unique_ptr<storage::ConnectionPool> other_pool = NewPool(1);
  storage::ApiKeyStore other_store(other_pool.get());
  KeyRing other(other_store, absl::Hours(1));
  auto unknown = other.Create("unknown", Role::kWriter, {}, "");
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  ASSERT_TRUE(other.Revoke(unknown->record.key_id).ok());
  absl::SleepFor(absl::Milliseconds(1100));

  ASSERT_TRUE(cluster().Stop().ok());
  auto unavailable = ring.Authenticate(unknown->text);
  auto still = ring.Authenticate(cached->text);
  auto malformed = ring.Authenticate("not-a-key");
  ASSERT_TRUE(cluster().Start().ok());
  EXPECT_EQ(unavailable.status().code(), absl::StatusCode::kUnavailable) << unavailable.status();
  EXPECT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kUnauthenticated) << malformed.status();
}

TEST_F(KeyRingTest, ServersBootstrappingOneDatabaseAtOnceMintOneAdminKey) {
  constexpr int kServers = 6;
  constexpr int kRounds = 20;  // The race is a matter of timing: give it many chances.
  std::vector<std::unique_ptr<storage::ConnectionPool>> pools;
  std::vector<std::unique_ptr<storage::ApiKeyStore>> stores;
  for (int i = 0; i < kServers; ++i) {
    pools.push_back(NewPool(1));
    stores.push_back(std::make_unique<storage::ApiKeyStore>(pools.back().get()));
  }
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_TRUE(pool().RunInTransaction("emptying api_keys", [](pqxx::work& txn) {
                        txn.exec("DELETE FROM api_keys");
                        return absl::OkStatus();
                      }).ok());
    std::vector<std::unique_ptr<KeyRing>> rings;
    for (int i = 0; i < kServers; ++i) {
      rings.push_back(std::make_unique<KeyRing>(*stores[i], absl::Seconds(10)));
    }
    std::atomic<int> minted{0};
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kServers; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kServers) {
        }
        auto key = rings[i]->EnsureAdminKey();
        EXPECT_TRUE(key.ok()) << key.status();
        if (key.ok() && key->has_value()) minted.fetch_add(1);
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(minted.load(), 1) << "round " << round;
    auto keys = store_->List(/*include_revoked=*/true);
    ASSERT_TRUE(keys.ok());
    ASSERT_EQ(keys->size(), 1u) << "round " << round << ": bootstrap admin keys minted";
  }
}

}  // namespace
}  // namespace verity::server

// ---------------------------------------------------------------------------------------------
// Mutation-testing additions: KeyRing promises from key_ring.h, and the interceptor's promises
// from auth_interceptor.h, checked through a real in-process gRPC server whose fake handlers do
// what auth_interceptor.h requires of every handler (CallAuthorizations::Admit first).

namespace verity::server {
namespace {

// key_ring.h: "Creating and revoking through the ring update the cache at once".
TEST_F(KeyRingTest, AKeyRevokedThroughTheRingFailsAtOnce) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  auto created = ring.Create("short-lived", Role::kWriter, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(ring.Authenticate(created->text).ok());
  ASSERT_TRUE(ring.Revoke(created->record.key_id).ok());
  EXPECT_EQ(ring.Authenticate(created->text).status().code(),
            absl::StatusCode::kUnauthenticated);
}

// key_ring.h Authenticate: "UNAUTHENTICATED for ... a wrong secret", whether the key id is in
// the cache (just created) or not.
TEST_F(KeyRingTest, AKnownKeyIdWithAWrongSecretIsUnauthenticated) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  auto created = ring.Create("k", Role::kAdmin, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  std::string forged = created->text;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(ring.Authenticate(forged).status().code(), absl::StatusCode::kUnauthenticated);
  // The same from a ring that learns the key from the database.
  KeyRing other(*store_, absl::Hours(1));
  ASSERT_TRUE(other.Load().ok());
  EXPECT_EQ(other.Authenticate(forged).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(other.Authenticate(created->text).ok());
}

// api_keys.h Principal: an authenticated key is what its record says, its role and its
// projects (empty = every project), both as cached at creation and as read from the database.
TEST_F(KeyRingTest, APrincipalCarriesItsKeysRoleAndProjects) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  auto reader = ring.Create("scoped reader", Role::kReader, {"alpha", "gamma"}, "");
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto writer = ring.Create("writer", Role::kWriter, {}, "");
  ASSERT_TRUE(writer.ok()) << writer.status();
  KeyRing fresh(*store_, absl::Hours(1));
  ASSERT_TRUE(fresh.Load().ok());
  for (KeyRing* r : {&ring, &fresh}) {
    auto who = r->Authenticate(reader->text);
    ASSERT_TRUE(who.ok()) << who.status();
    EXPECT_EQ((*who)->key_id, reader->record.key_id);
    EXPECT_EQ((*who)->role, Role::kReader);
    EXPECT_EQ((*who)->projects, (std::vector<std::string>{"alpha", "gamma"}));
    EXPECT_TRUE((*who)->MayTouch("alpha"));
    EXPECT_FALSE((*who)->MayTouch("beta"));
    auto all = r->Authenticate(writer->text);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ((*all)->role, Role::kWriter);
    EXPECT_TRUE((*all)->AllProjects());
  }
}

// key_ring.h Create: "INVALID_ARGUMENT for a name over 256 bytes or an invalid project name"
// (keys.proto CreateKeyRequest.name: 0-256 bytes).
TEST_F(KeyRingTest, CreateRefusesANameOver256BytesAndInvalidProjectNames) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  EXPECT_TRUE(ring.Create(std::string(256, 'n'), Role::kReader, {}, "").ok());
  EXPECT_TRUE(ring.Create("", Role::kReader, {}, "").ok());
  EXPECT_EQ(ring.Create(std::string(257, 'n'), Role::kReader, {}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad_project = ring.Create("k", Role::kReader, {"alpha", "has space"}, "");
  EXPECT_EQ(bad_project.status().code(), absl::StatusCode::kInvalidArgument);
  // The error names the entry, as other repeated fields' errors do.
  EXPECT_EQ(bad_project.status().message(), "projects[1]: name may only contain [A-Za-z0-9._-]")
      << bad_project.status();
  EXPECT_EQ(ring.Create("k", Role::kReader, {""}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// key_ring.h EnsureAdminKey: when no unrevoked admin key valid for every project exists,
// creates one and returns its text; otherwise nullopt.
TEST_F(KeyRingTest, EnsureAdminKeyMintsAnAdminForEveryProjectOnce) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  // A scoped admin does not count.
  ASSERT_TRUE(ring.Create("scoped admin", Role::kAdmin, {"alpha"}, "").ok());
  auto minted = ring.EnsureAdminKey();
  ASSERT_TRUE(minted.ok()) << minted.status();
  ASSERT_TRUE(minted->has_value());
  auto who = ring.Authenticate(**minted);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ((*who)->role, Role::kAdmin);
  EXPECT_TRUE((*who)->AllProjects());
  auto again = ring.EnsureAdminKey();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->has_value());
}

// key_ring.h: an unknown key id reloads the cache "at most one such refresh per second, so that
// made-up ids cannot flood the database".
TEST_F(KeyRingTest, UnknownKeyIdsReloadTheCacheAtMostOncePerSecond) {
  KeyRing ring(*store_, absl::Hours(1));
  int loads = 0;
  ring.SetAfterListHookForTesting([&] { ++loads; });
  ASSERT_TRUE(ring.Load().ok());
  ASSERT_EQ(loads, 1);
  for (int i = 0; i < 20; ++i) {
    std::string id = absl::StrCat(absl::Hex(0x1000000000000000ull + i, absl::kZeroPad16));
    auto status = ring.Authenticate(absl::StrCat("vk_", id, "_", std::string(64, 'a'))).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  }
  // Well under a second since the Load: at most one more reload (none expected, but a slow
  // machine may pass the second).
  EXPECT_LE(loads, 2);
}

// key_ring.h: keys revoked by another server on the same database reach this one "at most
// `refresh_interval` after the last refresh (checked on each call)"; keys.proto RevokeKey:
// "on other servers of the same database within their key refresh interval".
TEST_F(KeyRingTest, ARevocationOnAnotherServerReachesThisOneWithinTheRefreshInterval) {
  std::unique_ptr<storage::ConnectionPool> other_pool = NewPool(1);
  storage::ApiKeyStore other_store(other_pool.get());
  KeyRing here(*store_, absl::Milliseconds(200));
  KeyRing there(other_store, absl::Milliseconds(200));
  ASSERT_TRUE(here.Load().ok());
  ASSERT_TRUE(there.Load().ok());
  auto created = here.Create("revoked-elsewhere", Role::kWriter, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(here.Authenticate(created->text).ok());
  ASSERT_TRUE(there.Revoke(created->record.key_id).ok());
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_EQ(here.Authenticate(created->text).status().code(),
            absl::StatusCode::kUnauthenticated);
}

// ---- The interceptor, through a real gRPC server. ----

// What every real handler does first (auth_interceptor.h): Admit, and answer its refusal.
grpc::Status Refusal(const CallAuthorizations& decisions, grpc::ServerContextBase* context) {
  auto who = decisions.Admit(context);
  return who.ok() ? grpc::Status::OK : ToGrpcStatus(who.status());
}

class FakeProjectService final : public v1::ProjectService::Service {
 public:
  explicit FakeProjectService(CallAuthorizations& decisions) : decisions_(decisions) {}
  grpc::Status GetProject(grpc::ServerContext* context, const v1::GetProjectRequest*,
                          v1::GetProjectResponse*) override {
    return Refusal(decisions_, context);
  }
  grpc::Status ListProjects(grpc::ServerContext* context, const v1::ListProjectsRequest*,
                            v1::ListProjectsResponse*) override {
    return Refusal(decisions_, context);
  }
  grpc::Status UpdateProjectSettings(grpc::ServerContext* context,
                                     const v1::UpdateProjectSettingsRequest*,
                                     v1::UpdateProjectSettingsResponse*) override {
    return Refusal(decisions_, context);
  }
  // A handler that forgets to ask: the interceptor's second line must still refuse the call.
  // It answers as a real AddItems would (what it added), which a refused caller must not read.
  grpc::Status AddItems(grpc::ServerContext*, const v1::AddItemsRequest* request,
                        v1::AddItemsResponse* response) override {
    response->set_added(request->items_size());
    return grpc::Status::OK;
  }
  // Waits until its client has cancelled the call, then asks Admit and reports its answer.
  grpc::Status AddAnnotators(grpc::ServerContext* context, const v1::AddAnnotatorsRequest*,
                             v1::AddAnnotatorsResponse*) override {
    started.set_value();
    for (int i = 0; i < 10000 && !context->IsCancelled(); ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    admitted_once_cancelled.set_value(decisions_.Admit(context).status());
    return grpc::Status::OK;
  }
  std::promise<void> started;                         // AddAnnotators has begun.
  std::promise<absl::Status> admitted_once_cancelled;  // What Admit said after the cancel.

 private:
  CallAuthorizations& decisions_;
};

class FakeKeyService final : public v1::KeyService::Service {
 public:
  explicit FakeKeyService(CallAuthorizations& decisions) : decisions_(decisions) {}
  grpc::Status ListKeys(grpc::ServerContext* context, const v1::ListKeysRequest*,
                        v1::ListKeysResponse*) override {
    auto who = decisions_.Admit(context);
    if (!who.ok()) return ToGrpcStatus(who.status());
    last_caller = *who;
    return grpc::Status::OK;
  }
  std::shared_ptr<const Principal> last_caller;  // Of the last admitted call.

 private:
  CallAuthorizations& decisions_;
};

// Acks each batch after asking Admit again (as auth_interceptor.h requires of a streaming
// handler); a refused batch ends the stream with its refusal.
class FakeIngestService final : public v1::IngestService::Service {
 public:
  explicit FakeIngestService(CallAuthorizations& decisions) : decisions_(decisions) {}
  grpc::Status SubmitAnnotations(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream) override {
    if (grpc::Status s = Refusal(decisions_, context); !s.ok()) return s;
    v1::AnnotationBatch batch;
    while (stream->Read(&batch)) {
      if (grpc::Status s = Refusal(decisions_, context); !s.ok()) return s;
      if (!stream->Write(v1::BatchAck())) break;
    }
    return grpc::Status::OK;
  }

 private:
  CallAuthorizations& decisions_;
};

// A service with no access policy (rpc_policy.h has none for its methods), registered as a
// generic service; it asks Admit first, as every handler does.
class UnlistedService final : public grpc::CallbackGenericService {
 public:
  explicit UnlistedService(CallAuthorizations& decisions) : decisions_(decisions) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(grpc::Status status) { Finish(std::move(status)); }
      void OnDone() override { delete this; }
    };
    return new Reactor(Refusal(decisions_, context));
  }

 private:
  CallAuthorizations& decisions_;
};

class AuthInterceptorTest : public KeyRingTest {
 protected:
  void SetUp() override {
    KeyRingTest::SetUp();
    ring_ = std::make_unique<KeyRing>(*store_, absl::Hours(1));
    ASSERT_TRUE(ring_->Load().ok());
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    ring_.reset();
    KeyRingTest::TearDown();
  }

  void Start(KeyRing* keys) {
    projects_ = std::make_unique<FakeProjectService>(decisions_);
    keys_service_ = std::make_unique<FakeKeyService>(decisions_);
    ingest_ = std::make_unique<FakeIngestService>(decisions_);
    unlisted_ = std::make_unique<UnlistedService>(decisions_);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(projects_.get());
    builder.RegisterService(keys_service_.get());
    builder.RegisterService(ingest_.get());
    builder.RegisterCallbackGenericService(unlisted_.get());
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::make_unique<AuthInterceptorFactory>(keys, decisions_));
    builder.experimental().SetInterceptorCreators(std::move(creators));
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
  }

  std::string Key(Role role, std::vector<std::string> projects) {
    auto created = ring_->Create("k", role, std::move(projects), "");
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? created->text : "";
  }

  static void WithKey(grpc::ClientContext& context, const std::string& key) {
    if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
  }

  grpc::StatusCode GetProject(const std::string& key, const std::string& project) {
    grpc::ClientContext context;
    WithKey(context, key);
    v1::GetProjectRequest request;
    request.set_project(project);
    v1::GetProjectResponse response;
    return v1::ProjectService::NewStub(channel_)->GetProject(&context, request, &response)
        .error_code();
  }
  grpc::StatusCode UpdateSettings(const std::string& key, const std::string& project) {
    grpc::ClientContext context;
    WithKey(context, key);
    v1::UpdateProjectSettingsRequest request;
    request.set_project(project);
    v1::UpdateProjectSettingsResponse response;
    return v1::ProjectService::NewStub(channel_)
        ->UpdateProjectSettings(&context, request, &response)
        .error_code();
  }
  grpc::StatusCode ListKeys(const std::string& key) {
    grpc::ClientContext context;
    WithKey(context, key);
    v1::ListKeysRequest request;
    v1::ListKeysResponse response;
    return v1::KeyService::NewStub(channel_)->ListKeys(&context, request, &response).error_code();
  }

  CallAuthorizations decisions_;
  std::unique_ptr<KeyRing> ring_;
  std::unique_ptr<FakeProjectService> projects_;
  std::unique_ptr<FakeKeyService> keys_service_;
  std::unique_ptr<FakeIngestService> ingest_;
  std::unique_ptr<UnlistedService> unlisted_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

// auth_interceptor.h: no or a bad key -> UNAUTHENTICATED; a role too low -> PERMISSION_DENIED;
// keys.proto: a valid key used outside its projects fails PERMISSION_DENIED; each role may do
// everything the ones below it may (api_keys.h).
TEST_F(AuthInterceptorTest, KeysAreCheckedForRoleAndProject) {
  const std::string reader = Key(Role::kReader, {"alpha"});
  const std::string writer = Key(Role::kWriter, {"alpha"});
  const std::string admin = Key(Role::kAdmin, {"alpha"});
  const std::string global_admin = Key(Role::kAdmin, {});
  Start(ring_.get());
  EXPECT_EQ(GetProject("", "alpha"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetProject("vk_nonsense", "alpha"), grpc::StatusCode::UNAUTHENTICATED);
  {
    grpc::ClientContext context;  // The key without "Bearer ".
    context.AddMetadata("authorization", reader);
    v1::GetProjectRequest request;
    request.set_project("alpha");
    v1::GetProjectResponse response;
    EXPECT_EQ(v1::ProjectService::NewStub(channel_)->GetProject(&context, request, &response)
                  .error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  for (const std::string& key : {reader, writer, admin, global_admin}) {
    EXPECT_EQ(GetProject(key, "alpha"), grpc::StatusCode::OK);
  }
  for (const std::string& key : {reader, writer, admin}) {
    EXPECT_EQ(GetProject(key, "beta"), grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(GetProject(global_admin, "beta"), grpc::StatusCode::OK);
  // UpdateProjectSettings needs an admin (a writer is one role short).
  EXPECT_EQ(UpdateSettings(reader, "alpha"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(UpdateSettings(writer, "alpha"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(UpdateSettings(admin, "alpha"), grpc::StatusCode::OK);
  EXPECT_EQ(UpdateSettings(admin, "beta"), grpc::StatusCode::PERMISSION_DENIED);
  // rpc_policy.h kEveryProject, keys.proto KeyService: an admin valid for every project only.
  EXPECT_EQ(ListKeys(writer), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ListKeys(admin), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ListKeys(global_admin), grpc::StatusCode::OK);
  // ListProjects names no project: any valid key (the handler filters).
  grpc::ClientContext context;
  WithKey(context, reader);
  v1::ListProjectsResponse response;
  EXPECT_EQ(v1::ProjectService::NewStub(channel_)
                ->ListProjects(&context, v1::ListProjectsRequest(), &response)
                .error_code(),
            grpc::StatusCode::OK);
}

// auth_interceptor.h: Admit "fails closed", and as a second line a call refused at the metadata
// stage that a handler nevertheless answered OK is refused. A refused call must then carry no
// answer: the caller with no key, or with a key below the method's role, gets the refusal and
// an empty response, not what the handler that forgot to ask built (a KeyService handler that
// forgot would otherwise hand every key's record to a caller without a key). The status is the
// refusal's own: UNAUTHENTICATED without a key, PERMISSION_DENIED for the reader.
TEST_F(AuthInterceptorTest, AHandlerThatForgetsToAskSendsARefusedCallNoAnswer) {
  const std::string reader = Key(Role::kReader, {"alpha"});
  Start(ring_.get());
  for (const std::string& key : {std::string(), reader}) {
    grpc::ClientContext context;
    WithKey(context, key);
    v1::AddItemsRequest request;
    request.set_project("alpha");
    request.add_items()->set_id("item-1");
    v1::AddItemsResponse response;
    const grpc::Status status =
        v1::ProjectService::NewStub(channel_)->AddItems(&context, request, &response);
    EXPECT_EQ(status.error_code(), key.empty() ? grpc::StatusCode::UNAUTHENTICATED
                                               : grpc::StatusCode::PERMISSION_DENIED)
        << status.error_message();
    EXPECT_EQ(response.ByteSizeLong(), 0u)
        << (key.empty() ? "no key" : "reader") << " read the answer: " << response.DebugString();
  }
}

// auth_interceptor.h: "With authentication off ... every call is admitted as an admin valid for
// every project".
TEST_F(AuthInterceptorTest, WithAuthenticationOffEveryCallIsAnAdminOfEveryProject) {
  Start(nullptr);
  EXPECT_EQ(GetProject("", "beta"), grpc::StatusCode::OK);
  EXPECT_EQ(UpdateSettings("", "beta"), grpc::StatusCode::OK);
  EXPECT_EQ(ListKeys(""), grpc::StatusCode::OK);
  // What the handler is told about the caller (it decides what to show and allow from it).
  ASSERT_NE(keys_service_->last_caller, nullptr);
  EXPECT_EQ(keys_service_->last_caller->role, Role::kAdmin);
  EXPECT_TRUE(keys_service_->last_caller->AllProjects());
}

// auth_interceptor.h: each received message of a stream is checked: a batch naming a project
// the key may not touch -> PERMISSION_DENIED; a key revoked since the call began ->
// UNAUTHENTICATED (at once on the server that revoked it).
TEST_F(AuthInterceptorTest, EachBatchOfAStreamIsCheckedForItsProjectAndTheKeyAgain) {
  auto writer = ring_->Create("writer", Role::kWriter, {"alpha"}, "");
  ASSERT_TRUE(writer.ok()) << writer.status();
  Start(ring_.get());
  v1::AnnotationBatch mine;
  mine.set_project("alpha");
  v1::AnnotationBatch theirs;
  theirs.set_project("beta");
  v1::BatchAck ack;
  {
    grpc::ClientContext context;
    WithKey(context, writer->text);
    auto stream = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&context);
    ASSERT_TRUE(stream->Write(mine));
    ASSERT_TRUE(stream->Read(&ack));
    stream->Write(theirs);
    EXPECT_FALSE(stream->Read(&ack));
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext context;
    WithKey(context, writer->text);
    auto stream = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&context);
    ASSERT_TRUE(stream->Write(mine));
    ASSERT_TRUE(stream->Read(&ack));
    ASSERT_TRUE(ring_->Revoke(writer->record.key_id).ok());
    stream->Write(mine);
    EXPECT_FALSE(stream->Read(&ack));
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
}

// rpc_policy.h / auth_interceptor.h: the standard health service is open: it answers a call
// without a key (and the interceptor never replaces its answer with a refusal).
TEST_F(AuthInterceptorTest, TheHealthServiceAnswersWithoutAKey) {
  Start(ring_.get());
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  grpc::ByteBuffer request;  // An empty HealthCheckRequest: the server's overall health.
  {
    grpc::Slice empty("");
    request = grpc::ByteBuffer(&empty, 1);
  }
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                 &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
}

// auth_interceptor.h Admit: "CANCELLED when the call was cancelled or is past its deadline
// (its handler then does no work)": a valid key's call that its client cancelled is not
// admitted when its handler asks.
TEST_F(AuthInterceptorTest, ACallItsClientCancelledIsNotAdmitted) {
  const std::string writer = Key(Role::kWriter, {"alpha"});
  Start(ring_.get());
  grpc::ClientContext context;
  WithKey(context, writer);
  v1::AddAnnotatorsRequest request;
  request.set_project("alpha");
  v1::AddAnnotatorsResponse response;
  std::promise<grpc::Status> done;
  v1::ProjectService::NewStub(channel_)->async()->AddAnnotators(
      &context, &request, &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  projects_->started.get_future().wait();
  context.TryCancel();
  EXPECT_EQ(done.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
  const absl::Status admitted = projects_->admitted_once_cancelled.get_future().get();
  EXPECT_EQ(admitted.code(), absl::StatusCode::kCancelled) << admitted;
}

// ---- ApiKeyMetadataProcessor (key_metadata_processor.h): refuses a call without a valid API
// key when its metadata arrives; open methods (health, reflection) pass without a key. ----

grpc::StatusCode Process(ApiKeyMetadataProcessor& processor,
                         const std::vector<std::pair<std::string, std::string>>& entries) {
  grpc::AuthMetadataProcessor::InputMetadata metadata;
  for (const auto& [key, value] : entries) {
    metadata.emplace(grpc::string_ref(key), grpc::string_ref(value));
  }
  grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
  return processor.Process(metadata, nullptr, &consumed, &response).error_code();
}

TEST_F(KeyRingTest, TheMetadataProcessorAdmitsValidKeysAndOpenMethodsOnly) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  auto created = ring.Create("k", Role::kReader, {"alpha"}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  ApiKeyMetadataProcessor processor(ring);
  const std::string get = "/verity.v1.ProjectService/GetProject";
  EXPECT_EQ(Process(processor, {{":path", get}, {"authorization", "Bearer " + created->text}}),
            grpc::StatusCode::OK);
  // No key: refused, unless the method is open.
  EXPECT_EQ(Process(processor, {{":path", get}}), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Process(processor, {}), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Process(processor, {{":path", "/grpc.health.v1.Health/Check"}}),
            grpc::StatusCode::OK);
  EXPECT_EQ(Process(processor,
                    {{":path", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}}),
            grpc::StatusCode::OK);
  EXPECT_EQ(Process(processor, {{":path", "/grpc.health.v1.HealthX/Check"}}),
            grpc::StatusCode::UNAUTHENTICATED);
  // Not "Bearer <key>", a malformed key, a wrong secret, a revoked key: refused.
  EXPECT_EQ(Process(processor, {{":path", get}, {"authorization", created->text}}),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Process(processor, {{":path", get}, {"authorization", "Bearer vk_nope"}}),
            grpc::StatusCode::UNAUTHENTICATED);
  std::string forged = created->text;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(Process(processor, {{":path", get}, {"authorization", "Bearer " + forged}}),
            grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(ring.Revoke(created->record.key_id).ok());
  EXPECT_EQ(Process(processor, {{":path", get}, {"authorization", "Bearer " + created->text}}),
            grpc::StatusCode::UNAUTHENTICATED);
}

// auth_interceptor.cc: a method of a registered service with no access policy is refused,
// never guessed, even for an admin key valid for every project.
TEST_F(AuthInterceptorTest, AMethodWithoutAnAccessPolicyIsRefusedEvenToAGlobalAdmin) {
  const std::string global_admin = Key(Role::kAdmin, {});
  Start(ring_.get());
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  WithKey(context, global_admin);
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/verity.v1.UnlistedService/Do", grpc::StubOptions(), &request,
                 &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  // The same key on a method with a policy is admitted.
  EXPECT_EQ(ListKeys(global_admin), grpc::StatusCode::OK);
}

// key_ring.h: "When the database cannot be reached ... an unknown key then fails UNAVAILABLE,
// not UNAUTHENTICATED, since it may be valid" -- through the interceptor and the TLS metadata
// processor alike; a cached key still gets in.
TEST_F(AuthInterceptorTest, WithTheDatabaseDownAnUnknownKeysCallIsUnavailable) {
  const std::string reader = Key(Role::kReader, {"alpha"});
  Start(ring_.get());
  ApiKeyMetadataProcessor processor(*ring_);
  const std::string unknown = "vk_00000000000000ff_" + std::string(64, 'c');
  const std::string get = "/verity.v1.ProjectService/GetProject";
  absl::SleepFor(absl::Milliseconds(1100));  // Past the one-refresh-per-second bound.
  ASSERT_TRUE(cluster().Stop().ok());
  const grpc::StatusCode by_interceptor = GetProject(unknown, "alpha");
  const grpc::StatusCode by_processor =
      Process(processor, {{":path", get}, {"authorization", "Bearer " + unknown}});
  const grpc::StatusCode cached = GetProject(reader, "alpha");
  ASSERT_TRUE(cluster().Start().ok());
  EXPECT_EQ(by_interceptor, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(by_processor, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(cached, grpc::StatusCode::OK);
}

// key_ring.h: the cache is refreshed "at most `refresh_interval` after the last refresh ... or
// at once for an unknown key id". A wrong secret for a key id the cache knows is neither: it
// reads nothing from the database (or each forged call on a known id could make it reload).
TEST_F(KeyRingTest, AWrongSecretForAKnownKeyIdDoesNotReloadTheCache) {
  KeyRing ring(*store_, absl::Hours(1));
  int loads = 0;
  ring.SetAfterListHookForTesting([&] { ++loads; });
  ASSERT_TRUE(ring.Load().ok());
  auto created = ring.Create("known", Role::kWriter, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  absl::SleepFor(absl::Milliseconds(1100));  // Past the one-refresh-per-second bound.
  std::string forged = created->text;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(ring.Authenticate(forged).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(loads, 1);
  EXPECT_TRUE(ring.Authenticate(created->text).ok());
  EXPECT_EQ(loads, 1);
}

}  // namespace
}  // namespace verity::server
