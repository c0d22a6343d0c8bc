#include "client/csv_input.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

LabelParser BirdLabels() { return LabelParser({"false", "true"}); }

TEST(LabelParserTest, MapsClassNamesToTheirIndex) {
  const LabelParser labels({"cat", "dog", "bird"});
  EXPECT_EQ(*labels.Parse("cat"), 0);
  EXPECT_EQ(*labels.Parse("bird"), 2);
}

TEST(LabelParserTest, TakesAnIntegerThatIsNotAClassNameAsAnIndex) {
  const LabelParser labels({"cat", "dog", "bird"});
  EXPECT_EQ(*labels.Parse("1"), 1);
  EXPECT_EQ(*labels.Parse("0"), 0);
}

TEST(LabelParserTest, PrefersAClassNameOverAnIndex) {
  // Class "1" is index 0; "0" is not a name, so it is index 0 too.
  const LabelParser labels({"1", "0x", "2"});
  EXPECT_EQ(*labels.Parse("1"), 0);
  EXPECT_EQ(*labels.Parse("2"), 2);
  EXPECT_EQ(*labels.Parse("0"), 0);
}

TEST(LabelParserTest, RefusesUnknownNamesAndIndicesOutOfRange) {
  const LabelParser labels({"no", "yes"});
  EXPECT_THAT(labels.Parse("maybe"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "label \"maybe\" is neither a class name (no, yes) nor "
                       "a class index in [0, 2)"));
  EXPECT_THAT(labels.Parse("2"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(labels.Parse("-1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(labels.Parse("+1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(labels.Parse(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseClassListTest, SplitsOnCommasAndKeepsNamesExact) {
  EXPECT_THAT(*ParseClassList("a,b c,d"), ElementsAre("a", "b c", "d"));
  EXPECT_THAT(ParseClassList("a,,b"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(ParseClassList("only"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("at least two classes")));
}

TEST(ParseClassesFileTest, ReadsOneNamePerLineSkippingBlankLines) {
  EXPECT_THAT(*ParseClassesFile("false\r\ntrue\n\n", "classes.txt"),
              ElementsAre("false", "true"));
  EXPECT_THAT(ParseClassesFile("one\n", "classes.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("classes.txt: a project needs")));
}

// A classes file saved as "UTF-8 with BOM" (Notepad): the mark is no part of the
// first name, as it is no part of a labels CSV's first column (models/csv.h) or
// of a dataset's classes.txt (models/csv_dataset.h).
TEST(ParseClassesFileTest, SkipsAByteOrderMarkAtTheStart) {
  EXPECT_THAT(*ParseClassesFile("\xEF\xBB\xBF"
                                "false\r\ntrue\r\n",
                                "classes.txt"),
              ElementsAre("false", "true"));
}

// csv_input.h: ids and class names must be UTF-8 text; a file saved in another encoding
// (Windows-1252 "caf\xe9") is INVALID_ARGUMENT naming the file, the line and the byte, for
// labels, items and annotators files and for a classes file, while UTF-8 ids with spaces pass.
TEST(CsvInputTest, IdsAndClassNamesThatAreNotUtf8AreRefusedByLine) {
  const LabelParser labels = BirdLabels();
  absl::StatusOr<AnnotationRows> rows = ParseAnnotationsCsv(
      "item,annotator,label\ncaf\xc3\xa9 au lait,Jos\xc3\xa9,true\n", "labels.csv", labels);
  ASSERT_THAT(rows, IsOk());
  EXPECT_EQ(rows->annotations[0].item(), "caf\xc3\xa9 au lait");
  EXPECT_THAT(ParseAnnotationsCsv("item,annotator,label\nok,w,true\ncaf\xe9,w,true\n", "labels.csv",
                                  labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("labels.csv: line 3: item id is not UTF-8 text (byte 0xe9 at "
                                 "offset 3)")));
  EXPECT_THAT(ParseAnnotationsCsv("item,annotator,label\nok,\xff,true\n", "labels.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("labels.csv: line 2: annotator id is not UTF-8 text")));
  EXPECT_THAT(ParseItemsCsv("item\nok\ncaf\xe9\n", "items.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("items.csv: line 3: item id is not UTF-8 text")));
  EXPECT_THAT(ParseAnnotatorsCsv("annotator\ncaf\xe9\n", "annotators.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotators.csv: line 2: annotator id is not UTF-8 text")));
  EXPECT_THAT(
      ParseClassesFile("cat\ncaf\xe9\n", "classes.txt"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("classes.txt: class 2 is not UTF-8 text (byte 0xe9 at offset 3)")));
}

TEST(ParseAnnotationsCsvTest, ReadsTheDatasetFormat) {
  const LabelParser labels = BirdLabels();
  absl::StatusOr<AnnotationRows> rows = ParseAnnotationsCsv(
      "item,annotator,label\n11573,39,true\n\"a,b\",40,false\n", "labels.csv",
      labels);
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->annotations.size(), 2u);
  EXPECT_EQ(rows->annotations[0].item(), "11573");
  EXPECT_EQ(rows->annotations[0].annotator(), "39");
  EXPECT_EQ(rows->annotations[0].label(), 1);
  EXPECT_EQ(rows->annotations[1].item(), "a,b");
  EXPECT_EQ(rows->annotations[1].label(), 0);
  EXPECT_THAT(rows->lines, ElementsAre(2, 3));
}

TEST(ParseAnnotationsCsvTest, AcceptsColumnsInAnyOrderAndIndexLabels) {
  const LabelParser labels = BirdLabels();
  absl::StatusOr<AnnotationRows> rows = ParseAnnotationsCsv(
      "label,item,annotator\r\n1,i1,w1\r\n", "labels.csv", labels);
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->annotations.size(), 1u);
  EXPECT_EQ(rows->annotations[0].item(), "i1");
  EXPECT_EQ(rows->annotations[0].annotator(), "w1");
  EXPECT_EQ(rows->annotations[0].label(), 1);
}

TEST(ParseAnnotationsCsvTest, ErrorsNameTheFileAndLine) {
  const LabelParser labels = BirdLabels();
  EXPECT_THAT(
      ParseAnnotationsCsv("item,annotator,label\ni1,w1,true\ni2,w1,maybe\n",
                          "labels.csv", labels),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("labels.csv: line 3: label \"maybe\"")));
  EXPECT_THAT(
      ParseAnnotationsCsv("item,annotator,label\ni1,w1\n", "l.csv", labels),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "l.csv: line 2: expected 3 fields as in the header, "
               "got 2"));
  // One field too many (an unquoted comma in an id, say) is refused too, not cut off.
  EXPECT_THAT(
      ParseAnnotationsCsv("item,annotator,label\ni1,w1,true,extra\n", "l.csv", labels),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "l.csv: line 2: expected 3 fields as in the header, got 4"));
  EXPECT_THAT(
      ParseAnnotationsCsv("item,annotator,label\n,w1,true\n", "l.csv", labels),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "l.csv: line 2: empty item id"));
  // A parser error of models/csv.h gets the file name too.
  EXPECT_THAT(ParseAnnotationsCsv("item,annotator,label\ni\"1,w1,true\n",
                                  "l.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("l.csv: line 2: quote inside")));
}

TEST(ParseAnnotationsCsvTest, RefusesBadHeaders) {
  const LabelParser labels = BirdLabels();
  EXPECT_THAT(ParseAnnotationsCsv("item,worker,label\n", "l.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("l.csv: line 1: unknown column \"worker\"")));
  EXPECT_THAT(ParseAnnotationsCsv("item,label\n", "l.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must name the columns")));
  EXPECT_THAT(
      ParseAnnotationsCsv("item,item,annotator,label\n", "l.csv", labels),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("column \"item\" appears twice")));
  EXPECT_THAT(ParseAnnotationsCsv("", "l.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("l.csv: empty file")));
}

TEST(ParseItemsCsvTest, ReadsGoldByNameOrIndexAndEmptyGold) {
  const LabelParser labels = BirdLabels();
  absl::StatusOr<ItemRows> rows =
      ParseItemsCsv("item,gold\na,true\nb,0\nc,\n", "items.csv", labels);
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->items.size(), 3u);
  EXPECT_EQ(rows->items[0].gold_label(), 1);
  EXPECT_EQ(rows->items[1].gold_label(), 0);
  EXPECT_FALSE(rows->items[2].has_gold_label());
  EXPECT_EQ(rows->feature_dim, 0);
  EXPECT_THAT(rows->lines, ElementsAre(2, 3, 4));
}

TEST(ParseItemsCsvTest, ReadsTheDatasetsGoldCsv) {
  const LabelParser labels = BirdLabels();
  absl::StatusOr<ItemRows> rows = ParseItemsCsv(
      "item,label\n11573,true\n11577,false\n", "gold.csv", labels);
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->items.size(), 2u);
  EXPECT_EQ(rows->items[0].id(), "11573");
  EXPECT_EQ(rows->items[0].gold_label(), 1);
  EXPECT_EQ(rows->items[1].gold_label(), 0);
}

TEST(ParseItemsCsvTest, ReadsFeatureColumnsInIndexOrder) {
  const LabelParser labels = BirdLabels();
  absl::StatusOr<ItemRows> rows = ParseItemsCsv(
      "f1,id,f0,f2\n2.5,x,-1,1e3\n,y,,\n", "features.csv", labels);
  ASSERT_THAT(rows, IsOk());
  EXPECT_EQ(rows->feature_dim, 3);
  ASSERT_EQ(rows->items.size(), 2u);
  EXPECT_EQ(rows->items[0].id(), "x");
  EXPECT_THAT(rows->items[0].features(), ElementsAre(-1.0f, 2.5f, 1000.0f));
  EXPECT_TRUE(rows->items[1].features().empty());
}

TEST(ParseItemsCsvTest, RefusesBadFeatures) {
  const LabelParser labels = BirdLabels();
  EXPECT_THAT(ParseItemsCsv("item,f0,f2\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "i.csv: line 1: 2 feature columns but no column f1 "
                       "(expected f0 to f1)"));
  EXPECT_THAT(ParseItemsCsv("item,f0,f1\na,1,\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "i.csv: line 2: 1 of 2 features are empty (give all "
                       "or none)"));
  EXPECT_THAT(ParseItemsCsv("item,f0\na,nan\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "i.csv: line 2: feature f0 \"nan\" is not a finite "
                       "number"));
  EXPECT_THAT(ParseItemsCsv("item,f0\na,x1\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("feature f0 \"x1\"")));
  EXPECT_THAT(ParseItemsCsv("item,f01\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown column \"f01\"")));
}

TEST(ParseItemsCsvTest, RefusesRepeatedItemsAndMissingIds) {
  const LabelParser labels = BirdLabels();
  EXPECT_THAT(ParseItemsCsv("item\na\nb\na\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "i.csv: line 4: item \"a\" already listed on line 2"));
  EXPECT_THAT(ParseItemsCsv("gold\ntrue\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must name an \"item\"")));
  EXPECT_THAT(ParseItemsCsv("item,id\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("both \"item\" and \"id\"")));
  EXPECT_THAT(ParseItemsCsv("item,gold\na,maybe\n", "i.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("i.csv: line 2: label \"maybe\"")));
}

TEST(ParseItemsCsvTest, ReadsPrioritiesAndLeavesEmptyOnesUnset) {
  const LabelParser labels = BirdLabels();
  absl::StatusOr<ItemRows> rows = ParseItemsCsv(
      "item,priority,gold\na,2.5,true\nb,,\nc,-1,\n", "p.csv", labels);
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->items.size(), 3u);
  EXPECT_EQ(rows->items[0].priority(), 2.5);
  EXPECT_EQ(rows->items[0].gold_label(), 1);
  EXPECT_FALSE(rows->items[1].has_priority());
  EXPECT_EQ(rows->items[2].priority(), -1);
  EXPECT_THAT(ParseItemsCsv("item,priority\na,high\n", "p.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "p.csv: line 2: priority \"high\" is not a finite "
                       "number"));
  EXPECT_THAT(ParseItemsCsv("item,rank\n", "p.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "p.csv: line 1: unknown column \"rank\" (expected "
                       "item or id, gold or label, priority, f0, f1, ...)"));
}

TEST(ParseAnnotatorsCsvTest, ReadsIdsAndFeatures) {
  absl::StatusOr<AnnotatorRows> rows =
      ParseAnnotatorsCsv("f1,annotator,f0\n3,w1,2\n,w2,\n", "a.csv");
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->annotators.size(), 2u);
  EXPECT_EQ(rows->feature_dim, 2);
  EXPECT_EQ(rows->annotators[0].id(), "w1");
  EXPECT_THAT(rows->annotators[0].features(), ElementsAre(2.0f, 3.0f));
  EXPECT_TRUE(rows->annotators[1].features().empty());
  EXPECT_THAT(rows->lines, ElementsAre(2, 3));
  rows = ParseAnnotatorsCsv("id\nw1\n", "a.csv");
  ASSERT_THAT(rows, IsOk());
  EXPECT_EQ(rows->annotators[0].id(), "w1");
}

