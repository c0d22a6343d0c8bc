#include "server/console/console_json.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace verity::server {
namespace {

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("line\nbreak\ttab\r"), "\"line\\nbreak\\ttab\\r\"");
  EXPECT_EQ(JsonQuote(std::string("nul\0bell\x07", 9)), "\"nul\\u0000bell\\u0007\"");
  EXPECT_EQ(JsonQuote("</script> é"), "\"</script> é\"");
}

TEST(JsonWriterTest, SeparatesMembersAndElementsWithCommas) {
  JsonWriter json;
  json.BeginObject();
  json.Key("name").String("p\"1");
  json.Key("counts").BeginArray().Int(1).Int(-2).EndArray();
  json.Key("nested").BeginArray().BeginArray().EndArray().BeginObject().EndObject().EndArray();
  json.Key("ok").Bool(true).Key("none").Null();
  json.Key("x").Double(0.25);
  json.EndObject();
  EXPECT_EQ(json.text(),
            "{\"name\":\"p\\\"1\",\"counts\":[1,-2],\"nested\":[[],{}],\"ok\":true,"
            "\"none\":null,\"x\":0.25}");
}

TEST(JsonWriterTest, NonFiniteNumbersAreNull) {
  JsonWriter json;
  json.BeginArray()
      .Double(std::numeric_limits<double>::infinity())
      .Double(std::numeric_limits<double>::quiet_NaN())
      .EndArray();
  EXPECT_EQ(json.text(), "[null,null]");
}

}  // namespace
}  // namespace verity::server
