#include "storage/embedded_postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <postgresql/libpq-fe.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "pqxx/connection"
#include "pqxx/except"
#include "pqxx/nontransaction"
#include "storage/pg_status.h"

namespace verity {
namespace storage {

namespace embedded_postgres_internal {

// The OS identity that owns the cluster and runs initdb/pg_ctl/postgres.
struct OsUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  // True when the process must change identity (it is root and the cluster
  // user is not) before running PostgreSQL programs.
  bool switch_needed = false;
};

}  // namespace embedded_postgres_internal

namespace {

using embedded_postgres_internal::OsUser;

// The server always uses this port number; it only names the socket file
// (`.s.PGSQL.5432`), as the server listens on no TCP port.
constexpr int kPort = 5432;
constexpr absl::string_view kSocketFileName = ".s.PGSQL.5432";
// sizeof(sockaddr_un::sun_path) on Linux, including the terminating NUL.
constexpr size_t kUnixSocketPathMax = 108;

void LogLine(absl::string_view message) {
  std::fprintf(stderr, "[verity storage] %s\n", std::string(message).c_str());
  std::fflush(stderr);
}

std::string ErrnoMessage(int err) { return std::strerror(err); }

std::string Tail(absl::string_view text, size_t max_bytes = 2000) {
  text = absl::StripTrailingAsciiWhitespace(text);
  if (text.size() <= max_bytes) return std::string(text);
  return absl::StrCat("...", text.substr(text.size() - max_bytes));
}

std::string ReadFileTail(const std::string& path, size_t max_bytes = 2000) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Tail(buffer.str(), max_bytes);
}

bool IsExecutable(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Quotes a value for a libpq keyword/value connection string.
std::string QuoteConnValue(absl::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// Quotes a value for /bin/sh (pg_ctl passes -o through the shell).
std::string ShellQuote(absl::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'') {
      out.append("'\\''");
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

// FNV-1a, stable across builds and runs (std::hash is not).
uint64_t StableHash(absl::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

absl::StatusOr<std::string> MakeAbsolute(const std::string& path) {
  std::string out = path;
  if (out.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
      return absl::InternalError(
          absl::StrCat("getcwd failed: ", ErrnoMessage(errno)));
    }
    out = absl::StrCat(cwd, "/", out);
  }
  // Collapse repeated slashes and drop a trailing one; keep "/" itself.
  std::vector<absl::string_view> parts =
      absl::StrSplit(out, '/', absl::SkipEmpty());
  std::vector<absl::string_view> kept;
  for (absl::string_view p : parts) {
    if (p == ".") continue;
    if (p == "..") {
      if (!kept.empty()) kept.pop_back();
      continue;
    }
    kept.push_back(p);
  }
  return absl::StrCat("/", absl::StrJoin(kept, "/"));
}

// Takes the exclusive lock of Options::exclusive on `path`: the open file descriptor (close-on-
// exec, so that no child such as the postmaster inherits the lock), with this process's pid
// written in it. FAILED_PRECONDITION naming the holder's pid when another process holds it;
// -1 (logged) when the file system cannot lock.
absl::StatusOr<int> LockDataDir(const std::string& path, const std::string& data_dir) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) {
      // A file system without flock (some network ones): the lock is a guard against a
      // second server, not a condition of running one.
      LogLine(absl::StrCat("cannot lock ", path, ": ", std::strerror(err),
                           "; running without the lock that keeps a second server out"));
      return -1;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "data directory ", data_dir, " is in use by process ",
        n > 0 ? absl::StripAsciiWhitespace(absl::string_view(holder, n)) : "(unknown)",
        " (another verity_server?): one server owns an embedded PostgreSQL; give this one "
        "another --data_dir, or run several servers over one database with --postgres_url"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  const ssize_t written = ::ftruncate(fd, 0) == 0 ? ::pwrite(fd, pid.data(), pid.size(), 0) : -1;
  static_cast<void>(written);  // The pid only explains a refusal; the lock holds without it.
  return fd;
}

// mkdir -p; the last component gets `mode`, created parents 0755.
absl::Status MakeDirectories(const std::string& path, mode_t mode) {
  if (IsDirectory(path)) return absl::OkStatus();
  size_t pos = 1;
  while (true) {
    pos = path.find('/', pos);
    const std::string prefix = path.substr(0, pos);
    const bool last = pos == std::string::npos;
    if (::mkdir(prefix.c_str(), last ? mode : 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create directory ", prefix, ": ", ErrnoMessage(errno)));
    }
    if (last) break;
    ++pos;
  }
  if (!IsDirectory(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("lstat ", path, ": ", ErrnoMessage(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()),
                                            &::closedir);
    if (dir == nullptr) {
      return absl::InternalError(
          absl::StrCat("opendir ", path, ": ", ErrnoMessage(errno)));
    }
    std::vector<std::string> children;
    while (struct dirent* entry = ::readdir(dir.get())) {
      const absl::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      children.push_back(absl::StrCat(path, "/", name));
    }
    dir.reset();
    for (const std::string& child : children) {
      VERITY_RETURN_IF_ERROR(RemoveTree(child));
    }
    if (::rmdir(path.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("rmdir ", path, ": ", ErrnoMessage(errno)));
    }
    return absl::OkStatus();
  }
  if (::unlink(path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("unlink ", path, ": ", ErrnoMessage(errno)));
  }
  return absl::OkStatus();
}

struct CommandResult {
  int exit_code = 0;  // 128 + signal number if killed by a signal.
  std::string output;  // stdout and stderr interleaved.
};

// Everything the child needs, prepared before fork(): after fork() in a
// multi-threaded process the child may only call async-signal-safe
// functions.
struct ChildSetup {
  bool switch_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  int stdout_fd = -1;
  int stdin_fd = -1;
};

// In the child: redirect stdio, close inherited descriptors (the postmaster
// started by pg_ctl lives on and must not hold our sockets), drop privileges.
// Returns false (errno set) on failure.
bool PrepareChild(const ChildSetup& setup) {
  if (setup.stdin_fd >= 0 && ::dup2(setup.stdin_fd, 0) < 0) return false;
  if (setup.stdout_fd >= 0) {
    if (::dup2(setup.stdout_fd, 1) < 0 || ::dup2(setup.stdout_fd, 2) < 0) {
      return false;
    }
  }
  if (::close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd < 4096; ++fd) ::close(fd);
  }
  if (setup.switch_user) {
    if (::setgroups(setup.groups.size(), setup.groups.data()) != 0) {
      return false;
    }
    if (::setgid(setup.gid) != 0) return false;
    if (::setuid(setup.uid) != 0) return false;
  }
  // The caller's directory (e.g. /root) may not be readable by the user.
  return ::chdir("/") == 0;
}

void WriteChildError(const char* what) {
  const int err = errno;
  const char* reason = ::strerror(err);  // Fine in practice for a message.
  ssize_t ignored = ::write(2, what, std::strlen(what));
  ignored = ::write(2, ": ", 2);
  ignored = ::write(2, reason, std::strlen(reason));
  ignored = ::write(2, "\n", 1);
  (void)ignored;
}

absl::StatusOr<int> WaitForChild(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("waitpid failed: ", ErrnoMessage(errno)));
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

ChildSetup SetupFor(const OsUser& user) {
  ChildSetup setup;
  setup.switch_user = user.switch_needed;
  setup.uid = user.uid;
  setup.gid = user.gid;
  setup.groups = user.groups;
  return setup;
}

// Runs argv (argv[0] an absolute path) as `setup`'s user, capturing output.
absl::StatusOr<CommandResult> RunCommand(ChildSetup setup,
                                         const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const std::string& arg : argv) cargv.push_back(const_cast<char*>(arg.c_str()));
  cargv.push_back(nullptr);

  // An anonymous in-memory file rather than a pipe: a grandchild that keeps
  // the descriptor open (the postmaster) cannot make us block on EOF.
  const int out_fd = ::memfd_create("verity-command-output", MFD_CLOEXEC);
  if (out_fd < 0) {
    return absl::InternalError(
        absl::StrCat("memfd_create failed: ", ErrnoMessage(errno)));
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  setup.stdout_fd = out_fd;
  setup.stdin_fd = null_fd;

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(out_fd);
    if (null_fd >= 0) ::close(null_fd);
    return absl::InternalError(absl::StrCat("fork failed: ", ErrnoMessage(err)));
  }
  if (pid == 0) {
    if (!PrepareChild(setup)) {
      WriteChildError("cannot set up child process");
      ::_exit(126);
    }
    ::execv(cargv[0], cargv.data());
    WriteChildError(cargv[0]);
    ::_exit(127);
  }
  if (null_fd >= 0) ::close(null_fd);
  absl::StatusOr<int> exit_code = WaitForChild(pid);
  CommandResult result;
  if (::lseek(out_fd, 0, SEEK_SET) == 0) {
    char buffer[8192];
    ssize_t n;
    while ((n = ::read(out_fd, buffer, sizeof(buffer))) > 0) {
      result.output.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(out_fd);
  if (!exit_code.ok()) return exit_code.status();
  result.exit_code = *exit_code;
  return result;
}

// Returns the first path on the way to `dir` that the child identity cannot
// traverse (or, for `dir` itself, read/write/search); "" if all is well.
absl::StatusOr<std::string> FirstInaccessiblePath(ChildSetup setup,
                                                  const std::string& dir) {
  std::vector<std::string> prefixes;
  for (size_t pos = dir.find('/', 1); pos != std::string::npos;
       pos = dir.find('/', pos + 1)) {
    prefixes.push_back(dir.substr(0, pos));
  }
  prefixes.insert(prefixes.begin(), "/");
  prefixes.push_back(dir);
  if (prefixes.size() > 250) return std::string();  // Not checkable; go on.

  const pid_t pid = ::fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork failed: ", ErrnoMessage(errno)));
  }
  if (pid == 0) {
    if (!PrepareChild(setup)) ::_exit(255);
    for (size_t i = 0; i < prefixes.size(); ++i) {
      const int mode = i + 1 == prefixes.size() ? (R_OK | W_OK | X_OK) : X_OK;
      if (::access(prefixes[i].c_str(), mode) != 0) ::_exit(static_cast<int>(i + 1));
    }
    ::_exit(0);
  }
  VERITY_ASSIGN_OR_RETURN(int code, WaitForChild(pid));
  if (code == 0) return std::string();
  if (code >= 1 && code <= static_cast<int>(prefixes.size())) {
    return prefixes[code - 1];
  }
  return absl::InternalError(
      absl::StrCat("access check for ", dir, " failed (exit code ", code, ")"));
}

absl::StatusOr<std::string> ResolveBinDir(const std::string& requested) {
  auto has_programs = [](const std::string& dir) {
    return IsExecutable(dir + "/initdb") && IsExecutable(dir + "/pg_ctl") &&
           IsExecutable(dir + "/postgres");
  };
  if (!requested.empty()) {
    if (!has_programs(requested)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "bin_dir ", requested,
          " does not contain executable initdb, pg_ctl and postgres"));
    }
    return requested;
  }
  const std::string debian15 = "/usr/lib/postgresql/15/bin";
  if (has_programs(debian15)) return debian15;
  for (const char* pg_config : {"/usr/bin/pg_config", "/usr/local/bin/pg_config"}) {
    if (!IsExecutable(pg_config)) continue;
    ChildSetup setup;
    absl::StatusOr<CommandResult> result =
        RunCommand(setup, {pg_config, "--bindir"});
    if (result.ok() && result->exit_code == 0) {
      const std::string dir(absl::StripAsciiWhitespace(result->output));
      if (has_programs(dir)) return dir;
    }
  }
  // Newest Debian-style installation.
  int best_version = -1;
  std::string best;
  if (std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/usr/lib/postgresql"),
                                              &::closedir);
      dir != nullptr) {
    while (struct dirent* entry = ::readdir(dir.get())) {
      int version = 0;
      if (!absl::SimpleAtoi(entry->d_name, &version)) continue;
      const std::string candidate =
          absl::StrCat("/usr/lib/postgresql/", entry->d_name, "/bin");
      if (version > best_version && has_programs(candidate)) {
        best_version = version;
        best = candidate;
      }
    }
  }
  if (!best.empty()) return best;
  return absl::FailedPreconditionError(
      "PostgreSQL server programs (initdb, pg_ctl, postgres) not found in "
      "/usr/lib/postgresql/15/bin nor via pg_config --bindir; install the "
      "postgresql package or set the bin_dir option");
}

absl::StatusOr<std::shared_ptr<OsUser>> ResolveOsUser(
    const std::string& requested) {
  const uid_t euid = ::geteuid();
  std::string name = requested;
  struct passwd pwd;
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (name.empty()) {
    if (euid == 0) {
      name = "postgres";
    } else {
      if (::getpwuid_r(euid, &pwd, buffer.data(), buffer.size(), &found) != 0 ||
          found == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot look up the current user (uid ", euid, ")"));
      }
      name = found->pw_name;
    }
  }
  found = nullptr;
  if (::getpwnam_r(name.c_str(), &pwd, buffer.data(), buffer.size(), &found) !=
          0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OS user '", name, "' for PostgreSQL does not exist",
        euid == 0 ? " (install the postgresql package, which creates the "
                    "'postgres' user, or set os_user)"
                  : ""));
  }
  auto user = std::make_shared<OsUser>();
  user->name = name;
  user->uid = found->pw_uid;
  user->gid = found->pw_gid;
  if (user->uid == 0) {
    return absl::InvalidArgumentError(
        "PostgreSQL cannot run as root; set os_user to an unprivileged user "
        "(default when running as root: postgres)");
  }
  if (euid != 0 && user->uid != euid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "only root can run PostgreSQL as another OS user ('", name, "')"));
  }
  user->switch_needed = euid == 0;
  int ngroups = 64;
  std::vector<gid_t> groups(ngroups);
  while (::getgrouplist(name.c_str(), user->gid, groups.data(), &ngroups) < 0) {
    groups.resize(ngroups + 16);
    ngroups = static_cast<int>(groups.size());
  }
  groups.resize(ngroups);
  user->groups = std::move(groups);
  return user;
}

}  // namespace

