// suggest_benchmark: SuggestItems latency with many open items, through a real gRPC server on
// loopback over a real (embedded) PostgreSQL.
//
//   bazel run -c opt //bench:suggest_benchmark -- --items=100000 --annotators=10000
//
// Set-up: one project (K classes), `--items` items registered with AddItems, `--annotators`
// annotators, and `--labels_per_item` labels per item from random annotators so that posteriors
// differ; a Dawid-Skene fit. Then `--calls` SuggestItems(k) calls for random annotators from
// `--threads` client threads; prints throughput and latency percentiles. No item ever
// resolves (no confidence target, no maximum), so every call ranks all open items.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"

ABSL_FLAG(int, items, 100000, "Open items.");
ABSL_FLAG(int, annotators, 10000, "Annotators.");
ABSL_FLAG(int, classes, 2, "Classes.");
ABSL_FLAG(int, labels_per_item, 2, "Labels per item before the measurement.");
ABSL_FLAG(int, calls, 3000, "SuggestItems calls measured.");
ABSL_FLAG(int, k, 10, "Suggestions per call.");
ABSL_FLAG(int, threads, 1, "Concurrent client threads.");

namespace {

using Clock = std::chrono::steady_clock;

void Check(const grpc::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.error_message().c_str());
    std::exit(1);
  }
}

double Percentile(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int items = absl::GetFlag(FLAGS_items), annotators = absl::GetFlag(FLAGS_annotators);
  const int classes = absl::GetFlag(FLAGS_classes);
  char dir_template[] = "/tmp/verity-suggest-bench-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  chmod(dir.c_str(), 0755);
  verity::storage::EmbeddedPostgres::Options pg_options;
  pg_options.data_dir = dir + "/pg";
  auto pg = verity::storage::EmbeddedPostgres::Start(pg_options);
  if (!pg.ok()) {
    std::fprintf(stderr, "%s\n", pg.status().ToString().c_str());
    return 1;
  }
  verity::server::VerityServer::Options options;
  options.listen = "localhost:0";
  options.postgres_url = (*pg)->connection_url();
  options.training.run_in_background = false;
  auto server = verity::server::VerityServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  auto channel = grpc::CreateChannel(absl::StrCat("localhost:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto projects = verity::v1::ProjectService::NewStub(channel);
  auto ingest = verity::v1::IngestService::NewStub(channel);

  {
    grpc::ClientContext context;
    verity::v1::CreateProjectRequest request;
    request.mutable_project()->set_name("bench");
    for (int c = 0; c < classes; ++c) request.mutable_project()->add_classes(absl::StrCat("c", c));
    verity::v1::CreateProjectResponse response;
    Check(projects->CreateProject(&context, request, &response), "CreateProject");
  }
  for (int first = 0; first < items; first += 10000) {
    grpc::ClientContext context;
    verity::v1::AddItemsRequest request;
    request.set_project("bench");
    for (int i = first; i < std::min(items, first + 10000); ++i) {
      request.add_items()->set_id(absl::StrCat("item-", i));
    }
    verity::v1::AddItemsResponse response;
    Check(projects->AddItems(&context, request, &response), "AddItems");
  }
  for (int first = 0; first < annotators; first += 10000) {
    grpc::ClientContext context;
    verity::v1::AddAnnotatorsRequest request;
    request.set_project("bench");
    for (int a = first; a < std::min(annotators, first + 10000); ++a) {
      request.add_annotators()->set_id(absl::StrCat("worker-", a));
    }
    verity::v1::AddAnnotatorsResponse response;
    Check(projects->AddAnnotators(&context, request, &response), "AddAnnotators");
  }
  std::mt19937_64 rng(42);
  {
    grpc::ClientContext context;
    auto stream = ingest->SubmitAnnotations(&context);
    verity::v1::AnnotationBatch batch;
    uint64_t batches = 0;
    for (int i = 0; i < items; ++i) {
      const int truth = static_cast<int>(rng() % classes);
      for (int r = 0; r < absl::GetFlag(FLAGS_labels_per_item); ++r) {
        verity::v1::Annotation* a = batch.add_annotations();
        a->set_item(absl::StrCat("item-", i));
        a->set_annotator(absl::StrCat("worker-", (i * 7919 + r * 104729) % annotators));
        a->set_label(rng() % 10 < 7 ? truth : static_cast<int>(rng() % classes));
        if (batch.annotations_size() == 5000) {
          batch.set_project("bench");
          batch.set_batch_id(++batches);
          stream->Write(batch);
          batch.Clear();
        }
      }
    }
    if (batch.annotations_size() > 0) {
      batch.set_project("bench");
      batch.set_batch_id(++batches);
      stream->Write(batch);
    }
    stream->WritesDone();
    verity::v1::BatchAck ack;
    while (stream->Read(&ack)) {
      if (ack.error_code() != 0) {
        std::fprintf(stderr, "ingest: %s\n", ack.error_message().c_str());
        return 1;
      }
    }
    Check(stream->Finish(), "SubmitAnnotations");
  }
  if (absl::Status s = (*server)->core().scheduler->RefitDueProjectsNow(true); !s.ok()) {
    std::fprintf(stderr, "fit: %s\n", s.ToString().c_str());
    return 1;
  }

  const int threads = absl::GetFlag(FLAGS_threads), calls = absl::GetFlag(FLAGS_calls);
  std::vector<std::vector<double>> latencies(threads);
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto stub = verity::v1::AssignmentService::NewStub(channel);
      std::mt19937_64 local(1000 + t);
      for (int c = t; c < calls; c += threads) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        verity::v1::SuggestItemsRequest request;
        request.set_project("bench");
        request.set_annotator(absl::StrCat("worker-", local() % annotators));
        request.set_k(absl::GetFlag(FLAGS_k));
        verity::v1::SuggestItemsResponse response;
        const auto t0 = Clock::now();
        Check(stub->SuggestItems(&context, request, &response), "SuggestItems");
        latencies[t].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (response.suggestions_size() != absl::GetFlag(FLAGS_k)) {
          std::fprintf(stderr, "expected %d suggestions, got %d\n", absl::GetFlag(FLAGS_k),
                       response.suggestions_size());
          std::exit(1);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::printf(
      "items=%d annotators=%d classes=%d labels=%d k=%d threads=%d calls=%zu\n"
      "throughput=%.0f calls/s p50=%.3f ms p99=%.3f ms p999=%.3f ms max=%.3f ms\n",
      items, annotators, classes, items * absl::GetFlag(FLAGS_labels_per_item),
      absl::GetFlag(FLAGS_k), threads, all.size(), all.size() / seconds, Percentile(all, 0.5),
      Percentile(all, 0.99), Percentile(all, 0.999), Percentile(all, 1.0));
  (*server)->Shutdown();
  server->reset();
  (*pg)->Stop().IgnoreError();
  std::filesystem::remove_all(dir);
  return 0;
}
