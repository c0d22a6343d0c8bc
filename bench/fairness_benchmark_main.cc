// Fairness benchmark (docs/SECURITY.md, issue 23 point 5): one project floods ingest while
// another sends one-label batches; reports the small project's ack latency (p50, p99, max)
// and the flood's throughput and refusals.
//
//   bazel run -c opt //bench:fairness_benchmark -- [--flood_streams=4] [--flood_batches=16]
//       [--flood_batch_size=10000] [--probe_batches=200]
//
// The flood: --flood_streams streams, each sending --flood_batches batches of
// --flood_batch_size new labels as fast as its acks allow (a batch refused RESOURCE_EXHAUSTED
// is resent after 20 ms, as a client should). The probe: one stream of the other project
// sending one label at a time, one batch in flight, from the moment the flood starts until
// it ends (or --probe_batches batches).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_server.h"
#include "verity/v1/ingest.grpc.pb.h"

ABSL_FLAG(int, flood_streams, 4, "Streams of the flooding project.");
ABSL_FLAG(int, flood_batches, 16, "Batches per flooding stream.");
ABSL_FLAG(int, flood_batch_size, 10000, "Labels per flooding batch.");
ABSL_FLAG(int, probe_batches, 2000, "One-label batches the probe sends at most.");

namespace verity::bench {
namespace {

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(q * values.size()))];
}

int Run() {
  std::unique_ptr<BenchServer> bench = BenchServer::StartOrDie("fairness");
  std::printf("%s\n", bench->SharePriorityWithPostgres().c_str());
  bench->CreateProjectOrDie("flood", 2);
  bench->CreateProjectOrDie("probe", 2);
  auto stub = v1::IngestService::NewStub(bench->channel());

  const int streams = absl::GetFlag(FLAGS_flood_streams);
  const int batches = absl::GetFlag(FLAGS_flood_batches);
  const int batch_size = absl::GetFlag(FLAGS_flood_batch_size);
  std::atomic<int> flooders_left{streams};
  std::atomic<int64_t> refused{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> flooders;
  for (int s = 0; s < streams; ++s) {
    flooders.emplace_back([&, s] {
      grpc::ClientContext context;
      auto stream = stub->SubmitAnnotations(&context);
      for (int b = 0; b < batches; ++b) {
        v1::AnnotationBatch batch;
        batch.set_batch_id(b + 1);
        batch.set_project("flood");
        for (int n = 0; n < batch_size; ++n) {
          v1::Annotation* a = batch.add_annotations();
          a->set_item(absl::StrCat("s", s, "-b", b, "-", n));
          a->set_annotator(absl::StrCat("w", n % 50));
          a->set_label(n % 2);
        }
        while (true) {
          v1::BatchAck ack;
          if (!stream->Write(batch) || !stream->Read(&ack)) break;
          if (ack.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
          ++refused;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      stream->WritesDone();
      stream->Finish();
      --flooders_left;
    });
  }
  std::vector<double> latencies_ms;
  int probe_refused = 0;
  {
    grpc::ClientContext context;
    auto stream = stub->SubmitAnnotations(&context);
    for (int b = 0; b < absl::GetFlag(FLAGS_probe_batches) && flooders_left > 0; ++b) {
      v1::AnnotationBatch batch;
      batch.set_batch_id(b + 1);
      batch.set_project("probe");
      v1::Annotation* a = batch.add_annotations();
      a->set_item(absl::StrCat("p", b));
      a->set_annotator("probe");
      a->set_label(b % 2);
      const absl::Time sent = absl::Now();
      v1::BatchAck ack;
      if (!stream->Write(batch) || !stream->Read(&ack)) break;
      latencies_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - sent));
      probe_refused += ack.error_code() != 0;
    }
    stream->WritesDone();
    stream->Finish();
  }
  for (std::thread& t : flooders) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf(
      "flood: %d streams x %d batches x %d labels in %.1f s (%.0f labels/s), %lld refusals "
      "retried\nprobe: %zu one-label batches during the flood, %d refused; ack p50 %.1f ms, "
      "p99 %.1f ms, max %.1f ms\n",
      streams, batches, batch_size, seconds, streams * batches * batch_size / seconds,
      static_cast<long long>(refused.load()), latencies_ms.size(), probe_refused,
      Percentile(latencies_ms, 0.5), Percentile(latencies_ms, 0.99),
      Percentile(latencies_ms, 1.0));
  return 0;
}

}  // namespace
}  // namespace verity::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return verity::bench::Run();
}
