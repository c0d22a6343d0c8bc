// CreateTruthModel: builds an empty truth model from the method name stored
// in a project's configuration.
//
// Kept apart from truth_model.h so that the interface does not depend on its
// implementations (each model library depends on the interface).
//
// Thread safety: CreateTruthModel is a pure function, safe from any thread.

#ifndef VERITY_MODELS_TRUTH_MODEL_FACTORY_H_
#define VERITY_MODELS_TRUTH_MODEL_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "models/truth_model.h"

namespace verity::models {

// "mv" → MajorityVoteModel, "ds" → DawidSkeneModel, "one_coin" →
// OneCoinModel, "glad" → GladModel, the neural models (models/neural/),
// "wawa" → WawaModel, "zero_based_skill" → ZeroBasedSkillModel, "kos" → KosModel
// (2 classes only), "mace" → MaceModel, "bwa" → BwaModel, "ibcc" → IbccModel, "ebcc" →
// EbccModel, "mmsr" → MmsrModel, "auto" → AutoTruthModel (chooses one of the classical
// methods at each Fit, models/auto_truth_model.h), all without parameters.
// INVALID_ARGUMENT for an unknown method (the message lists the known ones),
// num_classes < 2, or options out of range.
// The model is wrapped in a CalibratedTruthModel
// (models/calibrated_truth_model.h), same method name: with
// options.calibration "auto" (the default) it serves calibrated posteriors
// after each Fit; with "none" the inner model's posteriors (the wrapper then
// only lets it restore versions written with calibration).
absl::StatusOr<std::unique_ptr<TruthModel>> CreateTruthModel(
    std::string_view method, int32_t num_classes,
    const TruthModelOptions& options);

// CreateTruthModel without the calibration wrapper, whatever
// options.calibration says.
absl::StatusOr<std::unique_ptr<TruthModel>> CreateUncalibratedTruthModel(
    std::string_view method, int32_t num_classes,
    const TruthModelOptions& options);

// The methods CreateTruthModel knows, in a fixed order.
std::vector<std::string_view> KnownTruthModelMethods();

}  // namespace verity::models

#endif  // VERITY_MODELS_TRUTH_MODEL_FACTORY_H_
