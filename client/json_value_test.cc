#include "client/json_value.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity::client {
namespace {

TEST(JsonValueTest, SerializesScalarsOfEveryKind) {
  EXPECT_EQ(JsonValue().Serialize(), "null");
  EXPECT_EQ(JsonValue(true).Serialize(), "true");
  EXPECT_EQ(JsonValue(false).Serialize(), "false");
  EXPECT_EQ(JsonValue(int32_t{-7}).Serialize(), "-7");
  EXPECT_EQ(JsonValue(int64_t{9007199254740993}).Serialize(),
            "9007199254740993");
  EXPECT_EQ(JsonValue(0.5).Serialize(), "0.5");
  EXPECT_EQ(JsonValue("text").Serialize(), "\"text\"");
  EXPECT_EQ(JsonValue(std::string("s")).Serialize(), "\"s\"");
}

TEST(JsonValueTest, KeepsMemberOrderAndNests) {
  JsonValue value = JsonValue::Object();
  value.Set("z", 1)
      .Set("a", JsonValue::Array().Append("x").Append(JsonValue()))
      .Set("m", JsonValue::Object());
  EXPECT_EQ(value.Serialize(), "{\"z\":1,\"a\":[\"x\",null],\"m\":{}}");
  EXPECT_EQ(JsonValue::Array().Serialize(), "[]");
}

TEST(JsonValueTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("line\nnext\ttab\r"), "\"line\\nnext\\ttab\\r\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  // UTF-8 passes through unchanged.
  EXPECT_EQ(JsonQuote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
  EXPECT_EQ(JsonValue::Object().Set("k\"", "v").Serialize(),
            "{\"k\\\"\":\"v\"}");
}

TEST(FormatShortestDoubleTest, RoundTripsAndWritesNonFiniteAsNull) {
  EXPECT_EQ(FormatShortestDouble(1.0), "1");
  EXPECT_EQ(FormatShortestDouble(0.0), "0");
  EXPECT_EQ(FormatShortestDouble(-0.0), "0");
  EXPECT_EQ(FormatShortestDouble(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatShortestDouble(2.0 / 3.0), "0.6666666666666666");
  EXPECT_EQ(FormatShortestDouble(-12.5), "-12.5");
  EXPECT_EQ(FormatShortestDouble(1e-7), "1e-07");
  EXPECT_EQ(FormatShortestDouble(std::nan("")), "null");
  EXPECT_EQ(FormatShortestDouble(std::numeric_limits<double>::infinity()),
            "null");
  EXPECT_EQ(std::stod(FormatShortestDouble(0.123456789012345678)),
            0.123456789012345678);
}

TEST(JsonArrayWriterTest, WritesOneElementPerLine) {
  std::ostringstream out;
  JsonArrayWriter array(out);
  EXPECT_EQ(out.str(), "");
  array.Add(JsonValue::Object().Set("a", 1));
  array.Add(2);
  array.Finish();
  EXPECT_EQ(out.str(), "[\n{\"a\":1},\n2\n]\n");
}

TEST(JsonArrayWriterTest, WritesAnEmptyArrayOnOneLine) {
  std::ostringstream out;
  JsonArrayWriter array(out);
  array.Finish();
  EXPECT_EQ(out.str(), "[]\n");
}

// Only the characters below U+0020 are control characters JSON must escape
// (json_value.h): the space, DEL and printable ASCII pass through, and NUL is
// \u0000.
TEST(JsonValueTest, EscapesOnlyTheControlCharactersBelowSpace) {
  EXPECT_EQ(JsonQuote("a b~"), "\"a b~\"");
  EXPECT_EQ(JsonQuote(std::string("\x7f", 1)), std::string("\"\x7f\"", 3));
  EXPECT_EQ(JsonQuote(std::string("\0", 1)), "\"\\u0000\"");
  EXPECT_EQ(JsonQuote(std::string("\x08\x0c", 2)), "\"\\u0008\\u000c\"");
}

}  // namespace
}  // namespace verity::client
