#include "server/auth/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace verity::server {
namespace {

absl::Status Failed(const std::string& file, const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("cannot write the admin key to ", file, " (", what, "): ", std::strerror(errno)));
}

}  // namespace

absl::Status WriteSecretFile(const std::string& path, const std::string& text) {
  const std::string temp = absl::StrCat(path, ".tmp");
  if (::unlink(temp.c_str()) != 0 && errno != ENOENT) return Failed(temp, "unlink");
  const int fd =
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Failed(temp, "open");
  const std::string line = absl::StrCat(text, "\n");
  bool ok = ::fchmod(fd, 0600) == 0;
  if (ok) ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if (ok) ok = ::fsync(fd) == 0;
  const int saved_errno = errno;
  ::close(fd);
  errno = saved_errno;
  if (!ok) {
    const absl::Status failed = Failed(temp, "write");
    ::unlink(temp.c_str());
    return failed;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) return Failed(path, "rename");
  // The rename is durable only once the directory is: without this a crash right after start
  // could leave no key file (or the old one) while the new key's hash is in the database.
  const std::string::size_type slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Failed(dir, "open directory");
  const bool synced = ::fsync(dir_fd) == 0;
  const int dir_errno = errno;
  ::close(dir_fd);
  errno = dir_errno;
  if (!synced) return Failed(dir, "fsync directory");
  return absl::OkStatus();
}

}  // namespace verity::server
