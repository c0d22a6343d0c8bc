// query_benchmark: throughput and latency percentiles of the read RPCs — GetPosteriors of 1
// and of 100 items, SuggestItems(k = 10) — from C concurrent callers over loopback gRPC, on
// an idle server and while an ingest stream (and optionally refits) runs; and the server's
// resident memory per label held.
//
//   bazel build -c opt //bench:query_benchmark
//   bazel-out/k8-opt/bin/bench/query_benchmark --items=100000 --labels_per_item=10
//       --annotators=300 --callers=1,4 --seconds=10   (one command line)
//
// Set-up (bench/bench_server.h, bench/random_crowd.h): an in-process server on an embedded
// PostgreSQL, one project of `--classes` classes, a seeded RandomCrowd of `--items` items ×
// `--labels_per_item` labels from `--annotators` annotators streamed in over gRPC, and one
// fit of `--method`. No item ever resolves (default assignment settings), so SuggestItems
// ranks every item.
//
// Then, for every load × kind × caller count, a phase of `--seconds` (after `--warmup_s` not
// counted): C caller threads, each with its own channel (its own TCP connection), call the
// RPC back to back with a 5 s deadline; each call's wall time is recorded on the client. The
// loads:
//   idle    nothing else runs;
//   ingest  one SubmitAnnotations stream sends batches of `--ingest_batch` labels, one batch
//           in flight. Each takes a random crowd label (item i, annotator a) and sends, as
//           the label of a's twin annotator "v<a>" on i, a fresh draw from a's confusion row
//           given i's true class: new labels on existing items with the crowd's label
//           distribution, the items and their number unchanged (so the read RPCs do the same
//           work in every phase) while the labels grow (the "labels at end" column); a
//           repeated pair is a revision or a duplicate ("of which changed" counts new and
//           revised labels);
//   refit   the ingest stream, plus a forced refit every `--refit_every_s` seconds.
// By default the callers run closed-loop (a caller that is stalled issues no calls, so a stall
// shows in one call's latency only); with --rate they run open-loop at a fixed total rate and
// latency counts from when each call was due, so every call due during a stall counts it.
// One markdown row per phase: calls/s, p50/p99/p999/max in ms, the p99 target and the ratio
// p99 / target; the process's CPU time per call (server, clients and the ingest stream's
// client side; not PostgreSQL) and the time its threads spent runnable waiting for a CPU per
// call (/proc/self/task/*/schedstat: the cost of other processes on the machine); the ingest
// rate of the phase, and the 1-minute load average at its start.
//
// Memory: the process's VmRSS (the server runs in this process; PostgreSQL does not) after
// the server starts, after the labels are in, and after the fit, each also after
// malloc_trim(0), which returns freed heap to the kernel, and the bytes held from malloc
// (mallinfo2: in use in every arena plus mmapped blocks); the benchmark's own copy of the
// crowd is freed before the second reading.
#include <grpcpp/grpcpp.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_server.h"
#include "bench/random_crowd.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

ABSL_FLAG(int, items, 100000, "Items.");
ABSL_FLAG(int, labels_per_item, 10, "Labels per item (distinct annotators).");
ABSL_FLAG(int, annotators, 300, "Annotators.");
ABSL_FLAG(int, classes, 5, "Classes.");
ABSL_FLAG(std::string, method, "ds", "Truth method fitted before the queries: ds, one_coin, glad.");
ABSL_FLAG(uint64_t, seed, 1, "RandomCrowd seed.");
ABSL_FLAG(std::string, loads, "idle,ingest", "Comma-separated loads: idle, ingest, refit.");
ABSL_FLAG(std::string, kinds, "get1,get100,suggest",
          "Comma-separated RPC kinds: get1, get100, suggest. Empty: set-up and memory only.");
ABSL_FLAG(std::string, callers, "1,4", "Comma-separated numbers of concurrent callers.");
ABSL_FLAG(double, seconds, 10, "Measured seconds per phase.");
ABSL_FLAG(double, warmup_s, 1, "Seconds per phase before measuring.");
ABSL_FLAG(double, rate, 0,
          "0: closed loop (each caller calls again as soon as a call returns). > 0: open loop "
          "at this many calls/s in all (split over the callers); latency counts from the time "
          "a call was due.");
