#include "client/message_format.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace verity::client {
namespace {

using ::testing::ElementsAre;

template <typename Message>
Message Parse(const std::string& text) {
  Message message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message))
      << text;
  return message;
}

const std::vector<std::string> kClasses = {"false", "true"};

TEST(MethodNameTest, NamesEveryMethodAndRoundTrips) {
  for (const std::string& name : MethodNames()) {
    ASSERT_TRUE(MethodFromName(name).has_value()) << name;
    EXPECT_EQ(MethodName(*MethodFromName(name)), name);
  }
  EXPECT_EQ(MethodName(v1::TRUTH_METHOD_DAWID_SKENE), "ds");
  EXPECT_EQ(MethodName(v1::TRUTH_METHOD_UNSPECIFIED), "default");
  EXPECT_EQ(MethodName(static_cast<v1::TruthMethod>(99)), "unknown(99)");
  EXPECT_FALSE(MethodFromName("best").has_value());
}

TEST(PolicyNameTest, NamesEveryPolicyAndAcceptsDefault) {
  EXPECT_THAT(PolicyNames(), ElementsAre("information_gain", "uncertainty",
                                         "uniform", "random", "default"));
  for (const std::string& name : PolicyNames()) {
    ASSERT_TRUE(PolicyFromName(name).has_value()) << name;
    EXPECT_EQ(PolicyName(*PolicyFromName(name)), name);
  }
  EXPECT_FALSE(PolicyFromName("greedy").has_value());
}

TEST(RoleNameTest, NamesEveryRoleAndRoundTrips) {
  EXPECT_THAT(RoleNames(), ElementsAre("reader", "writer", "admin"));
  for (const std::string& name : RoleNames()) {
    ASSERT_TRUE(RoleFromName(name).has_value()) << name;
    EXPECT_EQ(RoleName(*RoleFromName(name)), name);
  }
  EXPECT_EQ(RoleName(v1::ROLE_UNSPECIFIED), "unspecified");
  EXPECT_EQ(RoleName(static_cast<v1::Role>(9)), "unknown(9)");
  EXPECT_FALSE(RoleFromName("owner").has_value());
  EXPECT_FALSE(RoleFromName("unspecified").has_value());
}

TEST(FormatTimestampTest, UtcWithMillisecondsOrNothingWhenUnset) {
  EXPECT_EQ(FormatTimestamp(Parse<google::protobuf::Timestamp>(
                "seconds: 1700000000 nanos: 250000000")),
            "2023-11-14T22:13:20.250Z");
  EXPECT_FALSE(FormatTimestamp(google::protobuf::Timestamp()).has_value());
}

TEST(ProjectJsonTest, HoldsEverySettingAndTheCounts) {
  const auto project = Parse<v1::Project>(R"pb(
    name: "birds"
    classes: [ "false", "true" ]
    item_feature_dim: 3
    settings {
      model { method: TRUTH_METHOD_MAJORITY_VOTE max_iterations: 50 }
      assignment { confidence_target: 0.9 policy: ASSIGNMENT_POLICY_UNIFORM }
    }
    created_at { seconds: 1700000000 }
    num_items: 4
    num_annotators: 2
    num_labels: 6
    num_revisions: 5
  )pb");
  EXPECT_EQ(
      ProjectJson(project).Serialize(),
      "{\"name\":\"birds\",\"classes\":[\"false\",\"true\"],"
      "\"item_feature_dim\":3,\"annotator_feature_dim\":0,\"method\":\"mv\","
      "\"settings\":{\"model\":{\"method\":\"mv\",\"confusion_smoothing\":0,"
      "\"prior_smoothing\":0,\"max_iterations\":50,\"tolerance\":0,"
      "\"refit_min_new_labels\":0,\"refit_new_label_fraction\":0,"
      "\"calibration\":\"\"},"
      "\"assignment\":{\"min_labels_per_item\":0,\"max_labels_per_item\":0,"
      "\"confidence_target\":0.9,\"lease_seconds\":0,\"policy\":\"uniform\","
      "\"gold_items_for_new_annotators\":0},"
      "\"limits\":{\"max_items\":0,\"max_annotators\":0,\"max_labels\":0,"
      "\"max_confusion_cells\":0,\"max_feature_values\":0,\"max_revisions\":0}},"
      "\"created_at\":\"2023-11-14T22:13:20.000Z\",\"num_items\":4,"
      "\"num_annotators\":2,\"num_labels\":6,\"num_revisions\":5}");
}

