#include "models/truth_model_factory.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/auto_truth_model.h"
#include "models/bwa.h"
#include "models/calibrated_truth_model.h"
#include "models/dawid_skene.h"
#include "models/ebcc.h"
#include "models/glad.h"
#include "models/ibcc.h"
#include "models/kos.h"
#include "models/mace.h"
#include "models/majority_vote.h"
#include "models/mmsr.h"
#include "models/neural/cmm.h"
#include "models/neural/conal.h"
#include "models/neural/crowdlayer.h"
#include "models/neural/lia.h"
#include "models/neural/trace_reg.h"
#include "models/one_coin.h"
#include "models/wawa.h"
#include "models/zero_based_skill.h"

namespace verity::models {

std::vector<std::string_view> KnownTruthModelMethods() {
  return {MajorityVoteModel::kMethod,   DawidSkeneModel::kMethod,
          OneCoinModel::kMethod,        GladModel::kMethod,
          neural::LiaModel::kMethod,    neural::CrowdLayerModel::kMethod,
          neural::TraceRegModel::kMethod, neural::ConalModel::kMethod,
          neural::CmmModel::kMethod,    WawaModel::kMethod,
          ZeroBasedSkillModel::kMethod, KosModel::kMethod,
          MaceModel::kMethod,           BwaModel::kMethod,
          IbccModel::kMethod,           EbccModel::kMethod,
          MmsrModel::kMethod,            AutoTruthModel::kMethod};
}

namespace {

template <typename Model>
absl::StatusOr<std::unique_ptr<TruthModel>> Make(
    int32_t num_classes, const TruthModelOptions& options) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(num_classes, options);
  if (!model.ok()) return model.status();
  return std::unique_ptr<TruthModel>(*std::move(model));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TruthModel>> CreateUncalibratedTruthModel(
    std::string_view method, int32_t num_classes,
    const TruthModelOptions& options) {
  if (method == MajorityVoteModel::kMethod) {
    return Make<MajorityVoteModel>(num_classes, options);
  }
  if (method == DawidSkeneModel::kMethod) {
    return Make<DawidSkeneModel>(num_classes, options);
  }
  if (method == OneCoinModel::kMethod) {
    return Make<OneCoinModel>(num_classes, options);
  }
  if (method == GladModel::kMethod) {
    return Make<GladModel>(num_classes, options);
  }
  if (method == WawaModel::kMethod) return Make<WawaModel>(num_classes, options);
  if (method == ZeroBasedSkillModel::kMethod) {
    return Make<ZeroBasedSkillModel>(num_classes, options);
  }
  if (method == KosModel::kMethod) return Make<KosModel>(num_classes, options);
  if (method == MaceModel::kMethod) return Make<MaceModel>(num_classes, options);
  if (method == BwaModel::kMethod) return Make<BwaModel>(num_classes, options);
  if (method == IbccModel::kMethod) return Make<IbccModel>(num_classes, options);
  if (method == EbccModel::kMethod) return Make<EbccModel>(num_classes, options);
  if (method == MmsrModel::kMethod) return Make<MmsrModel>(num_classes, options);
  if (method == AutoTruthModel::kMethod) {
    absl::StatusOr<std::unique_ptr<AutoTruthModel>> model =
        AutoTruthModel::Create(num_classes, options, &CreateUncalibratedTruthModel);
    if (!model.ok()) return model.status();
    return std::unique_ptr<TruthModel>(*std::move(model));
  }
  if (method == neural::LiaModel::kMethod) return Make<neural::LiaModel>(num_classes, options);
  if (method == neural::CrowdLayerModel::kMethod) {
    return Make<neural::CrowdLayerModel>(num_classes, options);
  }
  if (method == neural::TraceRegModel::kMethod) {
    return Make<neural::TraceRegModel>(num_classes, options);
  }
  if (method == neural::ConalModel::kMethod) return Make<neural::ConalModel>(num_classes, options);
  if (method == neural::CmmModel::kMethod) return Make<neural::CmmModel>(num_classes, options);
  std::string known;
  for (std::string_view m : KnownTruthModelMethods()) {
    absl::StrAppend(&known, known.empty() ? "" : ", ", std::string(m));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown truth model method \"", std::string(method),
                   "\"; known: ", known));
}

absl::StatusOr<std::unique_ptr<TruthModel>> CreateTruthModel(
    std::string_view method, int32_t num_classes,
    const TruthModelOptions& options) {
  absl::StatusOr<std::unique_ptr<TruthModel>> model =
      CreateUncalibratedTruthModel(method, num_classes, options);
  if (!model.ok()) return model;
  return std::unique_ptr<TruthModel>(std::make_unique<CalibratedTruthModel>(
      *std::move(model), /*fit_map=*/options.calibration != "none"));
}

}  // namespace verity::models
