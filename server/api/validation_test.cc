#include "server/api/validation.h"

#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "storage/client_time_range.h"

namespace verity::server {
namespace {

using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

v1::Project ValidProject() {
  v1::Project p;
  p.set_name("birds-1");
  p.add_classes("false");
  p.add_classes("true");
  return p;
}

TEST(ValidateIdTest, AcceptsDigitsAndTheLongestId) {
  EXPECT_THAT(ValidateId("item", "11573"), IsOk());
  EXPECT_THAT(ValidateId("item", std::string(ApiLimits::kMaxIdBytes, 'x')), IsOk());
}

TEST(ValidateIdTest, RejectsEmptyOverlongAndControlBytesNamingTheField) {
  EXPECT_THAT(ValidateId("annotations[2].item", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("annotations[2].item")));
  EXPECT_THAT(ValidateId("item", std::string(ApiLimits::kMaxIdBytes + 1, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("257 bytes")));
  EXPECT_THAT(ValidateId("item", "a\x01"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateId("item", std::string("a\0b", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// validation.h, ParsePageToken: tokens are issued as decimal digits in [0, max]; empty is
// the first page; anything else is INVALID_ARGUMENT "page_token: not a token this server
// issued".
TEST(ParsePageTokenTest, TakesDigitsUpToMaxAndRefusesEverythingElse) {
  EXPECT_THAT(ParsePageToken("", 10), IsOkAndHolds(0));
  EXPECT_THAT(ParsePageToken("0", 10), IsOkAndHolds(0));
  EXPECT_THAT(ParsePageToken("007", 10), IsOkAndHolds(7));
  EXPECT_THAT(ParsePageToken("10", 10), IsOkAndHolds(10));
  EXPECT_THAT(ParsePageToken("2147483647", 2147483647), IsOkAndHolds(2147483647));
  EXPECT_THAT(ParsePageToken("9223372036854775807", std::numeric_limits<int64_t>::max()),
              IsOkAndHolds(std::numeric_limits<int64_t>::max()));
  for (const char* refused : {"11", "2147483648", "99999999999999999999", "+1", "-1", " 1", "1 ",
                              "1x", "x", "0x1", "1.0", "\xef\xbc\x91"}) {
    const int64_t max = std::string_view(refused) == "2147483648" ? 2147483647 : 10;
    EXPECT_THAT(
        ParsePageToken(refused, max),
        StatusIs(absl::StatusCode::kInvalidArgument, "page_token: not a token this server issued"))
        << refused;
  }
  EXPECT_THAT(ParsePageToken("9223372036854775808", std::numeric_limits<int64_t>::max()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ValidateNewProjectTest, AcceptsAMinimalProject) {
  EXPECT_THAT(ValidateNewProject(ValidProject()), IsOk());
}

TEST(ValidateNewProjectTest, RejectsBadNamesClassesAndDimensions) {
  v1::Project p = ValidProject();
  p.set_name("has space");
  EXPECT_THAT(ValidateNewProject(p), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project")));

  p = ValidProject();
  p.clear_classes();
  p.add_classes("only");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project.classes")));

  p = ValidProject();
  p.add_classes("true");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate class")));

  p = ValidProject();
  p.set_item_feature_dim(-1);
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("item_feature_dim")));

  // The field is named by its path in CreateProjectRequest: project.settings...
  p = ValidProject();
  p.mutable_settings()->mutable_model()->set_tolerance(std::nan(""));
  EXPECT_THAT(ValidateNewProject(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("project.settings.model.tolerance")));

  p = ValidProject();
  p.mutable_settings()->mutable_model()->set_calibration("platt");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("calibration")));
  for (const char* calibration : {"", "auto", "none"}) {
    p = ValidProject();
    p.mutable_settings()->mutable_model()->set_calibration(calibration);
    EXPECT_TRUE(ValidateNewProject(p).ok()) << calibration;
  }
}

TEST(ValidateFeaturesTest, RejectsWrongLengthAndNonFiniteValues) {
  const float ok[] = {1.0f, 2.0f};
  EXPECT_THAT(ValidateFeatures("items[0].features", ok, 2), IsOk());
  EXPECT_THAT(ValidateFeatures("items[0].features", {}, 2), IsOk());
  EXPECT_THAT(ValidateFeatures("items[0].features", ok, 3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dimension is 3")));
  const float bad[] = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_THAT(ValidateFeatures("items[0].features", bad, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("value 1 is not finite")));
  const float nan[] = {std::nanf(""), 0.0f};
  EXPECT_THAT(ValidateFeatures("items[0].features", nan, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("value 0")));
}

TEST(ValidateAnnotationTest, ChecksIdsAndLabelRange) {
  v1::Annotation a;
  a.set_item("i1");
  a.set_annotator("w1");
  a.set_label(1);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2), IsOk());
  a.set_label(2);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotations[0].label: 2 out of range [0, 2)")));
  a.set_label(-1);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2), StatusIs(absl::StatusCode::kInvalidArgument));
  a.set_label(0);
  a.set_annotator("");
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("annotations[0].annotator")));
}

TEST(ValidateAnnotationTest, ChecksClientTimeRange) {
  v1::Annotation a;
  a.set_item("i1");
  a.set_annotator("w1");
  a.set_label(0);
  a.mutable_client_time()->set_seconds(ApiLimits::kMaxTimestampSeconds);
  a.mutable_client_time()->set_nanos(999999000);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2), IsOk());
  a.mutable_client_time()->set_seconds(ApiLimits::kMinTimestampSeconds);
  a.mutable_client_time()->set_nanos(0);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2), IsOk());
  // Beyond PostgreSQL's range these used to fail the whole group commit.
  a.mutable_client_time()->set_seconds(ApiLimits::kMaxTimestampSeconds + 1);
  EXPECT_THAT(ValidateAnnotation("annotations[4]", a, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotations[4].client_time: seconds 253402300800")));
  a.mutable_client_time()->set_seconds(std::numeric_limits<int64_t>::min());
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client_time")));
  a.mutable_client_time()->set_seconds(0);
  a.mutable_client_time()->set_nanos(-1);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client_time: nanos -1")));
  a.mutable_client_time()->set_nanos(1000000000);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client_time: nanos")));
}

// The store keeps microseconds and refuses instants after 9999-12-31T23:59:59.999999; a
// client_time it refused used to pass validation and fail the whole group commit.
TEST(ValidateAnnotationTest, ClientTimeAtTheEndOfTheRangeIsAcceptedIffTheStoreAcceptsIt) {
  v1::Annotation a;
  a.set_item("i1");
  a.set_annotator("w1");
  a.set_label(0);
  for (int32_t nanos : {999999000, 999999001, 999999999}) {
    a.mutable_client_time()->set_seconds(ApiLimits::kMaxTimestampSeconds);
    a.mutable_client_time()->set_nanos(nanos);
    const bool stored = storage::ClientTimeInStoreRange(
        absl::FromUnixSeconds(ApiLimits::kMaxTimestampSeconds) + absl::Nanoseconds(nanos));
    EXPECT_EQ(stored, nanos == 999999000) << nanos;
    if (stored) {
      EXPECT_THAT(ValidateAnnotation("annotations[2]", a, 2), IsOk()) << nanos;
    } else {
      EXPECT_THAT(ValidateAnnotation("annotations[2]", a, 2),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("annotations[2].client_time: nanos")))
          << nanos;
    }
  }
  // The other end: the first instant of year 1 is stored, nothing before it validates.
  a.mutable_client_time()->set_seconds(ApiLimits::kMinTimestampSeconds);
  a.mutable_client_time()->set_nanos(0);
  EXPECT_TRUE(storage::ClientTimeInStoreRange(
      absl::FromUnixSeconds(ApiLimits::kMinTimestampSeconds)));
  EXPECT_THAT(ValidateAnnotation("annotations[2]", a, 2), IsOk());
}

