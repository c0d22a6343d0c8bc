#include "server/state/live_project.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "models/auto_truth_model.h"
#include "models/calibrated_truth_model.h"
#include "models/truth_model_factory.h"
#include "server/observability/log.h"
#include "server/state/information_gain.h"
#include "server/state/version_outputs.h"

namespace verity::server {
namespace {

std::shared_ptr<const models::TruthModel> MajorityVoteModel(int32_t num_classes,
                                                            const v1::ModelSettings& settings) {
  auto model = models::CreateTruthModel("mv", num_classes, ModelOptionsFromSettings(settings));
  // "mv" with validated options cannot fail; fall back to defaults if the options were bad.
  if (!model.ok()) model = models::CreateTruthModel("mv", num_classes, {});
  return std::shared_ptr<const models::TruthModel>(std::move(*model));
}

}  // namespace

namespace {

// v1 enum ↔ models:: method name. A method is served once the models factory knows its name.
constexpr std::pair<v1::TruthMethod, const char*> kMethodNames[] = {
    {v1::TRUTH_METHOD_MAJORITY_VOTE, "mv"}, {v1::TRUTH_METHOD_DAWID_SKENE, "ds"},
    {v1::TRUTH_METHOD_ONE_COIN, "one_coin"}, {v1::TRUTH_METHOD_GLAD, "glad"},
    {v1::TRUTH_METHOD_LIA, "lia"},          {v1::TRUTH_METHOD_CROWDLAYER, "crowdlayer"},
    {v1::TRUTH_METHOD_TRACE_REG, "trace_reg"}, {v1::TRUTH_METHOD_CONAL, "conal"},
    {v1::TRUTH_METHOD_CMM, "cmm"},          {v1::TRUTH_METHOD_WAWA, "wawa"},
    {v1::TRUTH_METHOD_ZERO_BASED_SKILL, "zero_based_skill"}, {v1::TRUTH_METHOD_KOS, "kos"},
    {v1::TRUTH_METHOD_MACE, "mace"},
    {v1::TRUTH_METHOD_BWA, "bwa"},
    {v1::TRUTH_METHOD_IBCC, "ibcc"},
    {v1::TRUTH_METHOD_EBCC, "ebcc"},
    {v1::TRUTH_METHOD_MMSR, "mmsr"},
    {v1::TRUTH_METHOD_AUTO, "auto"},
};

}  // namespace

absl::StatusOr<std::string> MethodName(v1::TruthMethod method) {
  if (method == v1::TRUTH_METHOD_UNSPECIFIED) method = v1::TRUTH_METHOD_DAWID_SKENE;
  const char* name = nullptr;
  for (const auto& [m, n] : kMethodNames) {
    if (m == method) name = n;
  }
  std::vector<std::string_view> known = models::KnownTruthModelMethods();
  if (name != nullptr && std::find(known.begin(), known.end(), name) != known.end()) {
    return std::string(name);
  }
  std::string served;
  for (const auto& [m, n] : kMethodNames) {
    if (std::find(known.begin(), known.end(), n) == known.end()) continue;
    absl::StrAppend(&served, served.empty() ? "" : ", ", v1::TruthMethod_Name(m));
  }
  // An enum value this release does not know (a newer client's, or a stored one) has no name.
  const std::string asked = v1::TruthMethod_IsValid(method)
                                ? v1::TruthMethod_Name(method)
                                : absl::StrCat(static_cast<int>(method), " (unknown)");
  return absl::UnimplementedError(
      absl::StrCat("truth method ", asked, " is not built yet; this release serves ", served));
}

v1::TruthMethod MethodFromName(absl::string_view name) {
  for (const auto& [m, n] : kMethodNames) {
    if (name == n) return m;
  }
  return v1::TRUTH_METHOD_UNSPECIFIED;
}

namespace {

absl::Mutex training_device_mu(absl::kConstInit);
std::string& TrainingDevice() ABSL_EXCLUSIVE_LOCKS_REQUIRED(training_device_mu) {
  static std::string* device = new std::string("auto");
  return *device;
}

}  // namespace

absl::Status SetTrainingDevice(const std::string& device) {
  absl::string_view index = device;
  const bool known = device == "auto" || device == "cpu" || device == "cuda" ||
                     (absl::ConsumePrefix(&index, "cuda:") && !index.empty() &&
                      std::all_of(index.begin(), index.end(), absl::ascii_isdigit));
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be auto, cpu, cuda or cuda:N, got \"", device, "\""));
  }
  absl::MutexLock lock(&training_device_mu);
  TrainingDevice() = device;
  return absl::OkStatus();
}

models::TruthModelOptions ModelOptionsFromSettings(const v1::ModelSettings& settings) {
  models::TruthModelOptions options;
  {
    absl::MutexLock lock(&training_device_mu);
    options.neural.device = TrainingDevice();
  }
  if (settings.confusion_smoothing() > 0) options.confusion_smoothing = settings.confusion_smoothing();
  if (settings.prior_smoothing() > 0) options.prior_smoothing = settings.prior_smoothing();
  if (settings.max_iterations() > 0) options.max_iterations = settings.max_iterations();
  if (settings.tolerance() > 0) options.tolerance = settings.tolerance();
  if (!settings.calibration().empty()) options.calibration = settings.calibration();
  // Fits run on the trainer thread, off the request path: use the machine's cores.
  options.num_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  return options;
}

LiveProject::LiveProject(Identity identity, v1::ProjectSettings settings)
    : identity_(std::move(identity)),
      settings_(std::move(settings)),
      labels_(static_cast<int32_t>(identity_.classes.size())) {}

