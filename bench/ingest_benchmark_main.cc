// ingest_benchmark: durable streaming ingest over loopback gRPC into PostgreSQL, next to the
// storage ceiling measured in the same run (PostgreSQL COPY of the same rows into a table
// shaped like `annotations`).
//
//   bazel run -c opt //bench:ingest_benchmark -- --annotations=1000000 --streams=4 --batch=5000
//
// The server runs in-process on an embedded PostgreSQL 15 with durable commits (fsync on,
// synchronous_commit on), its background trainer on. Each of --streams client streams keeps up
// to --in_flight batches unacked. Prints annotations/s, ack latency p50/p99 (send of a batch
// to its ack), the COPY rate of the same rows (one transaction, synchronous commit), and the
// CPU seconds this process (server, clients, trainer; the ingest committer thread apart) and
// PostgreSQL used during each: on a shared machine those are steadier than the rates.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_server.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "pqxx/pqxx"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

ABSL_FLAG(int, annotations, 1000000, "Annotations sent.");
ABSL_FLAG(int, items, 200000, "Distinct items.");
ABSL_FLAG(int, annotators, 2000, "Distinct annotators.");
ABSL_FLAG(int, streams, 4, "Concurrent SubmitAnnotations streams.");
ABSL_FLAG(int, batch, 5000, "Annotations per batch.");
ABSL_FLAG(int, in_flight, 8, "Unacked batches per stream.");
ABSL_FLAG(bool, background_refit, true, "Run the server's background trainer.");
ABSL_FLAG(double, trainer_busy_fraction, 0.5,
          "The server's --trainer_busy_fraction: the most of its time the trainer spends fitting.");
ABSL_FLAG(std::string, labels, "crowd",
          "crowd: each item has a true class (a fair coin) and each annotator an accuracy drawn "
          "from [0.6, 0.95], the chance that their label is the true class; uniform: every "
          "label a fair coin, which leaves EM nothing to converge to (fits run to their "
          "iteration cap).");
ABSL_FLAG(int, freshness_probes, 500,
          "Single-label batches sent during the bulk ingest to measure ack-to-posterior time.");

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  int32_t item, annotator, label;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// Sends batches [first, last) of `rows` on one stream; appends each batch's ack latency (ms).
void RunStream(verity::v1::IngestService::Stub& stub, const std::vector<Row>& rows, size_t first,
               size_t last, int batch_size, int in_flight, std::vector<double>& latencies) {
  grpc::ClientContext context;
  auto stream = stub.SubmitAnnotations(&context);
  absl::Mutex mu;
  std::deque<Clock::time_point> sent;  // send time of each unacked batch, in order
  size_t acked = 0, batches = 0;
  std::thread reader([&] {
    verity::v1::BatchAck ack;
    while (stream->Read(&ack)) {
      if (ack.error_code() != 0) {
        std::fprintf(stderr, "batch %llu failed: %s\n",
                     static_cast<unsigned long long>(ack.batch_id()), ack.error_message().c_str());
        std::exit(1);
      }
      absl::MutexLock lock(&mu);
      latencies.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - sent.front()).count());
      sent.pop_front();
      ++acked;
    }
  });
  for (size_t start = first; start < last; start += batch_size) {
    verity::v1::AnnotationBatch batch;
    batch.set_project("ingest");
    batch.set_batch_id(++batches);
    for (size_t i = start; i < std::min(last, start + batch_size); ++i) {
      verity::v1::Annotation* a = batch.add_annotations();
      a->set_item(absl::StrCat("item-", rows[i].item));
      a->set_annotator(absl::StrCat("worker-", rows[i].annotator));
      a->set_label(rows[i].label);
    }
    {
      absl::MutexLock lock(&mu);
      auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return sent.size() < static_cast<size_t>(in_flight);
      };
      mu.Await(absl::Condition(&room));
      sent.push_back(Clock::now());
    }
    stream->Write(batch);
  }
  stream->WritesDone();
  reader.join();
  grpc::Status status = stream->Finish();
  if (!status.ok()) {
    std::fprintf(stderr, "stream: %s\n", status.error_message().c_str());
    std::exit(1);
  }
}

