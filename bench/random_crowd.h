// RandomCrowd: a seeded simulated crowd for benchmarks — items with a true
// class, each labelled by r distinct annotators who answer through their own
// random confusion matrix — and its export to the shared/datasets format, so
// that this tool's fits and any other tool (another library, another
// language) can be timed on identical data.
//
// Each annotator draws an accuracy uniformly from [min_accuracy,
// max_accuracy]; every row of their K×K confusion matrix has that accuracy
// on the diagonal, and the rest of the row's mass is spread over the other
// K − 1 classes with weights drawn from a flat Dirichlet (independently per
// row), so errors are biased in a different, random way for every annotator
// and true class. Each item draws its true class from the class prior, then
// labels_per_item distinct annotators uniformly at random, then each
// annotator's label from their confusion row.
//
// Randomness comes from std::mt19937_64, whose output sequence the C++
// standard fixes, with hand-written sampling (no <random> distributions,
// whose algorithms are implementation-defined), so a seed gives the same
// crowd on every platform and compiler.
//
// Thread safety: pure functions.

#ifndef VERITY_BENCH_RANDOM_CROWD_H_
#define VERITY_BENCH_RANDOM_CROWD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/annotation_matrix.h"

namespace verity::bench {

struct RandomCrowdSpec {
  int32_t num_items = 100000;
  int32_t labels_per_item = 5;  // distinct annotators per item
  int32_t num_annotators = 300;
  int32_t num_classes = 5;
  // Probability of each true class; empty means uniform. Otherwise it must
  // have num_classes non-negative entries; they are normalised to sum to 1.
  std::vector<double> class_prior;
  double min_accuracy = 0.5;
  double max_accuracy = 0.95;
  uint64_t seed = 1;
};

struct RandomCrowd {
  int32_t num_items = 0;
  int32_t num_annotators = 0;
  int32_t num_classes = 0;
  // Item-major: the labels of item 0, then of item 1, ...
  std::vector<models::Annotation> annotations;
  std::vector<int32_t> truth;  // per item
  // Per annotator, K*K row-major (row = true class).
  std::vector<std::vector<double>> confusions;
};

// The crowd shapes the benchmarks share: "50k" = 10,000 items × 5 labels, 300 annotators;
// "500k" = 100,000 × 5, 300; "5m" = 1,000,000 × 5, 3,000; or "ITEMSxLABELSxANNOTATORS", e.g.
// "200000x5x1000". nullopt for anything else or counts out of range.
struct CrowdSize {
  std::string name;
  int32_t items = 0;
  int32_t labels_per_item = 0;
  int32_t annotators = 0;
};
std::optional<CrowdSize> ParseCrowdSize(absl::string_view text);

// INVALID_ARGUMENT, naming the field, if a count is out of range
// (num_items >= 0, num_classes >= 2, 1 <= labels_per_item <= num_annotators),
// if 0 <= min_accuracy <= max_accuracy <= 1 does not hold, or if class_prior
// has another size, a negative entry or sums to 0.
absl::StatusOr<RandomCrowd> GenerateRandomCrowd(const RandomCrowdSpec& spec);

// Writes `crowd` into `directory` (created if missing) as classes.txt
// (c0..c{K-1}), labels.csv (item ids i0.., annotator ids w0..) and gold.csv
// (every item's true class), the format of shared/datasets/README.md.
// `description` goes into a SOURCE.md beside them. Returns INTERNAL naming
// the path if a file cannot be created or written.
absl::Status WriteCrowdDataset(const RandomCrowd& crowd,
                               const std::string& directory,
                               const std::string& description);

}  // namespace verity::bench

#endif  // VERITY_BENCH_RANDOM_CROWD_H_