absl::StatusOr<std::unique_ptr<LiveProject>> LiveProject::Create(Identity identity,
                                                                 v1::ProjectSettings settings,
                                                                 StoredState stored) {
  std::unique_ptr<LiveProject> project(new LiveProject(std::move(identity), std::move(settings)));
  LiveProject& p = *project;
  const int32_t k = p.num_classes();
  absl::MutexLock lock(&p.mu_);
  for (size_t i = 0; i < stored.item_ids.size(); ++i) p.EnsureItem(i, stored.item_ids[i]);
  for (size_t i = 0; i < stored.gold.size() && i < p.gold_.size(); ++i) p.gold_[i] = stored.gold[i];
  for (size_t i = 0; i < stored.priority.size() && i < p.item_priority_.size(); ++i) {
    p.item_priority_[i] = stored.priority[i];
  }
  if (p.identity_.item_feature_dim > 0) {
    p.item_features_ = std::move(stored.item_features);
    p.item_features_.resize(p.item_ids_.size() * static_cast<size_t>(p.identity_.item_feature_dim), 0.0f);
  }
  for (size_t a = 0; a < stored.annotator_ids.size(); ++a) {
    p.EnsureAnnotator(a, stored.annotator_ids[a]);
  }
  if (p.identity_.annotator_feature_dim > 0) {
    p.annotator_features_ = std::move(stored.annotator_features);
    p.annotator_features_.resize(
        p.annotator_ids_.size() * static_cast<size_t>(p.identity_.annotator_feature_dim), 0.0f);
    p.annotator_has_features_ = std::move(stored.annotator_has_features);
    p.annotator_has_features_.resize(p.annotator_ids_.size(), false);
  }
  for (const storage::LeaseRecord& lease : stored.open_leases) {
    p.leases_.Add(lease.item_index, lease.annotator_index, lease.expires_at);
  }
  // Stored labels go straight into CSR arrays: one sort, no per-label row updates.
  std::vector<models::Annotation> triples;
  triples.reserve(stored.labels.size());
  for (const StoredState::Label& l : stored.labels) {
    if (l.item < 0 || l.item >= static_cast<int32_t>(p.item_ids_.size()) || l.annotator < 0 ||
        l.annotator >= static_cast<int32_t>(p.annotator_ids_.size()) || l.label < 0 ||
        l.label >= k) {
      return absl::InternalError(absl::StrCat("project ", p.identity_.name,
                                              ": stored label out of range (item ", l.item,
                                              ", annotator ", l.annotator, ", label ", l.label,
                                              ")"));
    }
    triples.push_back({l.item, l.annotator, l.label});
    p.item_newest_seq_[l.item] = std::max(p.item_newest_seq_[l.item], l.seq);
    p.newest_seq_ = std::max(p.newest_seq_, l.seq);
  }
  // The stored labels are one snapshot's live labels, complete through their newest seq.
  p.applied_seq_ = p.newest_seq_;
  p.followed_change_seq_ = stored.change_seq;
  p.history_rows_ = stored.history_rows;
  absl::StatusOr<models::AnnotationMatrix> stored_matrix = models::AnnotationMatrix::Build(
      static_cast<int32_t>(p.item_ids_.size()), static_cast<int32_t>(p.annotator_ids_.size()), k,
      triples);
  if (!stored_matrix.ok()) return stored_matrix.status();
  for (int32_t a = 0; a < stored_matrix->num_annotators(); ++a) {
    p.annotator_label_counts_[a] = static_cast<int32_t>(stored_matrix->LabelsOfAnnotator(a).size());
  }
  p.labels_.Reset(std::make_shared<const models::AnnotationMatrix>(std::move(*stored_matrix)));

  std::shared_ptr<const models::TruthModel> model;
  const storage::ModelVersionRecord* served = nullptr;  // The restored version, if any.
  int64_t watermark = 0;
  if (stored.latest_version.has_value()) {
    const storage::ModelVersionRecord& v = *stored.latest_version;
    auto restored = models::CreateTruthModel(v.method, k, ModelOptionsFromSettings(p.settings_.model()));
    if (!restored.ok()) return restored.status();
    if (absl::Status s = (*restored)->Restore(v.parameters, p.RestoreBoundsLocked()); !s.ok()) {
      // Never loaded: the project serves majority vote until its next fit (every label counts
      // as new, so one is due), rather than not at all.
      LogEvent("model_version_refused", {{"project", p.identity_.name},
                                         {"version", std::to_string(v.version)},
                                         {"error", std::string(s.message())}});
    } else {
      model = std::move(*restored);
      // The base of the version's chain of warm starts, not its own label count: that would let
      // chained warm starts creep past kMaxWarmStartGrowth across a restart (glad on bluebirds
      // then served its classes swapped). 0 (not known: stored before the column existed)
      // makes the first refit after the restart one from scratch.
      p.scratch_fit_num_labels_ = v.scratch_num_labels;
      served = &v;
      watermark = v.watermark;
    }
  }
  if (model == nullptr) model = MajorityVoteModel(k, p.settings_.model());
  // Labels the restored version did not see count toward the next refit, as they did before.
  p.changes_since_fit_ = 0;
  for (const StoredState::Label& l : stored.labels) {
    if (l.seq > watermark) ++p.changes_since_fit_;
  }
  p.last_fit_time_ = absl::Now();
  p.PublishFullRecompute(std::move(model), served);
  return project;
}

models::TruthModel::RestoreBounds LiveProject::RestoreBoundsLocked() const {
  models::TruthModel::RestoreBounds bounds;
  bounds.max_items = static_cast<int64_t>(item_ids_.size());
  bounds.max_annotators = static_cast<int64_t>(annotator_ids_.size());
  bounds.max_item_feature_dim = identity_.item_feature_dim;
  bounds.max_annotator_feature_dim = identity_.annotator_feature_dim;
  return bounds;
}

v1::ProjectSettings LiveProject::settings() const {
  absl::ReaderMutexLock lock(&mu_);
  return settings_;
}

void LiveProject::SetSettings(v1::ProjectSettings settings) {
  absl::MutexLock lock(&mu_);
  if (settings.model().SerializeAsString() != settings_.model().SerializeAsString()) {
    ++input_generation_;
    failed_fits_in_a_row_ = 0;  // Another method or setting may well fit: no back-off.
  }
  const v1::ModelSettings& was = settings_.model();
  const v1::ModelSettings& now = settings.model();
  if (now.confusion_smoothing() != was.confusion_smoothing() ||
      now.prior_smoothing() != was.prior_smoothing() ||
      now.max_iterations() != was.max_iterations() || now.tolerance() != was.tolerance()) {
    ++options_generation_;
  }
  settings_ = std::move(settings);
  // models.proto: the calibration is absent when ModelSettings.calibration is "none". Switched
  // off, the served version serves its model's own posteriors at once, as it would after a
  // restart; switched on, the map needs a fit, which RefitDue makes due at once.
  const auto* calibrated = dynamic_cast<const models::CalibratedTruthModel*>(model_.get());
  if (calibrated != nullptr && calibrated->fits_map() &&
      ModelOptionsFromSettings(settings_.model()).calibration == "none") {
    const std::shared_ptr<const ProjectSnapshot> served = snapshot();
    PublishFullRecompute(std::shared_ptr<const models::TruthModel>(calibrated->WithoutMap()),
                         served->version_metadata.get());
  }
}

std::shared_ptr<const ProjectSnapshot> LiveProject::snapshot() const {
  absl::ReaderMutexLock lock(&snapshot_mu_);
  return snapshot_;
}

void LiveProject::Publish(std::shared_ptr<const ProjectSnapshot> snapshot) {
  absl::MutexLock lock(&snapshot_mu_);
  snapshot_ = std::move(snapshot);
}

