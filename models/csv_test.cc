#include "models/csv.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"

namespace verity::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

struct Record {
  int64_t line;
  std::vector<std::string> fields;
};

absl::StatusOr<std::vector<Record>> Parse(std::string_view text) {
  std::vector<Record> records;
  absl::Status s = ForEachCsvRecord(
      text, [&](int64_t line, absl::Span<const std::string> fields) {
        records.push_back(
            Record{line, std::vector<std::string>(fields.begin(), fields.end())});
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return records;
}

std::vector<std::vector<std::string>> Fields(const std::vector<Record>& rs) {
  std::vector<std::vector<std::string>> out;
  for (const Record& r : rs) out.push_back(r.fields);
  return out;
}

using Row = std::vector<std::string>;

TEST(CsvTest, ParsesPlainRecords) {
  absl::StatusOr<std::vector<Record>> rs = Parse("a,b,c\n1,2,3\n");
  ASSERT_THAT(rs, IsOk());
  EXPECT_THAT(Fields(*rs), ElementsAre(Row{"a", "b", "c"}, Row{"1", "2", "3"}));
}

TEST(CsvTest, ParsesQuotedFieldsWithCommasQuotesAndLineBreaks) {
  absl::StatusOr<std::vector<Record>> rs =
      Parse("item,label\n\"a,b\",\"say \"\"hi\"\"\"\n\"two\nlines\",x\n");
  ASSERT_THAT(rs, IsOk());
  EXPECT_THAT(Fields(*rs), ElementsAre(Row{"item", "label"},
                                       Row{"a,b", "say \"hi\""},
                                       Row{"two\nlines", "x"}));
  // The record after the embedded line break starts on line 3, and the next
  // one would start on line 5.
  EXPECT_EQ((*rs)[2].line, 3);
}

TEST(CsvTest, HandlesCrlfEmptyFieldsMissingFinalNewlineAndBom) {
  absl::StatusOr<std::vector<Record>> rs =
      Parse("\xEF\xBB\xBFh1,h2\r\n,\r\n\"\",z\r\nlast,");
  ASSERT_THAT(rs, IsOk());
  EXPECT_THAT(Fields(*rs), ElementsAre(Row{"h1", "h2"}, Row{"", ""},
                                       Row{"", "z"}, Row{"last", ""}));
}

TEST(CsvTest, SkipsBlankLinesAndCountsThem) {
  absl::StatusOr<std::vector<Record>> rs = Parse("a\n\n\r\nb\n");
  ASSERT_THAT(rs, IsOk());
  ASSERT_EQ(rs->size(), 2u);
  EXPECT_EQ((*rs)[1].fields, Row{"b"});
  EXPECT_EQ((*rs)[1].line, 4);
}

// csv.h: a quoted field "must be followed by a comma or the end of the
// record", and a record ends with "\n", "\r\n" or the end of the text.
TEST(CsvTest, QuotedFieldMayEndTheRecordWithLfCrlfOrTheEndOfText) {
  absl::StatusOr<std::vector<Record>> rs = Parse("\"a\",\"b\"\r\n\"c\"\n\"d\"");
  ASSERT_THAT(rs, IsOk());
  EXPECT_THAT(Fields(*rs), ElementsAre(Row{"a", "b"}, Row{"c"}, Row{"d"}));
  ASSERT_EQ(rs->size(), 3u);
  EXPECT_EQ((*rs)[1].line, 2);
  EXPECT_EQ((*rs)[2].line, 3);
}

// csv.h: `line` is the line on which a record starts, so a line break inside
// a quoted field counts. Record 1 spans lines 1-3 ("x", "y", "w,1"); the
// next record starts on line 4.
TEST(CsvTest, LineBreaksInsideQuotedFieldsAdvanceTheLineOfLaterRecords) {
  absl::StatusOr<std::vector<Record>> rs = Parse("\"x\ny\nw\",1\nz\n");
  ASSERT_THAT(rs, IsOk());
  EXPECT_THAT(Fields(*rs), ElementsAre(Row{"x\ny\nw", "1"}, Row{"z"}));
  EXPECT_EQ((*rs)[0].line, 1);
  EXPECT_EQ((*rs)[1].line, 4);
}

// csv.h: records end with "\n" or "\r\n" only; a lone carriage return is an
// ordinary character of an unquoted field.
TEST(CsvTest, LoneCarriageReturnIsFieldData) {
  absl::StatusOr<std::vector<Record>> rs = Parse("a\rb,c\nd\r\n");
  ASSERT_THAT(rs, IsOk());
  EXPECT_THAT(Fields(*rs), ElementsAre(Row{"a\rb", "c"}, Row{"d"}));
}

TEST(CsvTest, RejectsUnterminatedQuote) {
  absl::StatusOr<std::vector<Record>> rs = Parse("a\n\"open,b\n");
  EXPECT_THAT(rs, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rs.status().message(), HasSubstr("line 2"));
}

TEST(CsvTest, RejectsTextAfterClosingQuote) {
  absl::StatusOr<std::vector<Record>> rs = Parse("\"a\"b,c\n");
  EXPECT_THAT(rs, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rs.status().message(), HasSubstr("after a closing quote"));
}

TEST(CsvTest, RejectsQuoteInsideUnquotedField) {
  absl::StatusOr<std::vector<Record>> rs = Parse("ok\nab\"c\n");
  EXPECT_THAT(rs, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rs.status().message(), HasSubstr("line 2"));
}

TEST(CsvTest, StopsAtTheCallbacksError) {
  int calls = 0;
  absl::Status s = ForEachCsvRecord(
      "a\nb\nc\n", [&](int64_t, absl::Span<const std::string>) {
        ++calls;
        return calls == 2 ? absl::NotFoundError("stop") : absl::OkStatus();
      });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(calls, 2);
}

// csv.h: `line` is the 1-based line on which a record starts, and "\r\n" ends a record (and a
// line) as "\n" does: records of unquoted fields ending in "\r\n" start on lines 1, 2, 4 and 5
// (line 3 is blank).
TEST(CsvTest, CrlfAfterAnUnquotedFieldAdvancesTheLine) {
  absl::StatusOr<std::vector<Record>> rs = Parse("a,b\r\nc\r\n\r\nd,\r\ne");
  ASSERT_THAT(rs, IsOk());
  EXPECT_THAT(Fields(*rs), ElementsAre(Row{"a", "b"}, Row{"c"}, Row{"d", ""}, Row{"e"}));
  ASSERT_EQ(rs->size(), 4u);
  EXPECT_EQ((*rs)[0].line, 1);
  EXPECT_EQ((*rs)[1].line, 2);
  EXPECT_EQ((*rs)[2].line, 4);
  EXPECT_EQ((*rs)[3].line, 5);
}

// csv.h: text after a closing quote, or a quote inside an unquoted field, is INVALID_ARGUMENT
// "naming the line": the line the offending character is on, also when the record started on
// an earlier line (here the quoted field "x\ny" spans lines 1-2, and the error is on line 2).
TEST(CsvTest, ErrorsAfterAMultiLineFieldNameTheLineOfTheOffendingCharacter) {
  absl::StatusOr<std::vector<Record>> rs = Parse("\"x\ny\"z\n");
  EXPECT_THAT(rs, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rs.status().message(), HasSubstr("line 2:"));
  rs = Parse("\"x\ny\",a\"b\n");
  EXPECT_THAT(rs, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rs.status().message(), HasSubstr("line 2:"));
}

// csv.h: a closing quote "must be followed by a comma or the end of the record", and a record
// ends with "\n" or "\r\n" only, so a lone carriage return after a closing quote is
// INVALID_ARGUMENT.
TEST(CsvTest, LoneCarriageReturnAfterAClosingQuoteIsAnError) {
  absl::StatusOr<std::vector<Record>> rs = Parse("\"a\"\rb\n");
  EXPECT_THAT(rs, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rs.status().message(), HasSubstr("after a closing quote"));
}

}  // namespace
}  // namespace verity::models
