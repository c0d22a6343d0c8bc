#include "storage/sql_values.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity {
namespace storage {
namespace {

using ::testing::ElementsAre;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

TEST(SqlValuesTest, TextArrayLiteralQuotesAndEscapes) {
  const std::vector<std::string> values = {"plain", "a,b", "say \"hi\"",
                                           "back\\slash", "", "NULL", "{}"};
  EXPECT_EQ(TextArrayLiteral(values),
            R"({"plain","a,b","say \"hi\"","back\\slash","","NULL","{}"})");
  EXPECT_EQ(TextArrayLiteral(std::vector<std::string>{}), "{}");
}

TEST(SqlValuesTest, TextArrayRoundTripsThroughTheParser) {
  const std::vector<std::string> values = {"cat", "a,b", "say \"hi\"",
                                           "back\\slash", "ünï", " spaced "};
  absl::StatusOr<std::vector<std::string>> parsed =
      ParseTextArray(TextArrayLiteral(values));
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(*parsed, values);
  EXPECT_THAT(ParseTextArray("{a,NULL}"),
              StatusIs(absl::StatusCode::kInternal));
}

TEST(SqlValuesTest, IntegerArrayLiteralsWriteNullForMissingValues) {
  EXPECT_EQ(Int32ArrayLiteral(std::vector<int32_t>{1, -2, 3}), "{1,-2,3}");
  EXPECT_EQ(Int64ArrayLiteral(std::vector<std::optional<int64_t>>{
                5, std::nullopt, std::numeric_limits<int64_t>::min()}),
            "{5,NULL,-9223372036854775808}");
  EXPECT_EQ(Int32ArrayLiteral(std::vector<std::optional<int32_t>>{}), "{}");
}

TEST(SqlValuesTest, FloatArraysRoundTripExactly) {
  const std::vector<float> values = {0.1f, -3.5f, 1e-38f, 3.4028235e38f,
                                     1.0f / 3.0f};
  absl::StatusOr<std::vector<float>> parsed =
      ParseFloatArray(FloatArrayLiteral(values));
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(*parsed, values);
}

TEST(SqlValuesTest, FloatArraysUsePostgresSpellingsForSpecialValues) {
  EXPECT_EQ(FloatArrayLiteral({INFINITY, -INFINITY}), "{Infinity,-Infinity}");
  absl::StatusOr<std::vector<float>> parsed =
      ParseFloatArray("{NaN,Infinity,-Infinity,2.5}");
  ASSERT_THAT(parsed, IsOk());
  EXPECT_TRUE(std::isnan((*parsed)[0]));
  EXPECT_EQ((*parsed)[1], INFINITY);
  EXPECT_EQ((*parsed)[2], -INFINITY);
  EXPECT_EQ((*parsed)[3], 2.5f);
  EXPECT_THAT(ParseFloatArray("{}"), IsOk());
  EXPECT_TRUE(ParseFloatArray("{}")->empty());
  EXPECT_THAT(ParseFloatArray("{1,x}"), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(ParseFloatArray("1,2"), StatusIs(absl::StatusCode::kInternal));
}

TEST(SqlValuesTest, NestedFloatArrayLiteralQuotesEachRow) {
  const std::vector<std::optional<std::vector<float>>> rows = {
      std::vector<float>{1, 2}, std::nullopt, std::vector<float>{}};
  EXPECT_EQ(NestedFloatArrayLiteral(rows), R"({"{1,2}",NULL,"{}"})");
}

TEST(SqlValuesTest, TimeMicrosRoundTrip) {
  const absl::Time t = absl::FromUnixMicros(1700000000123456);
  EXPECT_EQ(TimeToMicros(t), 1700000000123456);
  EXPECT_EQ(MicrosToTime(TimeToMicros(t)), t);
}

TEST(SqlValuesTest, ValidateExternalIdRejectsEmptyAndNul) {
  EXPECT_THAT(ValidateExternalId("item-1", "item_id"), IsOk());
  EXPECT_THAT(ValidateExternalId("", "item_id"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("item_id")));
  EXPECT_THAT(ValidateExternalId(std::string("a\0b", 3), "item_id"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// sql_values.h: "NaN and infinities use PostgreSQL's spellings" when written.
TEST(SqlValuesTest, FloatArrayLiteralSpellsNaNTheWayPostgresDoes) {
  EXPECT_EQ(FloatArrayLiteral({NAN, 1.5f}), "{NaN,1.5}");
}

// sql_values.h: Float64ArrayLiteral writes nullopt as NULL and keeps a
// double's full precision.
TEST(SqlValuesTest, Float64ArrayLiteralWritesNullAndFullPrecision) {
  EXPECT_EQ(Float64ArrayLiteral(std::vector<std::optional<double>>{0.5, std::nullopt, -2}),
            "{0.5,NULL,-2}");
  const std::string literal =
      Float64ArrayLiteral(std::vector<std::optional<double>>{0.1234567890123});
  ASSERT_GE(literal.size(), 2u);
  EXPECT_EQ(std::stod(literal.substr(1, literal.size() - 2)), 0.1234567890123);
  EXPECT_EQ(Float64ArrayLiteral(std::vector<std::optional<double>>{}), "{}");
}

// sql_values.h: Float64ArrayLiteral fills `double precision[]` columns (item priorities, which
// come back exactly): doubles that need all 17 significant digits round-trip too.
TEST(SqlValuesTest, Float64ArrayLiteralRoundTripsDoublesThatNeed17Digits) {
  for (double value : {0.1 + 0.2, 1.0 / 3.0, std::nextafter(1.0, 2.0), -1e300 / 7}) {
    const std::string literal = Float64ArrayLiteral(std::vector<std::optional<double>>{value});
    ASSERT_GE(literal.size(), 2u);
    EXPECT_EQ(std::stod(literal.substr(1, literal.size() - 2)), value) << literal;
  }
}

// sql_values.h: FloatArrayLiteral has "round-trip precision": also for floats whose shortest
// exact spelling takes all 9 significant digits.
TEST(SqlValuesTest, FloatArraysRoundTripFloatsThatNeedNineDigits) {
  const std::vector<float> values = {114.024994f, 1.01461843e+09f, 1.13137854e-20f};
  absl::StatusOr<std::vector<float>> parsed = ParseFloatArray(FloatArrayLiteral(values));
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(*parsed, values);
}

// sql_values.h: absl::Time -> epoch microseconds truncates "toward negative
// infinity": 1.5 us before the epoch is -2 us, 1.5 us after it is 1 us.
TEST(SqlValuesTest, TimeToMicrosTruncatesTowardNegativeInfinity) {
  EXPECT_EQ(TimeToMicros(absl::FromUnixNanos(-1500)), -2);
  EXPECT_EQ(TimeToMicros(absl::FromUnixNanos(1500)), 1);
  EXPECT_EQ(MicrosToTime(-2), absl::FromUnixMicros(-2));
}

// sql_values.h: ParseTextArray parses a "one-dimensional" text[]: a nested
// array is INTERNAL.
TEST(SqlValuesTest, ParseTextArrayRefusesNestedArrays) {
  EXPECT_THAT(ParseTextArray("{{a,b},{c,d}}"), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(ParseTextArray("{}"), ::verity::testing::IsOkAndHolds(::testing::IsEmpty()));
}

// ParseTextArray reads text[] values as PostgreSQL writes them: elements quoted only when
// they must be (then with backslash escapes), otherwise bare, where a single quote is an
// ordinary character; a bare NULL (any case) is a NULL element. Malformed text is INTERNAL,
// never a crash.
TEST(SqlValuesTest, ParseTextArrayReadsPostgresOutputWhereQuotesAreOnlyWhereNeeded) {
  using ::verity::testing::IsOkAndHolds;
  using V = std::vector<std::string>;
  EXPECT_THAT(ParseTextArray("{'x,y}"), IsOkAndHolds(V{"'x", "y"}));
  EXPECT_THAT(ParseTextArray("{'j',it's,'}"), IsOkAndHolds(V{"'j'", "it's", "'"}));
  EXPECT_THAT(ParseTextArray(R"({"a b","","NULL","{}",",","\\","\"",ünï})"),
              IsOkAndHolds(V{"a b", "", "NULL", "{}", ",", "\\", "\"", "ünï"}));
  EXPECT_THAT(ParseTextArray(R"({"'x","y'"})"), IsOkAndHolds(V{"'x", "y'"}));
  EXPECT_THAT(ParseTextArray("{a,null}"), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(ParseTextArray("{NULL}"), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(ParseTextArray("{Nulls}"), IsOkAndHolds(V{"Nulls"}));
  for (const char* malformed : {"", "a", "{", "{a", "a}", "{a}x", "{\"a}", "{\"a\\}", "{a,}",
                                "{,a}", "{a\"b}", "{\"a\"b}", "{\"a\"xb}", "{{a}}", "{a{}"}) {
    EXPECT_THAT(ParseTextArray(malformed), StatusIs(absl::StatusCode::kInternal)) << malformed;
  }
}

// sql_values.h: TextArrayLiteral quotes and escapes every element; the string_view overload
// (used for entity ids) writes the same literal as the std::string one.
TEST(SqlValuesTest, TextArrayLiteralOfStringViewsQuotesAndEscapes) {
  const std::vector<absl::string_view> values = {"plain", "a,b", "say \"hi\"", "back\\slash", ""};
  EXPECT_EQ(TextArrayLiteral(absl::MakeConstSpan(values)),
            R"({"plain","a,b","say \"hi\"","back\\slash",""})");
  EXPECT_EQ(TextArrayLiteral(absl::Span<const absl::string_view>()), "{}");
}

// sql_values.h: ParseFloatArray returns INTERNAL on malformed input: a missing closing brace or
// an empty element (a trailing comma) is not silently dropped.
TEST(SqlValuesTest, ParseFloatArrayRefusesAMissingBraceOrATrailingComma) {
  for (const char* malformed : {"{1", "{1,25", "{1,}", "{1,,2}"}) {
    EXPECT_THAT(ParseFloatArray(malformed), StatusIs(absl::StatusCode::kInternal)) << malformed;
  }
}

// sql_values.h: PostgreSQL quotes a text[] element holding a brace or backslash, so such a
// character in a bare element is malformed input: INTERNAL.
TEST(SqlValuesTest, ParseTextArrayRefusesBracesAndBackslashesInBareElements) {
  for (const char* malformed : {"{a}}", "{a,b}c}", "{a\\b}", "{x,\\}"}) {
    EXPECT_THAT(ParseTextArray(malformed), StatusIs(absl::StatusCode::kInternal)) << malformed;
  }
}

// sql_values.h: integer array literals are "{...}" with every element in order, NULL for
// nullopt; also the int64 overload without nullopt and the int32 one with it.
TEST(SqlValuesTest, IntegerArrayLiteralsKeepEveryElementInOrder) {
  EXPECT_EQ(Int64ArrayLiteral(std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 0, -7}),
            "{9223372036854775807,0,-7}");
  EXPECT_EQ(Int64ArrayLiteral(std::vector<int64_t>{}), "{}");
  EXPECT_EQ(Int32ArrayLiteral(std::vector<std::optional<int32_t>>{
                std::nullopt, 7, std::numeric_limits<int32_t>::min()}),
            "{NULL,7,-2147483648}");
}

}  // namespace
}  // namespace storage
}  // namespace verity