int32_t LiveProject::EnsureItem(int32_t index, absl::string_view id) {
  if (index >= static_cast<int32_t>(item_ids_.size())) {
    {
      absl::MutexLock ids_lock(&ids_mu_);
      item_ids_.resize(index + 1);
    }
    gold_.resize(index + 1, -1);
    item_priority_.resize(index + 1, 0.0);
    item_newest_seq_.resize(index + 1, 0);
    labels_.EnsureItems(index + 1);
    if (identity_.item_feature_dim > 0) {
      item_features_.resize((index + 1) * static_cast<size_t>(identity_.item_feature_dim), 0.0f);
    }
  }
  if (item_ids_[index].empty() && !id.empty()) {
    absl::MutexLock ids_lock(&ids_mu_);
    item_ids_[index] = std::string(id);
    item_index_.emplace(item_ids_[index], index);
    while (item_id_prefix_ < static_cast<int32_t>(item_ids_.size()) &&
           !item_ids_[item_id_prefix_].empty()) {
      ++item_id_prefix_;
    }
  }
  return index;
}

void LiveProject::EnsureAnnotator(int32_t index, absl::string_view id) {
  if (index >= static_cast<int32_t>(annotator_ids_.size())) {
    {
      absl::MutexLock ids_lock(&ids_mu_);
      annotator_ids_.resize(index + 1);
    }
    annotator_label_counts_.resize(index + 1, 0);
    labels_.EnsureAnnotators(index + 1);
    if (identity_.annotator_feature_dim > 0) {
      annotator_features_.resize((index + 1) * static_cast<size_t>(identity_.annotator_feature_dim), 0.0f);
      annotator_has_features_.resize(index + 1, false);
    }
  }
  if (annotator_ids_[index].empty() && !id.empty()) {
    absl::MutexLock ids_lock(&ids_mu_);
    annotator_ids_[index] = std::string(id);
    annotator_index_.emplace(annotator_ids_[index], index);
    while (annotator_id_prefix_ < static_cast<int32_t>(annotator_ids_.size()) &&
           !annotator_ids_[annotator_id_prefix_].empty()) {
      ++annotator_id_prefix_;
    }
  }
}

std::optional<int32_t> LiveProject::LiveLabel(int32_t item, int32_t annotator) const {
  absl::Span<const models::AnnotationMatrix::Entry> row = labels_.LabelsOfItem(item);
  auto it = std::lower_bound(row.begin(), row.end(), annotator,
                             [](const models::AnnotationMatrix::Entry& e, int32_t a) {
                               return e.other < a;
                             });
  if (it == row.end() || it->other != annotator) return std::nullopt;
  return it->label;
}

void LiveProject::SetLabel(int32_t item, int32_t annotator, int32_t label, int64_t seq) {
  if (labels_.Set(item, annotator, label) == models::IncrementalAnnotationMatrix::SetResult::kAdded) {
    ++annotator_label_counts_[annotator];
  }
  item_newest_seq_[item] = std::max(item_newest_seq_[item], seq);
  newest_seq_ = std::max(newest_seq_, seq);
}

namespace {

// Everything but the posterior of one item's row in a posterior table.
void FillItemFacts(int32_t item, int32_t num_labels, int32_t gold, int64_t newest_seq,
                   double priority, PosteriorTable::Builder& builder) {
  builder.set_num_labels(item, num_labels);
  builder.set_newest_seq(item, newest_seq);
  builder.set_is_gold(item, gold >= 0);
  builder.set_entropy(item, Entropy(builder.mutable_probabilities(item)));
  builder.set_priority(item, priority);
}

}  // namespace

namespace {

// `version` without its parameters (which can be tens of megabytes: not copied).
std::shared_ptr<const storage::ModelVersionRecord> VersionMetadata(
    const storage::ModelVersionRecord& version) {
  auto metadata = std::make_shared<storage::ModelVersionRecord>();
  metadata->project_id = version.project_id;
  metadata->version = version.version;
  metadata->method = version.method;
  metadata->watermark = version.watermark;
  metadata->log_likelihood = version.log_likelihood;
  metadata->iterations = version.iterations;
  metadata->duration_ms = version.duration_ms;
  metadata->num_labels = version.num_labels;
  metadata->created_at = version.created_at;
  return metadata;
}

}  // namespace

ProjectSnapshot::ProjectSnapshot(const ProjectSnapshot& other)
    : model(other.model),
      model_version(other.model_version),
      model_watermark(other.model_watermark),
      version_metadata(other.version_metadata),
      posteriors(other.posteriors) {}

const std::vector<double>& ProjectSnapshot::ClassPrior() const {
  absl::call_once(class_prior_once_, [this] {
    const int32_t k = posteriors.num_classes();
    std::vector<double> prior(k, 0.0);
    int64_t labelled = 0;
    for (int32_t i = 0; i < posteriors.num_items(); ++i) {
      if (posteriors.num_labels(i) == 0) continue;
      absl::Span<const double> p = posteriors.probabilities(i);
      for (int32_t c = 0; c < k; ++c) prior[c] += p[c];
      ++labelled;
    }
    for (double& v : prior) v = labelled > 0 ? v / labelled : 1.0 / k;
    class_prior_ = std::move(prior);
  });
  return class_prior_;
}

void LiveProject::RecomputeItem(const models::TruthModel& model, int32_t item,
                                PosteriorTable::Builder& builder) const {
  absl::Span<const models::AnnotationMatrix::Entry> labels = labels_.LabelsOfItem(item);
  model.ItemPosteriorForItem(item, labels, gold_[item], builder.mutable_probabilities(item));
  FillItemFacts(item, static_cast<int32_t>(labels.size()), gold_[item], item_newest_seq_[item],
                item_priority_[item], builder);
}

void LiveProject::PublishFullRecompute(std::shared_ptr<const models::TruthModel> model,
                                       const storage::ModelVersionRecord* version) {
  const int32_t k = num_classes();
  auto snapshot = std::make_shared<ProjectSnapshot>(k);
  PosteriorTable::Builder builder(snapshot->posteriors);
  const int32_t n = static_cast<int32_t>(item_ids_.size());
  builder.Resize(n);
  for (int32_t i = 0; i < n; ++i) RecomputeItem(*model, i, builder);
  PublishRecomputed(std::move(snapshot), std::move(builder), std::move(model), version);
}

void LiveProject::PublishRecomputed(std::shared_ptr<ProjectSnapshot> snapshot,
                                    PosteriorTable::Builder builder,
                                    std::shared_ptr<const models::TruthModel> model,
                                    const storage::ModelVersionRecord* version) {
  snapshot->posteriors = std::move(builder).Build();
  snapshot->model = model;
  snapshot->model_version = version != nullptr ? version->version : 0;
  snapshot->model_watermark = version != nullptr ? version->watermark : 0;
  snapshot->version_metadata = version != nullptr ? VersionMetadata(*version) : nullptr;
  model_ = std::move(model);
  model_version_ = snapshot->model_version;
  model_watermark_ = snapshot->model_watermark;
  Publish(std::move(snapshot));
}

