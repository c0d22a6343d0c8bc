#include "storage/testing/temp_dir.h"

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace verity {
namespace storage {
namespace testing {
namespace {

int RemoveEntry(const char* path, const struct stat*, int type, struct FTW*) {
  const int rc = type == FTW_DP ? ::rmdir(path) : ::unlink(path);
  return rc == 0 || errno == ENOENT ? 0 : -1;
}

}  // namespace

absl::Status RemoveRecursively(const std::string& path) {
  if (::nftw(path.c_str(), &RemoveEntry, 16, FTW_DEPTH | FTW_PHYS) != 0 &&
      errno != ENOENT) {
    return absl::InternalError(
        absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TempDir> TempDir::Create(absl::string_view prefix) {
  std::string templ = absl::StrCat("/tmp/", prefix, "XXXXXX");
  std::vector<char> buffer(templ.begin(), templ.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("mkdtemp ", templ, ": ", std::strerror(errno)));
  }
  std::string path(buffer.data());
  if (::chmod(path.c_str(), 0755) != 0) {
    const int err = errno;
    RemoveRecursively(path).IgnoreError();
    return absl::InternalError(
        absl::StrCat("chmod ", path, ": ", std::strerror(err)));
  }
  return TempDir(std::move(path));
}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) RemoveRecursively(path_).IgnoreError();
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    absl::Status status = RemoveRecursively(path_);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
    }
  }
}

}  // namespace testing
}  // namespace storage
}  // namespace verity
