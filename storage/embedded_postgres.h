// EmbeddedPostgres: a private PostgreSQL cluster owned by one Verity
// deployment, living entirely inside a data directory.
//
// Start() makes sure a cluster exists in `data_dir/pgdata` (running initdb on
// first use), that a postmaster serving it is running, and that the `verity`
// database exists. The server listens only on a Unix-domain socket (no TCP)
// in a private directory (mode 0700), with trust authentication for the
// `verity` role: only the OS user running PostgreSQL (and root) can connect.
//
// PostgreSQL refuses to run as root. When the calling process is root, the
// cluster is created and run as an unprivileged OS user (default "postgres",
// which Debian's postgresql package creates); every directory on the way to
// `data_dir` must be traversable by that user.
//
// The postmaster is a separate process (started with `pg_ctl`) and outlives
// this object if the process is killed. A later Start() on the same data_dir
// finds it running and reuses it; a postmaster.pid left by a dead server is
// handled by PostgreSQL itself. Stop() (and the destructor) shut the cluster
// down with `pg_ctl stop -m fast`, whether this object started it or found it
// running.
//
// Thread-safety: Start() may be called concurrently, also from different
// processes, for the same data_dir (initdb is staged in a temporary directory
// and renamed into place; a lost race to start the postmaster falls back to
// reusing the winner). The const accessors are thread-safe. Stop() and
// destruction must not race with each other.
#ifndef VERITY_STORAGE_EMBEDDED_POSTGRES_H_
#define VERITY_STORAGE_EMBEDDED_POSTGRES_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace verity {
namespace storage {
namespace embedded_postgres_internal {
struct OsUser;  // The OS identity running the cluster (defined in the .cc).
}  // namespace embedded_postgres_internal

class EmbeddedPostgres {
 public:
  struct Options {
    // Required. Directory holding everything: the cluster in `pgdata/`, the
    // server log `postgresql.log` and the socket directory `run/`. Created
    // (mode 0700) if missing; a relative path is made absolute against the
    // current directory.
    std::string data_dir;

    // Directory with `initdb`, `pg_ctl` and `postgres`. Default (empty):
    // /usr/lib/postgresql/15/bin if it exists, else `pg_config --bindir`,
    // else the newest /usr/lib/postgresql/*/bin.
    std::string bin_dir;

    // OS user that owns the cluster files and runs the server. Default
    // (empty): "postgres" when running as root, else the current user. Only
    // root may name a user other than itself.
    std::string os_user;

    // Durability. Default true: fsync=on, full_page_writes=on, and initdb
    // syncs its files; synchronous_commit is always on. Tests may set false
    // to trade crash safety for speed: an OS crash or power loss may then
    // lose committed data or corrupt the cluster; a crash (even kill -9) of
    // PostgreSQL or of this process still loses nothing committed.
    bool durable = true;

    // PostgreSQL `shared_buffers`. Default "128MB".
    std::string shared_buffers = "128MB";

    // PostgreSQL `max_connections`. Default 50.
    int max_connections = 50;

    // How long `pg_ctl start` / `pg_ctl stop` may wait. Default 60 s.
    absl::Duration timeout = absl::Seconds(60);

    // For an owner that stops the cluster when it stops (verity_server): Start() also takes
    // an exclusive lock on `data_dir/verity.lock` (flock, holding this process's pid), kept
    // until Stop() has stopped the cluster or the object is destroyed, and released by the
    // kernel if the process dies. While another process holds it, Start() fails
    // FAILED_PRECONDITION naming that pid and touches nothing, so that a second owner can
    // neither share the cluster nor stop it under the first. On a file system that cannot
    // lock, Start() logs that and goes on without the lock. Default false: starts that reuse
    // one another's cluster are allowed (see the class comment).
    bool exclusive = false;
  };

  // Starts (or reuses) the cluster in options.data_dir as described above.
  // Errors: INVALID_ARGUMENT for bad options (empty data_dir, unknown
  // os_user, a non-root process naming another user); FAILED_PRECONDITION
  // when another process holds the data_dir (Options::exclusive), when the
  // binaries cannot be found, when os_user cannot reach data_dir (the
  // message names the blocking directory and suggests another --data_dir), or
  // when `pgdata` exists but is not a cluster; INTERNAL when initdb or pg_ctl
  // fail (the message includes the tail of their output or of the server
  // log); UNAVAILABLE when the started server cannot be connected to.
  static absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> Start(
      const Options& options);

  EmbeddedPostgres(const EmbeddedPostgres&) = delete;
  EmbeddedPostgres& operator=(const EmbeddedPostgres&) = delete;

  // Calls Stop() unless it was already called; logs a failure to stderr.
  ~EmbeddedPostgres();

  // Shuts the cluster down (`pg_ctl stop -m fast`: open transactions are
  // rolled back, committed data is safe). A cluster that is already stopped
  // counts as success. Idempotent.
  absl::Status Stop();

  // libpq keyword/value connection string for the `verity` database, e.g.
  // "host='/data/run' port=5432 dbname='verity' user='verity'".
  std::string connection_url() const { return ConnectionUrl("verity"); }

  // The same for any database in the cluster (tests create their own).
  std::string ConnectionUrl(absl::string_view dbname) const;

  const std::string& data_dir() const { return data_dir_; }
  const std::string& socket_dir() const { return socket_dir_; }
  // True if Start() found a server from this data_dir already running and
  // reused it instead of starting one.
  bool reused_running_server() const { return reused_running_server_; }

 private:
  using OsUser = embedded_postgres_internal::OsUser;

  EmbeddedPostgres(Options options, std::string data_dir,
                   std::string socket_dir, std::string bin_dir,
                   std::shared_ptr<const OsUser> user);

  absl::Status StartImpl();
  absl::Status InitDbIfNeeded();
  absl::Status StartServer();
  absl::StatusOr<bool> IsRunning() const;
  bool CanConnect() const;
  absl::Status EnsureVerityDatabase() const;
  std::string ServerOptions() const;
  void ReleaseLock();  // Closes lock_fd_, if open.
  std::string PgData() const { return data_dir_ + "/pgdata"; }
  std::string LogFile() const { return data_dir_ + "/postgresql.log"; }

  const Options options_;
  const std::string data_dir_;
  const std::string socket_dir_;
  const std::string bin_dir_;
  const std::shared_ptr<const OsUser> user_;
  bool reused_running_server_ = false;
  bool stopped_ = false;
  // The open, flock'ed data_dir/verity.lock of an exclusive owner; -1 otherwise.
  int lock_fd_ = -1;
};

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_EMBEDDED_POSTGRES_H_