void LiveProject::ApplyCommitted(absl::Span<const CommittedLabel> labels) {
  if (labels.empty()) return;
  PublishCommitted(RegisterCommitted(labels));
}

std::vector<int32_t> LiveProject::RegisterCommitted(absl::Span<const CommittedLabel> labels) {
  absl::MutexLock lock(&mu_);
  return RegisterLocked(labels, /*applied_through=*/-1);
}

std::vector<int32_t> LiveProject::RegisterLocked(absl::Span<const CommittedLabel> labels,
                                                 int64_t applied_through) {
  std::vector<int32_t> touched;
  if (labels.empty()) return touched;
  touched.reserve(labels.size());
  for (const CommittedLabel& l : labels) {
    EnsureItem(l.item_index, l.item_id);
    EnsureAnnotator(l.annotator_index, l.annotator_id);
    leases_.Release(l.item_index, l.annotator_index);
    // Memory already reflects every commit through applied_through: this label, or a later
    // one of the same pair that superseded it.
    if (l.seq <= applied_through) continue;
    // A duplicate normally repeats what memory holds. If memory lacks it (another label, or an
    // older seq), an earlier transaction wrote it and its outcome never reached memory (the
    // connection broke during COMMIT, the batch was answered UNAVAILABLE and resent): apply it.
    // Memory holds this label already (a duplicate; or a followed label this server applied
    // first as its own): nothing changes.
    if (LiveLabel(l.item_index, l.annotator_index) == l.label &&
        item_newest_seq_[l.item_index] >= l.seq) {
      continue;
    }
    // Applied ahead of applied_seq_: a catch-up read from before this label's commit must
    // not take the pair back.
    if (!l.changed) follow_floor_ = std::max(follow_floor_, l.seq);
    SetLabel(l.item_index, l.annotator_index, l.label, l.seq);
    ++changes_since_fit_;
    touched.push_back(l.item_index);
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  if (training_) {
    for (int32_t item : touched) MarkTouchedDuringFit(item);
  }
  return touched;
}

std::optional<std::vector<int32_t>> LiveProject::RegisterOwnCommit(
    absl::Span<const CommittedLabel> labels, std::optional<storage::DrawnSeqs> drawn) {
  absl::MutexLock lock(&mu_);
  if (drawn.has_value()) history_rows_ = std::max(history_rows_, drawn->history_rows);
  if (drawn.has_value()) {
    if (drawn->last <= applied_seq_) {
      // A catch-up read after this commit applied it already (and maybe later commits over it).
      return RegisterLocked(labels, applied_seq_);
    }
    // Another writer's commit lies between what memory holds and this one.
    if (drawn->first != applied_seq_ + 1) return std::nullopt;
  }
  std::vector<int32_t> touched = RegisterLocked(labels, applied_seq_);
  if (drawn.has_value()) applied_seq_ = drawn->last;
  return touched;
}

std::vector<int32_t> LiveProject::RegisterOwnCommitOutOfOrder(
    absl::Span<const CommittedLabel> labels, std::optional<storage::DrawnSeqs> drawn) {
  absl::MutexLock lock(&mu_);
  if (drawn.has_value()) history_rows_ = std::max(history_rows_, drawn->history_rows);
  std::vector<int32_t> touched = RegisterLocked(labels, applied_seq_);
  // applied_seq_ stays: the commits before this one are still missing. A catch-up read that
  // this commit is not in would take its pairs back to older labels, so none is applied.
  if (drawn.has_value()) follow_floor_ = std::max(follow_floor_, drawn->last);
  return touched;
}

bool LiveProject::ApplyFollowed(const storage::LabelsSince& since) {
  std::vector<int32_t> touched;
  {
    absl::MutexLock lock(&mu_);
    // Other replicas' revisions, so that max_revisions is checked against them too (the count
    // only grows, so an older read never lowers it).
    history_rows_ = std::max(history_rows_, since.history_rows);
    if (since.drawn_through < follow_floor_ || since.drawn_through <= applied_seq_) return false;
    std::vector<CommittedLabel> labels;
    labels.reserve(since.labels.size());
    for (const storage::FollowedLabel& l : since.labels) {
      labels.push_back({l.item_index, l.item_id, l.annotator_index, l.annotator_id, l.label,
                        l.seq, /*changed=*/true});
    }
    touched = RegisterLocked(labels, applied_seq_);
    applied_seq_ = since.drawn_through;
  }
  PublishCommitted(touched);
  return !touched.empty();
}

int64_t LiveProject::followed_change_seq() const {
  absl::ReaderMutexLock lock(&mu_);
  return followed_change_seq_;
}

void LiveProject::NoteOwnChange(int64_t change_seq) {
  absl::MutexLock lock(&mu_);
  if (change_seq == followed_change_seq_ + 1) followed_change_seq_ = change_seq;
}

bool LiveProject::ApplyStoredEntities(const v1::ProjectSettings& settings,
                                      absl::Span<const storage::ItemRecord> items,
                                      absl::Span<const storage::AnnotatorRecord> annotators,
                                      int64_t change_seq) {
  std::vector<ItemChange> item_changes;
  std::vector<std::pair<int32_t, std::string>> new_annotators;
  std::vector<std::pair<int32_t, std::vector<float>>> annotator_features;
  bool settings_differ = false;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (change_seq <= followed_change_seq_) return false;
    settings_differ = settings.SerializeAsString() != settings_.SerializeAsString();
    const size_t item_dim = static_cast<size_t>(identity_.item_feature_dim);
    for (const storage::ItemRecord& item : items) {
      const bool known = item.index < static_cast<int32_t>(item_ids_.size()) &&
                         !item_ids_[item.index].empty();
      ItemChange change{item.index, item.external_id, std::nullopt, std::nullopt, std::nullopt};
      bool differs = !known;
      if (item.gold_label.has_value() && (!known || gold_[item.index] != *item.gold_label)) {
        change.gold_label = item.gold_label;
        differs = true;
      }
      if (!known ? item.priority != 0.0 : item_priority_[item.index] != item.priority) {
        change.priority = item.priority;
        differs = true;
      }
      if (item.features.has_value() && item.features->size() == item_dim && item_dim > 0 &&
          (!known || !std::equal(item.features->begin(), item.features->end(),
                                 item_features_.begin() + item.index * item_dim))) {
        change.features = item.features;
        differs = true;
      }
      if (differs) item_changes.push_back(std::move(change));
    }
    const size_t annotator_dim = static_cast<size_t>(identity_.annotator_feature_dim);
    for (const storage::AnnotatorRecord& a : annotators) {
      const bool known = a.index < static_cast<int32_t>(annotator_ids_.size()) &&
                         !annotator_ids_[a.index].empty();
      if (!known) new_annotators.emplace_back(a.index, a.external_id);
      if (a.features.has_value() && a.features->size() == annotator_dim && annotator_dim > 0 &&
          (!known || !std::equal(a.features->begin(), a.features->end(),
                                 annotator_features_.begin() + a.index * annotator_dim))) {
        annotator_features.emplace_back(a.index, *a.features);
      }
    }
  }
  if (settings_differ) SetSettings(settings);
  ApplyItems(item_changes);
  if (!new_annotators.empty()) RegisterAnnotators(new_annotators);
  for (const auto& [annotator, features] : annotator_features) {
    SetAnnotatorFeatures(annotator, features);
  }
  {
    absl::MutexLock lock(&mu_);
    followed_change_seq_ = std::max(followed_change_seq_, change_seq);
  }
  return settings_differ || !item_changes.empty() || !new_annotators.empty() ||
         !annotator_features.empty();
}