TEST(ModelStatusJsonTest, CurrentVersionIsNullBeforeTheFirstFit) {
  auto status = Parse<v1::GetModelStatusResponse>(
      "method: TRUTH_METHOD_DAWID_SKENE num_labels: 6 "
      "labels_since_version: 6");
  EXPECT_EQ(ModelStatusJson("birds", status).Serialize(),
            "{\"project\":\"birds\",\"method\":\"ds\",\"num_labels\":6,"
            "\"labels_since_version\":6,\"training\":false,"
            "\"current_version\":null}");
  *status.mutable_current_version() = Parse<v1::ModelVersion>(
      "version: 2 method: TRUTH_METHOD_DAWID_SKENE watermark: 6 num_labels: 6 "
      "log_likelihood: -12.5 iterations: 7 duration_ms: 1.25");
  EXPECT_EQ(ModelStatusJson("birds", status).Serialize(),
            "{\"project\":\"birds\",\"method\":\"ds\",\"num_labels\":6,"
            "\"labels_since_version\":6,\"training\":false,"
            "\"current_version\":{\"version\":2,\"method\":\"ds\","
            "\"watermark\":6,\"num_labels\":6,\"log_likelihood\":-12.5,"
            "\"iterations\":7,\"duration_ms\":1.25,\"created_at\":null}}");
}

TEST(ModelStatusJsonTest, ShowsWhichMethodAutoChoseAndWhy) {
  auto status = Parse<v1::GetModelStatusResponse>(
      "method: TRUTH_METHOD_AUTO num_labels: 6 labels_since_version: 0 "
      "chosen_method: \"one_coin\" choice_reason: \"held_out_labels: ds -0.5; one_coin -0.4\"");
  EXPECT_EQ(ModelStatusJson("birds", status).Serialize(),
            "{\"project\":\"birds\",\"method\":\"auto\",\"num_labels\":6,"
            "\"labels_since_version\":0,\"training\":false,"
            "\"current_version\":null,\"chosen_method\":\"one_coin\","
            "\"choice_reason\":\"held_out_labels: ds -0.5; one_coin -0.4\"}");
}

TEST(ModelStatusJsonTest, ShowsTheCalibrationOfTheServedPosteriors) {
  auto status = Parse<v1::GetModelStatusResponse>(
      "method: TRUTH_METHOD_DAWID_SKENE num_labels: 6 labels_since_version: 0 "
      "calibration { kind: \"temperature\" temperature: 0.25 source: \"crowd_labels\" }");
  EXPECT_EQ(ModelStatusJson("birds", status).Serialize(),
            "{\"project\":\"birds\",\"method\":\"ds\",\"num_labels\":6,"
            "\"labels_since_version\":0,\"training\":false,"
            "\"current_version\":null,\"calibration\":{\"kind\":\"temperature\","
            "\"temperature\":0.25,\"source\":\"crowd_labels\"}}");
  status = Parse<v1::GetModelStatusResponse>(
      "method: TRUTH_METHOD_DAWID_SKENE num_labels: 6 labels_since_version: 0 "
      "calibration { kind: \"top_label_temperature\" temperature: 0.5 source: \"gold\" "
      "gold_items: 80 gold_ece_raw: 0.25 gold_ece: 0.03125 }");
  EXPECT_EQ(ModelStatusJson("birds", status).Serialize(),
            "{\"project\":\"birds\",\"method\":\"ds\",\"num_labels\":6,"
            "\"labels_since_version\":0,\"training\":false,"
            "\"current_version\":null,\"calibration\":{\"kind\":\"top_label_temperature\","
            "\"temperature\":0.5,\"source\":\"gold\",\"gold_items\":80,"
            "\"gold_ece_raw\":0.25,\"gold_ece\":0.03125}}");
}

TEST(PosteriorJsonTest, KeysProbabilitiesByClassName) {
  const auto posterior = Parse<v1::Posterior>(
      "item: \"a\" probabilities: [0.25, 0.75] map_label: 1 confidence: 0.75 "
      "num_labels: 3 model_version: 2 includes_newer_labels: true");
  EXPECT_EQ(PosteriorJson(posterior, kClasses).Serialize(),
            "{\"item\":\"a\",\"label\":\"true\",\"label_index\":1,"
            "\"confidence\":0.75,\"probabilities\":{\"false\":0.25,"
            "\"true\":0.75},\"num_labels\":3,\"model_version\":2,"
            "\"includes_newer_labels\":true,\"is_gold\":false}");
}

