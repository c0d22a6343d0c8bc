// PostgreSQL goes away under a running server: ingest answers UNAVAILABLE (retryable) within
// its deadline instead of hanging or losing acked data, queries of in-memory state keep
// answering, and when PostgreSQL is back the server resumes by itself — no restart — with every
// acked annotation stored. A PostgreSQL that hangs (SIGSTOPped: its sockets stay open and
// answer nothing) makes calls fail UNAVAILABLE within the server's database timeout, and
// nothing acked is lost once it resumes.
#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "tests/frozen_postgres.h"
#include "tests/server_process.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {
namespace {

std::chrono::system_clock::time_point Deadline(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

struct SubmitResult {
  int code = 0;
  std::string message;
};

// One batch of `n` labels on items o<first>.. by annotator `annotator`; returns the ack's code
// and message (or the stream's status when no ack came).
SubmitResult Submit(v1::IngestService::Stub& ingest, int batch_id, int first, int n,
                    const std::string& annotator) {
  grpc::ClientContext context;
  context.set_deadline(Deadline(20));
  auto stream = ingest.SubmitAnnotations(&context);
  v1::AnnotationBatch batch;
  batch.set_project("outage");
  batch.set_batch_id(batch_id);
  for (int i = first; i < first + n; ++i) {
    v1::Annotation* a = batch.add_annotations();
    a->set_item(absl::StrCat("o", i));
    a->set_annotator(annotator);
    a->set_label(i % 2);
  }
  stream->Write(batch);
  stream->WritesDone();
  v1::BatchAck ack;
  const bool got = stream->Read(&ack);
  grpc::Status status = stream->Finish();
  if (got) return {ack.error_code(), ack.error_message()};
  return {static_cast<int>(status.error_code()), status.error_message()};
}

int SubmitOne(v1::IngestService::Stub& ingest, int batch_id, int first, int n,
              const std::string& annotator) {
  return Submit(ingest, batch_id, first, n, annotator).code;
}

// A server on `postgres_url` with the project "outage", and stubs of its services.
struct OutageServer {
  std::unique_ptr<server::VerityServer> server;
  std::unique_ptr<v1::ProjectService::Stub> projects;
  std::unique_ptr<v1::IngestService::Stub> ingest;
  std::unique_ptr<v1::TruthService::Stub> truth;
};

absl::StatusOr<OutageServer> StartServerWithProject(
    const std::string& postgres_url,
    absl::Duration db_timeout = server::VerityServer::Options().db_timeout) {
  server::VerityServer::Options options;
  options.listen = "127.0.0.1:0";
  options.postgres_url = postgres_url;
  options.db_timeout = db_timeout;
  options.training.run_in_background = false;
  auto started = server::VerityServer::Start(options);
  if (!started.ok()) return started.status();
  OutageServer served;
  served.server = *std::move(started);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", served.server->port()),
                                     grpc::InsecureChannelCredentials());
  served.projects = v1::ProjectService::NewStub(channel);
  served.ingest = v1::IngestService::NewStub(channel);
  served.truth = v1::TruthService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(Deadline(10));
  v1::CreateProjectRequest request;
  request.mutable_project()->set_name("outage");
  request.mutable_project()->add_classes("a");
  request.mutable_project()->add_classes("b");
  v1::CreateProjectResponse response;
  grpc::Status created = served.projects->CreateProject(&context, request, &response);
  if (!created.ok()) return absl::InternalError("CreateProject: " + created.error_message());
  return served;
}

TEST(PostgresOutageTest, UnavailableWhileDownAndRecoveryWithoutRestart) {
  const std::string dir = MakeTempDir("verity-outage-test");
  storage::EmbeddedPostgres::Options pg;
  pg.data_dir = dir + "/pg";
  auto postgres = storage::EmbeddedPostgres::Start(pg);
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  auto served = StartServerWithProject((*postgres)->connection_url());
  ASSERT_TRUE(served.ok()) << served.status();
  auto& server = served->server;
  auto& projects = served->projects;
  auto& ingest = served->ingest;
  auto& truth = served->truth;
  int acked = 0;
  ASSERT_EQ(SubmitOne(*ingest, 1, 0, 10, "w1"), 0);
  acked += 10;

  // PostgreSQL stops.
  ASSERT_TRUE((*postgres)->Stop().ok());
  const absl::Time before = absl::Now();
  const int down_code = SubmitOne(*ingest, 2, 100, 10, "w1");
  EXPECT_EQ(down_code, static_cast<int>(grpc::StatusCode::UNAVAILABLE)) << down_code;
  EXPECT_LT(absl::Now() - before, absl::Seconds(20));  // within the call's deadline
  {
    // In-memory queries keep answering.
    grpc::ClientContext context;
    context.set_deadline(Deadline(5));
    v1::GetPosteriorsRequest request;
    request.set_project("outage");
    request.add_items("o1");
    v1::GetPosteriorsResponse response;
    EXPECT_TRUE(truth->GetPosteriors(&context, request, &response).ok());
  }

  // PostgreSQL comes back on the same data; the server reconnects by itself.
  postgres->reset();
  auto restarted = storage::EmbeddedPostgres::Start(pg);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  int code = -1;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  for (int attempt = 0; absl::Now() < give_up; ++attempt) {
    code = SubmitOne(*ingest, 3 + attempt, 200, 10, "w1");
    if (code == 0) break;
    EXPECT_EQ(code, static_cast<int>(grpc::StatusCode::UNAVAILABLE));
    absl::SleepFor(absl::Milliseconds(500));
  }
  ASSERT_EQ(code, 0) << "the server did not recover";
  acked += 10;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline(10));
    v1::GetProjectRequest request;
    request.set_project("outage");
    v1::GetProjectResponse response;
    ASSERT_TRUE(projects->GetProject(&context, request, &response).ok());
    EXPECT_EQ(response.project().num_labels(), acked);  // nothing acked lost, nothing extra
  }
  server->Shutdown();
  server.reset();
  ASSERT_TRUE((*restarted)->Stop().ok());
  RemoveTree(dir);
}