std::pair<int32_t, int32_t> LiveProject::KnownIdPrefixes() const {
  absl::ReaderMutexLock lock(&ids_mu_);
  return {item_id_prefix_, annotator_id_prefix_};
}

int64_t LiveProject::applied_seq() const {
  absl::ReaderMutexLock lock(&mu_);
  return applied_seq_;
}

void LiveProject::MarkTouchedDuringFit(int32_t item) {
  if (item >= static_cast<int32_t>(touched_during_fit_mark_.size())) {
    touched_during_fit_mark_.resize(static_cast<size_t>(item) + 1, false);
  }
  if (touched_during_fit_mark_[item]) return;
  touched_during_fit_mark_[item] = true;
  touched_during_fit_.push_back(item);
}

void LiveProject::ClearTouchedDuringFit() {
  for (int32_t item : touched_during_fit_) touched_during_fit_mark_[item] = false;
  touched_during_fit_.clear();
}

void LiveProject::PublishCommitted(absl::Span<const int32_t> touched) {
  // Shared: this only reads the labels and ids; the committer's IngestHints for the next group
  // (also shared) need not wait for the recompute. Writers of mu_ still wait.
  absl::ReaderMutexLock lock(&mu_);
  absl::MutexLock publish_lock(&commit_publish_mu_);
  std::shared_ptr<const ProjectSnapshot> old = snapshot();
  if (touched.empty() && static_cast<int32_t>(item_ids_.size()) == old->posteriors.num_items()) {
    return;
  }
  auto next = std::make_shared<ProjectSnapshot>(*old);
  PosteriorTable::Builder builder(old->posteriors);
  const int32_t old_n = builder.num_items();
  builder.Resize(static_cast<int32_t>(item_ids_.size()));
  // New items without labels in this batch still need their prior (they start uniform).
  for (int32_t i = old_n; i < builder.num_items(); ++i) RecomputeItem(*model_, i, builder);
  for (int32_t i : touched) {
    if (i < old_n) RecomputeItem(*model_, i, builder);
  }
  next->posteriors = std::move(builder).Build();
  Publish(std::move(next));
}

storage::WriteHints LiveProject::IngestHints(
    absl::Span<const storage::AnnotationWrite> writes) const {
  storage::WriteHints hints;
  hints.writes.resize(writes.size());
  absl::ReaderMutexLock lock(&mu_);
  for (size_t i = 0; i < writes.size(); ++i) {
    storage::KnownWrite& known = hints.writes[i];
    if (auto it = item_index_.find(writes[i].item_id); it != item_index_.end()) {
      known.item_index = it->second;
    }
    if (auto it = annotator_index_.find(writes[i].annotator_id); it != annotator_index_.end()) {
      known.annotator_index = it->second;
    }
    known.unlabelled = known.item_index >= 0 && known.annotator_index >= 0 &&
                       !labels_.HasLabel(known.item_index, known.annotator_index);
  }
  // Registered ids, not the index vectors' sizes: an id registered out of order leaves a gap.
  hints.projects.push_back({identity_.project_id, static_cast<int32_t>(item_index_.size()),
                            static_cast<int32_t>(annotator_index_.size())});
  return hints;
}

void LiveProject::ApplyItems(absl::Span<const ItemChange> items) {
  if (items.empty()) return;
  absl::MutexLock lock(&mu_);
  std::shared_ptr<const ProjectSnapshot> old = snapshot();
  auto next = std::make_shared<ProjectSnapshot>(*old);
  PosteriorTable::Builder builder(old->posteriors);
  // Only what a fit reads makes the fit not current (FitIsCurrent): a new item, a changed gold
  // label or changed features. A priority is assignment's, and AddItems repeating what is
  // stored must not let TrainModel fit and store a version for nothing (docs/SECURITY.md).
  bool fit_input_changed = false;
  const size_t dim = static_cast<size_t>(identity_.item_feature_dim);
  for (const ItemChange& change : items) {
    const bool known = change.item_index < static_cast<int32_t>(item_ids_.size()) &&
                       !item_ids_[change.item_index].empty();
    if (!known ||
        (change.gold_label.has_value() && gold_[change.item_index] != *change.gold_label) ||
        (change.features.has_value() && dim > 0 && change.features->size() == dim &&
         !std::equal(change.features->begin(), change.features->end(),
                     item_features_.begin() + change.item_index * dim))) {
      fit_input_changed = true;
    }
  }
  if (fit_input_changed) ++input_generation_;
  for (const ItemChange& change : items) {
    EnsureItem(change.item_index, change.item_id);
    if (training_) MarkTouchedDuringFit(change.item_index);
    if (change.gold_label.has_value()) gold_[change.item_index] = *change.gold_label;
    if (change.priority.has_value()) item_priority_[change.item_index] = *change.priority;
    if (change.features.has_value() && dim > 0 && change.features->size() == dim) {
      std::copy(change.features->begin(), change.features->end(),
                item_features_.begin() + change.item_index * dim);
    }
  }
  const int32_t old_n = builder.num_items();
  builder.Resize(static_cast<int32_t>(item_ids_.size()));
  for (int32_t i = old_n; i < builder.num_items(); ++i) RecomputeItem(*model_, i, builder);
  for (const ItemChange& change : items) RecomputeItem(*model_, change.item_index, builder);
  next->posteriors = std::move(builder).Build();
  Publish(std::move(next));
}

void LiveProject::SetAnnotatorFeatures(int32_t annotator, const std::vector<float>& features) {
  absl::MutexLock lock(&mu_);
  const size_t dim = static_cast<size_t>(identity_.annotator_feature_dim);
  if (dim == 0 || features.size() != dim || annotator < 0 ||
      annotator >= static_cast<int32_t>(annotator_ids_.size())) {
    return;
  }
  const auto stored = annotator_features_.begin() + annotator * dim;
  // The same features again are not new input (as in ApplyItems).
  if (annotator_has_features_[annotator] && std::equal(features.begin(), features.end(), stored)) {
    return;
  }
  std::copy(features.begin(), features.end(), stored);
  annotator_has_features_[annotator] = true;
  ++input_generation_;
}

