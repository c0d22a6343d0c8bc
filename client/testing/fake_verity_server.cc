#include "client/testing/fake_verity_server.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::client::testing {

struct FakeItem {
  std::string id;
  std::optional<int32_t> gold;
  // annotator → live label.
  std::map<std::string, int32_t> labels;
};

struct FakeProject {
  v1::Project project;
  std::vector<FakeItem> items;  // In creation order.
  absl::flat_hash_map<std::string, size_t> item_index;
  int64_t num_labels = 0;
  int64_t num_revisions = 0;  // Revised labels (the fake keeps no client times: none stale).
  int64_t sequence = 0;  // Counts written labels (new or revised).
  std::vector<v1::ModelVersion> versions;
  // Annotators added by AddAnnotators or SuggestItems (labelling also makes
  // an annotator known; see Annotators()).
  std::set<std::string> registered_annotators;

  // Every annotator known: registered or with a label, sorted.
  std::set<std::string> Annotators() const {
    std::set<std::string> annotators = registered_annotators;
    for (const FakeItem& item : items) {
      for (const auto& [annotator, label] : item.labels) {
        annotators.insert(annotator);
      }
    }
    return annotators;
  }

  // annotator → (labels agreeing with the item's MAP class, labels).
  std::map<std::string, std::pair<double, double>> Agreement() const {
    std::map<std::string, std::pair<double, double>> agreement;
    for (const FakeItem& item : items) {
      const int map = PosteriorOf(item).map_label();
      for (const auto& [annotator, label] : item.labels) {
        auto& [agree, total] = agreement[annotator];
        agree += label == map ? 1 : 0;
        total += 1;
      }
    }
    return agreement;
  }

  // A new model version whose watermark is every label so far.
  const v1::ModelVersion& Fit() {
    v1::ModelVersion& version = versions.emplace_back();
    version.set_version(static_cast<int32_t>(versions.size()));
    version.set_method(project.settings().model().method() ==
                               v1::TRUTH_METHOD_UNSPECIFIED
                           ? v1::TRUTH_METHOD_DAWID_SKENE
                           : project.settings().model().method());
    version.set_watermark(sequence);
    version.set_num_labels(num_labels);
    version.set_log_likelihood(-12.5);
    version.set_iterations(7);
    version.set_duration_ms(1.25);
    version.mutable_created_at()->set_seconds(1700000100);
    return version;
  }

  FakeItem& ItemFor(const std::string& id) {
    auto [it, inserted] = item_index.emplace(id, items.size());
    if (inserted) items.push_back(FakeItem{id, std::nullopt, {}});
    return items[it->second];
  }

  v1::Posterior PosteriorOf(const FakeItem& item) const {
    const int k = project.classes_size();
    std::vector<double> p(k, 0.0);
    if (item.gold.has_value()) {
      p[*item.gold] = 1.0;
    } else if (item.labels.empty()) {
      std::fill(p.begin(), p.end(), 1.0 / k);
    } else {
      for (const auto& [annotator, label] : item.labels) p[label] += 1.0;
      for (double& x : p) x /= item.labels.size();
    }
    v1::Posterior posterior;
    posterior.set_item(item.id);
    int map = 0;
    for (int c = 0; c < k; ++c) {
      posterior.add_probabilities(p[c]);
      if (p[c] > p[map]) map = c;
    }
    posterior.set_map_label(map);
    posterior.set_confidence(p[map]);
    posterior.set_num_labels(static_cast<int32_t>(item.labels.size()));
    posterior.set_model_version(versions.empty() ? 0
                                                 : versions.back().version());
    posterior.set_is_gold(item.gold.has_value());
    return posterior;
  }
};

