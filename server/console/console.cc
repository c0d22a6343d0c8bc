#include "server/console/console.h"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/loopback.h"
#include "models/auto_truth_model.h"
#include "models/calibrated_truth_model.h"
#include "models/mace.h"
#include "server/api/validation.h"
#include "server/assignment/item_assigner.h"
#include "server/console/console_json.h"

namespace verity::server {
namespace {

constexpr char kJson[] = "application/json; charset=utf-8";
constexpr int32_t kHistogramBins = 10;

HttpResponse JsonResponse(int status, std::string body) {
  return HttpResponse{status, kJson, std::move(body)};
}

HttpResponse ErrorResponse(int status, absl::string_view message) {
  JsonWriter json;
  json.BeginObject().Key("error").String(message).EndObject();
  return JsonResponse(status, json.text());
}

HttpResponse StatusResponse(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound: return ErrorResponse(404, status.message());
    case absl::StatusCode::kInvalidArgument: return ErrorResponse(400, status.message());
    case absl::StatusCode::kUnavailable: return ErrorResponse(503, status.message());
    default: return ErrorResponse(500, status.ToString());
  }
}

// The method's name (unset: ds, the default of projects created before auto), or the enum's
// name where it has none.
std::string MethodNameOrEnum(v1::TruthMethod method) {
  if (method == v1::TRUTH_METHOD_UNSPECIFIED) method = v1::TRUTH_METHOD_DAWID_SKENE;
  absl::StatusOr<std::string> name = MethodName(method);
  return name.ok() ? *name : v1::TruthMethod_Name(method);
}

std::string ConfiguredMethod(const LiveProject& project) {
  return MethodNameOrEnum(project.settings().model().method());
}

// The model that computes the served posteriors, inside the calibration and auto wrappers.
const models::TruthModel& ServedModel(const models::TruthModel& model) {
  const models::TruthModel* served = &model;
  for (;;) {
    if (const auto* calibrated = dynamic_cast<const models::CalibratedTruthModel*>(served)) {
      served = &calibrated->inner();
    } else if (const auto* automatic = dynamic_cast<const models::AutoTruthModel*>(served)) {
      served = &automatic->served();
    } else {
      return *served;
    }
  }
}

int32_t ArgMax(absl::Span<const double> p) {
  return static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
}

// Resolved items / items now, or nullopt when the settings define no resolution or there are
// no items. O(items).
std::optional<double> ResolvedShare(LiveProject& project, absl::Time now) {
  const AssignmentRules rules = AssignmentRules::FromSettings(project.settings().assignment());
  if (rules.max_labels <= 0 && rules.confidence_target <= 0) return std::nullopt;
  std::shared_ptr<const ProjectSnapshot> snapshot = project.snapshot();
  const PosteriorTable& table = snapshot->posteriors;
  if (table.num_items() == 0) return std::nullopt;
  const absl::flat_hash_map<int32_t, int32_t> outstanding =
      project.leases().OutstandingPerItem(now);
  int64_t resolved = 0;
  for (int32_t item = 0; item < table.num_items(); ++item) {
    auto it = outstanding.find(item);
    if (IsResolved(table, item, it == outstanding.end() ? 0 : it->second, rules)) ++resolved;
  }
  return static_cast<double>(resolved) / table.num_items();
}

}  // namespace

WebConsole::WebConsole(ProjectRegistry& registry, storage::ModelVersionStore& versions,
                       Access access, storage::AnnotationStore* annotations)
    : registry_(registry),
      versions_(versions),
      access_(std::move(access)),
      annotations_(annotations),
      sampler_([this] {
        do {
          SampleProjects(absl::Now());
        } while (!stop_sampling_.WaitForNotificationWithTimeout(kSampleInterval));
      }) {}

WebConsole::~WebConsole() {
  stop_sampling_.Notify();
  sampler_.join();
}

void WebConsole::SampleProjects(absl::Time now) {
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) SampleProject(*project, now);
}

void WebConsole::SampleProject(LiveProject& project, absl::Time now) {
  const std::string& name = project.identity().name;
  {
    absl::MutexLock lock(&mu_);
    const std::deque<ProjectSample>& samples = history_[name];
    if (!samples.empty() && now - samples.back().time < kSampleInterval) return;
  }
  // Off the lock: O(items).
  ProjectSample sample{now, project.Counts().num_labels, ResolvedShare(project, now)};
  absl::MutexLock lock(&mu_);
  std::deque<ProjectSample>& samples = history_[name];
  if (!samples.empty() && now - samples.back().time < kSampleInterval) return;
  samples.push_back(sample);
  while (static_cast<int32_t>(samples.size()) > kHistorySamples) samples.pop_front();
}

