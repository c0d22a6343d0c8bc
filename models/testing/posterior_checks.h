// Contracts of a classical truth model's posteriors and confusions (models/truth_model.h),
// shared by the model tests.
#ifndef VERITY_MODELS_TESTING_POSTERIOR_CHECKS_H_
#define VERITY_MODELS_TESTING_POSTERIOR_CHECKS_H_

#include <cstdint>

#include "models/annotation_matrix.h"
#include "models/truth_model.h"

namespace verity::models::testing {

// The items of `data` whose ItemPosterior under `model` changes, in any bit, when their labels
// are given in reverse order (truth_model.h: the posterior does not depend on the labels'
// order). 0 for a model that keeps the contract.
int32_t ItemsWhosePosteriorDependsOnLabelOrder(const TruthModel& model,
                                               const AnnotationMatrix& data);

// `model` (not fitted) gives annotator 0 the uniform confusion, 1 / K in each of its K × K
// cells. GoogleTest expectations: failures are reported, not returned.
void ExpectUniformConfusionBeforeAFit(const TruthModel& model);

// `model` (two classes, not fitted, created with options.tolerance = 10, which any relative
// change meets) fitted on a 2 × 2 crowd stops converged at iteration 2: convergence compares
// two consecutive E-steps' log-likelihoods, so the first iteration never converges
// (truth_model.h).
void ExpectTheFirstIterationNeverConverges(TruthModel& model);

}  // namespace verity::models::testing

#endif  // VERITY_MODELS_TESTING_POSTERIOR_CHECKS_H_
