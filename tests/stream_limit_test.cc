// --max_streams: past the limit a new SubmitAnnotations stream is refused with
// RESOURCE_EXHAUSTED, the open streams keep working, and a closed stream frees its slot. A real
// server (in-process) over a real gRPC channel and a private PostgreSQL.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/verity_server.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"

namespace verity::tests {
namespace {

constexpr int kMaxStreams = 3;
constexpr char kProject[] = "streams";

using Stream = grpc::ClientReaderWriter<v1::AnnotationBatch, v1::BatchAck>;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

// One open stream with its context.
struct OpenStream {
  std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<Stream> stream;
};

class StreamLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pg_ = TestPostgres::Start("verity-streams");
    ASSERT_NE(pg_, nullptr);
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 2);
    options.max_streams = kMaxStreams;
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    ingest_ = v1::IngestService::NewStub(channel);
    auto projects = v1::ProjectService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::CreateProjectRequest request;
    request.mutable_project()->set_name(kProject);
    request.mutable_project()->add_classes("no");
    request.mutable_project()->add_classes("yes");
    v1::CreateProjectResponse response;
    ASSERT_TRUE(projects->CreateProject(&context, request, &response).ok());
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    pg_.reset();
  }

  OpenStream Open() {
    OpenStream s;
    s.context->set_deadline(Deadline());
    s.stream = ingest_->SubmitAnnotations(s.context.get());
    return s;
  }

  // Sends one batch and waits for its ack; false if the stream ended instead.
  bool RoundTrip(OpenStream& s, const std::string& annotator) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(++batch_id_);
    batch.set_project(kProject);
    v1::Annotation* a = batch.add_annotations();
    a->set_item(absl::StrCat("item-", batch_id_));
    a->set_annotator(annotator);
    a->set_label(1);
    if (!s.stream->Write(batch)) return false;
    v1::BatchAck ack;
    if (!s.stream->Read(&ack)) return false;
    EXPECT_EQ(ack.batch_id(), batch.batch_id());
    EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
    return true;
  }

  grpc::Status Close(OpenStream& s) {
    s.stream->WritesDone();
    v1::BatchAck ack;
    while (s.stream->Read(&ack)) {
    }
    return s.stream->Finish();
  }

  std::unique_ptr<TestPostgres> pg_;
  std::unique_ptr<server::VerityServer> server_;
  std::unique_ptr<v1::IngestService::Stub> ingest_;
  uint64_t batch_id_ = 0;
};

TEST_F(StreamLimitTest, AStreamPastTheLimitIsRefusedAndTheOthersKeepWorking) {
  std::vector<OpenStream> open;
  for (int i = 0; i < kMaxStreams; ++i) {
    open.push_back(Open());
    ASSERT_TRUE(RoundTrip(open.back(), absl::StrCat("a", i))) << "stream " << i;
  }

  OpenStream extra = Open();
  EXPECT_FALSE(RoundTrip(extra, "extra")) << "stream " << kMaxStreams + 1 << " was admitted";
  grpc::Status refused = extra.stream->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("max_streams"), std::string::npos)
      << refused.error_message();

  for (int i = 0; i < kMaxStreams; ++i) {
    EXPECT_TRUE(RoundTrip(open[i], absl::StrCat("a", i))) << "stream " << i << " after the refusal";
  }

  // A closed stream frees its slot (the handler may end a moment after Finish returns).
  ASSERT_TRUE(Close(open.back()).ok());
  open.pop_back();
  bool admitted = false;
  for (int attempt = 0; attempt < 50 && !admitted; ++attempt) {
    OpenStream again = Open();
    admitted = RoundTrip(again, "again");
    if (admitted) {
      EXPECT_TRUE(Close(again).ok());
    } else {
      again.stream->Finish();
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  EXPECT_TRUE(admitted) << "a slot freed by a closed stream was never reused";
  for (OpenStream& s : open) EXPECT_TRUE(Close(s).ok());
}

}  // namespace
}  // namespace verity::tests