ABSL_FLAG(int, ingest_batch, 500, "Labels per batch of the ingest stream.");
ABSL_FLAG(double, refit_every_s, 3, "Seconds between refits under the refit load.");
ABSL_FLAG(double, hold_s, 0,
          "Seconds to sleep after the memory readings (e.g. to take a heap profiler's snapshot "
          "of the loaded server with vgdb).");

namespace {

using Clock = std::chrono::steady_clock;
using verity::bench::BenchLabel;
using verity::bench::CheckOrDie;

double LoadAverage1() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

double RssMib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return -1;
}

// CPU time of this process (all threads, also those that ended), in seconds.
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Seconds the live threads of this process have spent runnable but waiting for a CPU (the
// second field of /proc/self/task/*/schedstat): what other processes on the machine cost us.
// Threads that ended are not counted.
double RunQueueWaitSeconds() {
  double total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "schedstat");
    unsigned long long on_cpu = 0, waiting = 0;
    if (in >> on_cpu >> waiting) total += waiting * 1e-9;
  }
  return total;
}

void PrintRss(const char* when, int64_t labels) {
  const double rss = RssMib();
  malloc_trim(0);
  const double trimmed = RssMib();
  // Bytes the program holds from malloc (all arenas, and blocks malloc took with mmap).
  const struct mallinfo2 info = mallinfo2();
  const double in_use = static_cast<double>(info.uordblks + info.hblkhd) / (1024.0 * 1024.0);
  std::printf("| %s | %lld | %.1f | %.1f | %.1f |\n", when, static_cast<long long>(labels), rss,
              trimmed, in_use);
  std::fflush(stdout);
}

std::vector<int> ParseInts(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      std::fprintf(stderr, "bad number %s\n", std::string(s).c_str());
      std::exit(2);
    }
    out.push_back(n);
  }
  return out;
}

