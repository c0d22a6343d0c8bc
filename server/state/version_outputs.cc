#include "server/state/version_outputs.h"

#include "absl/strings/match.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace verity::server {
namespace {

// x86-64 and aarch64 are little-endian, the only targets Verity builds for.
static_assert(sizeof(float) == 4, "float32 expected");

void PutU32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void PutF32(std::string& out, double v) {
  const float f = static_cast<float>(v);
  out.append(reinterpret_cast<const char*>(&f), 4);
}

class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  bool U32(uint32_t& v) { return Take(&v, 4); }
  bool F32(float& v) { return Take(&v, 4); }
  bool Magic(const char* magic) {
    if (data_.size() - pos_ < 4 || data_.substr(pos_, 4) != magic) return false;
    pos_ += 4;
    return true;
  }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  bool Take(void* out, size_t n) {
    if (data_.size() - pos_ < n) return false;
    std::memcpy(out, data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  absl::string_view data_;
  size_t pos_ = 0;
};

}  // namespace

std::string EncodePosteriors(int32_t num_classes, absl::Span<const double> posteriors) {
  std::string out = "VPO1";
  const uint32_t items = num_classes > 0 ? posteriors.size() / num_classes : 0;
  out.reserve(12 + posteriors.size() * 4);
  PutU32(out, items);
  PutU32(out, static_cast<uint32_t>(num_classes));
  for (double p : posteriors) PutF32(out, p);
  return out;
}

std::string EncodeProfiles(int32_t num_classes, absl::Span<const uint32_t> num_labels,
                           absl::Span<const double> diagonals) {
  std::string out = "VAP2";
  const size_t k = static_cast<size_t>(num_classes);
  out.reserve(12 + num_labels.size() * (4 + k * 4));
  PutU32(out, static_cast<uint32_t>(num_labels.size()));
  PutU32(out, static_cast<uint32_t>(num_classes));
  for (size_t a = 0; a < num_labels.size(); ++a) {
    PutU32(out, num_labels[a]);
    for (size_t c = 0; c < k; ++c) PutF32(out, diagonals[a * k + c]);
  }
  return out;
}

absl::StatusOr<DecodedPosteriors> DecodePosteriors(absl::string_view encoded) {
  Reader r(encoded);
  uint32_t items = 0, k = 0;
  if (!r.Magic("VPO1") || !r.U32(items) || !r.U32(k) ||
      r.remaining() != static_cast<size_t>(items) * k * 4) {
    return absl::InvalidArgumentError("posteriors blob: bad magic or size");
  }
  DecodedPosteriors out;
  out.num_items = static_cast<int32_t>(items);
  out.num_classes = static_cast<int32_t>(k);
  out.probabilities.resize(static_cast<size_t>(items) * k);
  for (float& p : out.probabilities) r.F32(p);
  return out;
}

absl::StatusOr<DecodedProfiles> DecodeProfiles(absl::string_view encoded) {
  // VAP1 (earlier builds) holds every annotator's full K*K matrix; keep its diagonal.
  const bool full_matrices = absl::StartsWith(encoded, "VAP1");
  Reader r(encoded);
  uint32_t annotators = 0, k = 0;
  if (!(full_matrices ? r.Magic("VAP1") : r.Magic("VAP2")) || !r.U32(annotators) || !r.U32(k)) {
    return absl::InvalidArgumentError("annotator profiles blob: bad magic or size");
  }
  const size_t cells = full_matrices ? static_cast<size_t>(k) * k : k;
  if (r.remaining() != static_cast<size_t>(annotators) * (4 + cells * 4)) {
    return absl::InvalidArgumentError("annotator profiles blob: bad magic or size");
  }
  DecodedProfiles out;
  out.num_annotators = static_cast<int32_t>(annotators);
  out.num_classes = static_cast<int32_t>(k);
  out.num_labels.resize(annotators);
  out.diagonals.resize(static_cast<size_t>(annotators) * k);
  float value = 0;
  for (uint32_t a = 0; a < annotators; ++a) {
    r.U32(out.num_labels[a]);
    for (size_t cell = 0; cell < cells; ++cell) {
      r.F32(value);
      const size_t c = full_matrices ? cell / k : cell;
      if (!full_matrices || cell % k == c) out.diagonals[a * k + c] = value;
    }
  }
  return out;
}

}  // namespace verity::server
