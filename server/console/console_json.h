// JsonWriter: appends one JSON value to a string, for the web console's small responses.
// Beside it, the console's pure computations whose results go into that JSON (project history,
// reliability diagram, 2-D map of embeddings), kept here so that they are tested by hand
// without a server.
// It writes what it is told in order and inserts the commas; the caller nests Begin/End
// calls correctly and names every member of an object with Key(). Strings are escaped per
// RFC 8259 (quote, backslash, control characters; other UTF-8 bytes pass through);
// non-finite numbers are written as null, which JSON has no other spelling for.
//
// Thread-compatible.
#ifndef VERITY_SERVER_CONSOLE_CONSOLE_JSON_H_
#define VERITY_SERVER_CONSOLE_CONSOLE_JSON_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace verity::server {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  const std::string& text() const { return out_; }

 private:
  // Writes the comma before a value or key that follows another in the same container.
  void Separate();

  std::string out_;
  // Per open container: whether it has an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

// `value` as a quoted JSON string.
std::string JsonQuote(absl::string_view value);

// One sample of a project's state, taken by the console every few seconds (console.h).
struct ProjectSample {
  absl::Time time;
  int64_t labels = 0;  // Live labels.
  // Resolved items / items; nullopt when the assignment settings define no resolution (no
  // confidence target, no label cap) or the project has no items.
  std::optional<double> resolved_share;
};

// Writes `samples` (oldest first) as an object of parallel arrays:
//   "time_ms":           Unix milliseconds of each sample (what JavaScript's Date takes)
//   "labels":            live labels at each sample
//   "labels_per_second": (labels[i] - labels[i-1]) / (time[i] - time[i-1]), clamped at 0
//                        (labels can be fewer after a restart of the count); null for the
//                        first sample and where two samples share a time
//   "resolved_share":    the share, or null
void WriteHistory(absl::Span<const ProjectSample> samples, JsonWriter& json);

// A reliability diagram: predictions binned by confidence, against how often they were right.
struct ReliabilityBin {
  int64_t count = 0;
  double mean_confidence = 0;  // Mean confidence of the bin's predictions (0 when empty).
  double accuracy = 0;         // Share of them that were right (0 when empty).
};
struct Reliability {
  // num_bins equal bins over [0, 1]: bin b holds confidences in [b/n, (b+1)/n), the last
  // also 1.
  std::vector<ReliabilityBin> bins;
  int64_t count = 0;
  double accuracy = 0;  // Over every prediction (0 when there are none).
  // Expected calibration error: sum over bins of count/total * |accuracy - mean_confidence|.
  double expected_calibration_error = 0;
};

// Bins predictions of confidence `confidence[i]` (in [0, 1]; values outside are clamped)
// that were right when `correct[i]`. Precondition: the spans have equal sizes, num_bins >= 1.
Reliability ComputeReliability(absl::Span<const double> confidence,
                               absl::Span<const bool> correct, int32_t num_bins);

// {"count", "accuracy", "expected_calibration_error", "bins": [{"low", "high", "count",
// "mean_confidence", "accuracy"}]}, with null mean_confidence and accuracy for empty bins.
void WriteReliability(const Reliability& reliability, JsonWriter& json);

// Each row's coordinates on the first two principal components of `rows` (centred; all rows
// of the same length d >= 1). Each component is a unit vector whose coordinate of largest
// magnitude (the first of equals) is positive, so that the map does not flip between calls.
// With d == 1, or when the rows vary along one direction only, the second coordinate is 0.
// Empty when `rows` is empty or the rows have different lengths. Power iteration: O(n d)
// per step, at most kMaxPowerIterations steps per component.
inline constexpr int32_t kMaxPowerIterations = 500;
std::vector<std::array<double, 2>> PrincipalComponents2D(
    const std::vector<std::vector<float>>& rows);

}  // namespace verity::server

#endif  // VERITY_SERVER_CONSOLE_CONSOLE_JSON_H_