// A channel of its own (its own subchannel and TCP connection), as separate clients have.
std::shared_ptr<grpc::Channel> OwnChannel(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("localhost:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

struct Latencies {
  std::vector<double> ms;
  int64_t errors = 0;
  std::string first_error;
};

// One caller's loop body: issues one call, returns its status.
using CallFn = std::function<grpc::Status(std::mt19937_64&)>;
using CallFactory = std::function<CallFn(std::shared_ptr<grpc::Channel>)>;

CallFactory GetPosteriorsCalls(int n_items, int items) {
  return [=](std::shared_ptr<grpc::Channel> channel) -> CallFn {
    auto stub = std::shared_ptr<verity::v1::TruthService::Stub>(
        verity::v1::TruthService::NewStub(channel));
    return [=](std::mt19937_64& rng) {
      verity::v1::GetPosteriorsRequest request;
      request.set_project("bench");
      for (int k = 0; k < n_items; ++k) request.add_items(absl::StrCat("i", rng() % items));
      verity::v1::GetPosteriorsResponse response;
      grpc::ClientContext context;
      SetDeadline(context);
      grpc::Status s = stub->GetPosteriors(&context, request, &response);
      if (s.ok() && response.posteriors_size() != n_items) {
        return grpc::Status(grpc::StatusCode::INTERNAL, "wrong number of posteriors");
      }
      return s;
    };
  };
}

CallFactory SuggestCalls(int annotators) {
  return [=](std::shared_ptr<grpc::Channel> channel) -> CallFn {
    auto stub = std::shared_ptr<verity::v1::AssignmentService::Stub>(
        verity::v1::AssignmentService::NewStub(channel));
    return [=](std::mt19937_64& rng) {
      verity::v1::SuggestItemsRequest request;
      request.set_project("bench");
      request.set_annotator(absl::StrCat("w", rng() % annotators));
      request.set_k(10);
      verity::v1::SuggestItemsResponse response;
      grpc::ClientContext context;
      SetDeadline(context);
      grpc::Status s = stub->SuggestItems(&context, request, &response);
      if (s.ok() && response.suggestions_size() != 10) {
        return grpc::Status(grpc::StatusCode::INTERNAL, "fewer than 10 suggestions");
      }
      return s;
    };
  };
}

// The background load of a phase: an ingest stream and, for "refit", periodic refits.
class BackgroundLoad {
 public:
  BackgroundLoad(verity::bench::BenchServer& bench, const std::string& load,
                 const verity::bench::RandomCrowd& crowd, uint64_t seed)
      : bench_(bench) {
    if (load == "idle") return;
    threads_.emplace_back([this, &crowd, seed] {
      auto stub = verity::v1::IngestService::NewStub(bench_.channel());
      std::mt19937_64 rng(seed);
      grpc::ClientContext context;
      auto stream = stub->SubmitAnnotations(&context);
      static std::atomic<uint64_t> next_batch{1u << 30};
      const int batch_size = absl::GetFlag(FLAGS_ingest_batch);
      while (!stop_.load()) {
        verity::v1::AnnotationBatch batch;
        batch.set_project("bench");
        batch.set_batch_id(next_batch++);
        for (int k = 0; k < batch_size; ++k) {
          // A random crowd label (item i, annotator a) drawn afresh from a's confusion row,
          // given as the label of a's twin "v<a>" on i: mostly a new (item, annotator) pair,
          // with the crowd's distribution of labels.
          const verity::models::Annotation& old = crowd.annotations[rng() % crowd.annotations.size()];
          const std::vector<double>& confusion = crowd.confusions[old.annotator];
          const int32_t k_classes = crowd.num_classes;
          const double* row = confusion.data() + crowd.truth[old.item] * k_classes;
          double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
          int32_t label = k_classes - 1;
          for (int32_t c = 0; c < k_classes; ++c) {
            if (u < row[c]) {
              label = c;
              break;
            }
            u -= row[c];
          }
          auto* a = batch.add_annotations();
          a->set_item(absl::StrCat("i", old.item));
          a->set_annotator(absl::StrCat("v", old.annotator));
          a->set_label(label);
        }
        verity::v1::BatchAck ack;
        if (!stream->Write(batch) || !stream->Read(&ack) || ack.error_code() != 0) {
          std::fprintf(stderr, "ingest stream failed: %s\n", ack.error_message().c_str());
          std::exit(1);
        }
        if (counting_.load()) {
          labels_ += batch_size;
          revised_ += ack.revised() + ack.accepted();
        }
      }
      stream->WritesDone();
      verity::v1::BatchAck ack;
      while (stream->Read(&ack)) {
      }
      CheckOrDie(stream->Finish(), "SubmitAnnotations");
    });
    if (load == "refit") {
      threads_.emplace_back([this] {
        const auto every = std::chrono::duration<double>(absl::GetFlag(FLAGS_refit_every_s));
        auto next = Clock::now() + every;
        while (!stop_.load()) {
          if (Clock::now() < next) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            continue;
          }
          if (absl::Status s = bench_.server().core().scheduler->RefitDueProjectsNow(true);
              !s.ok()) {
            std::fprintf(stderr, "refit: %s\n", s.ToString().c_str());
            std::exit(1);
          }
          if (counting_.load()) ++refits_;
          next = Clock::now() + every;
        }
      });
    }
  }
  ~BackgroundLoad() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  void StartCounting() { counting_ = true; }
  int64_t labels() const { return labels_.load(); }
  int64_t revised() const { return revised_.load(); }
  int refits() const { return refits_.load(); }

 private:
  verity::bench::BenchServer& bench_;
  std::atomic<bool> stop_{false}, counting_{false};
  std::atomic<int64_t> labels_{0}, revised_{0};
  std::atomic<int> refits_{0};
  std::vector<std::thread> threads_;
};

double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()))];
}

