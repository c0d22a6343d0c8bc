#include "models/csv_dataset.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"

namespace verity::models {
namespace {

using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

// A fresh directory under TEST_TMPDIR (or /tmp) per test.
class CsvDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/csv_dataset_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (const char* f : {"classes.txt", "labels.csv", "gold.csv"}) {
      std::remove((dir_ + "/" + f).c_str());
    }
    rmdir(dir_.c_str());
  }
  void Write(const std::string& name, const std::string& contents) {
    std::FILE* f = std::fopen((dir_ + "/" + name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(contents.data(), 1, contents.size(), f);
    std::fclose(f);
  }
  std::string dir_;
};

TEST_F(CsvDatasetTest, MapsIdsDenselyInOrderOfFirstAppearance) {
  Write("classes.txt", "cat\ndog\nbird, small\n");
  Write("labels.csv",
        "item,annotator,label\n"
        "i2,w1,dog\n"
        "\"i,1\",w2,\"bird, small\"\n"
        "i2,w2,cat\n");
  Write("gold.csv", "item,label\ni2,dog\ni9,cat\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  ASSERT_THAT(ds, IsOk());
  EXPECT_THAT(ds->class_names, ElementsAre("cat", "dog", "bird, small"));
  // i9 has gold but no labels: indexed after the labelled items.
  EXPECT_THAT(ds->item_ids, ElementsAre("i2", "i,1", "i9"));
  EXPECT_THAT(ds->annotator_ids, ElementsAre("w1", "w2"));
  EXPECT_EQ(ds->item_index.at("i,1"), 1);
  EXPECT_EQ(ds->annotator_index.at("w2"), 1);
  EXPECT_THAT(ds->gold, ElementsAre(1, -1, 0));
  ASSERT_EQ(ds->annotations.size(), 3u);
  EXPECT_EQ(ds->annotations[1].item, 1);
  EXPECT_EQ(ds->annotations[1].annotator, 1);
  EXPECT_EQ(ds->annotations[1].label, 2);

  absl::StatusOr<AnnotationMatrix> m = ds->ToMatrix();
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->num_items(), 3);
  EXPECT_EQ(m->num_labels(), 3);
  EXPECT_EQ(m->LabelsOfItem(0).size(), 2u);
  EXPECT_TRUE(m->LabelsOfItem(2).empty());
}

TEST_F(CsvDatasetTest, MissingGoldMeansNoGold) {
  Write("classes.txt", "no\r\nyes\r\n");
  Write("labels.csv", "item,annotator,label\r\na,x,yes\r\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  ASSERT_THAT(ds, IsOk());
  EXPECT_THAT(ds->class_names, ElementsAre("no", "yes"));
  EXPECT_THAT(ds->gold, ElementsAre(-1));
}

TEST_F(CsvDatasetTest, MissingLabelsIsNotFound) {
  Write("classes.txt", "a\nb\n");
  EXPECT_THAT(ReadCsvDataset(dir_), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ReadCsvDataset(dir_ + "/nonexistent"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CsvDatasetTest, UnknownLabelNamesFileAndLine) {
  Write("classes.txt", "a\nb\n");
  Write("labels.csv", "item,annotator,label\nx,w,a\ny,w,c\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("labels.csv:3"));
  EXPECT_THAT(ds.status().message(), HasSubstr("\"c\""));
}

TEST_F(CsvDatasetTest, RejectsWrongHeaderFieldCountAndDuplicates) {
  Write("classes.txt", "a\nb\n");
  Write("labels.csv", "item,worker,label\n");
  EXPECT_THAT(ReadCsvDataset(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument));

  Write("labels.csv", "item,annotator,label\nx,w\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("expected 3 fields"));
  // A fourth field is as wrong as a missing one.
  Write("labels.csv", "item,annotator,label\nx,w,a,extra\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("expected 3 fields, found 4"));

  Write("labels.csv", "item,annotator,label\nx,w,a\nx,w,b\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("second label"));

  Write("labels.csv", "item,annotator,label\nx,w,a\n");
  Write("gold.csv", "item,label\nx,a\nx,b\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("gold.csv:3"));
}

// csv_dataset.h: an empty id is INVALID_ARGUMENT naming the file and line.
TEST_F(CsvDatasetTest, RejectsEmptyIdsNamingFileAndLine) {
  Write("classes.txt", "a\nb\n");
  Write("labels.csv", "item,annotator,label\nx,w,a\n,w,b\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("labels.csv:3"));
  EXPECT_THAT(ds.status().message(), HasSubstr("empty item id"));

  Write("labels.csv", "item,annotator,label\nx,,a\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("labels.csv:2"));
  EXPECT_THAT(ds.status().message(), HasSubstr("empty annotator id"));

  Write("labels.csv", "item,annotator,label\nx,w,a\n");
  Write("gold.csv", "item,label\nx,a\n\"\",b\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("gold.csv:3"));
  EXPECT_THAT(ds.status().message(), HasSubstr("empty item id"));
}

// csv_dataset.h: gold.csv is checked like labels.csv: its header must be
// item,label, every row has 2 fields, and a label must be a class name; each
// error names gold.csv and the line.
TEST_F(CsvDatasetTest, RejectsMalformedGoldNamingFileAndLine) {
  Write("classes.txt", "a\nb\n");
  Write("labels.csv", "item,annotator,label\nx,w,a\n");

  Write("gold.csv", "item,class\nx,a\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("gold.csv:1"));

  Write("gold.csv", "item,label\nx,a,extra\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("gold.csv:2"));
  EXPECT_THAT(ds.status().message(), HasSubstr("expected 2 fields"));

  Write("gold.csv", "item,label\nx,c\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("gold.csv:2"));
  EXPECT_THAT(ds.status().message(), HasSubstr("\"c\""));
}

// csv_dataset.h: labels.csv must start with the header item,annotator,label;
// an empty file (or one of blank lines only) has none.
TEST_F(CsvDatasetTest, RejectsLabelsWithoutAHeader) {
  Write("classes.txt", "a\nb\n");
  Write("labels.csv", "");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("labels.csv"));
  Write("labels.csv", "\n\r\n");
  EXPECT_THAT(ReadCsvDataset(dir_), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CsvDatasetTest, RejectsBadClassLists) {
  Write("labels.csv", "item,annotator,label\n");
  Write("classes.txt", "only\n");
  EXPECT_THAT(ReadCsvDataset(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Write("classes.txt", "a\na\n");
  EXPECT_THAT(ReadCsvDataset(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Write("classes.txt", "a\n\nb\n");
  EXPECT_THAT(ReadCsvDataset(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// csv_dataset.h: class-list errors name classes.txt and the 1-based line
// (class index + 1).
TEST_F(CsvDatasetTest, ClassListErrorsNameTheLine) {
  Write("labels.csv", "item,annotator,label\n");
  Write("classes.txt", "a\nb\nc\nb\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("classes.txt:4"));
  EXPECT_THAT(ds.status().message(), HasSubstr("duplicate class name \"b\""));
  Write("classes.txt", "a\r\nb\r\n\r\nc\r\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds.status().message(), HasSubstr("classes.txt:3"));
  EXPECT_THAT(ds.status().message(), HasSubstr("empty class name"));
}

// csv_dataset.h: only a *missing* gold.csv means no gold. One that exists but cannot be read
// (here a directory) is an error naming it, not a dataset silently without gold.
TEST_F(CsvDatasetTest, AnUnreadableGoldFileIsAnErrorNotNoGold) {
  Write("classes.txt", "a\nb\n");
  Write("labels.csv", "item,annotator,label\nx,w,a\n");
  ASSERT_EQ(mkdir((dir_ + "/gold.csv").c_str(), 0755), 0);
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  EXPECT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), HasSubstr("gold.csv"));
}

// csv_dataset.h: the whole file is read, however long: a labels.csv of 6000 rows (over 64 KiB,
// more than one read buffer) gives 6000 annotations over 3000 items and 2 annotators, the last
// row's included.
TEST_F(CsvDatasetTest, ReadsLabelFilesLongerThanOneReadBuffer) {
  Write("classes.txt", "a\nb\n");
  std::string labels = "item,annotator,label\n";
  for (int i = 0; i < 3000; ++i) {
    const std::string item = "item-with-a-longish-id-" + std::to_string(i);
    labels += item + ",w1,a\n" + item + ",w2,b\n";
  }
  ASSERT_GT(labels.size(), 65536u);
  Write("labels.csv", labels);
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  ASSERT_THAT(ds, IsOk());
  EXPECT_EQ(ds->annotations.size(), 6000u);
  EXPECT_EQ(ds->num_items(), 3000);
  EXPECT_EQ(ds->num_annotators(), 2);
  EXPECT_EQ(ds->item_ids.back(), "item-with-a-longish-id-2999");
  EXPECT_EQ(ds->annotations.back().label, 1);
}

// csv_dataset.h: malformed CSV is INVALID_ARGUMENT "naming the file and line", in labels.csv
// (a quote inside an unquoted field on line 3) as in gold.csv (an unterminated quoted field
// starting on line 2).
TEST_F(CsvDatasetTest, MalformedCsvNamesTheFileAndLine) {
  Write("classes.txt", "a\nb\n");
  Write("labels.csv", "item,annotator,label\nx,w,a\ny,w\"2,b\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("labels.csv"));
  EXPECT_THAT(std::string(ds.status().message()), ContainsRegex("(line |:)3[^0-9]"));

  Write("labels.csv", "item,annotator,label\nx,w,a\n");
  Write("gold.csv", "item,label\n\"x,a\n");
  ds = ReadCsvDataset(dir_);
  EXPECT_THAT(ds, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("gold.csv"));
  EXPECT_THAT(std::string(ds.status().message()), ContainsRegex("(line |:)2[^0-9]"));
}

// csv_dataset.h: "Every file is parsed with the RFC 4180 parser of csv.h", which ignores a
// UTF-8 byte-order mark at the start (csv.h). A classes.txt saved with one (as Windows editors
// do) therefore names the classes "cat" and "dog", and a label "cat" is class 0.
TEST_F(CsvDatasetTest, AByteOrderMarkBeforeTheFirstClassNameIsIgnored) {
  Write("classes.txt", "\xEF\xBB\xBF" "cat\ndog\n");
  Write("labels.csv", "\xEF\xBB\xBFitem,annotator,label\nx,w,cat\n");
  absl::StatusOr<CsvDataset> ds = ReadCsvDataset(dir_);
  ASSERT_THAT(ds, IsOk()) << ds.status();
  EXPECT_THAT(ds->class_names, ElementsAre("cat", "dog"));
  ASSERT_EQ(ds->annotations.size(), 1u);
  EXPECT_EQ(ds->annotations[0].label, 0);
}

}  // namespace
}  // namespace verity::models
