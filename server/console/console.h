// WebConsole: the read-only operator console served on the metrics HTTP port beside /metrics
// (MetricsHttpServer::Options::page_handler). GET / answers one static HTML page (inline CSS
// and JavaScript, embedded in the binary: server/console/console_page.cc) that reads these JSON
// endpoints of the same server:
//
//   /api/projects                      every project: classes, counts, ingest rate, model
//   /api/projects/{name}               one project: posterior-confidence histogram, resolved
//                                      share, open items and leases, model versions
//   /api/projects/{name}/annotators    every annotator: labels, estimated accuracy, confusion
//
// Everything is read from the server's in-memory state (the project's current snapshot, as
// the Truth service reads it) except the model versions, which come from PostgreSQL. Unknown
// paths and projects answer 404 with {"error": "..."}; a failed database read answers 503.
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
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/observability/metrics_http.h"
#include "server/state/live_project.h"
#include "server/state/project_registry.h"
#include "storage/model_version_store.h"

namespace verity::server {

// The console page (HTML with inline CSS and JavaScript).
extern const char kConsolePage[];

class WebConsole {
 public:
  // Confusion matrices are listed for projects with at most this many classes (a K×K matrix
  // per annotator grows quickly); above it "confusion" is null.
  static constexpr int32_t kMaxConfusionClasses = 32;
  // Model versions listed per project, newest first.
  static constexpr int32_t kMaxVersions = 20;
  // The ingest rate is measured over label counts sampled at console requests within this
  // window (null until two samples at least a second apart exist).
  static constexpr absl::Duration kRateWindow = absl::Minutes(5);

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

  // `registry` and `versions` must outlive the console.
  WebConsole(ProjectRegistry& registry, storage::ModelVersionStore& versions, Access access)
      : registry_(registry), versions_(versions), access_(std::move(access)) {}

  // Answers a GET request.
  HttpResponse Handle(const HttpPageRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool HostAllowed(absl::string_view host_header) const;
  HttpResponse Projects(const ProjectFilter& may_read, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  HttpResponse Project(LiveProject& project, absl::Time now);
  HttpResponse Annotators(LiveProject& project);
  // Records `labels` for `project` at `now` and returns labels per second over the window,
  // or a negative value when it cannot be measured yet.
  double IngestRate(const std::string& project, int64_t labels, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ProjectRegistry& registry_;
  storage::ModelVersionStore& versions_;
  const Access access_;
  absl::Mutex mu_;
  // Per project: (time, live labels) samples, oldest first, within kRateWindow.
  absl::flat_hash_map<std::string, std::deque<std::pair<absl::Time, int64_t>>> label_samples_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace verity::server

#endif  // VERITY_SERVER_CONSOLE_CONSOLE_H_
