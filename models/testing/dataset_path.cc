#include "models/testing/dataset_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace verity::models::testing {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::optional<std::string> RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return std::nullopt;
  return std::string(resolved);
}

std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

// Searches `start` and its ancestors for shared/datasets/README.md.
std::optional<std::string> SearchUpward(std::string start) {
  while (true) {
    const std::string candidate =
        absl::StrCat(start == "/" ? "" : start, "/shared/datasets");
    if (IsFile(absl::StrCat(candidate, "/README.md"))) return candidate;
    if (start == "/") return std::nullopt;
    start = Parent(start);
  }
}

}  // namespace

absl::StatusOr<std::string> FindDatasetsDirectory() {
  if (const char* env = std::getenv("VERITY_DATASETS");
      env != nullptr && *env != '\0') {
    if (!IsDirectory(env)) {
      return absl::NotFoundError(absl::StrCat(
          "VERITY_DATASETS=", env, " is not a directory"));
    }
    return std::string(env);
  }

  std::vector<std::string> starts;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof(cwd)) != nullptr) {
    starts.push_back(cwd);
    if (auto real = RealPath(cwd)) starts.push_back(*real);
  }
  if (auto exe = RealPath("/proc/self/exe")) starts.push_back(Parent(*exe));
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    if (auto build = RealPath(
            absl::StrCat(srcdir, "/", workspace, "/models/BUILD"))) {
      starts.push_back(Parent(*build));
    }
  }
  for (const std::string& start : starts) {
    if (auto found = SearchUpward(start)) return *found;
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find shared/datasets above any of [", absl::StrJoin(starts, ", "),
      "]; set VERITY_DATASETS to the datasets directory"));
}

}  // namespace verity::models::testing
