// FindDatasetsDirectory: locates the shared crowdsourcing datasets
// (shared/datasets, beside the repository) for tests and tools.
//
// Looks, in order, at:
//   1. the VERITY_DATASETS environment variable (used as is; it must name a
//      directory);
//   2. a `shared/datasets` directory in the current directory or any of its
//      ancestors, both as given and after resolving symlinks;
//   3. the same search upward from the resolved locations of the running
//      binary and, under `bazel test`, of this package's BUILD file in the
//      runfiles tree (a test that uses this helper lists "//models:BUILD"
//      in its data so that the runfiles link back into the source tree).
// A directory qualifies if it holds README.md.
//
// Thread safety: safe from any thread (reads the environment and the file
// system only).

#ifndef VERITY_MODELS_TESTING_DATASET_PATH_H_
#define VERITY_MODELS_TESTING_DATASET_PATH_H_

#include <string>

#include "absl/status/statusor.h"

namespace verity::models::testing {

// The datasets directory, or NOT_FOUND with a message listing what was tried
// and how to set VERITY_DATASETS.
absl::StatusOr<std::string> FindDatasetsDirectory();

}  // namespace verity::models::testing

#endif  // VERITY_MODELS_TESTING_DATASET_PATH_H_