EmbeddedPostgres::EmbeddedPostgres(Options options, std::string data_dir,
                                   std::string socket_dir, std::string bin_dir,
                                   std::shared_ptr<const OsUser> user)
    : options_(std::move(options)),
      data_dir_(std::move(data_dir)),
      socket_dir_(std::move(socket_dir)),
      bin_dir_(std::move(bin_dir)),
      user_(std::move(user)) {}

absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> EmbeddedPostgres::Start(
    const Options& options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("EmbeddedPostgres: data_dir is required");
  }
  if (options.data_dir.find_first_of("\"$`\\\n") != std::string::npos) {
    // pg_ctl embeds the data directory in a shell command in double quotes.
    return absl::InvalidArgumentError(absl::StrCat(
        "EmbeddedPostgres: data_dir must not contain \", $, `, \\ or newlines: ",
        options.data_dir));
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("max_connections must be at least 1");
  }
  if (options.shared_buffers.empty() ||
      !std::all_of(options.shared_buffers.begin(), options.shared_buffers.end(),
                   [](char c) { return absl::ascii_isalnum(c); })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared_buffers must look like 128MB, got '", options.shared_buffers,
        "'"));
  }
  VERITY_ASSIGN_OR_RETURN(std::string data_dir, MakeAbsolute(options.data_dir));
  VERITY_ASSIGN_OR_RETURN(std::string bin_dir, ResolveBinDir(options.bin_dir));
  VERITY_ASSIGN_OR_RETURN(std::shared_ptr<OsUser> user,
                          ResolveOsUser(options.os_user));
  const ChildSetup as_user =
      SetupFor(*user);

  const bool created = !Exists(data_dir);
  VERITY_RETURN_IF_ERROR(MakeDirectories(data_dir, 0700));
  if (user->switch_needed) {
    struct stat st;
    if (::stat(data_dir.c_str(), &st) == 0 &&
        (st.st_uid != user->uid || created) &&
        ::chown(data_dir.c_str(), user->uid, user->gid) != 0) {
      const int err = errno;
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot chown ", data_dir, " to ", user->name, ": ",
          ErrnoMessage(err),
          err == EINVAL ? " (this root process runs in a user namespace where "
                          "that user does not exist, e.g. Bazel's "
                          "linux-sandbox: run it outside the sandbox, e.g. "
                          "with the no-sandbox tag)"
                        : ""));
    }
  }
  VERITY_ASSIGN_OR_RETURN(std::string blocked,
                          FirstInaccessiblePath(as_user, data_dir));
  if (!blocked.empty()) {
    if (blocked == data_dir) {
      return absl::FailedPreconditionError(absl::StrCat(
          "PostgreSQL runs as OS user '", user->name,
          "', which cannot read and write the data directory ", data_dir,
          "; fix its ownership or choose another --data_dir"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "PostgreSQL runs as OS user '", user->name, "', which cannot traverse ",
        blocked, " on the way to the data directory ", data_dir,
        " (e.g. a home directory with mode 700). Choose a --data_dir that user "
        "can reach, such as /var/lib/verity or /tmp/verity"));
  }

  // The socket path must fit in sockaddr_un; fall back to a short private
  // directory under /tmp (also for paths with characters that the server's
  // list syntax for unix_socket_directories would need quoting for).
  std::string socket_dir = data_dir + "/run";
  const bool plain_path =
      std::all_of(socket_dir.begin(), socket_dir.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '/' || c == '.' || c == '_' ||
               c == '-';
      });
  if (socket_dir.size() + 1 + kSocketFileName.size() >= kUnixSocketPathMax ||
      !plain_path) {
    const std::string short_dir = absl::StrFormat(
        "/tmp/verity-pg-%016x", StableHash(absl::StrCat(data_dir, "|", user->uid)));
    LogLine(absl::StrCat("socket directory ", socket_dir,
                         plain_path ? " is too long for a Unix socket path"
                                    : " contains special characters",
                         "; using ", short_dir, " instead"));
    socket_dir = short_dir;
  }
  if (::mkdir(socket_dir.c_str(), 0700) == 0) {
    if (user->switch_needed &&
        ::chown(socket_dir.c_str(), user->uid, user->gid) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot chown ", socket_dir, ": ", ErrnoMessage(errno)));
    }
  } else if (errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create socket directory ", socket_dir, ": ",
        ErrnoMessage(errno)));
  }
  {
    // The directory guards who may connect (trust authentication): it must be
    // a real directory owned by the cluster user and closed to others.
    struct stat st;
    if (::lstat(socket_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != user->uid || (st.st_mode & 077) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "socket directory ", socket_dir,
          " must be a directory owned by ", user->name,
          " with mode 0700; remove it or fix its permissions"));
    }
  }

  int lock_fd = -1;
  if (options.exclusive) {
    VERITY_ASSIGN_OR_RETURN(lock_fd, LockDataDir(data_dir + "/verity.lock", data_dir));
  }
  std::unique_ptr<EmbeddedPostgres> pg(new EmbeddedPostgres(
      options, std::move(data_dir), std::move(socket_dir), std::move(bin_dir),
      std::move(user)));
  pg->lock_fd_ = lock_fd;
  absl::Status status = pg->StartImpl();
  if (!status.ok()) {
    // Nothing this object started is left running... unless it reused one:
    // leave a server it did not start alone.
    if (pg->reused_running_server_) pg->stopped_ = true;
    return status;
  }
  return pg;
}

