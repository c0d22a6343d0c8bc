#include "server/rpc/truth_service.h"

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/api/grpc_status.h"
#include "server/api/validation.h"

namespace verity::server {
namespace {

void FillPosterior(const ProjectSnapshot& snapshot, int32_t item, std::string item_id,
                   v1::Posterior* out) {
  const PosteriorTable& table = snapshot.posteriors;
  out->set_item(std::move(item_id));
  if (item >= table.num_items()) {
    // Registered after this snapshot was taken: no labels yet, uniform.
    const int32_t k = table.num_classes();
    for (int32_t c = 0; c < k; ++c) out->add_probabilities(1.0 / k);
    out->set_confidence(1.0 / k);
    out->set_model_version(snapshot.model_version);
    return;
  }
  absl::Span<const double> p = table.probabilities(item);
  out->mutable_probabilities()->Reserve(static_cast<int>(p.size()));
  int32_t best = 0;
  for (int32_t c = 0; c < static_cast<int32_t>(p.size()); ++c) {
    out->add_probabilities(p[c]);
    if (p[c] > p[best]) best = c;
  }
  out->set_map_label(best);
  out->set_confidence(p[best]);
  out->set_num_labels(table.num_labels(item));
  out->set_model_version(snapshot.model_version);
  out->set_includes_newer_labels(table.newest_seq(item) > snapshot.model_watermark);
  out->set_is_gold(table.is_gold(item));
  if (const std::optional<double> d = snapshot.model->ItemDifficulty(item); d.has_value()) {
    out->set_difficulty(*d);
  }
}

// An upper bound of one posterior's encoded size: the id, K packed doubles, the scalars.
int64_t PosteriorBytesBound(int32_t num_classes, absl::string_view item_id) {
  return static_cast<int64_t>(item_id.size()) + int64_t{8} * num_classes + 64;
}

// What the posteriors of one response may take: the response limit, less room for the
// message's own framing.
constexpr int64_t kPosteriorBytesBudget = ApiLimits::kMaxMessageBytes - 4096;

}  // namespace

grpc::Status TruthServiceImpl::GetPosteriors(grpc::ServerContext* context,
                                             const v1::GetPosteriorsRequest* request,
                                             v1::GetPosteriorsResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  if (request->items_size() == 0 || request->items_size() > ApiLimits::kMaxItemsPerCall) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "items: need 1 to ", ApiLimits::kMaxItemsPerCall, " item ids, got ", request->items_size())));
  }
  for (int i = 0; i < request->items_size(); ++i) {
    if (absl::Status s = ValidateId(absl::StrCat("items[", i, "]"), request->items(i)); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  std::shared_ptr<const ProjectSnapshot> snapshot = (*project)->snapshot();
  const std::vector<absl::string_view> ids(request->items().begin(), request->items().end());
  const std::vector<std::optional<int32_t>> indices = (*project)->FindItems(ids);
  int64_t bytes = 0;
  for (absl::string_view id : ids) bytes += PosteriorBytesBound((*project)->num_classes(), id);
  if (bytes > kPosteriorBytesBudget) {
    return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        "items: the posteriors of ", ids.size(), " items with ", (*project)->num_classes(),
        " classes take about ", bytes, " bytes, over the ", ApiLimits::kMaxMessageBytes,
        "-byte response limit: ask for fewer ids")));
  }
  if (absl::Status s = core_.auth->ReserveAnswerBytes(context, bytes); !s.ok()) {
    return ToGrpcStatus(s);
  }
  response->mutable_posteriors()->Reserve(request->items_size());
  for (int i = 0; i < request->items_size(); ++i) {
    const std::string& id = request->items(i);
    if (!indices[i].has_value()) {
      return ToGrpcStatus(absl::NotFoundError(absl::StrCat(
          "items[", i, "]: item \"", id.substr(0, ApiLimits::kMaxIdBytes), "\" not found in project ",
          request->project())));
    }
    FillPosterior(*snapshot, *indices[i], id, response->add_posteriors());
  }
  return grpc::Status::OK;
}