TEST(AnnotatorProfileJsonTest, NestsTheConfusionMatrixByClassOrNull) {
  auto profile = Parse<v1::AnnotatorProfile>(
      "annotator: \"w1\" accuracy: 0.9 num_labels: 10 confusion { "
      "num_classes: 2 probabilities: [0.8, 0.2, 0.1, 0.9] }");
  EXPECT_EQ(AnnotatorProfileJson(profile, kClasses).Serialize(),
            "{\"annotator\":\"w1\",\"num_labels\":10,\"accuracy\":0.9,"
            "\"confusion\":{\"false\":{\"false\":0.8,\"true\":0.2},"
            "\"true\":{\"false\":0.1,\"true\":0.9}}}");
  profile.mutable_confusion()->clear_probabilities();
  EXPECT_EQ(AnnotatorProfileJson(profile, kClasses).Serialize(),
            "{\"annotator\":\"w1\",\"num_labels\":10,\"accuracy\":0.9,"
            "\"confusion\":null}");
}

// What lia and conal learn, shown only where the server sends it (truth.proto).
TEST(PosteriorJsonTest, CarriesTheDifficultyOnlyWhenTheMethodLearnsOne) {
  auto posterior = Parse<v1::Posterior>(
      "item: \"a\" probabilities: [0.25, 0.75] map_label: 1 confidence: 0.75 difficulty: 0.125");
  EXPECT_EQ(PosteriorJson(posterior, kClasses).Serialize(),
            "{\"item\":\"a\",\"label\":\"true\",\"label_index\":1,"
            "\"confidence\":0.75,\"probabilities\":{\"false\":0.25,"
            "\"true\":0.75},\"num_labels\":0,\"model_version\":0,"
            "\"includes_newer_labels\":false,\"is_gold\":false,\"difficulty\":0.125}");
  // A difficulty of 0 is sent (proto3 optional) and shown; an unset one is not.
  posterior.set_difficulty(0);
  EXPECT_NE(PosteriorJson(posterior, kClasses).Serialize().find("\"difficulty\":0"),
            std::string::npos);
  posterior.clear_difficulty();
  EXPECT_EQ(PosteriorJson(posterior, kClasses).Serialize().find("difficulty"), std::string::npos);
}

TEST(AnnotatorProfileJsonTest, CarriesTheEmbeddingOnlyWhenTheMethodLearnsOne) {
  auto profile = Parse<v1::AnnotatorProfile>(
      "annotator: \"w1\" accuracy: 0.9 num_labels: 10 embedding: [0.5, -1.25]");
  EXPECT_EQ(AnnotatorProfileJson(profile, kClasses).Serialize(),
            "{\"annotator\":\"w1\",\"num_labels\":10,\"accuracy\":0.9,"
            "\"confusion\":null,\"embedding\":[0.5,-1.25]}");
  // lia without features learns a one-value embedding: shown too.
  profile.clear_embedding();
  profile.add_embedding(0.75f);
  EXPECT_NE(AnnotatorProfileJson(profile, kClasses).Serialize().find("\"embedding\":[0.75]"),
            std::string::npos);
  profile.clear_embedding();
  EXPECT_EQ(AnnotatorProfileJson(profile, kClasses).Serialize().find("embedding"),
            std::string::npos);
}

TEST(AnnotatorProfileJsonTest, SaysWhenTheConfusionWasPredictedFromFeatures) {
  auto profile = Parse<v1::AnnotatorProfile>(
      "annotator: \"new\" accuracy: 0.8 num_labels: 0 predicted_from_features: true");
  EXPECT_EQ(AnnotatorProfileJson(profile, kClasses).Serialize(),
            "{\"annotator\":\"new\",\"num_labels\":0,\"accuracy\":0.8,"
            "\"confusion\":null,\"predicted_from_features\":true}");
  profile.set_predicted_from_features(false);
  EXPECT_EQ(AnnotatorProfileJson(profile, kClasses).Serialize().find("predicted_from_features"),
            std::string::npos);
}

TEST(SuggestionJsonTest, ItemsCarryTheLeaseExpiry) {
  EXPECT_EQ(ItemSuggestionJson(Parse<v1::ItemSuggestion>(
                                   "item: \"b\" score: 0.5 p_correct: 0.75 "
                                   "lease_expires_at { seconds: 1700000700 }"))
                .Serialize(),
            "{\"item\":\"b\",\"score\":0.5,\"p_correct\":0.75,"
            "\"lease_expires_at\":\"2023-11-14T22:25:00.000Z\"}");
  EXPECT_EQ(AnnotatorSuggestionJson(
                Parse<v1::AnnotatorSuggestion>(
                    "annotator: \"w2\" score: 0.25 p_correct: 0.5"))
                .Serialize(),
            "{\"annotator\":\"w2\",\"score\":0.25,\"p_correct\":0.5}");
}