bool WebConsole::HostAllowed(absl::string_view host_header) const {
  // A client without a Host header (HTTP/1.0) is no browser: DNS rebinding needs one.
  if (host_header.empty()) return true;
  absl::string_view host = host_header;
  if (absl::StartsWith(host, "[")) {
    const size_t end = host.find(']');
    if (end == absl::string_view::npos) return false;
    host = host.substr(1, end - 1);
  } else if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (IsLoopbackAddress(host)) return true;
  if (!access_.bound_host.empty() && access_.bound_host != "0.0.0.0" &&
      absl::EqualsIgnoreCase(host, access_.bound_host)) {
    return true;
  }
  for (const std::string& name : access_.allowed_hosts) {
    if (absl::EqualsIgnoreCase(host, name)) return true;
  }
  return false;
}

HttpResponse WebConsole::Handle(const HttpPageRequest& request) {
  const std::string& path = request.path;
  if (!HostAllowed(request.host)) {
    return ErrorResponse(403, absl::StrCat("Host \"", request.host.substr(0, 256),
                                           "\" is not an address of this console; name it in "
                                           "--console_allowed_hosts to allow it"));
  }
  if (path == "/" || path == "/index.html") {
    return HttpResponse{200, "text/html; charset=utf-8", kConsolePage};
  }
  if (!absl::StartsWith(path, "/api/")) return ErrorResponse(404, "no such page");
  ProjectFilter may_read = [](absl::string_view) { return true; };
  if (access_.authenticate) {
    absl::string_view key = request.authorization;
    if (!absl::ConsumePrefix(&key, "Bearer ") || key.empty()) {
      return ErrorResponse(401, "authentication is on: send an API key as "
                                "\"Authorization: Bearer KEY\"");
    }
    absl::StatusOr<ProjectFilter> filter = access_.authenticate(key);
    if (!filter.ok()) return ErrorResponse(401, filter.status().message());
    may_read = *std::move(filter);
  }
  constexpr absl::string_view kProjects = "/api/projects";
  if (path == kProjects || path == "/api/projects/") return Projects(may_read, absl::Now());
  if (!absl::StartsWith(path, "/api/projects/")) return ErrorResponse(404, "no such page");
  // {name} or {name}/annotators; project names never contain '/'.
  std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(path).substr(kProjects.size() + 1), '/');
  const bool annotators = parts.size() == 2 && parts[1] == "annotators";
  if (parts.size() != 1 && !annotators) return ErrorResponse(404, "no such page");
  if (absl::Status s = ValidateProjectName(parts[0]); !s.ok()) return StatusResponse(s);
  if (!may_read(parts[0])) {
    return ErrorResponse(403, absl::StrCat("the API key is not valid for project \"", parts[0],
                                           "\""));
  }
  absl::StatusOr<std::shared_ptr<LiveProject>> project = registry_.Get(parts[0]);
  if (!project.ok()) return StatusResponse(project.status());
  return annotators ? Annotators(**project) : Project(**project, absl::Now());
}

double WebConsole::IngestRate(const std::string& project, int64_t labels, absl::Time now) {
  auto it = history_.find(project);
  if (it == history_.end()) return -1;
  for (const ProjectSample& sample : it->second) {
    if (now - sample.time > kRateWindow) continue;
    const double seconds = absl::ToDoubleSeconds(now - sample.time);
    if (seconds < 1) return -1;
    return std::max<double>(0, labels - sample.labels) / seconds;
  }
  return -1;
}