TEST(ParseAnnotatorsCsvTest, RefusesBadRows) {
  EXPECT_THAT(ParseAnnotatorsCsv("annotator\nw1\nw1\n", "a.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a.csv: line 3: annotator \"w1\" already listed on "
                       "line 2"));
  EXPECT_THAT(ParseAnnotatorsCsv("annotator,gold\n", "a.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a.csv: line 1: unknown column \"gold\" (expected "
                       "annotator or id, f0, f1, ...)"));
  EXPECT_THAT(ParseAnnotatorsCsv("f0\n1\n", "a.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a.csv: line 1: the header must name an "
                       "\"annotator\" (or \"id\") column"));
  EXPECT_THAT(ParseAnnotatorsCsv("annotator,f0\n\"\",1\n", "a.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a.csv: line 2: empty annotator id"));
  EXPECT_THAT(ParseAnnotatorsCsv("", "a.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a.csv: empty file (expected a header line such as "
                       "annotator,f0,f1)"));
}

TEST(MergeGoldTest, SetsGoldOfKnownItemsAndAppendsTheOthers) {
  const LabelParser labels = BirdLabels();
  ItemRows items = *ParseItemsCsv("item,f0\na,1\nb,2\n", "f.csv", labels);
  const ItemRows gold =
      *ParseItemsCsv("item,label\nb,true\nc,false\n", "gold.csv", labels);
  absl::StatusOr<ItemRows> merged =
      MergeGold(std::move(items), gold, "gold.csv");
  ASSERT_THAT(merged, IsOk());
  ASSERT_EQ(merged->items.size(), 3u);
  EXPECT_FALSE(merged->items[0].has_gold_label());
  EXPECT_EQ(merged->items[1].gold_label(), 1);
  EXPECT_THAT(merged->items[1].features(), ElementsAre(2.0f));
  EXPECT_EQ(merged->items[2].id(), "c");
  EXPECT_EQ(merged->items[2].gold_label(), 0);
  EXPECT_TRUE(merged->items[2].features().empty());
}

