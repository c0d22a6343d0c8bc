// ServerProcess: runs the verity_server binary as a child process for tests that must kill it
// (durability) — start, wait until it listens, SIGKILL or SIGTERM it, restart on the same data.
//
// The server's stderr goes to a log file in the data directory; Start() parses the
// `event=listening ... port=N` line to learn the port (the server is started with port 0), and
// waits for `event=projects_loaded` too: the server listens before the projects stored by an
// earlier run have loaded (--load_threads), and tests that query them after a restart must not
// see their UNAVAILABLE "loading" answers.
//
// Thread-compatible.
#ifndef VERITY_TESTS_SERVER_PROCESS_H_
#define VERITY_TESTS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace verity::tests {

class ServerProcess {
 public:
  // `binary`: path of verity_server; `data_dir`: its --data_dir (embedded PostgreSQL);
  // `extra_flags` are passed after the defaults (--listen=localhost:0 --data_dir=...
  // --background_refit=false), so they may override them.
  ServerProcess(std::string binary, std::string data_dir,
                std::vector<std::string> extra_flags = {});
  ~ServerProcess();  // Stops the server (SIGTERM) if it runs.

  // Starts the server and waits up to `timeout` for it to listen and to have loaded every
  // stored project (or failed to: event=projects_loaded).
  absl::Status Start(absl::Duration timeout = absl::Seconds(60));
  // The same, but returns as soon as it listens, the stored projects perhaps still loading.
  absl::Status StartListening(absl::Duration timeout = absl::Seconds(60));
  // SIGKILL: no shutdown work at all (the embedded PostgreSQL keeps running).
  void Kill();
  // SIGTERM and wait for a clean exit; returns the exit status.
  absl::Status Stop();

  int port() const { return port_; }
  pid_t pid() const { return pid_; }  // -1 when not running.
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log_path() const { return data_dir_ + "/server.log"; }

 private:
  absl::Status StartAndWait(absl::Duration timeout, bool until_loaded);

  std::string binary_;
  std::string data_dir_;
  std::vector<std::string> extra_flags_;
  pid_t pid_ = -1;
  int port_ = 0;
  int starts_ = 0;
};

// Path of a runfile of this workspace (e.g. "server/verity_server") under bazel test.
std::string RunfilePath(const std::string& path_in_workspace);

// A fresh directory under /tmp (reachable by an unprivileged PostgreSQL user even when the
// test runs as root), removed with RemoveTree.
std::string MakeTempDir(const std::string& prefix);
void RemoveTree(const std::string& path);

}  // namespace verity::tests

#endif  // VERITY_TESTS_SERVER_PROCESS_H_