TEST(ValidateSettingsTest, NamesEachAssignmentField) {
  v1::ProjectSettings s;
  s.mutable_assignment()->set_min_labels_per_item(-1);
  EXPECT_THAT(ValidateSettings(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("settings.assignment.min_labels_per_item")));
  s = v1::ProjectSettings();
  s.mutable_assignment()->set_max_labels_per_item(-1);
  EXPECT_THAT(ValidateSettings(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("settings.assignment.max_labels_per_item")));
  s = v1::ProjectSettings();
  s.mutable_assignment()->set_policy(static_cast<v1::AssignmentPolicy>(99));
  EXPECT_THAT(ValidateSettings(s),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("settings.assignment.policy: unknown policy 99")));
  s = v1::ProjectSettings();
  s.mutable_assignment()->set_gold_items_for_new_annotators(-2);
  EXPECT_THAT(ValidateSettings(s),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("settings.assignment.gold_items_for_new_annotators")));
  s = v1::ProjectSettings();
  s.mutable_assignment()->set_policy(v1::ASSIGNMENT_POLICY_RANDOM);
  s.mutable_assignment()->set_gold_items_for_new_annotators(3);
  EXPECT_THAT(ValidateSettings(s), IsOk());
}

// Inputs on which fuzz/request_validation_fuzzer found validation accepting what it must not
// (byte-exact copies in fuzz/regressions/, replayed by //fuzz:corpus_replay_test).
TEST(FuzzRegressionTest, UpdateSettingsWithUnknownPolicy66IsRefused) {
  v1::ProjectSettings s;
  s.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  s.mutable_model()->set_confusion_smoothing(0.01);
  s.mutable_model()->set_max_iterations(100);
  s.mutable_model()->set_tolerance(1e-6);
  s.mutable_assignment()->set_min_labels_per_item(3);
  s.mutable_assignment()->set_max_labels_per_item(5);
  s.mutable_assignment()->set_confidence_target(0.95);
  s.mutable_assignment()->set_policy(static_cast<v1::AssignmentPolicy>(66));
  s.mutable_assignment()->set_gold_items_for_new_annotators(2);
  EXPECT_THAT(ValidateSettings(s),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("settings.assignment.policy: unknown policy 66")));
}