void RunPhase(verity::bench::BenchServer& bench, const std::string& load, const std::string& kind,
              int callers, double rate, const verity::bench::RandomCrowd& crowd,
              uint64_t phase_seed) {
  const int items = crowd.num_items, annotators = crowd.num_annotators;
  CallFactory factory;
  double target_ms = 0;
  if (kind == "get1") {
    factory = GetPosteriorsCalls(1, items);
  } else if (kind == "get100") {
    factory = GetPosteriorsCalls(100, items);
    target_ms = 2;
  } else if (kind == "suggest") {
    factory = SuggestCalls(annotators);
    target_ms = 10;
  } else {
    std::fprintf(stderr, "unknown kind %s\n", kind.c_str());
    std::exit(2);
  }
  const double load_average = LoadAverage1();
  BackgroundLoad background(bench, load, crowd, phase_seed);
  const auto warmup = std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup_s));
  const auto measured = std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds));
  const auto start = Clock::now() + std::chrono::duration_cast<Clock::duration>(warmup);
  const auto end = start + std::chrono::duration_cast<Clock::duration>(measured);
  std::vector<Latencies> per_caller(callers);
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; ++c) {
    threads.emplace_back([&, c] {
      CallFn call = factory(OwnChannel(bench.server().port()));
      std::mt19937_64 rng(phase_seed * 1000 + c);
      Latencies& out = per_caller[c];
      // Open loop: call i of this caller is due at first_due + i * interval (callers
      // staggered), and its latency counts from then, so a stall delays every call due
      // during it, as it would with independent clients.
      const auto interval = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(rate > 0 ? callers / rate : 0.0));
      auto due = Clock::now() + interval * c / std::max(callers, 1);
      for (;;) {
        if (rate > 0) {
          std::this_thread::sleep_until(due);
        } else {
          due = Clock::now();
        }
        const auto t0 = due;
        if (t0 >= end) break;
        grpc::Status s = call(rng);
        const auto t1 = Clock::now();
        due += interval;
        if (t0 < start) continue;
        if (s.ok()) {
          out.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        } else {
          if (out.errors++ == 0) out.first_error = s.error_message();
        }
      }
    });
  }
  std::this_thread::sleep_until(start);
  background.StartCounting();
  const double cpu_start = ProcessCpuSeconds(), wait_start = RunQueueWaitSeconds();
  std::this_thread::sleep_until(end);
  const double cpu = ProcessCpuSeconds() - cpu_start, wait = RunQueueWaitSeconds() - wait_start;
  for (auto& t : threads) t.join();
  const int64_t ingested = background.labels(), revised = background.revised();
  int64_t labels_at_end = -1;
  if (auto project = bench.server().core().registry->Get("bench"); project.ok()) {
    labels_at_end = (*project)->Counts().num_labels;
  }
  const int refits = background.refits();
  std::vector<double> all;
  int64_t errors = 0;
  std::string first_error;
  for (Latencies& l : per_caller) {
    all.insert(all.end(), l.ms.begin(), l.ms.end());
    if (l.errors > 0 && first_error.empty()) first_error = l.first_error;
    errors += l.errors;
  }
  std::sort(all.begin(), all.end());
  const double seconds = measured.count();
  const double p99 = Quantile(all, 0.99);
  const double per_call_ms = all.empty() ? 0.0 : 1000.0 / all.size();
  std::printf("| %s | %s | %d | %zu | %.0f | %.3f | %.3f | %.3f | %.3f | %s | %s | %.3f | %.3f | "
              "%.0f | %.0f | %d | %lld | %lld | %.2f |\n",
              load.c_str(), kind.c_str(), callers, all.size(), all.size() / seconds,
              Quantile(all, 0.5), p99, Quantile(all, 0.999), all.empty() ? 0.0 : all.back(),
              target_ms > 0 ? absl::StrCat(target_ms, " ms").c_str() : "-",
              target_ms > 0 ? absl::StrFormat("%.2f", p99 / target_ms).c_str() : "-",
              cpu * per_call_ms, wait * per_call_ms, ingested / seconds, revised / seconds, refits,
              static_cast<long long>(labels_at_end), static_cast<long long>(errors), load_average);
  if (errors > 0) std::printf("first error: %s\n", first_error.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int items = absl::GetFlag(FLAGS_items), annotators = absl::GetFlag(FLAGS_annotators);
  const int classes = absl::GetFlag(FLAGS_classes);
  verity::v1::TruthMethod method = verity::v1::TRUTH_METHOD_DAWID_SKENE;
  if (absl::GetFlag(FLAGS_method) == "one_coin") method = verity::v1::TRUTH_METHOD_ONE_COIN;
  if (absl::GetFlag(FLAGS_method) == "glad") method = verity::v1::TRUTH_METHOD_GLAD;

  std::printf("# %u hardware threads; load average at start %.2f\n",
              std::thread::hardware_concurrency(), LoadAverage1());
  auto bench = verity::bench::BenchServer::StartOrDie("query-bench");
  std::printf("# %s\n", bench->SharePriorityWithPostgres().c_str());
  std::printf("| memory | labels | VmRSS MiB | after malloc_trim MiB | malloc in use MiB |\n"
              "|---|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  bench->CreateProjectOrDie("bench", classes);
  {
    auto stub = verity::v1::ProjectService::NewStub(bench->channel());
    verity::v1::UpdateProjectSettingsRequest request;
    request.set_project("bench");
    request.mutable_settings()->mutable_model()->set_method(method);
    verity::v1::UpdateProjectSettingsResponse response;
    grpc::ClientContext context;
    CheckOrDie(stub->UpdateProjectSettings(&context, request, &response), "UpdateProjectSettings");
  }
  PrintRss("server started, empty project", 0);

  verity::bench::RandomCrowdSpec spec;
  spec.num_items = items;
  spec.labels_per_item = absl::GetFlag(FLAGS_labels_per_item);
  spec.num_annotators = annotators;
  spec.num_classes = classes;
  spec.seed = absl::GetFlag(FLAGS_seed);
  int64_t num_labels = 0;
  {
    auto crowd = verity::bench::GenerateRandomCrowd(spec);
    if (!crowd.ok()) {
      std::fprintf(stderr, "%s\n", crowd.status().ToString().c_str());
      return 1;
    }
    num_labels = static_cast<int64_t>(crowd->annotations.size());
    const auto start = Clock::now();
    // In slices, so that the string copies of all labels never exist at once.
    constexpr size_t kSlice = 100000;
    for (size_t first = 0; first < crowd->annotations.size(); first += kSlice) {
      std::vector<BenchLabel> slice;
      const size_t last = std::min(crowd->annotations.size(), first + kSlice);
      slice.reserve(last - first);
      for (size_t i = first; i < last; ++i) {
        const verity::models::Annotation& a = crowd->annotations[i];
        slice.push_back({absl::StrCat("i", a.item), absl::StrCat("w", a.annotator), a.label});
      }
      bench->SubmitOrDie("bench", slice);
    }
    std::printf("# ingested %lld labels in %.1f s\n", static_cast<long long>(num_labels),
                std::chrono::duration<double>(Clock::now() - start).count());
  }
  PrintRss("labels ingested (before the first fit)", num_labels);
  {
    const auto start = Clock::now();
    if (absl::Status s = bench->server().core().scheduler->RefitDueProjectsNow(true); !s.ok()) {
      std::fprintf(stderr, "fit: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("# first fit (%s) in %.2f s\n", absl::GetFlag(FLAGS_method).c_str(),
                std::chrono::duration<double>(Clock::now() - start).count());
  }
  PrintRss("after the first fit", num_labels);
  // One new label, so that the forced pass refits: it skips a project whose fit is current
  // (TrainingScheduler::RefitDueProjectsNow).
  bench->SubmitOrDie("bench", {{"i0", "warm-refit", 0}});
  if (absl::Status s = bench->server().core().scheduler->RefitDueProjectsNow(true); !s.ok()) {
    std::fprintf(stderr, "refit: %s\n", s.ToString().c_str());
    return 1;
  }
  PrintRss("after a second (warm) refit", num_labels);
  if (absl::GetFlag(FLAGS_hold_s) > 0) {
    std::printf("# holding %g s\n", absl::GetFlag(FLAGS_hold_s));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_hold_s)));
  }

  std::vector<std::string> loads = absl::StrSplit(absl::GetFlag(FLAGS_loads), ',', absl::SkipEmpty());
  std::vector<std::string> kinds = absl::StrSplit(absl::GetFlag(FLAGS_kinds), ',', absl::SkipEmpty());
  const std::vector<int> callers = ParseInts(absl::GetFlag(FLAGS_callers));
  if (kinds.empty()) return 0;
  // The ingest stream draws from the same crowd (regenerated: the memory readings above are
  // taken without this copy).
  auto crowd = verity::bench::GenerateRandomCrowd(spec);
  if (!crowd.ok()) return 1;
  std::printf("\n| load | kind | callers | calls | calls/s | p50 ms | p99 ms | p999 ms | max ms | "
              "target p99 | p99 / target | cpu ms/call | run-queue wait ms/call | ingest labels/s | "
              "of which changed /s | refits | labels at end | errors | load avg |\n"
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  uint64_t phase = 0;
  for (const std::string& load : loads) {
    for (const std::string& kind : kinds) {
      for (int c : callers) {
        RunPhase(*bench, load, kind, c, absl::GetFlag(FLAGS_rate), *crowd, ++phase);
      }
    }
  }
  return 0;
}
