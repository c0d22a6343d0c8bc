#include "models/truth_model_factory.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/dawid_skene.h"
#include "models/majority_vote.h"

namespace verity::models {

std::vector<std::string_view> KnownTruthModelMethods() {
  return {MajorityVoteModel::kMethod, DawidSkeneModel::kMethod};
}

absl::StatusOr<std::unique_ptr<TruthModel>> CreateTruthModel(
    std::string_view method, int32_t num_classes,
    const TruthModelOptions& options) {
  if (method == MajorityVoteModel::kMethod) {
    absl::StatusOr<std::unique_ptr<MajorityVoteModel>> model =
        MajorityVoteModel::Create(num_classes, options);
    if (!model.ok()) return model.status();
    return std::unique_ptr<TruthModel>(*std::move(model));
  }
  if (method == DawidSkeneModel::kMethod) {
    absl::StatusOr<std::unique_ptr<DawidSkeneModel>> model =
        DawidSkeneModel::Create(num_classes, options);
    if (!model.ok()) return model.status();
    return std::unique_ptr<TruthModel>(*std::move(model));
  }
  std::string known;
  for (std::string_view m : KnownTruthModelMethods()) {
    absl::StrAppend(&known, known.empty() ? "" : ", ", std::string(m));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown truth model method \"", std::string(method),
                   "\"; known: ", known));
}

}  // namespace verity::models