EmbeddedPostgres::~EmbeddedPostgres() {
  if (!stopped_) {
    absl::Status status = Stop();
    if (!status.ok()) {
      LogLine(absl::StrCat("stopping PostgreSQL failed: ", status.ToString()));
    }
  }
  ReleaseLock();
}

std::string EmbeddedPostgres::ConnectionUrl(absl::string_view dbname) const {
  return absl::StrCat("host=", QuoteConnValue(socket_dir_), " port=", kPort,
                      " dbname=", QuoteConnValue(dbname), " user='verity'");
}

absl::Status EmbeddedPostgres::StartImpl() {
  VERITY_RETURN_IF_ERROR(InitDbIfNeeded());
  VERITY_ASSIGN_OR_RETURN(bool running, IsRunning());
  if (running && CanConnect()) {
    reused_running_server_ = true;
  } else {
    if (running) {
      // Running from this data_dir but not answering on our socket (e.g. it
      // was started with another socket directory): restart it.
      LogLine(absl::StrCat("PostgreSQL for ", PgData(),
                           " is running but not reachable at ", socket_dir_,
                           "; restarting it"));
      VERITY_RETURN_IF_ERROR(Stop());
      stopped_ = false;
    }
    VERITY_RETURN_IF_ERROR(StartServer());
  }
  VERITY_RETURN_IF_ERROR(EnsureVerityDatabase());
  std::string pid_line = ReadFileTail(PgData() + "/postmaster.pid", 1 << 16);
  pid_line = pid_line.substr(0, pid_line.find('\n'));
  LogLine(absl::StrCat(
      "embedded PostgreSQL ",
      reused_running_server_ ? "(reused running server" : "(started", ", pid ",
      pid_line, ", OS user ", user_->name, "): data in ", PgData(),
      ", socket in ", socket_dir_, ", log in ", LogFile()));
  return absl::OkStatus();
}

