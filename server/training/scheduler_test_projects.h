// Test support for the scheduler's tests over a real PostgreSQL: a stored project with labels
// for a fit.
#ifndef VERITY_SERVER_TRAINING_SCHEDULER_TEST_PROJECTS_H_
#define VERITY_SERVER_TRAINING_SCHEDULER_TEST_PROJECTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "storage/connection_pool.h"

namespace verity::server::testing {

// Stores a Dawid-Skene project `name` (classes a, b) with 40 items × 3 labels from 5
// annotators, four of whom give the item's class (i % 2) and one the other; its id.
absl::StatusOr<int64_t> StoreDsProjectWithLabels(storage::ConnectionPool& pool,
                                                 const std::string& name);

}  // namespace verity::server::testing

#endif  // VERITY_SERVER_TRAINING_SCHEDULER_TEST_PROJECTS_H_
