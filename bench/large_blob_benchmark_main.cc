// Reading a large model blob back (docs/SECURITY.md, issue 23 point 1): stores a version whose
// parameters are --megabytes MB and reads it with ModelVersionStore, in chunks (the default,
// 64 MiB) and in one piece (--whole: a chunk as large as the blob, as reads were before),
// reporting the time, this process's peak RSS, or PostgreSQL's error.
//
//   bazel run -c opt //bench:large_blob_benchmark -- --megabytes=600 [--whole]
#include <sys/resource.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "bench/bench_server.h"
#include "storage/model_version_store.h"

ABSL_FLAG(int, megabytes, 600, "Size of the stored parameters (MB).");
ABSL_FLAG(bool, whole, false, "Read the blob in one piece instead of in 64 MiB chunks.");

namespace verity::bench {
namespace {

long PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;
}

int Run() {
  std::unique_ptr<BenchServer> bench = BenchServer::StartOrDie("large-blob");
  bench->CreateProjectOrDie("blob", 2);
  bench->SubmitOrDie("blob", {{"i", "w", 0}});
  const int64_t project_id = (*bench->server().core().registry->Get("blob"))->identity().project_id;
  storage::ConnectionPool& pool = *bench->server().core().storage->pool;
  storage::ModelVersionRecord record;
  record.project_id = project_id;
  record.method = "ds";
  record.parameters.assign(static_cast<size_t>(absl::GetFlag(FLAGS_megabytes)) << 20, '\x5a');
  absl::Time start = absl::Now();
  absl::StatusOr<storage::ModelVersionRecord> saved =
      storage::ModelVersionStore(&pool).SaveModelVersion(record);
  if (!saved.ok()) {
    std::printf("save failed: %s\n", saved.status().ToString().c_str());
    return 1;
  }
  std::printf("saved %d MB in %.1f s; peak RSS %ld MB\n", absl::GetFlag(FLAGS_megabytes),
              absl::ToDoubleSeconds(absl::Now() - start), PeakRssMb());
  record.parameters = std::string();
  const int64_t chunk = absl::GetFlag(FLAGS_whole)
                            ? (int64_t{absl::GetFlag(FLAGS_megabytes)} << 20) + 1
                            : storage::ModelVersionStore::kDefaultReadChunkBytes;
  start = absl::Now();
  absl::StatusOr<storage::ModelVersionRecord> read =
      storage::ModelVersionStore(&pool, chunk).LatestModelVersion(project_id);
  if (!read.ok()) {
    std::printf("read (%s) failed after %.1f s: %s\n", absl::GetFlag(FLAGS_whole) ? "whole" : "chunks",
                absl::ToDoubleSeconds(absl::Now() - start), read.status().ToString().c_str());
    return 1;
  }
  std::printf("read %zu bytes (%s) in %.1f s; peak RSS %ld MB\n", read->parameters.size(),
              absl::GetFlag(FLAGS_whole) ? "whole" : "64 MiB chunks",
              absl::ToDoubleSeconds(absl::Now() - start), PeakRssMb());
  return 0;
}

}  // namespace
}  // namespace verity::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return verity::bench::Run();
}