absl::Status EmbeddedPostgres::InitDbIfNeeded() {
  const std::string pgdata = PgData();
  if (Exists(pgdata + "/PG_VERSION")) return absl::OkStatus();
  if (Exists(pgdata)) {
    if (::rmdir(pgdata.c_str()) != 0) {  // Only succeeds when empty.
      return absl::FailedPreconditionError(absl::StrCat(
          pgdata, " exists but is not a PostgreSQL data directory (no "
                  "PG_VERSION); move it away or choose another --data_dir"));
    }
  }
  // initdb into a staging directory renamed into place when complete, so a
  // crash during initdb never leaves a half-made cluster in `pgdata`, and
  // concurrent starters do not trip over each other.
  const std::string staging =
      absl::StrCat(data_dir_, "/pgdata.initdb-", ::getpid());
  VERITY_RETURN_IF_ERROR(RemoveTree(staging));
  const ChildSetup as_user = SetupFor(*user_);
  std::vector<std::string> argv = {bin_dir_ + "/initdb",
                                   "-D",
                                   staging,
                                   "-U",
                                   "verity",
                                   "--auth=trust",
                                   "-E",
                                   "UTF8",
                                   "--no-locale",
                                   "--no-instructions"};
  if (!options_.durable) argv.push_back("--no-sync");
  LogLine(absl::StrCat("initializing a new PostgreSQL cluster in ", pgdata));
  VERITY_ASSIGN_OR_RETURN(CommandResult result, RunCommand(as_user, argv));
  if (result.exit_code != 0) {
    RemoveTree(staging).IgnoreError();
    return absl::InternalError(absl::StrCat("initdb failed (exit code ",
                                            result.exit_code,
                                            "): ", Tail(result.output)));
  }
  if (::rename(staging.c_str(), pgdata.c_str()) != 0) {
    const int err = errno;
    RemoveTree(staging).IgnoreError();
    // Another process finished initdb first: use its cluster.
    if (Exists(pgdata + "/PG_VERSION")) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("cannot rename ", staging, " to ",
                                            pgdata, ": ", ErrnoMessage(err)));
  }
  return absl::OkStatus();
}