TEST(MergeGoldTest, RefusesContradictingGold) {
  const LabelParser labels = BirdLabels();
  ItemRows items = *ParseItemsCsv("item,gold\na,true\n", "i.csv", labels);
  const ItemRows gold =
      *ParseItemsCsv("item,label\na,false\n", "g.csv", labels);
  EXPECT_THAT(MergeGold(std::move(items), gold, "g.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("g.csv: line 2: gold label 0 of item \"a\" "
                                 "contradicts gold label 1")));
}

TEST(FormatCsvRecordTest, QuotesOnlyFieldsThatNeedIt) {
  EXPECT_EQ(FormatCsvRecord({"a", "b c", "1.5"}), "a,b c,1.5");
  EXPECT_EQ(FormatCsvRecord({"a,b", "say \"hi\"", "x\ny", ""}),
            "\"a,b\",\"say \"\"hi\"\"\",\"x\ny\",");
}

TEST(SpreadsheetSafeCellTest, PrefixesOnlyCellsASpreadsheetWouldRunOrThatStartWithAQuote) {
  for (const std::string formula :
       {"=1+1", "+A1", "-2+3", "@SUM(A1)", "\t=1", "\r=1", "=HYPERLINK(\"http://x\")", "'quoted",
        "'=1+1", "'-1", "-", "+", "-.", "-1e", "-1e+", "--1", "-1 ", "-1.2.3"}) {
    EXPECT_EQ(SpreadsheetSafeCell(formula), "'" + formula) << formula;
  }
  for (const std::string text :
       {"", "a=1", "item-1", "1.5", " =1", "a'b", "-1", "+3", "-0.5", "-.5", "+2.5e3", "-1E-2"}) {
    EXPECT_EQ(SpreadsheetSafeCell(text), text) << text;
  }
}