// Freshness probe: while the bulk ingest runs, sends one new label at a time on its own
// stream; after each ack, reads the item's posterior until it counts the label. Appends the
// time from ack to a posterior that includes the label (ms).
void RunFreshnessProbe(verity::v1::IngestService::Stub& ingest,
                       verity::v1::TruthService::Stub& truth, int probes, const std::atomic<bool>& bulk_done,
                       std::vector<double>& freshness) {
  grpc::ClientContext context;
  auto stream = ingest.SubmitAnnotations(&context);
  for (int p = 0; p < probes && !bulk_done; ++p) {
    // A fresh item per probe: its posterior counts 1 label once the label is in.
    const std::string item = absl::StrCat("probe-", p);
    verity::v1::AnnotationBatch batch;
    batch.set_project("ingest");
    batch.set_batch_id(p + 1);
    verity::v1::Annotation* a = batch.add_annotations();
    a->set_item(item);
    a->set_annotator("probe-worker");
    a->set_label(1);
    stream->Write(batch);
    verity::v1::BatchAck ack;
    if (!stream->Read(&ack) || ack.error_code() != 0) break;
    const auto acked = Clock::now();
    while (true) {
      grpc::ClientContext query;
      verity::v1::GetPosteriorsRequest request;
      request.set_project("ingest");
      request.add_items(item);
      verity::v1::GetPosteriorsResponse response;
      grpc::Status status = truth.GetPosteriors(&query, request, &response);
      if (status.ok() && response.posteriors(0).num_labels() == 1) break;
    }
    freshness.push_back(std::chrono::duration<double, std::milli>(Clock::now() - acked).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stream->WritesDone();
  stream->Finish();
}

// Fields 3.. of a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat line (after the command
// name, which may contain spaces); empty if unreadable.
std::vector<std::string> StatFields(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::vector<std::string> fields;
  std::istringstream rest(line.substr(close + 1));
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

// utime + stime of a stat line, in seconds.
double CpuSeconds(const std::vector<std::string>& fields) {
  if (fields.size() < 13) return 0;
  return (std::stod(fields[11]) + std::stod(fields[12])) / sysconf(_SC_CLK_TCK);
}

// CPU seconds used so far: this process (server, clients and trainer together), its ingest
// committer thread (named verity-ingest), and each process of the PostgreSQL cluster (the
// postmaster and its children: backends, WAL writer, checkpointer...).
struct CpuSample {
  double process = 0;
  double committer = 0;
  std::map<std::string, double> postgres;  // By pid.
};

// CPU seconds from `before` to `after`. PostgreSQL: the postmaster's own and its reaped
// children's (cutime, cstime: backends, autovacuum workers and closed connections that exited
// in between) plus every child alive at either sample.
struct CpuUsed {
  double process = 0;
  double committer = 0;
  double postgres = 0;
};

CpuUsed Used(const CpuSample& before, const CpuSample& after) {
  CpuUsed used{after.process - before.process, after.committer - before.committer, 0};
  // A child alive before and reaped since counts -before here and its total in the
  // postmaster's cutime.
  for (const auto& [pid, seconds] : after.postgres) used.postgres += seconds;
  for (const auto& [pid, seconds] : before.postgres) used.postgres -= seconds;
  return used;
}

CpuSample SampleCpu(const std::string& postmaster_pid) {
  CpuSample sample;
  sample.process = CpuSeconds(StatFields("/proc/self/stat"));
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name == "verity-ingest") sample.committer += CpuSeconds(StatFields(task.path() / "stat"));
  }
  for (const auto& proc : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = proc.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::vector<std::string> fields = StatFields(proc.path() / "stat");
    if (fields.size() < 13) continue;
    if (pid == postmaster_pid) {
      // utime + stime + cutime + cstime: the postmaster reaps every child of the cluster.
      sample.postgres[pid] = CpuSeconds(fields) + (fields.size() < 15 ? 0
                                                   : (std::stod(fields[13]) + std::stod(fields[14])) /
                                                         sysconf(_SC_CLK_TCK));
    } else if (fields[1] == postmaster_pid) {
      sample.postgres[pid] = CpuSeconds(fields);
    }
  }
  return sample;
}

std::string PostmasterPid(const std::string& pgdata) {
  std::ifstream pid_file(pgdata + "/postmaster.pid");
  std::string pid;
  std::getline(pid_file, pid);
  return pid;
}

struct CopyResult {
  double rows_per_second = 0;
  CpuUsed cpu;  // Used by the COPY and its commit.
};

// COPY of the same rows into a table shaped like `annotations`.
CopyResult CopyCeiling(const std::string& url, const std::string& postmaster,
                       const std::vector<Row>& rows) {
  pqxx::connection connection(url);
  {
    pqxx::work setup(connection);
    setup.exec0("DROP TABLE IF EXISTS copy_ceiling");
    setup.exec0("CREATE TABLE copy_ceiling (LIKE annotations INCLUDING ALL)");
    setup.commit();
  }
  const CpuSample cpu_before = SampleCpu(postmaster);
  const auto start = Clock::now();
  pqxx::work txn(connection);
  pqxx::stream_to copy(txn, "copy_ceiling",
                       std::vector<std::string>{"project_id", "item_index", "annotator_index",
                                                "label", "seq"});
  // The same (item, annotator) pairs the ingest wrote: the benchmark's rows are unique pairs.
  int64_t seq = 0;
  for (const Row& r : rows) copy << std::make_tuple(int64_t{1}, r.item, r.annotator, r.label, ++seq);
  copy.complete();
  txn.commit();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const CpuSample cpu_after = SampleCpu(postmaster);  // Before the backend exits.
  pqxx::work cleanup(connection);
  cleanup.exec0("DROP TABLE copy_ceiling");
  cleanup.commit();
  return {rows.size() / seconds, Used(cpu_before, cpu_after)};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int n = absl::GetFlag(FLAGS_annotations);
  const int items = absl::GetFlag(FLAGS_items), annotators = absl::GetFlag(FLAGS_annotators);
  const std::string label_model = absl::GetFlag(FLAGS_labels);
  if (label_model != "crowd" && label_model != "uniform") {
    std::fprintf(stderr, "--labels must be crowd or uniform, got \"%s\"\n", label_model.c_str());
    return 1;
  }
  // Unique (item, annotator) pairs: item i gets labels from annotators (i*7 + r*31) mod W.
  std::vector<Row> rows;
  rows.reserve(n);
  std::mt19937 rng(5);
  // With --labels=crowd: the true class of each item and the accuracy of each annotator.
  std::vector<int32_t> true_class(items);
  for (int32_t& t : true_class) t = static_cast<int32_t>(rng() % 2);
  std::vector<double> accuracy(annotators);
  for (double& a : accuracy) a = 0.6 + 0.35 * (static_cast<double>(rng()) / 4294967296.0);
  const int per_item = (n + items - 1) / items;
  for (int r = 0; r < per_item && static_cast<int>(rows.size()) < n; ++r) {
    for (int i = 0; i < items && static_cast<int>(rows.size()) < n; ++i) {
      const auto annotator =
          static_cast<int32_t>((static_cast<int64_t>(i) * 7 + r * 31) % annotators);
      const double u = static_cast<double>(rng()) / 4294967296.0;
      const int32_t label = label_model == "uniform" ? (u < 0.5 ? 1 : 0)
                            : u < accuracy[annotator] ? true_class[i]
                                                      : 1 - true_class[i];
      rows.push_back({i, annotator, label});
    }
  }
  if (per_item > annotators) {
    std::fprintf(stderr, "need more annotators than labels per item\n");
    return 1;
  }

  char dir_template[] = "/tmp/verity-ingest-bench-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  chmod(dir.c_str(), 0755);
  verity::storage::EmbeddedPostgres::Options pg_options;
  pg_options.data_dir = dir + "/pg";
  auto pg = verity::storage::EmbeddedPostgres::Start(pg_options);
  if (!pg.ok()) {
    std::fprintf(stderr, "%s\n", pg.status().ToString().c_str());
    return 1;
  }
  const std::string postmaster = PostmasterPid(pg_options.data_dir + "/pgdata");
  const std::string priority = verity::bench::SharePriorityWithPostmaster(postmaster);
  verity::server::VerityServer::Options options;
  options.listen = "localhost:0";
  options.postgres_url = (*pg)->connection_url();
  options.training.run_in_background = absl::GetFlag(FLAGS_background_refit);
  options.training.max_busy_fraction = absl::GetFlag(FLAGS_trainer_busy_fraction);
  if (!(options.training.max_busy_fraction > 0.0 && options.training.max_busy_fraction <= 1.0)) {
    std::fprintf(stderr, "--trainer_busy_fraction must be in (0, 1]\n");
    return 1;
  }
  auto server = verity::server::VerityServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  auto channel = grpc::CreateChannel(absl::StrCat("localhost:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  {
    auto projects = verity::v1::ProjectService::NewStub(channel);
    grpc::ClientContext context;
    verity::v1::CreateProjectRequest request;
    request.mutable_project()->set_name("ingest");
    request.mutable_project()->add_classes("no");
    request.mutable_project()->add_classes("yes");
    verity::v1::CreateProjectResponse response;
    grpc::Status status = projects->CreateProject(&context, request, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.error_message().c_str());
      return 1;
    }
  }

  const int streams = absl::GetFlag(FLAGS_streams), batch = absl::GetFlag(FLAGS_batch);
  auto stub = verity::v1::IngestService::NewStub(channel);
  std::vector<std::vector<double>> latencies(streams);
  std::vector<std::thread> threads;
  const CpuSample cpu_before = SampleCpu(postmaster);
  const auto start = Clock::now();
  for (int s = 0; s < streams; ++s) {
    const size_t first = rows.size() * s / streams, last = rows.size() * (s + 1) / streams;
    threads.emplace_back([&, s, first, last] {
      RunStream(*stub, rows, first, last, batch, absl::GetFlag(FLAGS_in_flight), latencies[s]);
    });
  }
  std::atomic<bool> bulk_done{false};
  std::vector<double> freshness;
  auto truth = verity::v1::TruthService::NewStub(channel);
  std::thread probe([&] {
    RunFreshnessProbe(*stub, *truth, absl::GetFlag(FLAGS_freshness_probes), bulk_done, freshness);
  });
  for (auto& t : threads) t.join();
  bulk_done = true;
  probe.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const CpuUsed ingest_cpu = Used(cpu_before, SampleCpu(postmaster));
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  (*server)->Shutdown();
  server->reset();

  CopyResult copy;
  try {
    copy = CopyCeiling((*pg)->connection_url(), postmaster, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "COPY ceiling failed: %s\n", e.what());
    return 1;
  }
  const double copy_rate = copy.rows_per_second;
  const double ingest_rate = rows.size() / seconds;
  std::printf(
      "annotations=%zu streams=%d batch=%d in_flight=%d labels=%s trainer=%s\n"
      "ingest: %.0f annotations/s (%.2f s)  ack latency p50=%.1f ms p99=%.1f ms\n"
      "COPY ceiling: %.0f rows/s  ratio ceiling/ingest=%.2f\n"
      "freshness (ack to posterior including the label, %zu probes during the ingest): "
      "p50=%.2f ms p99=%.2f ms\n"
      "cpu seconds during the ingest: this process %.2f (ingest committer %.2f), PostgreSQL %.2f; "
      "during the COPY ceiling: this process %.2f, PostgreSQL %.2f\n%s\n",
      rows.size(), streams, batch, absl::GetFlag(FLAGS_in_flight), label_model.c_str(),
      options.training.run_in_background
          ? absl::StrCat("on, busy fraction ", options.training.max_busy_fraction).c_str()
          : "off",
      ingest_rate, seconds,
      Percentile(all, 0.5), Percentile(all, 0.99), copy_rate, copy_rate / ingest_rate,
      freshness.size(), Percentile(freshness, 0.5), Percentile(freshness, 0.99),
      ingest_cpu.process, ingest_cpu.committer, ingest_cpu.postgres, copy.cpu.process,
      copy.cpu.postgres,
      priority.c_str());
  (*pg)->Stop().IgnoreError();
  std::filesystem::remove_all(dir);
  return 0;
}
