// replicas_benchmark: ingest, queries and cross-replica freshness with 1, 2 and 3 verity_server
// replicas over one PostgreSQL database, as ratios to one replica.
//
//   bazel run -c opt //bench:replicas_benchmark -- --labels=200000
//
// For each replica count n, on a fresh embedded PostgreSQL 15 (durable commits):
//  - ingest: --streams SubmitAnnotations streams, spread round robin over the n replicas (or all
//    to replica 1 with --ingest_through_first), send --labels labels in batches of --batch;
//    labels/s from the first send to the last ack;
//  - queries: --query_threads threads, spread the same way, call GetPosteriors for --query_items
//    random items for --query_seconds; calls/s;
//  - freshness: --freshness_probes single labels acked by replica 1, each timed until replica n
//    serves it (n = 1: the acking replica itself); p50 and p99 in ms.
// All processes share this machine's cores, so n replicas do not get n times the CPU: the
// ratios say what replication costs here, not what more machines would give.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_server.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

ABSL_FLAG(int, max_replicas, 3, "Measure 1 .. this many replicas.");
ABSL_FLAG(int, labels, 200000, "Labels ingested per replica count.");
ABSL_FLAG(int, items, 20000, "Distinct items.");
ABSL_FLAG(int, annotators, 500, "Distinct annotators.");
ABSL_FLAG(int, batch, 2000, "Labels per batch.");
ABSL_FLAG(int, streams, 6, "Concurrent ingest streams, spread over the replicas.");
ABSL_FLAG(bool, ingest_through_first, false,
          "Send every stream to replica 1 (the others only follow) instead of spreading them.");
ABSL_FLAG(int, query_threads, 6, "Concurrent query threads, spread over the replicas.");
ABSL_FLAG(int, query_items, 100, "Items per GetPosteriors call.");
ABSL_FLAG(int, query_seconds, 5, "Seconds of queries.");
ABSL_FLAG(int, freshness_probes, 200, "Single labels timed from ack to served elsewhere.");

namespace verity::bench {
namespace {

struct Result {
  int replicas = 0;
  double labels_per_second = 0;
  double queries_per_second = 0;
  double freshness_p50_ms = 0;
  double freshness_p99_ms = 0;
};

int64_t NumLabels(const std::shared_ptr<grpc::Channel>& channel, const std::string& project) {
  auto stub = v1::ProjectService::NewStub(channel);
  grpc::ClientContext context;
  v1::GetProjectRequest request;
  request.set_project(project);
  v1::GetProjectResponse response;
  CheckOrDie(stub->GetProject(&context, request, &response), "GetProject");
  return response.project().num_labels();
}

Result Measure(int n) {
  Result result;
  result.replicas = n;
  std::unique_ptr<BenchServer> bench = BenchServer::StartOrDie(absl::StrCat("replicas", n));
  std::fprintf(stderr, "%s\n", bench->SharePriorityWithPostgres().c_str());
  const std::string project = "replicas";
  bench->CreateProjectOrDie(project, 3);
  std::vector<std::shared_ptr<grpc::Channel>> channels = {bench->channel()};
  for (int r = 1; r < n; ++r) channels.push_back(bench->StartReplicaOrDie());
  for (auto& channel : channels) NumLabels(channel, project);  // Each replica loads it.

  // Ingest.
  const int labels = absl::GetFlag(FLAGS_labels);
  const int streams = absl::GetFlag(FLAGS_streams);
  std::vector<std::vector<BenchLabel>> per_stream(streams);
  std::mt19937 rng(1);
  for (int i = 0; i < labels; ++i) {
    per_stream[i % streams].push_back(
        {absl::StrCat("item-", rng() % absl::GetFlag(FLAGS_items)),
         absl::StrCat("annotator-", rng() % absl::GetFlag(FLAGS_annotators)),
         static_cast<int32_t>(rng() % 3)});
  }
  absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&, s] {
      const int replica = absl::GetFlag(FLAGS_ingest_through_first) ? 0 : s % n;
      BenchServer::SubmitOrDie(channels[replica], project, per_stream[s],
                               absl::GetFlag(FLAGS_batch));
    });
  }
  for (std::thread& t : threads) t.join();
  result.labels_per_second = labels / absl::ToDoubleSeconds(absl::Now() - start);
  threads.clear();
  const int64_t stored = NumLabels(channels[0], project);
  for (auto& channel : channels) {
    while (NumLabels(channel, project) != stored) absl::SleepFor(absl::Milliseconds(10));
  }

  // Queries.
  std::atomic<int64_t> calls{0};
  const absl::Time stop = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_query_seconds));
  for (int q = 0; q < absl::GetFlag(FLAGS_query_threads); ++q) {
    threads.emplace_back([&, q] {
      auto stub = v1::TruthService::NewStub(channels[q % n]);
      std::mt19937 local(100 + q);
      while (absl::Now() < stop) {
        grpc::ClientContext context;
        v1::GetPosteriorsRequest request;
        request.set_project(project);
        // Items 0 .. items-1 all exist after the ingest (with these sizes, every id is drawn).
        for (int i = 0; i < absl::GetFlag(FLAGS_query_items); ++i) {
          request.add_items(absl::StrCat("item-", local() % std::min<uint32_t>(
                                                              absl::GetFlag(FLAGS_items), 1000)));
        }
        v1::GetPosteriorsResponse response;
        CheckOrDie(stub->GetPosteriors(&context, request, &response), "GetPosteriors");
        ++calls;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  result.queries_per_second = calls / static_cast<double>(absl::GetFlag(FLAGS_query_seconds));

  // Freshness: ack by replica 1, served by replica n.
  std::vector<double> ms;
  int64_t expected = stored;
  for (int p = 0; p < absl::GetFlag(FLAGS_freshness_probes); ++p) {
    BenchServer::SubmitOrDie(channels[0], project,
                             {{absl::StrCat("probe-", p), "prober", p % 3}}, 1);
    const absl::Time acked = absl::Now();
    ++expected;
    while (NumLabels(channels[n - 1], project) < expected) {
      absl::SleepFor(absl::Microseconds(200));
    }
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - acked));
  }
  std::sort(ms.begin(), ms.end());
  result.freshness_p50_ms = ms[ms.size() / 2];
  result.freshness_p99_ms = ms[ms.size() * 99 / 100];
  return result;
}

}  // namespace
}  // namespace verity::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<verity::bench::Result> results;
  for (int n = 1; n <= absl::GetFlag(FLAGS_max_replicas); ++n) {
    results.push_back(verity::bench::Measure(n));
  }
  const verity::bench::Result& one = results.front();
  std::printf("| replicas | ingest labels/s | × 1 replica | GetPosteriors calls/s | × 1 replica "
              "| freshness p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (const verity::bench::Result& r : results) {
    std::printf("| %d | %.0f | %.2f | %.0f | %.2f | %.2f | %.2f |\n", r.replicas,
                r.labels_per_second, r.labels_per_second / one.labels_per_second,
                r.queries_per_second, r.queries_per_second / one.queries_per_second,
                r.freshness_p50_ms, r.freshness_p99_ms);
  }
  return 0;
}
