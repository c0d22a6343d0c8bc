// WebConsole: the read-only operator console served on the metrics HTTP port beside /metrics
// (MetricsHttpServer::Options::page_handler). GET / answers one static HTML page (inline CSS
// and JavaScript, embedded in the binary: server/console/console_page.cc) that reads these JSON
// endpoints of the same server:
//
//   /api/projects                      every project: classes, counts, ingest rate, model
//   /api/projects/{name}               one project: posterior-confidence histogram, resolved
//                                      share, open items and leases, model versions, history
//                                      (ingest rate and resolved share over time), reliability
//                                      diagram on gold items
//   /api/projects/{name}/annotators    every annotator: labels, estimated accuracy, confusion,
//                                      spam score (mace), 2-D map of learned embeddings
//
// Everything is read from the server's in-memory state (the project's current snapshot, as
// the Truth service reads it) except the model versions and the gold items' labels, which
// come from PostgreSQL. Unknown paths and projects answer 404 with {"error": "..."}, a name
// that no project can have (projects.proto's rule) 400 with the same form; a failed database
// read answers 503.
//
// History: a background thread samples every project (live labels, resolved share) every
// kSampleInterval into a ring buffer of kHistorySamples per project, held in memory only (a
// restart starts it again; README.md here explains why).
//
// Reliability: for each gold item with labels, the served model's posterior from its labels
// alone (the gold label held out; the served posterior of a gold item is clamped to it), its
// confidence (largest probability) against whether its class is the gold one. The labels are
// read from PostgreSQL at most every kReliabilityRefresh per project, and only while the
// model version or the label count changed since the last read.
//
// Access (Access below, docs/SECURITY.md):
// - Host: a request whose Host header names neither a loopback name (localhost, 127.0.0.0/8,
//   ::1), nor the bound address, nor one of Access::allowed_hosts is refused (403), so a web
//   page cannot read the console through an operator's browser by DNS rebinding.
// - With authentication on (Access::authenticate set), every /api/ request needs
//   "Authorization: Bearer KEY" (401 without a valid one) and sees only the projects the key
//   may touch, with the gRPC scopes: a reader of project A lists only A, and B answers 403.
//   The page itself (GET /) carries no data; it asks for the key and keeps it in
//   sessionStorage.
//
// Thread-safety: Handle() is thread-safe (civetweb calls it from several threads).
#ifndef VERITY_SERVER_CONSOLE_CONSOLE_H_
#define VERITY_SERVER_CONSOLE_CONSOLE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/console/console_json.h"
#include "server/observability/metrics_http.h"
#include "server/state/live_project.h"
#include "server/state/project_registry.h"
#include "storage/annotation_store.h"
#include "storage/model_version_store.h"

namespace verity::server {

// The console page (HTML with inline CSS and JavaScript).
extern const char kConsolePage[];

class WebConsole {
 public:
  // Confusion matrices are listed for projects with at most this many classes (a K×K matrix
  // per annotator grows quickly); above it "confusion" is null.
  static constexpr int32_t kMaxConfusionClasses = 32;
  // /api/projects/NAME/annotators lists at most this many annotators, and with confusion
  // matrices at most kMaxListedConfusionCells / K² (K = 32: 1,024), those with the most labels
  // first; "annotators_total" says how many the project has. So one request's answer stays
  // within about 16 MB whatever the project holds (GetAnnotatorProfiles pages the rest).
  static constexpr int32_t kMaxListedAnnotators = 10000;
  static constexpr int64_t kMaxListedConfusionCells = 1 << 20;
  // Model versions listed per project, newest first.
  static constexpr int32_t kMaxVersions = 20;
  // The ingest rate of /api/projects is measured from the oldest history sample within this
  // window to the request (null until that sample is a second old).
  static constexpr absl::Duration kRateWindow = absl::Minutes(5);
  // History: one sample per project every kSampleInterval, the last kHistorySamples kept (an
  // hour).
  static constexpr absl::Duration kSampleInterval = absl::Seconds(5);
  static constexpr int32_t kHistorySamples = 720;
  // The reliability diagram's bins over [0, 1], and the least time between two reads of a
  // project's gold labels from PostgreSQL.
  static constexpr int32_t kReliabilityBins = 10;
  static constexpr absl::Duration kReliabilityRefresh = absl::Seconds(30);
  // The embedding map is drawn for projects with at most this many annotators (a PCA per
  // request); above it "embedding_2d" is null.
  static constexpr int32_t kMaxEmbeddingAnnotators = 10000;

  // Which projects a key may read: true for those it may touch.
  using ProjectFilter = std::function<bool(absl::string_view project)>;

  struct Access {
    // The host part of the address the console is bound to ("" or 0.0.0.0: none).
    std::string bound_host;
    // Further names the Host header may carry (--console_allowed_hosts), case-insensitive.
    std::vector<std::string> allowed_hosts;
    // Authentication on: maps a key's text to the projects it may read, or UNAUTHENTICATED.
    // Unset: authentication off, every project is readable.
    std::function<absl::StatusOr<ProjectFilter>(absl::string_view key)> authenticate;
  };

  // `registry`, `versions` and `annotations` must outlive the console. Without `annotations`
  // (null) no reliability diagram is drawn ("reliability" is null). Starts the thread that
  // samples the history; the destructor stops it.
  WebConsole(ProjectRegistry& registry, storage::ModelVersionStore& versions, Access access,
             storage::AnnotationStore* annotations = nullptr);
  ~WebConsole();
  WebConsole(const WebConsole&) = delete;
  WebConsole& operator=(const WebConsole&) = delete;

  // Answers a GET request.
  HttpResponse Handle(const HttpPageRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

  // Adds a history sample at `now` for every project whose last one is at least
  // kSampleInterval old (what the sampling thread does every kSampleInterval; a project's
  // JSON also samples that project, so that a new project has a sample at once).
  void SampleProjects(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool HostAllowed(absl::string_view host_header) const;
  HttpResponse Projects(const ProjectFilter& may_read, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  HttpResponse Project(LiveProject& project, absl::Time now);
  HttpResponse Annotators(LiveProject& project);
  void SampleProject(LiveProject& project, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Labels per second from the oldest history sample within kRateWindow to (`now`,
  // `labels`), or a negative value when it cannot be measured yet.
  double IngestRate(const std::string& project, int64_t labels, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The reliability diagram of `snapshot`'s model on the project's gold items (see the file
  // comment), from the cache when it is recent enough. UNAVAILABLE if PostgreSQL cannot be
  // read.
  struct GoldReliability {
    int32_t model_version = 0;
    int64_t labels = 0;
    absl::Time computed_at;
    int64_t gold_items = 0;
    int64_t gold_items_with_labels = 0;
    std::optional<Reliability> reliability;  // nullopt: no gold item with labels, or no store.
  };
  absl::StatusOr<GoldReliability> ReliabilityOnGold(LiveProject& project,
                                                    const ProjectSnapshot& snapshot,
                                                    int64_t labels, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  ProjectRegistry& registry_;
  storage::ModelVersionStore& versions_;
  const Access access_;
  storage::AnnotationStore* const annotations_;
  absl::Mutex mu_;
  // Per project: samples, oldest first, at most kHistorySamples.
  absl::flat_hash_map<std::string, std::deque<ProjectSample>> history_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, GoldReliability> reliability_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_sampling_;
  std::thread sampler_;  // Last: started once everything above is constructed.
};

}  // namespace verity::server

#endif  // VERITY_SERVER_CONSOLE_CONSOLE_H_