TEST(ApiKeyJsonTest, ListsProjectsAndIsNullUntilRevoked) {
  const auto key = Parse<v1::ApiKey>(R"pb(
    key_id: "00112233445566aa"
    name: "labelling team"
    role: ROLE_WRITER
    projects: [ "birds", "dogs" ]
    created_at { seconds: 1700000000 }
    created_by: "ffeeddccbbaa9988"
  )pb");
  EXPECT_EQ(ApiKeyJson(key).Serialize(),
            "{\"key_id\":\"00112233445566aa\",\"name\":\"labelling team\","
            "\"role\":\"writer\",\"projects\":[\"birds\",\"dogs\"],"
            "\"created_at\":\"2023-11-14T22:13:20.000Z\",\"revoked_at\":null,"
            "\"created_by\":\"ffeeddccbbaa9988\"}");
  v1::CreateKeyResponse created;
  created.set_secret_key("vk_00112233445566aa_0123");
  *created.mutable_key() = key;
  created.mutable_key()->clear_projects();
  created.mutable_key()->mutable_revoked_at()->set_seconds(1700000700);
  EXPECT_EQ(CreatedKeyJson(created).Serialize(),
            "{\"secret_key\":\"vk_00112233445566aa_0123\","
            "\"key_id\":\"00112233445566aa\",\"name\":\"labelling team\","
            "\"role\":\"writer\",\"projects\":[],"
            "\"created_at\":\"2023-11-14T22:13:20.000Z\","
            "\"revoked_at\":\"2023-11-14T22:25:00.000Z\","
            "\"created_by\":\"ffeeddccbbaa9988\"}");
}

TEST(PosteriorExportTest, WritesEveryFieldAtFullPrecision) {
  EXPECT_THAT(PosteriorExportHeader(kClasses),
              ElementsAre("item", "label", "label_index", "confidence",
                          "p_false", "p_true", "num_labels", "model_version",
                          "includes_newer_labels", "is_gold"));
  v1::Posterior posterior = Parse<v1::Posterior>(
      "item: \"a\" map_label: 1 num_labels: 3 model_version: 1 is_gold: true");
  posterior.add_probabilities(1.0 / 3.0);
  posterior.add_probabilities(2.0 / 3.0);
  posterior.set_confidence(2.0 / 3.0);
  EXPECT_THAT(
      PosteriorExportFields(posterior, kClasses),
      ElementsAre("a", "true", "1", "0.6666666666666666", "0.3333333333333333",
                  "0.6666666666666666", "3", "1", "false", "true"));
}

TEST(PosteriorExportTest, FormulaLikeItemsAndClassesAreWrittenAsText) {
  const std::vector<std::string> classes = {"@risk", "+ok"};
  v1::Posterior posterior = Parse<v1::Posterior>(
      "item: \"=HYPERLINK(\\\"http://x\\\",\\\"y\\\")\" map_label: 0 num_labels: 1");
  posterior.add_probabilities(1.0);
  posterior.add_probabilities(0.0);
  posterior.set_confidence(1.0);
  const std::vector<std::string> fields = PosteriorExportFields(posterior, classes);
  EXPECT_EQ(fields[0], "'=HYPERLINK(\"http://x\",\"y\")");
  EXPECT_EQ(fields[1], "'@risk");
  EXPECT_EQ(fields[2], "0");  // Numbers untouched.
}

TEST(ClassNameTest, FallsBackToTheIndex) {
  EXPECT_EQ(ClassName(kClasses, 1), "true");
  EXPECT_EQ(ClassName(kClasses, 2), "2");  // one past the last class
  EXPECT_EQ(ClassName(kClasses, 5), "5");
  EXPECT_EQ(ClassName(kClasses, -1), "-1");
}