struct FakeState {
  absl::Mutex mutex;
  std::map<std::string, FakeProject> projects ABSL_GUARDED_BY(mutex);
  int fail_batches ABSL_GUARDED_BY(mutex) = 0;
  absl::StatusCode fail_code ABSL_GUARDED_BY(mutex) = absl::StatusCode::kOk;
  std::string fail_message ABSL_GUARDED_BY(mutex);
  int break_after ABSL_GUARDED_BY(mutex) = -1;
  absl::StatusCode break_code ABSL_GUARDED_BY(mutex) = absl::StatusCode::kOk;
  int hold_acks ABSL_GUARDED_BY(mutex) = 1;
  std::vector<uint64_t> batch_ids ABSL_GUARDED_BY(mutex);
  int max_outstanding ABSL_GUARDED_BY(mutex) = 0;
  int streams ABSL_GUARDED_BY(mutex) = 0;
  std::vector<v1::ApiKey> keys ABSL_GUARDED_BY(mutex);  // In creation order.
  std::vector<std::string> key_authorizations ABSL_GUARDED_BY(mutex);
};

namespace {

grpc::Status NotFound(const std::string& project) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("project \"", project, "\" does not exist"));
}

class FakeProjectService final : public v1::ProjectService::Service {
 public:
  explicit FakeProjectService(std::shared_ptr<FakeState> state)
      : state_(std::move(state)) {}

  grpc::Status CreateProject(grpc::ServerContext*,
                             const v1::CreateProjectRequest* request,
                             v1::CreateProjectResponse* response) override {
    const v1::Project& project = request->project();
    if (project.name().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "project.name: must not be empty");
    }
    if (project.classes_size() < 2) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "project.classes: at least 2 classes");
    }
    absl::MutexLock lock(&state_->mutex);
    if (state_->projects.count(project.name()) > 0) {
      return grpc::Status(
          grpc::StatusCode::ALREADY_EXISTS,
          absl::StrCat("project \"", project.name(), "\" already exists"));
    }
    FakeProject& stored = state_->projects[project.name()];
    stored.project = project;
    stored.project.mutable_created_at()->set_seconds(1700000000);
    *response->mutable_project() = stored.project;
    return grpc::Status::OK;
  }

  grpc::Status GetProject(grpc::ServerContext*,
                          const v1::GetProjectRequest* request,
                          v1::GetProjectResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    *response->mutable_project() = WithCounts(it->second);
    return grpc::Status::OK;
  }

  grpc::Status ListProjects(grpc::ServerContext*,
                            const v1::ListProjectsRequest*,
                            v1::ListProjectsResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    for (const auto& [name, project] : state_->projects) {
      *response->add_projects() = WithCounts(project);
    }
    return grpc::Status::OK;
  }

  grpc::Status AddItems(grpc::ServerContext*,
                        const v1::AddItemsRequest* request,
                        v1::AddItemsResponse* response) override {
    if (request->items_size() > 10000) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "items: at most 10000");
    }
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    FakeProject& project = it->second;
    for (const v1::Item& item : request->items()) {
      if (item.features_size() != 0 &&
          item.features_size() != project.project.item_feature_dim()) {
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("items[", item.id(), "].features: expected ",
                         project.project.item_feature_dim(), " values"));
      }
    }
    for (const v1::Item& item : request->items()) {
      const bool existed = project.item_index.contains(item.id());
      FakeItem& stored = project.ItemFor(item.id());
      if (item.has_gold_label()) stored.gold = item.gold_label();
      response->set_added(response->added() + (existed ? 0 : 1));
      response->set_updated(response->updated() + (existed ? 1 : 0));
    }
    return grpc::Status::OK;
  }

  grpc::Status UpdateProjectSettings(
      grpc::ServerContext*, const v1::UpdateProjectSettingsRequest* request,
      v1::UpdateProjectSettingsResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    *it->second.project.mutable_settings() = request->settings();
    *response->mutable_project() = WithCounts(it->second);
    return grpc::Status::OK;
  }

  grpc::Status AddAnnotators(grpc::ServerContext*,
                             const v1::AddAnnotatorsRequest* request,
                             v1::AddAnnotatorsResponse* response) override {
    if (request->annotators_size() > 10000) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "annotators: at most 10000");
    }
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    FakeProject& project = it->second;
    for (const v1::Annotator& annotator : request->annotators()) {
      if (annotator.features_size() != 0 &&
          annotator.features_size() !=
              project.project.annotator_feature_dim()) {
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("annotators[", annotator.id(), "].features: expected ",
                         project.project.annotator_feature_dim(), " values"));
      }
    }
    for (const v1::Annotator& annotator : request->annotators()) {
      const bool existed = project.Annotators().count(annotator.id()) > 0;
      project.registered_annotators.insert(annotator.id());
      response->set_added(response->added() + (existed ? 0 : 1));
      response->set_updated(response->updated() + (existed ? 1 : 0));
    }
    return grpc::Status::OK;
  }

 private:
  static v1::Project WithCounts(const FakeProject& project) {
    v1::Project out = project.project;
    out.set_num_items(static_cast<int64_t>(project.items.size()));
    out.set_num_annotators(static_cast<int64_t>(project.Annotators().size()));
    out.set_num_labels(project.num_labels);
    out.set_num_revisions(project.num_revisions);
    return out;
  }

  std::shared_ptr<FakeState> state_;
};

