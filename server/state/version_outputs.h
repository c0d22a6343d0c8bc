// Encodings of what a model version said when it was fitted, stored beside the version in
// PostgreSQL (storage::ModelVersionOutputs): every fitted item's posterior and every
// annotator's profile. Little-endian, versioned by a 4-byte magic:
//
//   posteriors:          "VPO1" u32 num_items u32 K, then num_items*K float32 (item-major)
//   annotator_profiles:  "VAP2" u32 num_annotators u32 K, then per annotator
//                        u32 num_labels and K float32: the diagonal of its confusion,
//                        p(label = k | true class = k). O(annotators × K), so a many-class
//                        project's version stays small; the full matrices follow from the
//                        version's parameters. (Versions written before hold "VAP1": K*K
//                        float32 per annotator, row = true class; both decode.)
//
// Pure functions, thread-safe.
#ifndef VERITY_SERVER_STATE_VERSION_OUTPUTS_H_
#define VERITY_SERVER_STATE_VERSION_OUTPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace verity::server {

struct DecodedPosteriors {
  int32_t num_items = 0;
  int32_t num_classes = 0;
  std::vector<float> probabilities;  // num_items * num_classes
};

struct DecodedProfiles {
  int32_t num_annotators = 0;
  int32_t num_classes = 0;
  std::vector<uint32_t> num_labels;  // per annotator
  std::vector<float> diagonals;      // num_annotators * K: p(label = k | true class = k)
};

// `posteriors` has num_items * num_classes entries.
std::string EncodePosteriors(int32_t num_classes, absl::Span<const double> posteriors);
// `diagonals` has num_labels.size() * K entries.
std::string EncodeProfiles(int32_t num_classes, absl::Span<const uint32_t> num_labels,
                           absl::Span<const double> diagonals);

// INVALID_ARGUMENT on a wrong magic or size.
absl::StatusOr<DecodedPosteriors> DecodePosteriors(absl::string_view encoded);
absl::StatusOr<DecodedProfiles> DecodeProfiles(absl::string_view encoded);

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_VERSION_OUTPUTS_H_
