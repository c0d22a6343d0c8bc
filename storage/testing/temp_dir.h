// TempDir: a fresh private directory under /tmp, removed with its contents
// when the object is destroyed.
//
// Tests put PostgreSQL clusters here. Bazel's $TEST_TMPDIR lives under the
// invoking user's cache directory (e.g. /root/.cache), which the `postgres`
// OS user that runs the cluster when tests run as root cannot traverse, so
// the directory is always created under /tmp and made traversable (0755)
// by other users. Not thread-safe; owned by one test.
#ifndef VERITY_STORAGE_TESTING_TEMP_DIR_H_
#define VERITY_STORAGE_TESTING_TEMP_DIR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace verity {
namespace storage {
namespace testing {

class TempDir {
 public:
  // Creates /tmp/<prefix>XXXXXX (mkdtemp) with mode 0755.
  static absl::StatusOr<TempDir> Create(absl::string_view prefix);

  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Removes `path` and everything below it (not following symlinks).
absl::Status RemoveRecursively(const std::string& path);

}  // namespace testing
}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_TESTING_TEMP_DIR_H_