TEST(FuzzRegressionTest, ClientTimeBeforePostgresRangeIsRefused) {
  v1::Annotation a;
  a.set_item("item-0");
  a.set_annotator("worker-7");
  a.mutable_client_time()->set_seconds(-1210245642832596736);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotations[0].client_time: seconds -1210245642832596736")));
}

TEST(ValidateBatchShapeTest, RejectsOversizedBatch) {
  v1::AnnotationBatch batch;
  for (int i = 0; i < ApiLimits::kMaxBatchAnnotations; ++i) batch.add_annotations();
  EXPECT_THAT(ValidateBatchShape(batch), IsOk());
  batch.add_annotations();
  EXPECT_THAT(ValidateBatchShape(batch),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the limit is 10000")));
}

// Promise (validation.h, projects.proto Project.name): project names are 1-128 characters of
// [A-Za-z0-9._-]. Every character class, '.' and '_' included, is accepted, and so is a name of
// exactly 128 bytes; 129 and a character outside the set are refused.
TEST(ValidateProjectNameTest, AcceptsTheWholeCharsetAndExactly128Bytes) {
  EXPECT_THAT(ValidateProjectName("a.b_C-9"), IsOk());
  EXPECT_THAT(ValidateProjectName("._-"), IsOk());
  EXPECT_THAT(ValidateProjectName("AZaz09"), IsOk());
  EXPECT_THAT(ValidateProjectName(std::string(128, 'n')), IsOk());
  EXPECT_THAT(ValidateProjectName(std::string(129, 'n')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("128")));
  EXPECT_THAT(ValidateProjectName("a/b"), StatusIs(absl::StatusCode::kInvalidArgument));
  v1::Project p = ValidProject();
  p.set_name("a.b_C-9");
  EXPECT_THAT(ValidateNewProject(p), IsOk());
  p.set_name(std::string(128, 'n'));
  EXPECT_THAT(ValidateNewProject(p), IsOk());
}

// Promise (common.proto TRUTH_METHOD_KOS, validation.h ValidateMethodForClasses): kos serves
// projects of 2 classes only; CreateProject refuses it for others. A 2-class kos project is
// accepted; 3 classes are refused naming settings.model.method.
TEST(ValidateNewProjectTest, KosIsAcceptedWithTwoClassesOnly) {
  v1::Project p = ValidProject();
  p.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_KOS);
  EXPECT_THAT(ValidateNewProject(p), IsOk());
  EXPECT_THAT(ValidateMethodForClasses(p.settings(), 2), IsOk());
  p.add_classes("maybe");
  EXPECT_THAT(ValidateNewProject(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("settings.model.method")));
}