class FakeIngestService final : public v1::IngestService::Service {
 public:
  explicit FakeIngestService(std::shared_ptr<FakeState> state)
      : state_(std::move(state)) {}

  grpc::Status SubmitAnnotations(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream)
      override {
    int break_after = -1;
    absl::StatusCode break_code = absl::StatusCode::kOk;
    int hold = 1;
    {
      absl::MutexLock lock(&state_->mutex);
      ++state_->streams;
      std::swap(break_after, state_->break_after);
      break_code = state_->break_code;
      hold = state_->hold_acks;
    }
    std::string project;
    std::deque<v1::BatchAck> held;
    v1::AnnotationBatch batch;
    int read = 0;
    while (stream->Read(&batch)) {
      {
        absl::MutexLock lock(&state_->mutex);
        state_->batch_ids.push_back(batch.batch_id());
      }
      if (read++ == break_after) {
        return grpc::Status(static_cast<grpc::StatusCode>(break_code),
                            "fake stream broken");
      }
      if (!batch.project().empty()) project = batch.project();
      held.push_back(Apply(project, batch));
      {
        absl::MutexLock lock(&state_->mutex);
        state_->max_outstanding =
            std::max(state_->max_outstanding, static_cast<int>(held.size()));
      }
      if (static_cast<int>(held.size()) >= hold) {
        if (!Flush(held, stream)) return grpc::Status::OK;
      }
    }
    Flush(held, stream);
    return grpc::Status::OK;
  }

 private:
  static bool Flush(
      std::deque<v1::BatchAck>& held,
      grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream) {
    for (const v1::BatchAck& ack : held) {
      if (!stream->Write(ack)) return false;
    }
    held.clear();
    return true;
  }

