#include "common/utf8.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace verity {
namespace {

// RFC 3629, section 4: the length of a sequence is given by its lead byte; the first and the
// last code point of each length are well-formed.
TEST(Utf8SequenceLengthTest, IsTheLengthOfTheFirstSequence) {
  EXPECT_EQ(Utf8SequenceLength("a\xc3\xa9"), 1u);
  EXPECT_EQ(Utf8SequenceLength(std::string("\0", 1)), 1u);
  EXPECT_EQ(Utf8SequenceLength("\x7f"), 1u);
  EXPECT_EQ(Utf8SequenceLength("\xc2\x80z"), 2u);
  EXPECT_EQ(Utf8SequenceLength("\xdf\xbf"), 2u);
  EXPECT_EQ(Utf8SequenceLength("\xe0\xa0\x80"), 3u);
  EXPECT_EQ(Utf8SequenceLength("\xef\xbf\xbf"), 3u);
  EXPECT_EQ(Utf8SequenceLength("\xf0\x90\x80\x80"), 4u);
  EXPECT_EQ(Utf8SequenceLength("\xf4\x8f\xbf\xbf"), 4u);
  EXPECT_EQ(Utf8SequenceLength(""), 0u);
}

// RFC 3629: overlong forms, surrogates, code points past U+10FFFF, stray continuation bytes and
// truncated sequences are not UTF-8.
TEST(Utf8SequenceLengthTest, IsZeroForWhatIsNotUtf8) {
  for (const std::string bad :
       {"\x80", "\xbf", "\xc0\xaf", "\xc1\xbf", "\xc3", "\xc3(", "\xe0\x9f\xbf", "\xed\xa0\x80",
        "\xe6\x97", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff"}) {
    EXPECT_EQ(Utf8SequenceLength(bad), 0u) << bad.size() << " bytes";
  }
}

TEST(FirstInvalidUtf8OffsetTest, NamesTheFirstByteThatStartsNoSequence) {
  EXPECT_EQ(FirstInvalidUtf8Offset(""), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8Offset("caf\xc3\xa9 \xf0\x9f\x99\x82"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8Offset("caf\xe9"), std::optional<size_t>(3));
  EXPECT_EQ(FirstInvalidUtf8Offset("\xc3\xa9\xc3"), std::optional<size_t>(2));
  EXPECT_EQ(FirstInvalidUtf8Offset("\xff\xc3\xa9"), std::optional<size_t>(0));
}

}  // namespace
}  // namespace verity