// Promise (validation.h: INVALID_ARGUMENT naming the offending field; projects.proto
// ProjectLimits: sizes, 0 = the server's default): a negative limit is refused, naming it.
TEST(ValidateSettingsTest, NegativeLimitsAreRefusedNamingTheField) {
  struct Case {
    const char* field;
    void (*set)(v1::ProjectLimits&);
  };
  const Case cases[] = {
      {"settings.limits.max_items", [](v1::ProjectLimits& l) { l.set_max_items(-1); }},
      {"settings.limits.max_annotators", [](v1::ProjectLimits& l) { l.set_max_annotators(-1); }},
      {"settings.limits.max_labels", [](v1::ProjectLimits& l) { l.set_max_labels(-1); }},
      {"settings.limits.max_confusion_cells",
       [](v1::ProjectLimits& l) { l.set_max_confusion_cells(-1); }},
      {"settings.limits.max_feature_values",
       [](v1::ProjectLimits& l) { l.set_max_feature_values(-1); }},
      {"settings.limits.max_revisions", [](v1::ProjectLimits& l) { l.set_max_revisions(-1); }},
  };
  for (const Case& c : cases) {
    v1::ProjectSettings s;
    c.set(*s.mutable_limits());
    EXPECT_THAT(ValidateSettings(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field)))
        << c.field;
  }
  v1::ProjectSettings zero_and_positive;
  zero_and_positive.mutable_limits()->set_max_items(1);
  zero_and_positive.mutable_limits()->set_max_annotators(0);
  zero_and_positive.mutable_limits()->set_max_labels(5);
  zero_and_positive.mutable_limits()->set_max_confusion_cells(0);
  zero_and_positive.mutable_limits()->set_max_revisions(7);
  EXPECT_THAT(ValidateSettings(zero_and_positive), IsOk());
}

// Promise (projects.proto AssignmentSettings; validation.cc's range "[0, 1]" and
// "max_labels_per_item must be >= min_labels_per_item"): confidence_target is a posterior
// confidence, so 1.0 (resolve only certain items) is in range and 1.0 + epsilon is not; a cap
// equal to the minimum (exactly n labels per item) is consistent, one below is not.
TEST(ValidateSettingsTest, ConfidenceTargetOneAndMinEqualToMaxAreAccepted) {
  v1::ProjectSettings s;
  s.mutable_assignment()->set_confidence_target(1.0);
  EXPECT_THAT(ValidateSettings(s), IsOk());
  s.mutable_assignment()->set_confidence_target(std::nextafter(1.0, 2.0));
  EXPECT_THAT(ValidateSettings(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("settings.assignment.confidence_target")));
  s = v1::ProjectSettings();
  s.mutable_assignment()->set_min_labels_per_item(3);
  s.mutable_assignment()->set_max_labels_per_item(3);
  EXPECT_THAT(ValidateSettings(s), IsOk());
  s.mutable_assignment()->set_max_labels_per_item(2);
  EXPECT_THAT(ValidateSettings(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("settings.assignment.max_labels_per_item")));
}

// Promise (projects.proto Project.classes: "each 1-128 bytes with no control character (no
// byte below 0x20, no 0x7f ...)"; docs/SECURITY.md: class names 128 bytes): a space and UTF-8
// are accepted, as is a name of exactly 128 bytes (here 64 two-byte UTF-8 characters); 129
// bytes are refused. The DEL byte is refused as a control character.
TEST(ValidateNewProjectTest, ClassNamesAreBytesWithSpacesAndUtf8) {
  v1::Project p = ValidProject();
  p.clear_classes();
  p.add_classes("not sure");
  p.add_classes("caf\xc3\xa9");
  EXPECT_THAT(ValidateNewProject(p), IsOk());
  std::string long_name;
  for (int i = 0; i < 64; ++i) long_name += "\xc3\xa9";
  ASSERT_EQ(long_name.size(), 128u);
  p.add_classes(long_name);
  EXPECT_THAT(ValidateNewProject(p), IsOk());
  p.set_classes(2, long_name + "x");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project.classes[2]")));
  p.set_classes(2, "a\x7f");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project.classes[2]")));
}