  v1::BatchAck Apply(const std::string& project_name,
                     const v1::AnnotationBatch& batch) {
    v1::BatchAck ack;
    ack.set_batch_id(batch.batch_id());
    absl::MutexLock lock(&state_->mutex);
    if (state_->fail_batches > 0) {
      --state_->fail_batches;
      ack.set_error_code(static_cast<int32_t>(state_->fail_code));
      ack.set_error_message(state_->fail_message);
      return ack;
    }
    auto it = state_->projects.find(project_name);
    if (it == state_->projects.end()) {
      ack.set_error_code(static_cast<int32_t>(absl::StatusCode::kNotFound));
      ack.set_error_message(
          absl::StrCat("project \"", project_name, "\" does not exist"));
      return ack;
    }
    FakeProject& project = it->second;
    const int k = project.project.classes_size();
    for (int i = 0; i < batch.annotations_size(); ++i) {
      const v1::Annotation& annotation = batch.annotations(i);
      std::string reason;
      if (annotation.item().empty()) {
        reason = "item: empty id";
      } else if (annotation.item().size() > 256) {  // The API's id limit, ApiLimits::kMaxIdBytes.
        reason = absl::StrCat("item: is ", annotation.item().size(),
                              " bytes, more than the limit of 256");
      } else if (annotation.annotator().empty()) {
        reason = "annotator: empty id";
      } else if (annotation.label() < 0 || annotation.label() >= k) {
        reason = absl::StrCat("label ", annotation.label(),
                              " out of range [0, ", k, ")");
      }
      if (!reason.empty()) {
        ack.set_rejected(ack.rejected() + 1);
        if (ack.rejections_size() < 100) {  // ingest.proto: the first 100 are listed.
          v1::Rejection* rejection = ack.add_rejections();
          rejection->set_index(i);
          rejection->set_reason(reason);
        }
        continue;
      }
      FakeItem& item = project.ItemFor(annotation.item());
      auto [label, inserted] =
          item.labels.emplace(annotation.annotator(), annotation.label());
      if (inserted) {
        ack.set_accepted(ack.accepted() + 1);
        ++project.num_labels;
        ++project.sequence;
      } else if (label->second == annotation.label()) {
        ack.set_duplicate(ack.duplicate() + 1);
      } else {
        label->second = annotation.label();
        ack.set_revised(ack.revised() + 1);
        ++project.num_revisions;
        ++project.sequence;
      }
    }
    return ack;
  }

  std::shared_ptr<FakeState> state_;
};

class FakeTruthService final : public v1::TruthService::Service {
 public:
  explicit FakeTruthService(std::shared_ptr<FakeState> state)
      : state_(std::move(state)) {}

  grpc::Status GetPosteriors(grpc::ServerContext*,
                             const v1::GetPosteriorsRequest* request,
                             v1::GetPosteriorsResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    const FakeProject& project = it->second;
    for (const std::string& id : request->items()) {
      auto item = project.item_index.find(id);
      if (item == project.item_index.end()) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrCat("item \"", id, "\" does not exist"));
      }
      *response->add_posteriors() =
          project.PosteriorOf(project.items[item->second]);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListPosteriors(grpc::ServerContext*,
                              const v1::ListPosteriorsRequest* request,
                              v1::ListPosteriorsResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    const FakeProject& project = it->second;
    size_t begin = 0;
    if (!request->page_token().empty() &&
        !absl::SimpleAtoi(request->page_token(), &begin)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "page_token: malformed");
    }
    const size_t page_size =
        request->page_size() == 0 ? 1000 : request->page_size();
    const size_t end = std::min(project.items.size(), begin + page_size);
    for (size_t i = begin; i < end; ++i) {
      *response->add_posteriors() = project.PosteriorOf(project.items[i]);
    }
    if (end < project.items.size()) {
      response->set_next_page_token(absl::StrCat(end));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetAnnotatorProfiles(
      grpc::ServerContext*, const v1::GetAnnotatorProfilesRequest* request,
      v1::GetAnnotatorProfilesResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    const FakeProject& project = it->second;
    const int k = project.project.classes_size();
    // annotator → K*K counts of (MAP class, label).
    std::map<std::string, std::vector<double>> counts;
    for (const FakeItem& item : project.items) {
      const int map = project.PosteriorOf(item).map_label();
      for (const auto& [annotator, label] : item.labels) {
        std::vector<double>& c = counts[annotator];
        c.resize(k * k, 0.0);
        c[map * k + label] += 1.0;
      }
    }
    std::vector<std::string> wanted(request->annotators().begin(),
                                    request->annotators().end());
    if (wanted.empty()) {
      for (const auto& [annotator, c] : counts) wanted.push_back(annotator);
    }
    for (const std::string& annotator : wanted) {
      auto c = counts.find(annotator);
      if (c == counts.end()) {
        return grpc::Status(
            grpc::StatusCode::NOT_FOUND,
            absl::StrCat("annotator \"", annotator, "\" does not exist"));
      }
      v1::AnnotatorProfile* profile = response->add_profiles();
      profile->set_annotator(annotator);
      profile->mutable_confusion()->set_num_classes(k);
      double total = 0, agree = 0;
      for (int t = 0; t < k; ++t) {
        double row = 0;
        for (int l = 0; l < k; ++l) row += c->second[t * k + l];
        for (int l = 0; l < k; ++l) {
          profile->mutable_confusion()->add_probabilities(
              row > 0 ? c->second[t * k + l] / row : (t == l ? 1.0 : 0.0));
        }
        total += row;
        agree += c->second[t * k + t];
      }
      profile->set_accuracy(agree / total);
      profile->set_num_labels(static_cast<int32_t>(total));
    }
    return grpc::Status::OK;
  }

 private:
  std::shared_ptr<FakeState> state_;
};

class FakeModelService final : public v1::ModelService::Service {
 public:
  explicit FakeModelService(std::shared_ptr<FakeState> state)
      : state_(std::move(state)) {}

