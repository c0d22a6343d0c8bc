// Writes the seed inputs of request_validation_fuzzer into a directory: for every request
// kind a valid request and a few near the documented bounds, in the fuzzer's input format
// (kind byte, project-shape bytes, serialized request). Deterministic: the same files on every
// run, so fuzz/seeds/ changes only when the API does.
//
// Usage: make_seeds DIR
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "verity/v1/assignment.pb.h"
#include "verity/v1/ingest.pb.h"
#include "verity/v1/projects.pb.h"
#include "verity/v1/truth.pb.h"

namespace {

// Byte values of the fuzzer's input header (see request_validation_fuzzer.cc).
enum Kind : uint8_t {
  kCreateProject = 0,
  kUpdateProjectSettings,
  kAddItems,
  kAddAnnotators,
  kAnnotationBatch,
  kSuggestItems,
  kSuggestAnnotators,
  kGetPosteriors,
};

// 2 classes, item features of dimension 4, annotator features of dimension 2.
constexpr uint8_t kShape[3] = {0, 4, 2};

int written = 0;

void Write(const std::string& dir, const char* name, Kind kind,
           const google::protobuf::Message& request) {
  std::string bytes(1, static_cast<char>(kind));
  bytes.append(reinterpret_cast<const char*>(kShape), sizeof(kShape));
  bytes += request.SerializeAsString();
  std::ofstream out(dir + "/seed-" + name, std::ios::binary);
  out << bytes;
  ++written;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  namespace v1 = verity::v1;

  v1::CreateProjectRequest create;
  v1::Project* p = create.mutable_project();
  p->set_name("bluebirds");
  p->add_classes("false");
  p->add_classes("true");
  Write(dir, "create-project", kCreateProject, create);
  p->set_item_feature_dim(4);
  p->set_annotator_feature_dim(2);
  v1::ProjectSettings* settings = p->mutable_settings();
  settings->mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings->mutable_model()->set_confusion_smoothing(0.01);
  settings->mutable_model()->set_tolerance(1e-6);
  settings->mutable_model()->set_max_iterations(100);
  settings->mutable_assignment()->set_min_labels_per_item(3);
  settings->mutable_assignment()->set_max_labels_per_item(5);
  settings->mutable_assignment()->set_confidence_target(0.95);
  settings->mutable_assignment()->set_policy(v1::ASSIGNMENT_POLICY_UNCERTAINTY);
  settings->mutable_assignment()->set_gold_items_for_new_annotators(2);
  Write(dir, "create-project-settings", kCreateProject, create);
  p->add_classes("false");
  Write(dir, "create-project-duplicate-class", kCreateProject, create);

  v1::UpdateProjectSettingsRequest update;
  update.set_project("bluebirds");
  *update.mutable_settings() = *settings;
  Write(dir, "update-settings", kUpdateProjectSettings, update);

  v1::AddItemsRequest items;
  items.set_project("bluebirds");
  v1::Item* item = items.add_items();
  item->set_id("item-1");
  for (float f : {0.5f, -1.0f, 2.0f, 0.0f}) item->add_features(f);
  item->set_gold_label(1);
  item->set_priority(2.5);
  items.add_items()->set_id("item-2");
  Write(dir, "add-items", kAddItems, items);

  v1::AddAnnotatorsRequest annotators;
  annotators.set_project("bluebirds");
  v1::Annotator* annotator = annotators.add_annotators();
  annotator->set_id("worker-7");
  annotator->add_features(0.25f);
  annotator->add_features(0.75f);
  Write(dir, "add-annotators", kAddAnnotators, annotators);

  v1::AnnotationBatch batch;
  batch.set_batch_id(1);
  batch.set_project("bluebirds");
  for (int i = 0; i < 3; ++i) {
    v1::Annotation* a = batch.add_annotations();
    a->set_item("item-" + std::to_string(i));
    a->set_annotator("worker-7");
    a->set_label(i % 2);
  }
  batch.mutable_annotations(0)->mutable_client_time()->set_seconds(1700000000);
  batch.mutable_annotations(0)->mutable_client_time()->set_nanos(123456789);
  // The last instant the store takes (9999-12-31T23:59:59.999999): one mutation of nanos away
  // from values it refuses.
  batch.mutable_annotations(1)->mutable_client_time()->set_seconds(253402300799);
  batch.mutable_annotations(1)->mutable_client_time()->set_nanos(999999000);
  Write(dir, "annotation-batch", kAnnotationBatch, batch);

  v1::SuggestItemsRequest suggest_items;
  suggest_items.set_project("bluebirds");
  suggest_items.set_annotator("worker-7");
  suggest_items.set_k(10);
  suggest_items.add_candidate_items("item-1");
  Write(dir, "suggest-items", kSuggestItems, suggest_items);

  v1::SuggestAnnotatorsRequest suggest_annotators;
  suggest_annotators.set_project("bluebirds");
  suggest_annotators.set_item("item-1");
  suggest_annotators.set_k(3);
  suggest_annotators.add_candidates("worker-7");
  suggest_annotators.add_candidates("worker-8");
  Write(dir, "suggest-annotators", kSuggestAnnotators, suggest_annotators);

  v1::GetPosteriorsRequest posteriors;
  posteriors.set_project("bluebirds");
  posteriors.add_items("item-1");
  Write(dir, "get-posteriors", kGetPosteriors, posteriors);

  std::printf("wrote %d seeds to %s\n", written, dir.c_str());
  return 0;
}
