// CreateOrFail: a truth model made by its class's Create(k, options) in a test, or nullptr
// with a test failure naming the status.
#ifndef VERITY_MODELS_TESTING_CREATE_MODEL_H_
#define VERITY_MODELS_TESTING_CREATE_MODEL_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "models/truth_model.h"

namespace verity::models::testing {

template <typename Model>
std::unique_ptr<Model> CreateOrFail(int32_t k, const TruthModelOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(k, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

}  // namespace verity::models::testing

#endif  // VERITY_MODELS_TESTING_CREATE_MODEL_H_