  grpc::Status GetModelStatus(grpc::ServerContext*,
                              const v1::GetModelStatusRequest* request,
                              v1::GetModelStatusResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    const FakeProject& project = it->second;
    const v1::TruthMethod method = project.project.settings().model().method();
    response->set_method(method == v1::TRUTH_METHOD_UNSPECIFIED
                             ? v1::TRUTH_METHOD_DAWID_SKENE
                             : method);
    response->set_num_labels(project.num_labels);
    int64_t watermark = 0;
    if (!project.versions.empty()) {
      *response->mutable_current_version() = project.versions.back();
      watermark = project.versions.back().watermark();
    }
    response->set_labels_since_version(project.sequence - watermark);
    return grpc::Status::OK;
  }

  grpc::Status ListModelVersions(
      grpc::ServerContext*, const v1::ListModelVersionsRequest* request,
      v1::ListModelVersionsResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    const auto& versions = it->second.versions;
    const int limit = request->limit() == 0 ? 20 : request->limit();
    for (auto v = versions.rbegin();
         v != versions.rend() && response->versions_size() < limit; ++v) {
      *response->add_versions() = *v;
    }
    return grpc::Status::OK;
  }

  grpc::Status TrainModel(grpc::ServerContext*,
                          const v1::TrainModelRequest* request,
                          v1::TrainModelResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    if (it->second.num_labels == 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("project \"", request->project(),
                                       "\" has no labels to fit"));
    }
    *response->mutable_version() = it->second.Fit();
    return grpc::Status::OK;
  }

 private:
  std::shared_ptr<FakeState> state_;
};

grpc::Status CheckK(int32_t k) {
  if (k < 1 || k > 1000) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "k: must be in [1, 1000]");
  }
  return grpc::Status::OK;
}

// Ranks by uncertainty (1 - confidence) for items and by agreement with the
// MAP classes for annotators; ties keep creation (items) or id (annotators)
// order. Leases are only reported, never enforced.
class FakeAssignmentService final : public v1::AssignmentService::Service {
 public:
  // The lease_expires_at of every suggestion.
  static constexpr int64_t kLeaseExpiresAt = 1700000700;

  explicit FakeAssignmentService(std::shared_ptr<FakeState> state)
      : state_(std::move(state)) {}