std::string EmbeddedPostgres::ServerOptions() const {
  const char* durable = options_.durable ? "on" : "off";
  const std::vector<std::pair<std::string, std::string>> settings = {
      // Unix socket only, private to the cluster's OS user.
      {"listen_addresses", ""},
      {"port", absl::StrCat(kPort)},
      {"unix_socket_directories", socket_dir_},
      {"unix_socket_permissions", "0700"},
      {"max_connections", absl::StrCat(options_.max_connections)},
      {"shared_buffers", options_.shared_buffers},
      // Acked means durable: every commit is flushed to the WAL on disk.
      // Group commit in the server amortises the flush over many labels.
      // Without `durable`, commits still reach the kernel before they are
      // acknowledged (synchronous_commit stays on), so only an OS crash can
      // lose them, never a crash of PostgreSQL or of this process.
      {"fsync", durable},
      {"synchronous_commit", "on"},
      {"full_page_writes", durable},
      // Index probes are cheap on SSDs and a cached working set; the
      // default (4, for spinning disks) steers plans to sequential scans.
      {"random_page_cost", "1.1"},
      // Fewer, larger checkpoints for a write-heavy workload.
      {"max_wal_size", "2GB"},
      {"checkpoint_timeout", "10min"},
      {"wal_compression", "on"},
      // Everything goes to the -l log file.
      {"logging_collector", "off"},
      {"log_timezone", "UTC"},
      {"timezone", "UTC"},
  };
  std::vector<std::string> parts;
  parts.reserve(settings.size());
  for (const auto& [name, value] : settings) {
    parts.push_back(absl::StrCat("-c ", name, "=", ShellQuote(value)));
  }
  return absl::StrJoin(parts, " ");
}