grpc::Status TruthServiceImpl::ListPosteriors(grpc::ServerContext* context,
                                              const v1::ListPosteriorsRequest* request,
                                              v1::ListPosteriorsResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  int32_t page_size = request->page_size() == 0 ? ApiLimits::kDefaultPageSize : request->page_size();
  if (page_size < 0 || page_size > ApiLimits::kMaxPageSize) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, ", ApiLimits::kMaxPageSize, "]")));
  }
  absl::StatusOr<int64_t> token =
      ParsePageToken(request->page_token(), std::numeric_limits<int32_t>::max());
  if (!token.ok()) return ToGrpcStatus(token.status());
  const int32_t first = static_cast<int32_t>(*token);
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  std::shared_ptr<const ProjectSnapshot> snapshot = (*project)->snapshot();
  std::vector<std::string> ids = (*project)->ItemIds(first, page_size);
  // The page ends early where its posteriors would pass the response limit (many classes).
  int64_t bytes = 0;
  int32_t served = 0;
  for (const std::string& id : ids) {
    const int64_t more = PosteriorBytesBound((*project)->num_classes(), id);
    if (bytes + more > kPosteriorBytesBudget && served > 0) break;
    bytes += more;
    ++served;
  }
  if (absl::Status s = core_.auth->ReserveAnswerBytes(context, bytes); !s.ok()) {
    return ToGrpcStatus(s);
  }
  response->mutable_posteriors()->Reserve(served);
  for (int32_t j = 0; j < served; ++j) {
    FillPosterior(*snapshot, first + j, std::move(ids[j]), response->add_posteriors());
  }
  if ((*project)->Counts().num_items > int64_t{first} + served) {
    response->set_next_page_token(absl::StrCat(int64_t{first} + served));
  }
  return grpc::Status::OK;
}

