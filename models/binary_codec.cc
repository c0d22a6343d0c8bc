#include "models/binary_codec.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verity::models {
namespace {

void AppendLittleEndian(uint64_t v, int bytes, std::string& out) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}

uint64_t ParseLittleEndian(std::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return v;
}

constexpr size_t kChecksumBytes = 8;

}  // namespace

namespace {
constexpr std::string_view kModelMagic = "VRTY";
constexpr uint32_t kModelFormatVersion = 1;
}  // namespace

void WriteModelHeader(ByteWriter& writer, std::string_view method, bool has_parameters) {
  writer.WriteString(kModelMagic);
  writer.WriteU32(kModelFormatVersion);
  writer.WriteString(method);
  writer.WriteU32(has_parameters ? 1 : 0);
}

absl::StatusOr<bool> ReadModelHeader(ByteReader& reader, std::string_view method) {
  absl::StatusOr<std::string_view> magic = reader.ReadString();
  if (!magic.ok()) return magic.status();
  if (*magic != kModelMagic) {
    return absl::InvalidArgumentError("not a serialized Verity model");
  }
  absl::StatusOr<uint32_t> version = reader.ReadU32();
  if (!version.ok()) return version.status();
  if (*version != kModelFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized model has format version ", *version,
                     "; this build reads version ", kModelFormatVersion));
  }
  absl::StatusOr<std::string_view> stored_method = reader.ReadString();
  if (!stored_method.ok()) return stored_method.status();
  if (*stored_method != method) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized model is of method \"", std::string(*stored_method),
                     "\", not \"", std::string(method), "\""));
  }
  absl::StatusOr<uint32_t> has_params = reader.ReadU32();
  if (!has_params.ok()) return has_params.status();
  if (*has_params > 1) {
    return absl::InvalidArgumentError("serialized model is corrupt: bad parameter flag");
  }
  return *has_params == 1;
}

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

void ByteWriter::WriteU32(uint32_t v) { AppendLittleEndian(v, 4, bytes_); }
void ByteWriter::WriteU64(uint64_t v) { AppendLittleEndian(v, 8, bytes_); }

void ByteWriter::WriteF64(double v) {
  uint64_t bits;
  static_assert(sizeof(bits) == sizeof(v));
  std::memcpy(&bits, &v, sizeof(v));
  WriteU64(bits);
}

void ByteWriter::WriteString(std::string_view s) {
  WriteU32(static_cast<uint32_t>(s.size()));
  bytes_.append(s.data(), s.size());
}

std::string ByteWriter::Finish() {
  const uint64_t checksum = Fnv1a64(bytes_);
  AppendLittleEndian(checksum, 8, bytes_);
  return std::exchange(bytes_, std::string());
}

absl::StatusOr<ByteReader> ByteReader::Open(std::string_view blob) {
  if (blob.size() < kChecksumBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is truncated: ", blob.size(), " bytes"));
  }
  const std::string_view payload = blob.substr(0, blob.size() - kChecksumBytes);
  const uint64_t stored =
      ParseLittleEndian(blob.substr(payload.size()), kChecksumBytes);
  if (stored != Fnv1a64(payload)) {
    return absl::InvalidArgumentError(
        "serialized model is corrupt: checksum mismatch");
  }
  return ByteReader(payload);
}

absl::Status ByteReader::Need(size_t n) const {
  if (payload_.size() - pos_ < n) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized model is truncated at byte ", pos_,
                     ": need ", n, " more bytes, have ", payload_.size() - pos_));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ByteReader::ReadU32() {
  absl::Status s = Need(4);
  if (!s.ok()) return s;
  const uint64_t v = ParseLittleEndian(payload_.substr(pos_), 4);
  pos_ += 4;
  return static_cast<uint32_t>(v);
}

absl::StatusOr<uint64_t> ByteReader::ReadU64() {
  absl::Status s = Need(8);
  if (!s.ok()) return s;
  const uint64_t v = ParseLittleEndian(payload_.substr(pos_), 8);
  pos_ += 8;
  return v;
}

absl::StatusOr<double> ByteReader::ReadF64() {
  absl::StatusOr<uint64_t> bits = ReadU64();
  if (!bits.ok()) return bits.status();
  double v;
  std::memcpy(&v, &*bits, sizeof(v));
  return v;
}

absl::StatusOr<std::string_view> ByteReader::ReadString() {
  absl::StatusOr<uint32_t> size = ReadU32();
  if (!size.ok()) return size.status();
  absl::Status s = Need(*size);
  if (!s.ok()) return s;
  const std::string_view v = payload_.substr(pos_, *size);
  pos_ += *size;
  return v;
}

absl::Status ByteReader::ExpectEnd() const {
  if (pos_ != payload_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized model has ", payload_.size() - pos_,
                     " unexpected trailing bytes"));
  }
  return absl::OkStatus();
}

absl::Status ReadClassCount(ByteReader& reader, int32_t num_classes,
                            std::string_view what) {
  absl::StatusOr<uint32_t> k32 = reader.ReadU32();
  if (!k32.ok()) return k32.status();
  if (*k32 != static_cast<uint32_t>(num_classes)) {
    return absl::InvalidArgumentError(absl::StrCat("serialized ", std::string(what), ": ", *k32,
                                                   " classes; this model has ", num_classes));
  }
  return absl::OkStatus();
}

}  // namespace verity::models