// Promise (validation.h, projects.proto Item): ids are 1-256 bytes of UTF-8 text without control
// characters (no byte below 0x20, no 0x7f); spaces belong to the id. The printable ASCII ends
// (0x20 and 0x7e), spaces anywhere and UTF-8 of every length are accepted; the control
// characters on both sides of the printable range (0x1f, 0x7f) and any C0 control are refused,
// naming the field, the byte and its position.
TEST(ValidateIdTest, AcceptsUtf8TextWithSpacesAndRefusesControlCharacters) {
  for (const std::string id : {"!~", " ", "boy lad", " leading", "trailing ", "caf\xc3\xa9",
                               "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x99\x82"}) {
    EXPECT_THAT(ValidateId("item", id), IsOk()) << id;
  }
  EXPECT_THAT(ValidateId("item", "\x7f"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("item: contains byte 0x7f (a control character) at offset 0")));
  EXPECT_THAT(ValidateId("annotator", "ab\x1f"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotator: contains byte 0x1f (a control character) at offset 2")));
  for (const std::string id : {std::string("a\tb"), std::string("a\nb"), std::string("a\rb"),
                               std::string("a\0b", 3)}) {
    EXPECT_THAT(ValidateId("item", id), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("control character")));
  }
}

// Promise (validation.h): ids are well-formed UTF-8 (RFC 3629, section 4: overlong forms,
// surrogates and code points past U+10FFFF are not UTF-8). The first and last code point of
// every sequence length and both ends of the surrogate gap are accepted; a stray continuation
// byte, a truncated sequence, a bad continuation, overlong forms of '/', a surrogate, U+110000
// and the bytes 0xc0, 0xc1, 0xf5-0xff are refused, naming the field and the byte position.
TEST(ValidateIdTest, AcceptsWellFormedUtf8OnlyNamingTheFirstBadByte) {
  for (const std::string id :
       {"\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
        "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_THAT(ValidateId("item", id), IsOk()) << absl::CHexEscape(id);
  }
  for (const std::string id :
       {"\x80", "\xbf", "\xc3", "\xe6\x97", "\xf0\x9f\x99", "\xc3(", "\xe6\x97(",
        "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xe0\x9f\xbf", "\xf0\x80\x80\xaf",
        "\xf0\x8f\xbf\xbf", "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80",
        "\xf5\x80\x80\x80", "\xff"}) {
    EXPECT_THAT(ValidateId("item", id), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("item: is not valid UTF-8 at offset 0")))
        << absl::CHexEscape(id);
  }
  EXPECT_THAT(ValidateId("items[3]", "ok caf\xc3\xa9 \xe9t\xe9"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("items[3]: is not valid UTF-8 at offset 9 (byte 0xe9)")));
}

// Promise (projects.proto Project: item_feature_dim and annotator_feature_dim "At most 65536";
// validation.h: INVALID_ARGUMENT naming the offending field): 65536 is accepted for both, 65537
// and -1 are refused naming the field at fault.
TEST(ValidateNewProjectTest, FeatureDimensionsAreAtMost65536EachNamingItsField) {
  v1::Project p = ValidProject();
  p.set_item_feature_dim(65536);
  p.set_annotator_feature_dim(65536);
  EXPECT_THAT(ValidateNewProject(p), IsOk());
  for (int32_t bad : {65537, -1}) {
    p = ValidProject();
    p.set_item_feature_dim(bad);
    EXPECT_THAT(ValidateNewProject(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("project.item_feature_dim")))
        << bad;
    p = ValidProject();
    p.set_annotator_feature_dim(bad);
    EXPECT_THAT(ValidateNewProject(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("project.annotator_feature_dim")))
        << bad;
  }
}

// Promise (projects.proto Project.classes: "2 to 256 of them, unique, each 1-128 bytes"):
// 256 classes are accepted, 257 refused naming project.classes; an empty class name is refused
// naming its index.
TEST(ValidateNewProjectTest, TwoHundredFiftySixClassesAtMostAndNoneEmpty) {
  v1::Project p = ValidProject();
  p.clear_classes();
  for (int k = 0; k < 256; ++k) p.add_classes(absl::StrCat("c", k));
  EXPECT_THAT(ValidateNewProject(p), IsOk());
  p.add_classes("c256");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project.classes")));
  p = ValidProject();
  p.add_classes("");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project.classes[2]")));
}

// Promise (validation.h ValidateTimestamp: "nanos in [0, 1e9)"; google.protobuf.Timestamp):
// the last nanosecond of an ordinary second is valid.
TEST(ValidateAnnotationTest, TheLastNanosecondOfAnOrdinarySecondIsValid) {
  v1::Annotation a;
  a.set_item("i1");
  a.set_annotator("w1");
  a.set_label(0);
  a.mutable_client_time()->set_seconds(1700000000);
  a.mutable_client_time()->set_nanos(999999999);
  EXPECT_THAT(ValidateAnnotation("annotations[0]", a, 2), IsOk());
  EXPECT_THAT(ValidateTimestamp("t", a.client_time()), IsOk());
}

// Promise (projects.proto AssignmentSettings.max_labels_per_item: "Default 0 = unlimited"): an
// unlimited cap is consistent with any minimum.
TEST(ValidateSettingsTest, MaxLabelsPerItemZeroIsUnlimitedWhateverTheMinimum) {
  v1::ProjectSettings s;
  s.mutable_assignment()->set_min_labels_per_item(5);
  s.mutable_assignment()->set_max_labels_per_item(0);
  EXPECT_THAT(ValidateSettings(s), IsOk());
}

// Promise (validation.h: "every bound the v1 API documents", INVALID_ARGUMENT naming the field;
// proto3 enums are open, so an unknown TruthMethod number parses): a method that is not one of
// common.proto's TruthMethod values is refused, as an unknown assignment policy is.
TEST(ValidateSettingsTest, AnUnknownTruthMethodIsRefused) {
  v1::ProjectSettings s;
  s.mutable_model()->set_method(static_cast<v1::TruthMethod>(9999));
  EXPECT_THAT(ValidateSettings(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("settings.model.method")));
}

// Promise (projects.proto: smoothing values are Dirichlet pseudo-counts, counts of labels and
// seconds of lease are amounts, and a confidence_target is a posterior confidence, so none can
// be negative; "0 = default" for each): a negative value is refused naming its field.
TEST(ValidateSettingsTest, NegativeCountsDurationsAndConfidencesAreRefusedNamingTheField) {
  struct Case {
    const char* field;
    void (*set)(v1::ProjectSettings&);
  };
  const Case cases[] = {
      {"settings.model.confusion_smoothing",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_confusion_smoothing(-0.5); }},
      {"settings.model.prior_smoothing",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_prior_smoothing(-0.5); }},
      {"settings.model.refit_min_new_labels",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_refit_min_new_labels(-1); }},
      {"settings.model.refit_new_label_fraction",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_refit_new_label_fraction(-0.1); }},
      {"settings.model.refit_new_label_fraction",
       [](v1::ProjectSettings& s) {
         s.mutable_model()->set_refit_new_label_fraction(std::numeric_limits<double>::infinity());
       }},
      {"settings.model.max_iterations",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_max_iterations(-1); }},
      {"settings.assignment.lease_seconds",
       [](v1::ProjectSettings& s) { s.mutable_assignment()->set_lease_seconds(-1); }},
      {"settings.assignment.confidence_target",
       [](v1::ProjectSettings& s) { s.mutable_assignment()->set_confidence_target(-0.01); }},
  };
  for (const Case& c : cases) {
    v1::ProjectSettings s;
    c.set(s);
    EXPECT_THAT(ValidateSettings(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field)))
        << c.field;
  }
}