std::vector<double> LiveProject::ConfusionPredictedFromFeatures(const ProjectSnapshot& snapshot,
                                                                int32_t annotator) const {
  const size_t dim = static_cast<size_t>(identity_.annotator_feature_dim);
  if (dim == 0 || annotator < 0 || snapshot.model == nullptr) return {};
  std::vector<float> features;
  {
    absl::MutexLock lock(&mu_);
    if (annotator >= static_cast<int32_t>(annotator_has_features_.size()) ||
        !annotator_has_features_[annotator]) {
      return {};
    }
    features.assign(annotator_features_.begin() + annotator * dim,
                    annotator_features_.begin() + (annotator + 1) * dim);
  }
  return snapshot.model->AnnotatorConfusionFromFeatures(annotator, features);
}

void LiveProject::RegisterAnnotators(
    absl::Span<const std::pair<int32_t, std::string>> annotators) {
  absl::MutexLock lock(&mu_);
  for (const auto& [index, id] : annotators) EnsureAnnotator(index, id);
}

std::optional<int32_t> LiveProject::FindItem(absl::string_view item_id) const {
  absl::ReaderMutexLock lock(&ids_mu_);
  auto it = item_index_.find(item_id);
  if (it == item_index_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::optional<int32_t>> LiveProject::FindItems(
    absl::Span<const absl::string_view> item_ids) const {
  std::vector<std::optional<int32_t>> indices(item_ids.size());
  absl::ReaderMutexLock lock(&ids_mu_);
  for (size_t i = 0; i < item_ids.size(); ++i) {
    if (auto it = item_index_.find(item_ids[i]); it != item_index_.end()) indices[i] = it->second;
  }
  return indices;
}

std::optional<int32_t> LiveProject::FindAnnotator(absl::string_view annotator_id) const {
  absl::ReaderMutexLock lock(&ids_mu_);
  auto it = annotator_index_.find(annotator_id);
  if (it == annotator_index_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> LiveProject::ItemIds(int32_t first, int32_t count) const {
  absl::ReaderMutexLock lock(&ids_mu_);
  std::vector<std::string> ids;
  const int64_t n = static_cast<int64_t>(item_ids_.size());
  // In int64: first + count may pass INT32_MAX (a page token near it).
  const int64_t end = std::min(n, static_cast<int64_t>(first) + std::max(count, 0));
  for (int64_t i = std::max(first, 0); i < end; ++i) ids.push_back(item_ids_[i]);
  return ids;
}

std::vector<std::string> LiveProject::AnnotatorIds() const {
  absl::ReaderMutexLock lock(&ids_mu_);
  return annotator_ids_;
}

LiveProject::AnnotatorIdPage LiveProject::AnnotatorIds(int64_t first, int32_t count) const {
  absl::ReaderMutexLock lock(&ids_mu_);
  AnnotatorIdPage page;
  page.total = static_cast<int64_t>(annotator_ids_.size());
  const int64_t begin = std::max<int64_t>(first, 0);
  if (begin >= page.total) return page;  // Also keeps begin + count from overflowing.
  const int64_t end = begin + std::min<int64_t>(std::max(count, 0), page.total - begin);
  for (int64_t a = begin; a < end; ++a) page.ids.push_back(annotator_ids_[a]);
  return page;
}

int32_t LiveProject::AnnotatorLabelCount(int32_t annotator) const {
  absl::ReaderMutexLock lock(&mu_);
  if (annotator < 0 || annotator >= static_cast<int32_t>(annotator_label_counts_.size())) return 0;
  return annotator_label_counts_[annotator];
}

bool LiveProject::HasLabelled(int32_t item, int32_t annotator) const {
  absl::ReaderMutexLock lock(&mu_);
  return labels_.HasLabel(item, annotator);
}

std::optional<int32_t> LiveProject::LiveLabelOf(int32_t item, int32_t annotator) const {
  absl::ReaderMutexLock lock(&mu_);
  if (!labels_.HasLabel(item, annotator)) return std::nullopt;
  return LiveLabel(item, annotator);
}

std::vector<int32_t> LiveProject::GoldItems() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<int32_t> gold;
  for (int32_t i = 0; i < static_cast<int32_t>(gold_.size()); ++i) {
    if (gold_[i] >= 0) gold.push_back(i);
  }
  return gold;
}

int64_t LiveProject::EstimatedBytes() const {
  absl::ReaderMutexLock lock(&mu_);
  const int64_t k = num_classes();
  return 24 * labels_.num_labels() + (200 + 32 * k) * static_cast<int64_t>(item_ids_.size()) +
         (100 + 16 * k * k) * static_cast<int64_t>(annotator_ids_.size()) +
         static_cast<int64_t>(sizeof(float)) *
             static_cast<int64_t>(item_features_.size() + annotator_features_.size());
}

ProjectCounts LiveProject::Counts() const {
  absl::ReaderMutexLock lock(&mu_);
  ProjectCounts counts;
  counts.num_items = static_cast<int64_t>(item_ids_.size());
  counts.num_annotators = static_cast<int64_t>(annotator_ids_.size());
  counts.num_labels = labels_.num_labels();
  counts.num_revisions = history_rows_;
  counts.labels_since_version = changes_since_fit_;
  counts.training = training_;
  return counts;
}

ProjectSummary LiveProject::Summary() const {
  ProjectSummary summary;
  summary.name = identity_.name;
  summary.classes = identity_.classes;
  summary.counts = Counts();
  summary.method = settings().model().method();
  const std::shared_ptr<const ProjectSnapshot> served = snapshot();
  summary.model_version = served->model_version;
  summary.model_method = std::string(served->model->method());
  const models::TruthModel* inner = served->model.get();
  if (const auto* calibrated = dynamic_cast<const models::CalibratedTruthModel*>(inner)) {
    inner = &calibrated->inner();
  }
  if (const auto* automatic = dynamic_cast<const models::AutoTruthModel*>(inner)) {
    summary.chosen_method = automatic->choice().method;
    summary.choice_reason = automatic->choice().reason;
  }
  return summary;
}

bool LiveProject::RefitDue(absl::Time now, absl::Duration max_staleness) const {
  absl::ReaderMutexLock lock(&mu_);
  if (training_ || labels_.num_labels() == 0) return false;
  if (failed_fits_in_a_row_ > 0) {
    // The same input would likely fail again: wait 1 s after a failed fit, doubling with each
    // failure in a row, at most max_staleness. A settings change clears the count.
    const absl::Duration backoff = std::min(
        max_staleness, absl::Seconds(1) * (int64_t{1} << std::min(failed_fits_in_a_row_ - 1, 20)));
    if (now - last_failed_fit_time_ < backoff) return false;
  }
  absl::StatusOr<std::string> method = MethodName(settings_.model().method());
  if (method.ok() && *method != model_->method() && model_version_ > 0) return true;
  // Calibration switched on since the served version's fit (its map needs a fit), or off
  // while a fit that started with it ran (SetSettings serves the model's own posteriors at
  // once otherwise).
  const auto* calibrated = dynamic_cast<const models::CalibratedTruthModel*>(model_.get());
  const bool wants_map = ModelOptionsFromSettings(settings_.model()).calibration != "none";
  if (calibrated != nullptr && model_version_ > 0 && calibrated->fits_map() != wants_map) {
    return true;
  }
  if (changes_since_fit_ == 0) return false;
  const v1::ModelSettings& m = settings_.model();
  const int64_t min_new = m.refit_min_new_labels() > 0 ? m.refit_min_new_labels() : 50;
  const double fraction = m.refit_new_label_fraction() > 0 ? m.refit_new_label_fraction() : 0.1;
  // Compared in double: fraction × labels may be past int64's range (any finite fraction is
  // valid, and a huge one means "refit on staleness only").
  const bool enough_changes =
      changes_since_fit_ >= min_new &&
      static_cast<double>(changes_since_fit_) >= std::floor(fraction * labels_.num_labels());
  return enough_changes || now - last_fit_time_ >= max_staleness;
}

bool LiveProject::FitIsCurrent() const {
  absl::ReaderMutexLock lock(&mu_);
  if (model_version_ == 0 || training_ || changes_since_fit_ != 0 ||
      fitted_input_generation_ != input_generation_) {
    return false;
  }
  absl::StatusOr<std::string> method = MethodName(settings_.model().method());
  return method.ok() && *method == model_->method();
}

absl::StatusOr<LiveProject::RefitResult> LiveProject::Refit(
    storage::ModelVersionStore& versions,
    std::optional<storage::ModelVersionRecord::JobOwnership> job) {
  RefitResult result;
  absl::Time phase_start = absl::Now();
  // Milliseconds since the previous call (or the start), for the phase timings.
  auto lap = [&phase_start] {
    const absl::Time now = absl::Now();
    const double ms = absl::ToDoubleMilliseconds(now - phase_start);
    phase_start = now;
    return ms;
  };
  // 1. Copy the fit's input under the lock.
  models::IncrementalAnnotationMatrix::Pending pending;
  // Per item, as of the fit's input: what the new posterior table is built from off the lock.
  std::vector<int32_t> gold;
  std::vector<int64_t> newest_seq;
  std::vector<double> priority;
  std::vector<float> item_features, annotator_features;
  std::unique_ptr<models::TruthModel> model;
  int64_t watermark, changes_at_start, generation_at_start, options_generation_at_start;
  // The labels of the fit from scratch a warm start continues from (stored with the version).
  int64_t scratch_base = 0;
  int32_t version_at_start;
  std::string method;
  {
    absl::MutexLock lock(&mu_);
    if (training_) return absl::FailedPreconditionError("a fit of this project is running");
    absl::StatusOr<std::string> name = MethodName(settings_.model().method());
    if (!name.ok()) return name.status();
    method = *name;
    // A warm start clones the served model, options and calibration mode included; a change
    // of ModelSettings.calibration takes effect at once, through a cold fit.
    const auto* calibrated = dynamic_cast<const models::CalibratedTruthModel*>(model_.get());
    const bool same_calibration =
        calibrated != nullptr &&
        calibrated->fits_map() ==
            (ModelOptionsFromSettings(settings_.model()).calibration != "none");
    const bool warm = model_->method() == method && model_->has_parameters() &&
                      same_calibration && served_options_generation_ == options_generation_ &&
                      scratch_fit_num_labels_ > 0 &&
                      static_cast<double>(labels_.num_labels()) <
                          kMaxWarmStartGrowth * static_cast<double>(scratch_fit_num_labels_);
    if (warm) {
      model = model_->Clone();
      scratch_base = scratch_fit_num_labels_;
    } else {
      auto created = models::CreateTruthModel(method, num_classes(),
                                              ModelOptionsFromSettings(settings_.model()));
      if (!created.ok()) return created.status();
      model = std::move(*created);
    }
    pending = labels_.PrepareConsolidation();
    gold = gold_;
    newest_seq = item_newest_seq_;
    priority = item_priority_;
    ClearTouchedDuringFit();
    // Copied here, handed to the model (which standardises them) off the lock.
    item_features = item_features_;
    annotator_features = annotator_features_;
    lap();
    watermark = newest_seq_;
    changes_at_start = changes_since_fit_;
    generation_at_start = input_generation_;
    options_generation_at_start = options_generation_;
    version_at_start = model_version_;
    training_ = true;
  }
  // Every early return below is a failed fit: RefitDue backs off from it.
  auto done = [this](bool) {
    absl::MutexLock lock(&mu_);
    training_ = false;
    ClearTouchedDuringFit();
    ++failed_fits_in_a_row_;
    last_failed_fit_time_ = absl::Now();
  };

  // 2. Features, then the labels into CSR arrays, and fit, off the lock.
  if (identity_.item_feature_dim > 0) {
    if (absl::Status s = model->SetItemFeatures(identity_.item_feature_dim, std::move(item_features));
        !s.ok()) {
      done(false);
      return s;
    }
  }
  if (identity_.annotator_feature_dim > 0) {
    if (absl::Status s = model->SetAnnotatorFeatures(identity_.annotator_feature_dim,
                                                     std::move(annotator_features));
        !s.ok()) {
      done(false);
      return s;
    }
  }
  lap();  // feature standardisation is not part of consolidate_ms
  auto data = std::make_shared<const models::AnnotationMatrix>(
      models::IncrementalAnnotationMatrix::Consolidate(pending));
  const int32_t num_annotators = data->num_annotators();
  result.consolidate_ms = lap();
  const bool warm_started = model->has_parameters();
  absl::StatusOr<models::FitReport> report = model->Fit(*data, gold, warm_started);
  if (!report.ok()) {
    done(false);
    return report.status();
  }
  result.fit_ms = lap();

  // 3. Persist the new version before anyone can see it.
  storage::ModelVersionRecord record;
  record.project_id = identity_.project_id;
  record.method = method;
  record.parameters = model->Serialize();
  record.watermark = watermark;
  record.log_likelihood = report->log_likelihood;
  record.iterations = report->iterations;
  record.duration_ms = report->seconds * 1000.0;
  record.num_labels = data->num_labels();
  record.scratch_num_labels = warm_started ? scratch_base : record.num_labels;
  record.completes_job = std::move(job);
  // What this version says about the data it saw, kept with it for audit and comparison.
  storage::ModelVersionOutputs outputs;
  const std::vector<double> posteriors = models::AllPosteriors(*model, *data, gold);
  // A model that overflowed (e.g. a pseudo-count near DBL_MAX) is not stored or served: it
  // would serve NaN, and warm starts from it would keep doing so.
  if (auto bad = std::find_if(posteriors.begin(), posteriors.end(),
                              [](double p) { return !std::isfinite(p); });
      bad != posteriors.end()) {
    done(false);
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", method, " fit of project ", identity_.name,
        " gave a posterior that is not finite (", *bad, ", item index ",
        (bad - posteriors.begin()) / num_classes(),
        "); no version was stored. Check the project's model settings"));
  }
  outputs.posteriors = EncodePosteriors(num_classes(), posteriors);
  {
    const int32_t k = num_classes();
    std::vector<uint32_t> counts(num_annotators);
    std::vector<double> diagonals(static_cast<size_t>(num_annotators) * k);
    for (int32_t a = 0; a < num_annotators; ++a) {
      counts[a] = static_cast<uint32_t>(data->LabelsOfAnnotator(a).size());
      std::vector<double> d = model->AnnotatorConfusionDiagonal(a);
      std::copy(d.begin(), d.end(), diagonals.begin() + static_cast<size_t>(a) * k);
    }
    outputs.annotator_profiles = EncodeProfiles(k, counts, diagonals);
  }
  result.outputs_ms = lap();
  absl::StatusOr<storage::ModelVersionRecord> saved = versions.SaveModelVersion(record, outputs);
  if (!saved.ok()) {
    done(false);
    return saved.status();
  }
  result.persist_ms = lap();
  if (after_version_stored_for_testing_) after_version_stored_for_testing_(*saved);

  // 4. Publish every posterior under the new parameters. The table is built off the lock from
  // the fit's input; under the lock only the items whose labels, gold or priority changed
  // during the fit (and items added since) are recomputed, so ingest is held up for the
  // changes, not for every item.
  const int32_t k = num_classes();
  auto snapshot = std::make_shared<ProjectSnapshot>(k);
  PosteriorTable::Builder builder(snapshot->posteriors);
  // The items of the fit's input (gold was copied with it; the matrix has the same items).
  const int32_t fitted_items =
      std::min(static_cast<int32_t>(gold.size()), data->num_items());
  builder.Resize(fitted_items);
  for (int32_t i = 0; i < fitted_items; ++i) {
    absl::Span<double> p = builder.mutable_probabilities(i);
    std::copy_n(posteriors.begin() + static_cast<size_t>(i) * k, k, p.begin());
    FillItemFacts(i, static_cast<int32_t>(data->LabelsOfItem(i).size()), gold[i], newest_seq[i],
                  priority[i], builder);
  }
  {
    absl::MutexLock lock(&mu_);
    labels_.Rebase(data, pending);
    training_ = false;
    failed_fits_in_a_row_ = 0;
    if (model_version_ <= saved->version) {
      if (!warm_started) scratch_fit_num_labels_ = saved->num_labels;
      fitted_input_generation_ = generation_at_start;
    }
    if (model_version_ >= saved->version) {
      // Adopted meanwhile: a replica follower, notified of this very version (or of a newer
      // one), restored and published it with every posterior and counted the changes since
      // it. Publishing again would repeat that work, or go back a version.
      ClearTouchedDuringFit();
    } else {
      // The changes the fit did not see: those since it copied its input, unless a version was
      // adopted during the fit (and recounted them against itself).
      changes_since_fit_ = model_version_ == version_at_start
                               ? changes_since_fit_ - changes_at_start
                               : ChangesAfterVersionLocked(saved->watermark, saved->num_labels);
      last_fit_time_ = absl::Now();
      builder.Resize(static_cast<int32_t>(item_ids_.size()));
      for (int32_t i = fitted_items; i < builder.num_items(); ++i) RecomputeItem(*model, i, builder);
      for (int32_t i : touched_during_fit_) {
        if (i < fitted_items) RecomputeItem(*model, i, builder);
      }
      ClearTouchedDuringFit();
      served_options_generation_ = options_generation_at_start;
      PublishRecomputed(std::move(snapshot), std::move(builder),
                        std::shared_ptr<const models::TruthModel>(std::move(model)), &*saved);
    }
  }
  result.publish_ms = lap();
  result.version = *std::move(saved);
  return result;
}

int32_t LiveProject::model_version() const {
  absl::ReaderMutexLock lock(&mu_);
  return model_version_;
}

int64_t LiveProject::ChangesAfterVersionLocked(int64_t watermark, int64_t num_labels) const {
  // At least the new labels (by count) and every item holding a label committed after the
  // watermark (a revision, which leaves the count unchanged, included).
  int64_t items_after_watermark = 0;
  for (int64_t seq : item_newest_seq_) items_after_watermark += seq > watermark ? 1 : 0;
  return std::max<int64_t>(items_after_watermark,
                           std::max<int64_t>(0, labels_.num_labels() - num_labels));
}

absl::StatusOr<bool> LiveProject::AdoptVersion(const storage::ModelVersionRecord& version) {
  if (model_version() >= version.version) return false;
  v1::ModelSettings model_settings;
  int64_t options_generation = 0;
  models::TruthModel::RestoreBounds bounds;
  {
    absl::ReaderMutexLock lock(&mu_);
    model_settings = settings_.model();
    options_generation = options_generation_;
    bounds = RestoreBoundsLocked();
  }
  auto model = models::CreateTruthModel(version.method, num_classes(),
                                        ModelOptionsFromSettings(model_settings));
  if (!model.ok()) return model.status();
  if (absl::Status s = (*model)->Restore(version.parameters, bounds); !s.ok()) {
    LogEvent("model_version_refused", {{"project", identity_.name},
                                       {"version", std::to_string(version.version)},
                                       {"error", std::string(s.message())}});
    return absl::InternalError(absl::StrCat("project ", identity_.name, ": model version ",
                                            version.version, " does not restore: ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  if (model_version_ >= version.version) return false;
  // Labels the version did not see still count toward the next refit.
  changes_since_fit_ = ChangesAfterVersionLocked(version.watermark, version.num_labels);
  fitted_input_generation_ = input_generation_;  // What the worker copied is not recorded.
  served_options_generation_ = options_generation;  // The settings it was built with above.
  scratch_fit_num_labels_ = version.scratch_num_labels;  // The adopted chain's base (0: unknown).
  last_fit_time_ = absl::Now();
  PublishFullRecompute(std::shared_ptr<const models::TruthModel>(std::move(*model)), &version);
  return true;
}

}  // namespace verity::server