TEST(FormatCsvRecordTest, RoundTripsThroughTheParser) {
  const LabelParser labels({"x,y", "z\"w"});
  const std::string text =
      "item,annotator,label\n" + FormatCsvRecord({"i,1", "a\"1", "x,y"}) + "\n";
  absl::StatusOr<AnnotationRows> rows =
      ParseAnnotationsCsv(text, "round.csv", labels);
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->annotations.size(), 1u);
  EXPECT_EQ(rows->annotations[0].item(), "i,1");
  EXPECT_EQ(rows->annotations[0].annotator(), "a\"1");
  EXPECT_EQ(rows->annotations[0].label(), 0);
}

// RFC 4180 (csv_input.h): a field holding a carriage return is quoted too,
// not only one holding a line feed.
TEST(FormatCsvRecordTest, QuotesAFieldWithALoneCarriageReturn) {
  EXPECT_EQ(FormatCsvRecord({"x\ry", "z"}), "\"x\ry\",z");
  EXPECT_EQ(FormatCsvRecord({"\r"}), "\"\r\"");
}

TEST(ParseAnnotationsCsvTest, RefusesAnEmptyAnnotatorWithItsLine) {
  const LabelParser labels = BirdLabels();
  EXPECT_THAT(ParseAnnotationsCsv("item,annotator,label\ni1,w1,true\ni2,,true\n",
                                  "l.csv", labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "l.csv: line 3: empty annotator id"));
}