// The bounds projects.proto states, each at its edge: the last value inside is accepted and the
// first outside refused naming the field (max_iterations at most 100,000; tolerance in [0, 1);
// the smoothings at most 1,000,000; counts >= 0; client_time from 0001-01-01T00:00:00Z).
TEST(ValidateSettingsTest, EachStatedBoundHoldsAtItsEdge) {
  struct Case {
    const char* field;
    void (*inside)(v1::ProjectSettings&);
    void (*outside)(v1::ProjectSettings&);
  };
  const Case cases[] = {
      {"settings.model.max_iterations",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_max_iterations(100000); },
       [](v1::ProjectSettings& s) { s.mutable_model()->set_max_iterations(100001); }},
      {"settings.model.tolerance",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_tolerance(0.999); },
       [](v1::ProjectSettings& s) { s.mutable_model()->set_tolerance(1.0); }},
      {"settings.model.prior_smoothing",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_prior_smoothing(1e6); },
       [](v1::ProjectSettings& s) { s.mutable_model()->set_prior_smoothing(1.000001e6); }},
      // Finite but huge: K x 1e308 overflowed and every posterior of the project was NaN.
      {"settings.model.prior_smoothing",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_prior_smoothing(1e6); },
       [](v1::ProjectSettings& s) { s.mutable_model()->set_prior_smoothing(1e308); }},
      {"settings.model.prior_smoothing",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_prior_smoothing(1e6); },
       [](v1::ProjectSettings& s) {
         s.mutable_model()->set_prior_smoothing(std::numeric_limits<double>::infinity());
       }},
      {"settings.model.prior_smoothing",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_prior_smoothing(0.0); },
       [](v1::ProjectSettings& s) { s.mutable_model()->set_prior_smoothing(std::nan("")); }},
      {"settings.model.confusion_smoothing",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_confusion_smoothing(1e6); },
       [](v1::ProjectSettings& s) { s.mutable_model()->set_confusion_smoothing(1e308); }},
      {"settings.model.confusion_smoothing",
       [](v1::ProjectSettings& s) { s.mutable_model()->set_confusion_smoothing(1e6); },
       [](v1::ProjectSettings& s) {
         s.mutable_model()->set_confusion_smoothing(std::numeric_limits<double>::infinity());
       }},
      {"settings.assignment.gold_items_for_new_annotators",
       [](v1::ProjectSettings& s) { s.mutable_assignment()->set_gold_items_for_new_annotators(0); },
       [](v1::ProjectSettings& s) {
         s.mutable_assignment()->set_gold_items_for_new_annotators(-1);
       }},
      {"settings.assignment.lease_seconds",
       [](v1::ProjectSettings& s) { s.mutable_assignment()->set_lease_seconds(0); },
       [](v1::ProjectSettings& s) { s.mutable_assignment()->set_lease_seconds(-1); }},
  };
  for (const Case& c : cases) {
    v1::ProjectSettings inside;
    c.inside(inside);
    EXPECT_THAT(ValidateSettings(inside), IsOk()) << c.field;
    v1::ProjectSettings outside;
    c.outside(outside);
    EXPECT_THAT(ValidateSettings(outside),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field)))
        << c.field;
  }
}

