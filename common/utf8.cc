#include "common/utf8.h"

namespace verity {

size_t Utf8SequenceLength(absl::string_view text) {
  if (text.empty()) return 0;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // The range of the second byte.
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // Overlong below U+0800.
    if (lead == 0xed) high = 0x9f;  // Surrogates U+D800-U+DFFF.
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // Overlong below U+10000.
    if (lead == 0xf4) high = 0x8f;  // Past U+10FFFF.
  } else {
    return 0;  // A continuation byte, an overlong lead (0xc0, 0xc1) or 0xf5-0xff.
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return length;
}

std::optional<size_t> FirstInvalidUtf8Offset(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = Utf8SequenceLength(text.substr(i));
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

}  // namespace verity