absl::StatusOr<WebConsole::GoldReliability> WebConsole::ReliabilityOnGold(
    LiveProject& project, const ProjectSnapshot& snapshot, int64_t labels, absl::Time now) {
  const PosteriorTable& table = snapshot.posteriors;
  // Gold items and their class: a gold item's served posterior is one-hot on its gold label.
  absl::flat_hash_map<int32_t, int32_t> gold_class;
  for (int32_t item = 0; item < table.num_items(); ++item) {
    if (table.is_gold(item)) gold_class[item] = ArgMax(table.probabilities(item));
  }
  GoldReliability result;
  result.model_version = snapshot.model_version;
  result.labels = labels;
  result.computed_at = now;
  result.gold_items = static_cast<int64_t>(gold_class.size());
  if (gold_class.empty() || annotations_ == nullptr) return result;
  const std::string& name = project.identity().name;
  {
    absl::MutexLock lock(&mu_);
    auto it = reliability_.find(name);
    if (it != reliability_.end() && it->second.gold_items == result.gold_items &&
        ((it->second.model_version == result.model_version && it->second.labels == labels) ||
         now - it->second.computed_at < kReliabilityRefresh)) {
      return it->second;
    }
  }
  absl::StatusOr<std::vector<storage::LiveAnnotation>> stored =
      annotations_->LoadLiveAnnotations(project.identity().project_id);
  if (!stored.ok()) return stored.status();
  absl::flat_hash_map<int32_t, std::vector<models::AnnotationMatrix::Entry>> gold_labels;
  for (const storage::LiveAnnotation& a : *stored) {
    if (gold_class.contains(a.item_index)) {
      gold_labels[a.item_index].push_back({a.annotator_index, a.label});
    }
  }
  std::vector<double> confidence;
  std::unique_ptr<bool[]> correct(new bool[gold_labels.size()]);
  std::vector<double> posterior(project.num_classes());
  for (const auto& [item, item_labels] : gold_labels) {
    snapshot.model->ItemPosteriorForItem(item, item_labels, /*gold_label=*/-1,
                                         absl::MakeSpan(posterior));
    correct[confidence.size()] = ArgMax(posterior) == gold_class[item];
    confidence.push_back(*std::max_element(posterior.begin(), posterior.end()));
  }
  result.gold_items_with_labels = static_cast<int64_t>(confidence.size());
  if (!confidence.empty()) {
    result.reliability = ComputeReliability(
        confidence, absl::MakeConstSpan(correct.get(), confidence.size()), kReliabilityBins);
  }
  absl::MutexLock lock(&mu_);
  reliability_[name] = result;
  return result;
}

HttpResponse WebConsole::Projects(const ProjectFilter& may_read, absl::Time now) {
  // The loaded projects, and the ones the memory budget unloaded as they were then (listing
  // loads nothing, as ListProjects).
  std::vector<std::pair<ProjectSummary, bool>> projects;  // The summary, and whether loaded.
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) {
    if (may_read(project->identity().name)) projects.emplace_back(project->Summary(), true);
  }
  for (ProjectSummary& unloaded : registry_.UnloadedSummaries()) {
    if (may_read(unloaded.name)) projects.emplace_back(std::move(unloaded), false);
  }
  std::sort(projects.begin(), projects.end(),
            [](const auto& a, const auto& b) { return a.first.name < b.first.name; });
  JsonWriter json;
  json.BeginObject().Key("projects").BeginArray();
  for (const auto& [project, loaded] : projects) {
    json.BeginObject();
    json.Key("name").String(project.name);
    json.Key("classes").BeginArray();
    for (const std::string& c : project.classes) json.String(c);
    json.EndArray();
    json.Key("items").Int(project.counts.num_items);
    json.Key("annotators").Int(project.counts.num_annotators);
    json.Key("labels").Int(project.counts.num_labels);
    double rate;
    {
      absl::MutexLock lock(&mu_);
      rate = IngestRate(project.name, project.counts.num_labels, now);
    }
    json.Key("labels_per_second");
    if (rate >= 0) {
      json.Double(rate);
    } else {
      json.Null();
    }
    json.Key("method").String(MethodNameOrEnum(project.method));
    json.Key("model_version").Int(project.model_version);
    json.Key("model_method").String(project.model_method);
    // auto: the method it chose for the served version and why ("" otherwise).
    json.Key("chosen_method").String(project.chosen_method);
    json.Key("choice_reason").String(project.choice_reason);
    json.Key("training").Bool(project.counts.training);
    json.Key("loaded").Bool(loaded);
    json.EndObject();
  }
  json.EndArray().EndObject();
  return JsonResponse(200, json.text());
}

