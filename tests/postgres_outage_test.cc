// PostgreSQL goes away under a running server: ingest answers UNAVAILABLE (retryable) within
// its deadline instead of hanging or losing acked data, queries of in-memory state keep
// answering, and when PostgreSQL is back the server resumes by itself — no restart — with every
// acked annotation stored.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
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

// One batch of `n` labels on items o<first>.. by annotator `annotator`; returns the ack's code
// (or the stream's status code when no ack came).
int SubmitOne(v1::IngestService::Stub& ingest, int batch_id, int first, int n,
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
  if (got) return ack.error_code();
  return static_cast<int>(status.error_code());
}

TEST(PostgresOutageTest, UnavailableWhileDownAndRecoveryWithoutRestart) {
  const std::string dir = MakeTempDir("verity-outage-test");
  storage::EmbeddedPostgres::Options pg;
  pg.data_dir = dir + "/pg";
  auto postgres = storage::EmbeddedPostgres::Start(pg);
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  server::VerityServer::Options options;
  options.listen = "localhost:0";
  options.postgres_url = (*postgres)->connection_url();
  options.training.run_in_background = false;
  auto server = server::VerityServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel(absl::StrCat("localhost:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto projects = v1::ProjectService::NewStub(channel);
  auto ingest = v1::IngestService::NewStub(channel);
  auto truth = v1::TruthService::NewStub(channel);
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline(10));
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name("outage");
    request.mutable_project()->add_classes("a");
    request.mutable_project()->add_classes("b");
    v1::CreateProjectResponse response;
    ASSERT_TRUE(projects->CreateProject(&context, request, &response).ok());
  }
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
  (*server)->Shutdown();
  server->reset();
  ASSERT_TRUE((*restarted)->Stop().ok());
  RemoveTree(dir);
}

}  // namespace
}  // namespace verity::tests