// 0001-01-01T00:00:00Z is -62135596800 s from the Unix epoch; the second before it is refused.
TEST(ValidateAnnotationTest, TheFirstSecondOfYearOneIsTheEarliestClientTime) {
  v1::Annotation a;
  a.set_item("i1");
  a.set_annotator("w1");
  a.set_label(1);
  a.mutable_client_time()->set_seconds(-62135596800);
  EXPECT_THAT(ValidateAnnotation("annotations[2]", a, 2), IsOk());
  a.mutable_client_time()->set_seconds(-62135596801);
  a.mutable_client_time()->set_nanos(999999999);
  EXPECT_THAT(ValidateAnnotation("annotations[2]", a, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("annotations[2].client_time: seconds -62135596801")));
}

// Promise (validation.h, projects.proto Project.name: "1-128 characters"): a name of 0
// characters is refused naming the project, by ValidateProjectName and by CreateProject's
// ValidateNewProject alike.
TEST(ValidateProjectNameTest, AnEmptyNameIsRefused) {
  EXPECT_THAT(ValidateProjectName(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project")));
  v1::Project p = ValidProject();
  p.set_name("");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project")));
}

// Promise (projects.proto ModelSettings.tolerance: "in [0, 1)"): the lower end is closed, so 0
// (the default) is accepted and anything below it, however small, is refused naming the field.
TEST(ValidateSettingsTest, ANegativeToleranceIsRefused) {
  v1::ProjectSettings s;
  s.mutable_model()->set_tolerance(0.0);
  EXPECT_THAT(ValidateSettings(s), IsOk());
  for (double bad : {-1e-9, -0.5, -std::numeric_limits<double>::infinity()}) {
    s.mutable_model()->set_tolerance(bad);
    EXPECT_THAT(ValidateSettings(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("settings.model.tolerance")))
        << bad;
  }
}

// Promise (validation.h ValidateAnnotation and ValidateId: item ids are 1-256 bytes of UTF-8
// text without control characters, and the message names the offending field): an annotation's
// item is checked as its annotator is, named "<field>.item".
TEST(ValidateAnnotationTest, ChecksTheItemIdNamingTheField) {
  v1::Annotation a;
  a.set_item("i1");
  a.set_annotator("w1");
  a.set_label(0);
  EXPECT_THAT(ValidateAnnotation("annotations[3]", a, 2), IsOk());
  for (const std::string& bad :
       {std::string(), std::string("a\tb"), std::string("\xc3"),
        std::string(ApiLimits::kMaxIdBytes + 1, 'x')}) {
    a.set_item(bad);
    EXPECT_THAT(ValidateAnnotation("annotations[3]", a, 2),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("annotations[3].item")))
        << "item of " << bad.size() << " bytes";
  }
}

// Promise (validation.h ParsePageToken: "decimal digits only"): the bytes either side of the
// digit range, '/' (0x2f) and ':' (0x3a), are not digits, alone or after one.
TEST(ParsePageTokenTest, TheBytesNextToTheDigitRangeAreRefused) {
  for (const char* refused : {"/", ":", "1/", "1:", "/1", ":0"}) {
    EXPECT_THAT(
        ParsePageToken(refused, 100),
        StatusIs(absl::StatusCode::kInvalidArgument, "page_token: not a token this server issued"))
        << refused;
  }
  EXPECT_THAT(ParsePageToken("19", 100), IsOkAndHolds(19));
}

// Promise (projects.proto Project.classes: "no byte below 0x20, no 0x7f; INVALID_ARGUMENT
// naming classes[i]"): a tab, a newline, 0x01 and 0x1f are control characters wherever they
// sit in the name; the message names the index of the class at fault.
TEST(ValidateNewProjectTest, ControlCharactersBelowSpaceAreRefusedNamingTheClass) {
  for (const std::string& bad : {std::string("a\tb"), std::string("a\nb"), std::string("\x01"),
                                 std::string("x\x1f"), std::string("a\0b", 3)}) {
    v1::Project p = ValidProject();
    p.add_classes(bad);
    EXPECT_THAT(ValidateNewProject(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("project.classes[2]")))
        << "class of " << bad.size() << " bytes";
  }
}

// Promise (validation.h: the message names the offending field; projects.proto Project.classes
// "unique"): of two equal class names the second is at fault, and the message names its index.
TEST(ValidateNewProjectTest, ADuplicateClassIsNamedByItsIndex) {
  v1::Project p = ValidProject();
  p.add_classes("maybe");
  p.add_classes("false");
  EXPECT_THAT(ValidateNewProject(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("project.classes[3]: duplicate class \"false\"")));
}

// Promise (validation.h: INVALID_ARGUMENT naming the offending field, under project. in a
// CreateProjectRequest): a bad calibration is named by its whole path.
TEST(ValidateNewProjectTest, ABadCalibrationIsNamedByItsPath) {
  v1::Project p = ValidProject();
  p.mutable_settings()->mutable_model()->set_calibration("platt");
  EXPECT_THAT(ValidateNewProject(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("project.settings.model.calibration")));
  v1::ProjectSettings s;
  s.mutable_model()->set_calibration("AUTO");
  EXPECT_THAT(ValidateSettings(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("settings.model.calibration")));
}

// Promise (projects.proto AssignmentSettings.confidence_target: a posterior confidence, which
// validation keeps in [0, 1]): NaN is no confidence and is refused naming the field, as is
// infinity.
TEST(ValidateSettingsTest, ANanOrInfiniteConfidenceTargetIsRefused) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    v1::ProjectSettings s;
    s.mutable_assignment()->set_confidence_target(bad);
    EXPECT_THAT(ValidateSettings(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("settings.assignment.confidence_target")))
        << bad;
  }
}

// Promise (validation.h ValidateTimestamp: up to 9999-12-31T23:59:59.999999Z, nanos in
// [0, 1e9)): only the very last second stops at its microsecond; the second before it,
// 9999-12-31T23:59:58, keeps all its nanoseconds.
TEST(ValidateAnnotationTest, TheSecondBeforeTheLastKeepsAllItsNanoseconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(ApiLimits::kMaxTimestampSeconds - 1);
  t.set_nanos(999999999);
  EXPECT_THAT(ValidateTimestamp("client_time", t), IsOk());
  t.set_seconds(ApiLimits::kMaxTimestampSeconds);
  EXPECT_THAT(ValidateTimestamp("client_time", t),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client_time: nanos")));
}

}  // namespace
}  // namespace verity::server