HttpResponse WebConsole::Project(LiveProject& project, absl::Time now) {
  absl::StatusOr<std::vector<storage::ModelVersionRecord>> versions =
      versions_.ListModelVersions(project.identity().project_id, kMaxVersions);
  if (!versions.ok()) return StatusResponse(versions.status());
  const ProjectCounts counts = project.Counts();
  std::shared_ptr<const ProjectSnapshot> snapshot = project.snapshot();
  const PosteriorTable& table = snapshot->posteriors;
  const int32_t k = project.num_classes();
  absl::StatusOr<GoldReliability> reliability =
      ReliabilityOnGold(project, *snapshot, counts.num_labels, now);
  if (!reliability.ok()) return StatusResponse(reliability.status());
  const AssignmentRules rules = AssignmentRules::FromSettings(project.settings().assignment());
  const bool resolution_defined = rules.max_labels > 0 || rules.confidence_target > 0;
  absl::flat_hash_map<int32_t, int32_t> outstanding = project.leases().OutstandingPerItem(now);
  int64_t outstanding_leases = 0;
  for (const auto& [item, count] : outstanding) outstanding_leases += count;

  // Confidence (the largest posterior) lies in [1/K, 1]: the bins split that range evenly.
  const double low = 1.0 / k;
  std::vector<int64_t> bins(kHistogramBins, 0);
  int64_t resolved = 0;
  for (int32_t item = 0; item < table.num_items(); ++item) {
    absl::Span<const double> p = table.probabilities(item);
    const double confidence = *std::max_element(p.begin(), p.end());
    const int32_t bin = static_cast<int32_t>((confidence - low) / (1 - low) * kHistogramBins);
    ++bins[std::clamp(bin, 0, kHistogramBins - 1)];
    if (resolution_defined) {
      auto it = outstanding.find(item);
      if (IsResolved(table, item, it == outstanding.end() ? 0 : it->second, rules)) ++resolved;
    }
  }

  JsonWriter json;
  json.BeginObject();
  json.Key("name").String(project.identity().name);
  json.Key("classes").BeginArray();
  for (const std::string& c : project.identity().classes) json.String(c);
  json.EndArray();
  json.Key("items").Int(counts.num_items);
  json.Key("annotators").Int(counts.num_annotators);
  json.Key("labels").Int(counts.num_labels);
  json.Key("labels_since_version").Int(counts.labels_since_version);
  json.Key("training").Bool(counts.training);
  json.Key("method").String(ConfiguredMethod(project));
  json.Key("model_version").Int(snapshot->model_version);
  json.Key("model_method").String(std::string(snapshot->model->method()));
  json.Key("class_prior").BeginArray();
  for (double p : snapshot->ClassPrior()) json.Double(p);
  json.EndArray();
  json.Key("confidence_histogram").BeginObject();
  json.Key("low").Double(low).Key("high").Double(1.0);
  json.Key("counts").BeginArray();
  for (int64_t count : bins) json.Int(count);
  json.EndArray().EndObject();
  json.Key("assignment").BeginObject();
  json.Key("confidence_target").Double(rules.confidence_target);
  json.Key("min_labels_per_item").Int(rules.min_labels);
  json.Key("max_labels_per_item").Int(rules.max_labels);
  json.Key("outstanding_leases").Int(outstanding_leases);
  json.Key("items_with_leases").Int(static_cast<int64_t>(outstanding.size()));
  // Without a confidence target or a label cap no item is ever resolved: null, not 0.
  json.Key("resolved_items");
  if (resolution_defined) {
    json.Int(resolved);
  } else {
    json.Null();
  }
  json.Key("resolved_share");
  if (resolution_defined && table.num_items() > 0) {
    json.Double(static_cast<double>(resolved) / table.num_items());
  } else {
    json.Null();
  }
  json.Key("open_items");
  if (resolution_defined) {
    json.Int(table.num_items() - resolved);
  } else {
    json.Null();
  }
  json.EndObject();
  json.Key("versions").BeginArray();
  for (const storage::ModelVersionRecord& v : *versions) {
    json.BeginObject();
    json.Key("version").Int(v.version);
    json.Key("method").String(v.method);
    json.Key("num_labels").Int(v.num_labels);
    json.Key("log_likelihood").Double(v.log_likelihood);
    json.Key("iterations").Int(v.iterations);
    json.Key("duration_ms").Double(v.duration_ms);
    json.Key("created_at").String(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", v.created_at,
                                                   absl::UTCTimeZone()));
    json.EndObject();
  }
  json.EndArray();
  {
    // A project created since the last tick gets its first sample now.
    SampleProject(project, now);
    std::vector<ProjectSample> samples;
    {
      absl::MutexLock lock(&mu_);
      auto it = history_.find(project.identity().name);
      if (it != history_.end()) samples.assign(it->second.begin(), it->second.end());
    }
    json.Key("history");
    WriteHistory(samples, json);
  }
  json.Key("gold_items").Int(reliability->gold_items);
  json.Key("gold_items_with_labels").Int(reliability->gold_items_with_labels);
  json.Key("reliability");
  if (reliability->reliability.has_value()) {
    WriteReliability(*reliability->reliability, json);
  } else {
    json.Null();
  }
  json.EndObject();
  return JsonResponse(200, json.text());
}