TEST(PostgresOutageTest, AHungDatabaseFailsCallsWithinTheBoundAndLosesNothing) {
  const std::string dir = MakeTempDir("verity-hang-test");
  storage::EmbeddedPostgres::Options pg;
  pg.data_dir = dir + "/pg";
  auto postgres = storage::EmbeddedPostgres::Start(pg);
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  constexpr absl::Duration kDbTimeout = absl::Seconds(2);
  auto served = StartServerWithProject((*postgres)->connection_url(), kDbTimeout);
  ASSERT_TRUE(served.ok()) << served.status();
  auto& server = served->server;
  auto& projects = served->projects;
  auto& ingest = served->ingest;
  auto& truth = served->truth;
  ASSERT_EQ(SubmitOne(*ingest, 1, 0, 10, "w1"), 0);

  FrozenPostgres frozen((*postgres)->data_dir() + "/pgdata");
  ASSERT_GE(frozen.processes(), 2);  // the postmaster and at least the pool's backend
  // Each call has a 20 s deadline; with the database hung, it fails UNAVAILABLE once the 2 s
  // bound passes (a stuck transaction, then a new connection that gets no answer), not at
  // its deadline. The margin absorbs a loaded machine.
  for (int call = 0; call < 2; ++call) {
    const absl::Time before = absl::Now();
    const SubmitResult down = Submit(*ingest, 2, 100, 10, "w1");
    const absl::Duration took = absl::Now() - before;
    EXPECT_EQ(down.code, static_cast<int>(grpc::StatusCode::UNAVAILABLE))
        << down.code << " " << down.message << " after " << took;
    EXPECT_THAT(down.message, ::testing::HasSubstr("2s")) << down.message;
    EXPECT_LT(took, 4 * kDbTimeout + absl::Seconds(4)) << "call " << call;
    // In test.xml, for docs/RELIABILITY.md.
    RecordProperty(absl::StrCat("hung_call_", call),
                   absl::StrCat(absl::FormatDuration(took), ": ", down.message));
  }
  {
    // In-memory queries keep answering.
    grpc::ClientContext context;
    context.set_deadline(Deadline(5));
    v1::GetPosteriorsRequest request;
    request.set_project("outage");
    request.add_items("o1");
    v1::GetPosteriorsResponse response;
    EXPECT_TRUE(truth->GetPosteriors(&context, request, &response).ok());
  }

  // PostgreSQL resumes: the same batch, resent, is acked (resending is always safe).
  frozen.Thaw();
  int code = -1;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (absl::Now() < give_up) {
    code = SubmitOne(*ingest, 2, 100, 10, "w1");
    if (code == 0) break;
    EXPECT_EQ(code, static_cast<int>(grpc::StatusCode::UNAVAILABLE));
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_EQ(code, 0) << "the server did not recover";
  ASSERT_EQ(SubmitOne(*ingest, 3, 200, 10, "w1"), 0);
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline(10));
    v1::GetProjectRequest request;
    request.set_project("outage");
    v1::GetProjectResponse response;
    ASSERT_TRUE(projects->GetProject(&context, request, &response).ok());
    EXPECT_EQ(response.project().num_labels(), 30);  // every acked label, once
  }
  server->Shutdown();
  server.reset();
  ASSERT_TRUE((*postgres)->Stop().ok());
  RemoveTree(dir);
}

}  // namespace
}  // namespace verity::tests
