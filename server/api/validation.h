// Request validation: every bound the v1 API documents, checked before anything is stored.
//
// Functions are pure and thread-compatible. Each returns OkStatus or INVALID_ARGUMENT whose
// message names the offending field (e.g. "annotations[3].label: 7 out of range [0, 2)").
#ifndef VERITY_SERVER_API_VALIDATION_H_
#define VERITY_SERVER_API_VALIDATION_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "google/protobuf/timestamp.pb.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {

// Documented limits of the v1 API (proto comments quote the same numbers).
struct ApiLimits {
  static constexpr int kMaxIdBytes = 256;
  static constexpr int kMaxProjectNameBytes = 128;
  static constexpr int kMinClasses = 2;
  static constexpr int kMaxClasses = 256;
  static constexpr int kMaxClassNameBytes = 128;
  static constexpr int kMaxFeatureDim = 65536;
  static constexpr int kMaxBatchAnnotations = 10000;
  // ModelSettings.confusion_smoothing and prior_smoothing: pseudo-counts far above any label
  // count already make the prior decide alone; near DBL_MAX, K of them overflowed to infinity
  // and every posterior of the project was NaN.
  static constexpr double kMaxSmoothing = 1e6;
  // BatchAck.rejections lists at most the first this many (BatchAck.rejected counts all): an
  // ack of a batch of invalid annotations stays small, and so does what a stream whose client
  // does not read its acks holds.
  static constexpr int kMaxListedRejections = 100;
  static constexpr int kMaxItemsPerCall = 10000;
  static constexpr int kMaxPageSize = 10000;
  static constexpr int kDefaultPageSize = 1000;
  // gRPC message size limit the server enforces (bytes).
  static constexpr int kMaxMessageBytes = 16 << 20;
  // Timestamps: google.protobuf.Timestamp's documented range, 0001-01-01T00:00:00Z to
  // 9999-12-31T23:59:59.999999Z, whose last second ends at its last microsecond: the store
  // keeps microseconds and refuses later instants (storage::ClientTimeInStoreRange).
  static constexpr int64_t kMinTimestampSeconds = -62135596800;
  static constexpr int64_t kMaxTimestampSeconds = 253402300799;
  static constexpr int32_t kMaxNanosAtMaxTimestampSeconds = 999999000;
};

// Item and annotator ids: 1-256 bytes of well-formed UTF-8 text without control characters (no
// byte below 0x20, no 0x7f). Spaces, leading and trailing ones too, are part of the id: ids are
// compared byte for byte, never trimmed or normalised.
absl::Status ValidateId(absl::string_view field, absl::string_view id);

// Project names: 1-128 bytes of [A-Za-z0-9._-].
absl::Status ValidateProjectName(absl::string_view name);

// A page token of the list calls (ListProjects, ListPosteriors, GetAnnotatorProfiles), which
// issue a position in [0, max] written in decimal digits only. Empty is the first page (0).
// Anything else (a sign, white space, other characters, a value over max) is INVALID_ARGUMENT
// "page_token: not a token this server issued".
absl::StatusOr<int64_t> ParsePageToken(absl::string_view token, int64_t max);

// A project as given to CreateProject: name, classes, feature dimensions, settings ranges.
absl::Status ValidateNewProject(const v1::Project& project);

absl::Status ValidateSettings(const v1::ProjectSettings& settings);

// `settings` on a project of `num_classes` classes: the method must handle that many (kos is
// for 2 only). ValidateNewProject checks it; UpdateProjectSettings checks it against the
// project's classes.
absl::Status ValidateMethodForClasses(const v1::ProjectSettings& settings, int num_classes);

// Features must have exactly `dim` finite values, or be empty.
absl::Status ValidateFeatures(absl::string_view field, absl::Span<const float> features,
                              int32_t dim);

// A timestamp within [0001-01-01T00:00:00Z, 9999-12-31T23:59:59.999999Z], nanos in [0, 1e9).
absl::Status ValidateTimestamp(absl::string_view field, const google::protobuf::Timestamp& t);

// One annotation of a batch for a project with `num_classes` classes. `field` prefixes the
// message, e.g. "annotations[3]".
absl::Status ValidateAnnotation(absl::string_view field, const v1::Annotation& annotation,
                                int32_t num_classes);

// The batch as a whole (size limits). Per-annotation problems are not batch errors.
absl::Status ValidateBatchShape(const v1::AnnotationBatch& batch);

}  // namespace verity::server

#endif  // VERITY_SERVER_API_VALIDATION_H_