// MergeGold contradicts only a DIFFERENT gold label; an agreeing one is fine,
// and a gold row without a label (empty cell) neither sets nor appends.
TEST(MergeGoldTest, AcceptsAgreeingGoldAndSkipsGoldRowsWithoutALabel) {
  const LabelParser labels = BirdLabels();
  ItemRows items = *ParseItemsCsv("item,gold\na,true\nb,\n", "i.csv", labels);
  const ItemRows gold =
      *ParseItemsCsv("item,label\na,true\nb,\nc,\n", "g.csv", labels);
  absl::StatusOr<ItemRows> merged = MergeGold(std::move(items), gold, "g.csv");
  ASSERT_THAT(merged, IsOk());
  ASSERT_EQ(merged->items.size(), 2u);
  EXPECT_EQ(merged->items[0].gold_label(), 1);
  EXPECT_FALSE(merged->items[1].has_gold_label());
}

// ItemRows::lines[i] is the CSV line of items[i] (csv_input.h): an item that
// only the gold file lists keeps its line there, so errors about it can name it.
TEST(MergeGoldTest, AppendedItemsKeepTheirGoldFileLine) {
  const LabelParser labels = BirdLabels();
  ItemRows items = *ParseItemsCsv("item\na\nb\n", "i.csv", labels);
  const ItemRows gold = *ParseItemsCsv("item,label\nx,\nb,true\nc,false\n", "g.csv", labels);
  absl::StatusOr<ItemRows> merged = MergeGold(std::move(items), gold, "g.csv");
  ASSERT_THAT(merged, IsOk());
  ASSERT_EQ(merged->items.size(), 3u);
  EXPECT_EQ(merged->items[2].id(), "c");
  // a and b from lines 2 and 3 of i.csv; c from line 4 of g.csv.
  EXPECT_THAT(merged->lines, ElementsAre(2, 3, 4));
}

// An empty class in a comma list is named by its position, counting from 1.
TEST(ParseClassListTest, NamesTheEmptyClassByItsPositionFromOne) {
  EXPECT_THAT(ParseClassList("a,,b"),
              StatusIs(absl::StatusCode::kInvalidArgument, "class 2 of \"a,,b\" is empty"));
  EXPECT_THAT(ParseClassList(",a"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("class 1 of")));
}

// A labels CSV needs all three columns (csv_input.h): a header missing any one
// of them is refused on line 1, before any row is read.
TEST(ParseAnnotationsCsvTest, RefusesAHeaderMissingAnyOneColumn) {
  const LabelParser labels = BirdLabels();
  for (const char* text :
       {"annotator,label\n", "item,label\n", "item,annotator\n", "item,annotator\ni1,w1\n"}) {
    EXPECT_THAT(ParseAnnotationsCsv(text, "l.csv", labels),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "l.csv: line 1: the header must name the columns item, "
                         "annotator, label"))
        << text;
  }
}

// An items CSV priority is "a finite number" (csv_input.h).
TEST(ParseItemsCsvTest, RefusesNonFinitePriorities) {
  const LabelParser labels = BirdLabels();
  for (const char* bad : {"nan", "inf", "-inf"}) {
    EXPECT_THAT(ParseItemsCsv(absl::StrCat("item,priority\na,", bad, "\n"),
                              "p.csv", labels),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("p.csv: line 2: priority")))
        << bad;
  }
}

}  // namespace
}  // namespace verity::client