grpc::Status TruthServiceImpl::GetAnnotatorProfiles(grpc::ServerContext* context,
                                                    const v1::GetAnnotatorProfilesRequest* request,
                                                    v1::GetAnnotatorProfilesResponse* response) {
  if (auto admitted = core_.auth->Admit(context); !admitted.ok()) {
    return ToGrpcStatus(admitted.status());
  }
  if (absl::Status s = ValidateProjectName(request->project()); !s.ok()) return ToGrpcStatus(s);
  if (request->annotators_size() > ApiLimits::kMaxItemsPerCall) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("annotators: at most ", ApiLimits::kMaxItemsPerCall, " ids")));
  }
  for (int i = 0; i < request->annotators_size(); ++i) {
    if (absl::Status s = ValidateId(absl::StrCat("annotators[", i, "]"), request->annotators(i));
        !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  const int32_t page_size = request->page_size() == 0 ? 1000 : request->page_size();
  if (page_size < 0 || page_size > ApiLimits::kMaxItemsPerCall) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, ", ApiLimits::kMaxItemsPerCall, "]")));
  }
  if (!request->page_token().empty() && request->annotators_size() > 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("page_token: only without annotator ids"));
  }
  absl::StatusOr<int64_t> token =
      ParsePageToken(request->page_token(), std::numeric_limits<int64_t>::max());
  if (!token.ok()) return ToGrpcStatus(token.status());
  const int64_t first = *token;
  if (request->confusion_detail() != v1::CONFUSION_DETAIL_FULL &&
      request->confusion_detail() != v1::CONFUSION_DETAIL_NONE) {
    return ToGrpcStatus(absl::InvalidArgumentError("confusion_detail: unknown value"));
  }
  auto project = core_.registry->Get(request->project());
  if (!project.ok()) return ToGrpcStatus(project.status());
  LiveProject& live = **project;
  std::shared_ptr<const ProjectSnapshot> snapshot = live.snapshot();
  const int32_t k = live.num_classes();
  const bool with_confusion = request->confusion_detail() == v1::CONFUSION_DETAIL_FULL;
  // An upper bound of one profile's encoded size: the id, the matrix, the embedding (the same
  // size for every annotator of a model), the scalars and tags.
  const int64_t embedding_bytes =
      static_cast<int64_t>(snapshot->model->AnnotatorEmbedding(0).size()) * 4 + 16;
  auto profile_bytes = [&](const std::string& id) {
    return static_cast<int64_t>(id.size()) + 64 + embedding_bytes +
           (with_confusion ? static_cast<int64_t>(k) * k * 8 + 16 : 0);
  };
  const int64_t budget = ApiLimits::kMaxMessageBytes - 4096;
  std::vector<std::pair<int32_t, std::string>> wanted;
  int64_t bytes = 0;  // The bound of the answer's encoded size.
  if (request->annotators_size() == 0) {
    // This page's ids only: copying every id for each page made paging through A annotators
    // cost O(A² / page_size).
    LiveProject::AnnotatorIdPage page = live.AnnotatorIds(first, page_size);
    for (size_t j = 0; j < page.ids.size(); ++j) {
      const int64_t more = profile_bytes(page.ids[j]);
      if (bytes + more > budget && !wanted.empty()) break;  // The page ends inside the limit.
      bytes += more;
      wanted.emplace_back(static_cast<int32_t>(first + static_cast<int64_t>(j)),
                          std::move(page.ids[j]));
    }
    const int64_t next = first + static_cast<int64_t>(wanted.size());
    if (next < page.total) response->set_next_page_token(absl::StrCat(next));
  } else {
    absl::flat_hash_set<int32_t> seen;
    for (int i = 0; i < request->annotators_size(); ++i) {
      std::optional<int32_t> index = live.FindAnnotator(request->annotators(i));
      if (!index.has_value()) {
        return ToGrpcStatus(absl::NotFoundError(absl::StrCat(
            "annotators[", i, "]: annotator \"",
            request->annotators(i).substr(0, ApiLimits::kMaxIdBytes), "\" not found")));
      }
      if (!seen.insert(*index).second) continue;
      bytes += profile_bytes(request->annotators(i));
      wanted.emplace_back(*index, request->annotators(i));
    }
    if (bytes > budget) {
      return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
          "annotators: the profiles of ", wanted.size(), " annotators with ", k,
          " classes take about ", bytes, " bytes, over the ", ApiLimits::kMaxMessageBytes,
          "-byte response limit: ask for fewer ids, or confusion_detail=CONFUSION_DETAIL_NONE")));
    }
  }
  if (absl::Status s = core_.auth->ReserveAnswerBytes(context, bytes); !s.ok()) {
    return ToGrpcStatus(s);
  }
  const std::vector<double>& class_prior = snapshot->ClassPrior();
  std::vector<double> confusion;
  for (auto& [index, id] : wanted) {
    v1::AnnotatorProfile* profile = response->add_profiles();
    profile->set_annotator(std::move(id));
    // The accuracy needs only the diagonal (O(K) for the models that keep confusions
    // sparsely); the full matrix is built only when asked for.
    const std::vector<double> predicted = live.ConfusionPredictedFromFeatures(*snapshot, index);
    std::vector<double> diagonal;
    if (predicted.empty()) {
      diagonal = snapshot->model->AnnotatorConfusionDiagonal(index);
    } else {
      for (int32_t c = 0; c < k; ++c) diagonal.push_back(predicted[static_cast<size_t>(c) * k + c]);
      profile->set_predicted_from_features(true);
    }
    double accuracy = 0;
    for (int32_t c = 0; c < k; ++c) accuracy += class_prior[c] * diagonal[c];
    if (with_confusion) {
      confusion = predicted.empty() ? snapshot->model->AnnotatorConfusion(index) : predicted;
      profile->mutable_confusion()->set_num_classes(k);
      profile->mutable_confusion()->mutable_probabilities()->Add(confusion.begin(),
                                                                 confusion.end());
    }
    profile->set_accuracy(accuracy);
    profile->set_num_labels(live.AnnotatorLabelCount(index));
    const std::vector<float> embedding = snapshot->model->AnnotatorEmbedding(index);
    profile->mutable_embedding()->Add(embedding.begin(), embedding.end());
  }
  return grpc::Status::OK;
}

}  // namespace verity::server
