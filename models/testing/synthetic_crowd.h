// GenerateSyntheticCrowd: simulated crowd labels with known truth and known
// annotator confusion matrices, for tests of truth models.
//
// Each item draws its true class from `class_prior`, then `labels_per_item`
// distinct annotators chosen uniformly at random; each chosen annotator a
// gives label l with probability confusions[a][true * K + l]. Randomness comes
// from std::mt19937_64 (whose output sequence the C++ standard fixes) with
// hand-written sampling, so a seed gives the same data on every platform.
//
// Thread safety: a pure function.

#ifndef VERITY_MODELS_TESTING_SYNTHETIC_CROWD_H_
#define VERITY_MODELS_TESTING_SYNTHETIC_CROWD_H_

#include <cstdint>
#include <vector>

#include "models/annotation_matrix.h"

namespace verity::models::testing {

struct SyntheticCrowdSpec {
  int32_t num_items = 1000;
  int32_t num_classes = 2;
  int32_t labels_per_item = 5;  // <= confusions.size()
  std::vector<double> class_prior;  // empty = uniform
  // One K*K row-major confusion per annotator (row = true class).
  std::vector<std::vector<double>> confusions;
  uint64_t seed = 1;
};

struct SyntheticCrowd {
  std::vector<Annotation> annotations;
  AnnotationMatrix matrix;
  std::vector<int32_t> truth;  // per item
};

SyntheticCrowd GenerateSyntheticCrowd(const SyntheticCrowdSpec& spec);

// A K*K confusion with `accuracy` on the diagonal and the rest spread evenly.
std::vector<double> SymmetricConfusion(int32_t num_classes, double accuracy);

// The most probable class of each item of `posteriors` (items x k, row-major), the lowest
// class on ties.
std::vector<int32_t> ArgMax(const std::vector<double>& posteriors, int32_t k);

// Fraction of items i (with truth[i] >= 0 and at least one label in
// `matrix`) whose argmax posterior (lowest class on ties) equals truth[i].
double Accuracy(const std::vector<double>& posteriors,
                const AnnotationMatrix& matrix,
                const std::vector<int32_t>& truth);

}  // namespace verity::models::testing

#endif  // VERITY_MODELS_TESTING_SYNTHETIC_CROWD_H_
