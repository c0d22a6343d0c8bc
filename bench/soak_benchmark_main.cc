// soak_benchmark: mixed concurrent load on one server for a bounded time (loopback only) —
// ingest streams, GetPosteriors readers and SuggestItems callers, with background refits on —
// reporting throughput, latency percentiles, error counts and the process's RSS at start and
// end (the server runs in this process, so RSS is the server's plus the clients').
//
//   bazel build -c opt //bench:soak_benchmark
//   bazel-out/k8-opt/bin/bench/soak_benchmark --seconds=120
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench_server.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

ABSL_FLAG(int, seconds, 120, "Duration of the mixed load.");
ABSL_FLAG(int, writers, 2, "Concurrent ingest streams.");
ABSL_FLAG(int, readers, 2, "Concurrent GetPosteriors (100 items) callers.");
ABSL_FLAG(int, suggesters, 1, "Concurrent SuggestItems callers.");
ABSL_FLAG(int, items, 50000, "Items the labels are spread over.");
ABSL_FLAG(int, annotators, 2000, "Annotators.");
ABSL_FLAG(int, batch, 500, "Annotations per ingest batch.");

namespace {

using Clock = std::chrono::steady_clock;

int64_t RssKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

struct Series {
  absl::Mutex mu;
  std::vector<double> ms;
  int64_t errors = 0;
  void Add(double v, bool ok) {
    absl::MutexLock lock(&mu);
    if (ok) ms.push_back(v); else ++errors;
  }
  void Print(const char* name, double seconds, int64_t units_per_call) {
    absl::MutexLock lock(&mu);
    std::sort(ms.begin(), ms.end());
    auto q = [&](double p) { return ms.empty() ? 0.0 : ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))]; };
    std::printf("| %s | %zu | %.0f | %.2f | %.2f | %.2f | %lld |\n", name, ms.size(),
                ms.size() * units_per_call / seconds, q(0.5), q(0.99), q(0.999),
                static_cast<long long>(errors));
  }
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int items = absl::GetFlag(FLAGS_items), annotators = absl::GetFlag(FLAGS_annotators);
  const int batch_size = absl::GetFlag(FLAGS_batch);
  auto bench = verity::bench::BenchServer::StartOrDie("soak-bench");
  bench->CreateProjectOrDie("soak", 3);
  // Seed data so that readers and suggesters have items from the start.
  {
    std::vector<verity::bench::BenchLabel> seed;
    for (int i = 0; i < items; ++i) {
      seed.push_back({absl::StrCat("i", i), absl::StrCat("w", i % annotators), i % 3});
    }
    bench->SubmitOrDie("soak", seed);
  }
  const int64_t rss_start = RssKib();
  const auto deadline = Clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_seconds));
  Series ingest_acks, posteriors, suggest;
  std::atomic<uint64_t> next_batch{1000};
  std::vector<std::thread> threads;
  for (int w = 0; w < absl::GetFlag(FLAGS_writers); ++w) {
    threads.emplace_back([&, w] {
      auto stub = verity::v1::IngestService::NewStub(bench->channel());
      std::mt19937_64 rng(w + 1);
      while (Clock::now() < deadline) {
        grpc::ClientContext context;
        auto stream = stub->SubmitAnnotations(&context);
        // One stream per 20 batches, each awaited: ack latency per batch.
        for (int b = 0; b < 20 && Clock::now() < deadline; ++b) {
          verity::v1::AnnotationBatch batch;
          batch.set_project("soak");
          batch.set_batch_id(next_batch++);
          for (int k = 0; k < batch_size; ++k) {
            auto* a = batch.add_annotations();
            a->set_item(absl::StrCat("i", rng() % items));
            a->set_annotator(absl::StrCat("w", rng() % annotators));
            a->set_label(static_cast<int>(rng() % 3));
          }
          const auto start = Clock::now();
          verity::v1::BatchAck ack;
          const bool ok = stream->Write(batch) && stream->Read(&ack) && ack.error_code() == 0;
          ingest_acks.Add(std::chrono::duration<double, std::milli>(Clock::now() - start).count(), ok);
        }
        stream->WritesDone();
        stream->Finish();
      }
    });
  }
  for (int r = 0; r < absl::GetFlag(FLAGS_readers); ++r) {
    threads.emplace_back([&, r] {
      auto stub = verity::v1::TruthService::NewStub(bench->channel());
      std::mt19937_64 rng(100 + r);
      while (Clock::now() < deadline) {
        verity::v1::GetPosteriorsRequest request;
        request.set_project("soak");
        for (int k = 0; k < 100; ++k) request.add_items(absl::StrCat("i", rng() % items));
        verity::v1::GetPosteriorsResponse response;
        grpc::ClientContext context;
        const auto start = Clock::now();
        const bool ok = stub->GetPosteriors(&context, request, &response).ok();
        posteriors.Add(std::chrono::duration<double, std::milli>(Clock::now() - start).count(), ok);
      }
    });
  }
  for (int s = 0; s < absl::GetFlag(FLAGS_suggesters); ++s) {
    threads.emplace_back([&, s] {
      auto stub = verity::v1::AssignmentService::NewStub(bench->channel());
      std::mt19937_64 rng(200 + s);
      while (Clock::now() < deadline) {
        verity::v1::SuggestItemsRequest request;
        request.set_project("soak");
        request.set_annotator(absl::StrCat("w", rng() % annotators));
        request.set_k(10);
        verity::v1::SuggestItemsResponse response;
        grpc::ClientContext context;
        const auto start = Clock::now();
        const bool ok = stub->SuggestItems(&context, request, &response).ok();
        suggest.Add(std::chrono::duration<double, std::milli>(Clock::now() - start).count(), ok);
      }
    });
  }
  // Refits as the scheduler would run them, while the load runs.
  int refits = 0;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    if (bench->server().core().scheduler->RefitDueProjectsNow().ok()) ++refits;
  }
  for (auto& t : threads) t.join();
  const int64_t rss_end = RssKib();
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::printf("| load | calls | per second (annotations for ingest) | p50 ms | p99 ms | p99.9 ms | errors |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  ingest_acks.Print("ingest batch ack", seconds, batch_size);
  posteriors.Print("GetPosteriors (100 items)", seconds, 1);
  suggest.Print("SuggestItems (k = 10)", seconds, 1);
  std::printf("\nrefit passes: %d; RSS at start %lld MiB, at end %lld MiB\n", refits,
              static_cast<long long>(rss_start / 1024), static_cast<long long>(rss_end / 1024));
  return 0;
}