  grpc::Status SuggestItems(grpc::ServerContext*,
                            const v1::SuggestItemsRequest* request,
                            v1::SuggestItemsResponse* response) override {
    if (grpc::Status k = CheckK(request->k()); !k.ok()) return k;
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    FakeProject& project = it->second;
    project.registered_annotators.insert(request->annotator());
    std::set<std::string> candidates(request->candidate_items().begin(),
                                     request->candidate_items().end());
    std::vector<std::pair<double, const FakeItem*>> open;
    for (const FakeItem& item : project.items) {
      if (item.gold.has_value() || item.labels.count(request->annotator()) ||
          (!candidates.empty() && candidates.count(item.id) == 0)) {
        continue;
      }
      open.emplace_back(1.0 - project.PosteriorOf(item).confidence(), &item);
    }
    std::stable_sort(
        open.begin(), open.end(),
        [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [score, item] : open) {
      if (response->suggestions_size() == request->k()) break;
      v1::ItemSuggestion* suggestion = response->add_suggestions();
      suggestion->set_item(item->id);
      suggestion->set_score(score);
      suggestion->set_p_correct(0.75);
      suggestion->mutable_lease_expires_at()->set_seconds(kLeaseExpiresAt);
    }
    return grpc::Status::OK;
  }

  grpc::Status SuggestAnnotators(
      grpc::ServerContext*, const v1::SuggestAnnotatorsRequest* request,
      v1::SuggestAnnotatorsResponse* response) override {
    if (grpc::Status k = CheckK(request->k()); !k.ok()) return k;
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->projects.find(request->project());
    if (it == state_->projects.end()) return NotFound(request->project());
    const FakeProject& project = it->second;
    auto item = project.item_index.find(request->item());
    if (item == project.item_index.end()) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat("item \"", request->item(), "\" does not exist"));
    }
    const FakeItem& target = project.items[item->second];
    std::set<std::string> candidates(request->candidates().begin(),
                                     request->candidates().end());
    if (candidates.empty()) candidates = project.Annotators();
    const auto agreement = project.Agreement();
    std::vector<std::pair<double, std::string>> ranked;
    for (const std::string& annotator : candidates) {
      if (target.labels.count(annotator) > 0) continue;
      auto a = agreement.find(annotator);
      ranked.emplace_back(
          a == agreement.end() ? 0.5 : a->second.first / a->second.second,
          annotator);
    }
    std::stable_sort(
        ranked.begin(), ranked.end(),
        [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [score, annotator] : ranked) {
      if (response->suggestions_size() == request->k()) break;
      v1::AnnotatorSuggestion* suggestion = response->add_suggestions();
      suggestion->set_annotator(annotator);
      suggestion->set_score(score);
      suggestion->set_p_correct(score);
    }
    return grpc::Status::OK;
  }

 private:
  std::shared_ptr<FakeState> state_;
};

// In-memory keys; records each call's `authorization` metadata.
class FakeKeyService final : public v1::KeyService::Service {
 public:
  static constexpr int64_t kCreatedAt = 1700000200;
  static constexpr int64_t kRevokedAt = 1700000300;

  explicit FakeKeyService(std::shared_ptr<FakeState> state)
      : state_(std::move(state)) {}

  grpc::Status CreateKey(grpc::ServerContext* context,
                         const v1::CreateKeyRequest* request,
                         v1::CreateKeyResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    Record(*context);
    if (request->role() == v1::ROLE_UNSPECIFIED) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "role: required");
    }
    v1::ApiKey& key = state_->keys.emplace_back();
    key.set_key_id(absl::StrFormat("%016x", state_->keys.size()));
    key.set_name(request->name());
    key.set_role(request->role());
    *key.mutable_projects() = request->projects();
    key.mutable_created_at()->set_seconds(kCreatedAt);
    *response->mutable_key() = key;
    response->set_secret_key(
        absl::StrCat("vk_", key.key_id(), "_", std::string(64, 'e')));
    return grpc::Status::OK;
  }

  grpc::Status ListKeys(grpc::ServerContext* context,
                        const v1::ListKeysRequest* request,
                        v1::ListKeysResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    Record(*context);
    for (const v1::ApiKey& key : state_->keys) {
      if (key.has_revoked_at() && !request->include_revoked()) continue;
      *response->add_keys() = key;
    }
    return grpc::Status::OK;
  }

  grpc::Status RevokeKey(grpc::ServerContext* context,
                         const v1::RevokeKeyRequest* request,
                         v1::RevokeKeyResponse* response) override {
    absl::MutexLock lock(&state_->mutex);
    Record(*context);
    for (v1::ApiKey& key : state_->keys) {
      if (key.key_id() != request->key_id()) continue;
      if (!key.has_revoked_at()) {
        key.mutable_revoked_at()->set_seconds(kRevokedAt);
      }
      *response->mutable_key() = key;
      return grpc::Status::OK;
    }
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("API key \"", request->key_id(), "\" does not exist"));
  }

 private:
  void Record(const grpc::ServerContext& context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mutex) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find("authorization");
    state_->key_authorizations.push_back(
        it == metadata.end()
            ? std::string()
            : std::string(it->second.data(), it->second.size()));
  }

  std::shared_ptr<FakeState> state_;
};

}  // namespace

