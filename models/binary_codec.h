// ByteWriter / ByteReader: the little binary format of serialized model
// parameters.
//
// A blob is a sequence of little-endian fixed-width fields (u32, u64, IEEE-754
// f64 by bit pattern, length-prefixed strings) followed by an 8-byte FNV-1a
// checksum of everything before it. Doubles round-trip bit for bit, so a
// restored model computes exactly the posteriors of the serialized one. The
// format is independent of the host's byte order.
//
// ByteReader::Open verifies the checksum first, so truncation or a flipped
// bit is reported as INVALID_ARGUMENT before any field is parsed; every Read*
// also fails with INVALID_ARGUMENT instead of reading past the end.
//
// Thread safety: neither class is thread-safe; use one object per thread.

#ifndef VERITY_MODELS_BINARY_CODEC_H_
#define VERITY_MODELS_BINARY_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace verity::models {

class ByteWriter {
 public:
  void WriteU32(uint32_t v);
  void WriteU64(uint64_t v);
  void WriteF64(double v);
  // A u32 length, then the bytes.
  void WriteString(std::string_view s);

  // Appends the checksum and returns the blob. The writer is left empty.
  std::string Finish();

 private:
  std::string bytes_;
};

class ByteReader {
 public:
  // Verifies the trailing checksum of `blob` (which must outlive the reader): INVALID_ARGUMENT
  // "serialized model is truncated" for a blob shorter than the checksum's 8 bytes, "... is
  // corrupt: checksum mismatch" for one whose checksum does not match its payload.
  static absl::StatusOr<ByteReader> Open(std::string_view blob);

  absl::StatusOr<uint32_t> ReadU32();
  absl::StatusOr<uint64_t> ReadU64();
  absl::StatusOr<double> ReadF64();
  absl::StatusOr<std::string_view> ReadString();

  // Bytes not yet read (checksum excluded).
  size_t remaining() const { return payload_.size() - pos_; }

  // OK if every byte was read, else INVALID_ARGUMENT (trailing garbage).
  absl::Status ExpectEnd() const;

 private:
  explicit ByteReader(std::string_view payload) : payload_(payload) {}
  absl::Status Need(size_t n) const;

  std::string_view payload_;
  size_t pos_ = 0;
};

// Reads the u32 class count that leads a model's parameters (or its counts) and checks it
// against the model's: INVALID_ARGUMENT "serialized <what>: N classes; this model has K" when
// they differ, or the reader's error.
absl::Status ReadClassCount(ByteReader& reader, int32_t num_classes,
                            std::string_view what = "model");

// The header every serialized truth model starts with: the magic "VRTY", the format version,
// the method name, and a flag telling whether parameters follow.
void WriteModelHeader(ByteWriter& writer, std::string_view method, bool has_parameters);

// Reads that header. INVALID_ARGUMENT if the magic, format version or method differ from this
// build's and `method`, or the flag is neither 0 nor 1; otherwise whether parameters follow.
absl::StatusOr<bool> ReadModelHeader(ByteReader& reader, std::string_view method);

// 64-bit FNV-1a hash of `bytes`.
uint64_t Fnv1a64(std::string_view bytes);

}  // namespace verity::models

#endif  // VERITY_MODELS_BINARY_CODEC_H_