HttpResponse WebConsole::Annotators(LiveProject& project) {
  std::shared_ptr<const ProjectSnapshot> snapshot = project.snapshot();
  const int32_t k = project.num_classes();
  const std::vector<double>& prior = snapshot->ClassPrior();
  const std::vector<std::string> ids = project.AnnotatorIds();
  JsonWriter json;
  json.BeginObject();
  json.Key("name").String(project.identity().name);
  json.Key("classes").BeginArray();
  for (const std::string& c : project.identity().classes) json.String(c);
  json.EndArray();
  json.Key("model_version").Int(snapshot->model_version);
  // mace's spam score: 1 - theta_j, the chance that the annotator labels at random.
  const auto* mace = dynamic_cast<const models::MaceModel*>(&ServedModel(*snapshot->model));
  json.Key("spam_scores").Bool(mace != nullptr);
  // Learned embeddings (lia, conal): every annotator's on the first two principal components.
  std::vector<std::array<double, 2>> map;
  int32_t embedding_dim = 0;
  if (static_cast<int32_t>(ids.size()) <= kMaxEmbeddingAnnotators) {
    std::vector<std::vector<float>> embeddings;
    for (int32_t a = 0; a < static_cast<int32_t>(ids.size()); ++a) {
      embeddings.push_back(snapshot->model->AnnotatorEmbedding(a));
      if (embeddings.back().empty()) {
        embeddings.clear();  // Not a model with embeddings, or an annotator not in the fit.
        break;
      }
    }
    if (!embeddings.empty()) {
      embedding_dim = static_cast<int32_t>(embeddings[0].size());
      map = PrincipalComponents2D(embeddings);
    }
  }
  json.Key("embedding_dim").Int(map.empty() ? 0 : embedding_dim);
  // The annotators with the most labels (then the earliest registered), as many as the bounds
  // of console.h allow.
  std::vector<int32_t> listed(ids.size());
  std::vector<int32_t> label_counts(ids.size());
  for (int32_t a = 0; a < static_cast<int32_t>(ids.size()); ++a) {
    listed[a] = a;
    label_counts[a] = project.AnnotatorLabelCount(a);
  }
  int64_t most = kMaxListedAnnotators;
  if (k <= kMaxConfusionClasses) {
    most = std::min<int64_t>(most, kMaxListedConfusionCells / (int64_t{k} * k));
  }
  const size_t shown = std::min<size_t>(listed.size(), static_cast<size_t>(most));
  std::partial_sort(listed.begin(), listed.begin() + shown, listed.end(),
                    [&label_counts](int32_t x, int32_t y) {
                      return label_counts[x] != label_counts[y] ? label_counts[x] > label_counts[y]
                                                                : x < y;
                    });
  listed.resize(shown);
  json.Key("annotators_total").Int(static_cast<int64_t>(ids.size()));
  json.Key("annotators").BeginArray();
  for (const int32_t a : listed) {
    // Estimated accuracy: the chance of a correct label on an item drawn from the prior. The
    // diagonal is O(K); the full matrix is built only for the few classes the page draws.
    const std::vector<double> diagonal = snapshot->model->AnnotatorConfusionDiagonal(a);
    double accuracy = 0;
    for (int32_t c = 0; c < k; ++c) accuracy += prior[c] * diagonal[c];
    json.BeginObject();
    json.Key("id").String(ids[a]);
    json.Key("labels").Int(label_counts[a]);
    json.Key("accuracy").Double(accuracy);
    json.Key("confusion");
    if (k <= kMaxConfusionClasses) {
      const std::vector<double> confusion = snapshot->model->AnnotatorConfusion(a);
      json.BeginArray();  // Rows: true class; columns: the label given.
      for (int32_t row = 0; row < k; ++row) {
        json.BeginArray();
        for (int32_t col = 0; col < k; ++col) json.Double(confusion[row * k + col]);
        json.EndArray();
      }
      json.EndArray();
    } else {
      json.Null();
    }
    json.Key("spam_score");
    std::optional<double> competence;
    if (mace != nullptr) competence = mace->AnnotatorCompetence(a);
    if (competence.has_value()) {
      json.Double(1 - *competence);
    } else {
      json.Null();
    }
    json.Key("embedding_2d");
    if (!map.empty()) {
      json.BeginArray().Double(map[a][0]).Double(map[a][1]).EndArray();
    } else {
      json.Null();
    }
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  return JsonResponse(200, json.text());
}

}  // namespace verity::server