// Every setting under its own proto field name (message_format.h), with
// distinct values so that no two fields can be swapped unnoticed.
TEST(ProjectJsonTest, EverySettingIsKeyedByItsOwnField) {
  const auto project = Parse<v1::Project>(R"pb(
    name: "p"
    classes: [ "a", "b" ]
    item_feature_dim: 2
    annotator_feature_dim: 5
    settings {
      model {
        method: TRUTH_METHOD_GLAD
        confusion_smoothing: 0.5
        prior_smoothing: 0.25
        max_iterations: 40
        tolerance: 0.125
        refit_min_new_labels: 17
        refit_new_label_fraction: 0.75
        calibration: "none"
      }
      assignment {
        min_labels_per_item: 2
        max_labels_per_item: 9
        confidence_target: 0.875
        lease_seconds: 600
        policy: ASSIGNMENT_POLICY_INFORMATION_GAIN
        gold_items_for_new_annotators: 3
      }
      limits {
        max_items: 101
        max_annotators: 102
        max_labels: 103
        max_confusion_cells: 104
        max_feature_values: 105
        max_revisions: 106
      }
    }
    num_items: 11
    num_annotators: 12
    num_labels: 13
    num_revisions: 14
  )pb");
  EXPECT_EQ(
      ProjectJson(project).Serialize(),
      "{\"name\":\"p\",\"classes\":[\"a\",\"b\"],"
      "\"item_feature_dim\":2,\"annotator_feature_dim\":5,\"method\":\"glad\","
      "\"settings\":{\"model\":{\"method\":\"glad\",\"confusion_smoothing\":0.5,"
      "\"prior_smoothing\":0.25,\"max_iterations\":40,\"tolerance\":0.125,"
      "\"refit_min_new_labels\":17,\"refit_new_label_fraction\":0.75,"
      "\"calibration\":\"none\"},"
      "\"assignment\":{\"min_labels_per_item\":2,\"max_labels_per_item\":9,"
      "\"confidence_target\":0.875,\"lease_seconds\":600,"
      "\"policy\":\"information_gain\",\"gold_items_for_new_annotators\":3},"
      "\"limits\":{\"max_items\":101,\"max_annotators\":102,\"max_labels\":103,"
      "\"max_confusion_cells\":104,\"max_feature_values\":105,\"max_revisions\":106}},"
      "\"created_at\":null,\"num_items\":11,\"num_annotators\":12,"
      "\"num_labels\":13,\"num_revisions\":14}");
}

TEST(ModelVersionJsonTest, EveryFieldIsKeyedByItsOwnName) {
  const auto version = Parse<v1::ModelVersion>(
      "version: 3 method: TRUTH_METHOD_ONE_COIN watermark: 41 num_labels: 37 "
      "log_likelihood: -2.5 iterations: 9 duration_ms: 0.5 "
      "created_at { seconds: 1700000000 nanos: 7000000 }");
  EXPECT_EQ(ModelVersionJson(version).Serialize(),
            "{\"version\":3,\"method\":\"one_coin\",\"watermark\":41,"
            "\"num_labels\":37,\"log_likelihood\":-2.5,\"iterations\":9,"
            "\"duration_ms\":0.5,\"created_at\":\"2023-11-14T22:13:20.007Z\"}");
}

// Only a zero timestamp (seconds and nanos both 0) is unset.
TEST(FormatTimestampTest, ATimestampWithOnlyNanosIsSet) {
  EXPECT_EQ(FormatTimestamp(Parse<google::protobuf::Timestamp>("nanos: 5000000")),
            "1970-01-01T00:00:00.005Z");
  EXPECT_EQ(FormatTimestamp(Parse<google::protobuf::Timestamp>("seconds: 1")),
            "1970-01-01T00:00:01.000Z");
}

// The confusion is null unless the server sent a valid K-by-K matrix: K 0
// (no matrix) and a size other than K*K are both null.
TEST(AnnotatorProfileJsonTest, ConfusionIsNullWithoutAValidMatrix) {
  auto profile = Parse<v1::AnnotatorProfile>(
      "annotator: \"w\" accuracy: 0.5 num_labels: 1 confusion { num_classes: 0 }");
  EXPECT_EQ(AnnotatorProfileJson(profile, kClasses).Serialize(),
            "{\"annotator\":\"w\",\"num_labels\":1,\"accuracy\":0.5,"
            "\"confusion\":null}");
  profile = Parse<v1::AnnotatorProfile>(
      "annotator: \"w\" accuracy: 0.5 num_labels: 1 confusion { num_classes: 2 "
      "probabilities: [0.5, 0.5, 0.5] }");
  EXPECT_EQ(AnnotatorProfileJson(profile, kClasses).Serialize(),
            "{\"annotator\":\"w\",\"num_labels\":1,\"accuracy\":0.5,"
            "\"confusion\":null}");
}

}  // namespace
}  // namespace verity::client