absl::StatusOr<bool> EmbeddedPostgres::IsRunning() const {
  const ChildSetup as_user = SetupFor(*user_);
  VERITY_ASSIGN_OR_RETURN(
      CommandResult result,
      RunCommand(as_user, {bin_dir_ + "/pg_ctl", "status", "-D", PgData()}));
  // pg_ctl status: 0 running, 3 not running, 4 no accessible data directory.
  if (result.exit_code == 0) return true;
  if (result.exit_code == 3 || result.exit_code == 4) return false;
  return absl::InternalError(absl::StrCat("pg_ctl status failed (exit code ",
                                          result.exit_code,
                                          "): ", Tail(result.output)));
}

bool EmbeddedPostgres::CanConnect() const {
  // A server may still be starting up (crash recovery, or another process
  // just started it): wait for it to accept connections for a while.
  const std::string url = ConnectionUrl("postgres");
  const absl::Time deadline =
      absl::Now() + std::min(options_.timeout, absl::Seconds(30));
  int no_response_polls = 0;
  while (true) {
    switch (PQping(url.c_str())) {
      case PQPING_OK:
        return true;
      case PQPING_NO_ATTEMPT:
        return false;
      case PQPING_NO_RESPONSE:
        // No socket at our path: give a server that is starting a moment to
        // create it, then decide it listens elsewhere.
        if (++no_response_polls > 40) return false;
        break;
      case PQPING_REJECT:  // Starting up or shutting down.
        break;
    }
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status EmbeddedPostgres::StartServer() {
  const ChildSetup as_user = SetupFor(*user_);
  const std::vector<std::string> argv = {
      bin_dir_ + "/pg_ctl",
      "start",
      "-w",
      "-t",
      absl::StrCat(std::max<int64_t>(1, absl::ToInt64Seconds(options_.timeout))),
      "-D",
      PgData(),
      "-l",
      LogFile(),
      "-o",
      ServerOptions()};
  std::string last_error;
  constexpr int kAttempts = 3;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    VERITY_ASSIGN_OR_RETURN(CommandResult result, RunCommand(as_user, argv));
    if (result.exit_code == 0) return absl::OkStatus();
    // Lost a race with another starter, or the old postmaster's children
    // (after a kill -9) still hold its shared memory: check, then retry.
    absl::StatusOr<bool> running = IsRunning();
    if (running.ok() && *running && CanConnect()) {
      reused_running_server_ = true;
      return absl::OkStatus();
    }
    last_error = absl::StrCat("pg_ctl start failed (exit code ",
                              result.exit_code, "): ", Tail(result.output),
                              "\nserver log tail:\n", ReadFileTail(LogFile()));
    if (attempt < kAttempts) absl::SleepFor(absl::Seconds(1));
  }
  return absl::InternalError(last_error);
}

absl::Status EmbeddedPostgres::EnsureVerityDatabase() const {
  return CatchPqxx("creating the verity database", [&]() -> absl::Status {
    pqxx::connection conn(ConnectionUrl("postgres"));
    pqxx::nontransaction txn(conn);
    const pqxx::result existing = txn.exec_params(
        "SELECT 1 FROM pg_database WHERE datname = $1", "verity");
    if (!existing.empty()) return absl::OkStatus();
    try {
      txn.exec0("CREATE DATABASE verity");
    } catch (const pqxx::sql_error& e) {
      // A concurrent starter created it first.
      if (e.sqlstate() != "42P04" && e.sqlstate() != "23505") throw;
    }
    return absl::OkStatus();
  });
}

absl::Status EmbeddedPostgres::Stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  VERITY_ASSIGN_OR_RETURN(bool running, IsRunning());
  if (running) {
    const ChildSetup as_user = SetupFor(*user_);
    VERITY_ASSIGN_OR_RETURN(
        CommandResult result,
        RunCommand(as_user,
                   {bin_dir_ + "/pg_ctl", "stop", "-w", "-t",
                    absl::StrCat(std::max<int64_t>(
                        1, absl::ToInt64Seconds(options_.timeout))),
                    "-D", PgData(), "-m", "fast"}));
    if (result.exit_code != 0) {
      VERITY_ASSIGN_OR_RETURN(bool still_running, IsRunning());
      if (still_running) {
        stopped_ = false;
        return absl::InternalError(absl::StrCat("pg_ctl stop failed (exit code ",
                                                result.exit_code,
                                                "): ", Tail(result.output)));
      }
    }
  }
  // The cluster is down: another owner may start it now.
  ReleaseLock();
  return absl::OkStatus();
}

void EmbeddedPostgres::ReleaseLock() {
  if (lock_fd_ < 0) return;
  ::close(lock_fd_);
  lock_fd_ = -1;
}

}  // namespace storage
}  // namespace verity