FakeVerityServer::FakeVerityServer() : state_(std::make_shared<FakeState>()) {}

FakeVerityServer::~FakeVerityServer() {
  // Cancels streams a test left open instead of waiting for them forever.
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
  }
}

std::unique_ptr<FakeVerityServer> FakeVerityServer::Start() {
  std::unique_ptr<FakeVerityServer> fake(new FakeVerityServer());
  fake->services_.push_back(std::make_unique<FakeProjectService>(fake->state_));
  fake->services_.push_back(std::make_unique<FakeIngestService>(fake->state_));
  fake->services_.push_back(std::make_unique<FakeTruthService>(fake->state_));
  fake->services_.push_back(std::make_unique<FakeModelService>(fake->state_));
  fake->services_.push_back(
      std::make_unique<FakeAssignmentService>(fake->state_));
  fake->services_.push_back(std::make_unique<FakeKeyService>(fake->state_));
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &fake->port_);
  for (const auto& service : fake->services_) {
    builder.RegisterService(service.get());
  }
  fake->server_ = builder.BuildAndStart();
  if (fake->server_ == nullptr || fake->port_ == 0) {
    std::cerr << "FakeVerityServer: cannot start a gRPC server on 127.0.0.1\n";
    std::abort();
  }
  return fake;
}

std::string FakeVerityServer::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void FakeVerityServer::FailNextBatches(int n, absl::StatusCode code,
                                       std::string message) {
  absl::MutexLock lock(&state_->mutex);
  state_->fail_batches = n;
  state_->fail_code = code;
  state_->fail_message = std::move(message);
}

void FakeVerityServer::BreakNextStream(int after_batches,
                                       absl::StatusCode code) {
  absl::MutexLock lock(&state_->mutex);
  state_->break_after = after_batches;
  state_->break_code = code;
}

void FakeVerityServer::HoldAcksUntil(int n) {
  absl::MutexLock lock(&state_->mutex);
  state_->hold_acks = n;
}

std::vector<uint64_t> FakeVerityServer::received_batch_ids() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->batch_ids;
}

int FakeVerityServer::max_outstanding_batches() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->max_outstanding;
}

int FakeVerityServer::streams_opened() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->streams;
}

std::vector<std::string> FakeVerityServer::key_call_authorizations() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->key_authorizations;
}

void FakeVerityServer::Fit(const std::string& project) {
  absl::MutexLock lock(&state_->mutex);
  state_->projects.at(project).Fit();
}

std::optional<int32_t> FakeVerityServer::LiveLabel(
    const std::string& project, const std::string& item,
    const std::string& annotator) const {
  absl::MutexLock lock(&state_->mutex);
  auto p = state_->projects.find(project);
  if (p == state_->projects.end()) return std::nullopt;
  auto i = p->second.item_index.find(item);
  if (i == p->second.item_index.end()) return std::nullopt;
  const auto& labels = p->second.items[i->second].labels;
  auto l = labels.find(annotator);
  if (l == labels.end()) return std::nullopt;
  return l->second;
}

}  // namespace verity::client::testing
