#include "server/state/project_registry.h"

#include <algorithm>

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/observability/log.h"

namespace verity::server {
namespace {

LiveProject::Identity IdentityOf(const storage::ProjectRecord& record) {
  LiveProject::Identity id;
  id.project_id = record.project_id;
  id.name = record.name;
  id.classes = record.classes;
  id.item_feature_dim = record.item_feature_dim;
  id.annotator_feature_dim = record.annotator_feature_dim;
  id.created_at = record.created_at;
  return id;
}

// What Get() answers for a project whose stored state cannot be loaded.
absl::Status CannotLoad(absl::string_view name, const absl::Status& why) {
  return absl::UnavailableError(
      absl::StrCat("project \"", name, "\" cannot be loaded: ", why.message()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<LiveProject>> ProjectRegistry::Load(
    const storage::ProjectRecord& record) {
  const absl::Time start = absl::Now();
  auto loaded = LoadFromStorage(record);
  if (loaded.ok()) {
    const ProjectCounts counts = (*loaded)->Counts();
    LogEvent("project_loaded",
             {{"project", record.name},
              {"labels", absl::StrCat(counts.num_labels)},
              {"items", absl::StrCat(counts.num_items)},
              {"estimated_bytes", absl::StrCat((*loaded)->EstimatedBytes())},
              {"ms", absl::StrCat(absl::ToDoubleMilliseconds(absl::Now() - start))}});
    (*loaded)->MarkUsed(absl::Now());
  }
  return loaded;
}

absl::StatusOr<std::shared_ptr<LiveProject>> ProjectRegistry::LoadFromStorage(
    const storage::ProjectRecord& record) {
  v1::ProjectSettings settings;
  if (!settings.ParseFromString(record.settings)) {
    return absl::InternalError(absl::StrCat("project ", record.name, ": stored settings do not parse"));
  }
  LiveProject::StoredState stored;
  // Read before the items and annotators below: a change after it is re-read (followed).
  stored.change_seq = record.change_seq;
  // Read with the record, before the labels: commits after it are counted by this server's
  // next commit to the project, which reports the count over every replica's commits.
  stored.history_rows = record.history_rows;
  // The labels before the items and annotators, in separate queries: a label commits with (or
  // after) its item and annotator, so every label read here names an item and an annotator the
  // reads below see. Read after them, a label committed in between on a new item named an item
  // the load had not read, and the load failed.
  auto labels = storage_.annotations->LoadLiveAnnotations(record.project_id);
  if (!labels.ok()) return labels.status();
  stored.labels.reserve(labels->size());
  for (const auto& l : *labels) {
    stored.labels.push_back({l.item_index, l.annotator_index, l.label, l.seq});
  }
  auto items = storage_.items->LoadItems(record.project_id);
  if (!items.ok()) return items.status();
  stored.item_ids.resize(items->size());
  stored.gold.assign(items->size(), -1);
  stored.priority.assign(items->size(), 0.0);
  for (const auto& item : *items) {
    if (item.index < 0 || item.index >= static_cast<int32_t>(items->size())) {
      return absl::InternalError(absl::StrCat("project ", record.name, ": item indices not dense"));
    }
    stored.item_ids[item.index] = item.external_id;
    if (item.gold_label.has_value()) stored.gold[item.index] = *item.gold_label;
    stored.priority[item.index] = item.priority;
  }
  if (record.item_feature_dim > 0) {
    const size_t dim = static_cast<size_t>(record.item_feature_dim);
    stored.item_features.assign(items->size() * dim, 0.0f);
    for (const auto& item : *items) {
      if (item.features.has_value() && item.features->size() == dim) {
        std::copy(item.features->begin(), item.features->end(),
                  stored.item_features.begin() + item.index * dim);
      }
    }
  }
  auto annotators = storage_.items->LoadAnnotators(record.project_id);
  if (!annotators.ok()) return annotators.status();
  stored.annotator_ids.resize(annotators->size());
  for (const auto& a : *annotators) {
    if (a.index < 0 || a.index >= static_cast<int32_t>(annotators->size())) {
      return absl::InternalError(absl::StrCat("project ", record.name, ": annotator indices not dense"));
    }
    stored.annotator_ids[a.index] = a.external_id;
  }
  if (record.annotator_feature_dim > 0) {
    const size_t dim = static_cast<size_t>(record.annotator_feature_dim);
    stored.annotator_features.assign(annotators->size() * dim, 0.0f);
    stored.annotator_has_features.assign(annotators->size(), false);
    for (const auto& a : *annotators) {
      if (a.features.has_value() && a.features->size() == dim) {
        std::copy(a.features->begin(), a.features->end(),
                  stored.annotator_features.begin() + a.index * dim);
        stored.annotator_has_features[a.index] = true;
      }
    }
  }
  auto leases = storage_.leases->LoadOpenLeases(record.project_id, absl::Now());
  if (!leases.ok()) return leases.status();
  stored.open_leases = std::move(*leases);
  auto latest = storage_.versions->LatestModelVersion(record.project_id);
  if (latest.ok()) {
    stored.latest_version = std::move(*latest);
  } else if (!absl::IsNotFound(latest.status())) {
    return latest.status();
  }
  auto live = LiveProject::Create(IdentityOf(record), std::move(settings), std::move(stored));
  if (!live.ok()) return live.status();
  return std::shared_ptr<LiveProject>(std::move(*live));
}

absl::Status ProjectRegistry::LoadAll() {
  const absl::Time start = absl::Now();
  auto records = storage_.projects->ListProjects();
  if (!records.ok()) return records.status();
  int failed = 0;
  for (const storage::ProjectRecord& record : *records) {
    auto project = Load(record);
    if (!project.ok()) {
      // The others serve; Get() answers UNAVAILABLE with the reason and tries again later.
      ++failed;
      LogEvent("project_load_failed",
               {{"project", record.name}, {"error", project.status().ToString()}});
      absl::MutexLock lock(&mu_);
      failed_[record.name] = {absl::Now(), CannotLoad(record.name, project.status())};
      continue;
    }
    absl::MutexLock lock(&mu_);
    projects_.emplace(record.name, std::move(*project));
  }
  LogEvent("projects_loaded", {{"projects", absl::StrCat(records->size())},
                               {"loaded", absl::StrCat(records->size() - failed)},
                               {"failed", absl::StrCat(failed)},
                               {"ms", absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - start))}});
  return absl::OkStatus();
}

ProjectRegistry::~ProjectRegistry() { StopBackgroundWork(); }

void ProjectRegistry::StopBackgroundWork() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    to_load_.clear();
  }
  for (std::thread& loader : loaders_) {
    if (loader.joinable()) loader.join();
  }
  if (budget_thread_.joinable()) budget_thread_.join();
}

absl::Status ProjectRegistry::LoadAllInBackground(int threads) {
  auto records = storage_.projects->ListProjects();
  if (!records.ok()) return records.status();
  threads = std::max(1, threads);
  {
    absl::MutexLock lock(&mu_);
    // Taken from the back: the order of the list.
    to_load_.assign(records->rbegin(), records->rend());
    background_done_ = false;
    background_listed_ = static_cast<int64_t>(records->size());
    background_failed_ = 0;
    background_start_ = absl::Now();
    background_threads_ = threads;
  }
  LogEvent("projects_loading", {{"projects", absl::StrCat(records->size())},
                                {"threads", absl::StrCat(threads)}});
  for (int t = 0; t < threads; ++t) {
    loaders_.emplace_back([this] { BackgroundLoader(); });
  }
  return absl::OkStatus();
}

bool ProjectRegistry::BackgroundLoadDone() const {
  absl::ReaderMutexLock lock(&mu_);
  return background_done_;
}

void ProjectRegistry::OnBackgroundLoadDone(std::function<void()> done) {
  {
    absl::MutexLock lock(&mu_);
    if (!background_done_) {
      on_background_done_ = std::move(done);
      return;
    }
  }
  done();
}

int64_t ProjectRegistry::ProjectsStillLoading() const {
  absl::ReaderMutexLock lock(&mu_);
  if (background_done_) return 0;
  int64_t waiting = 0;
  for (const storage::ProjectRecord& record : to_load_) {
    waiting += !projects_.contains(record.name);  // Not one a first call loaded meanwhile.
  }
  return waiting + static_cast<int64_t>(loading_.size());
}

void ProjectRegistry::BackgroundLoader() {
  std::function<void()> done;
  while (true) {
    storage::ProjectRecord record;
    {
      absl::MutexLock lock(&mu_);
      // Skips projects a first call loaded already, or is loading (Get: one load at a time).
      while (!to_load_.empty() && (projects_.contains(to_load_.back().name) ||
                                   pending_loads_.contains(to_load_.back().name))) {
        to_load_.pop_back();
      }
      if (stopping_) return;
      if (to_load_.empty()) {
        // The last loader to run out of projects ends the initial load.
        if (!loading_.empty() || background_done_) return;
        background_done_ = true;
        done = std::move(on_background_done_);
        on_background_done_ = nullptr;
        LogEvent("projects_loaded",
                 {{"projects", absl::StrCat(background_listed_)},
                  {"loaded", absl::StrCat(background_listed_ - background_failed_)},
                  {"failed", absl::StrCat(background_failed_)},
                  {"threads", absl::StrCat(background_threads_)},
                  {"ms", absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - background_start_))}});
        break;
      }
      record = std::move(to_load_.back());
      to_load_.pop_back();
      loading_[record.name] = absl::Now();
    }
    if (before_background_load_) before_background_load_(record.name);
    auto project = Load(record);
    absl::MutexLock lock(&mu_);
    loading_.erase(record.name);
    if (!project.ok()) {
      ++background_failed_;
      LogEvent("project_load_failed",
               {{"project", record.name}, {"error", project.status().ToString()}});
      failed_[record.name] = {absl::Now(), CannotLoad(record.name, project.status())};
      continue;
    }
    projects_.emplace(record.name, std::move(*project));
  }
  if (done) done();
}

void ProjectRegistry::EnforceMemoryBudget(int64_t bytes, absl::Duration idle) {
  {
    absl::MutexLock lock(&mu_);
    budget_bytes_ = bytes;
    evict_after_idle_ = idle;
  }
  if (bytes > 0 && !budget_thread_.joinable()) {
    budget_thread_ = std::thread([this] { BudgetLoop(); });
  }
}

void ProjectRegistry::BudgetLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Seconds(1));
      if (stopping_) return;
    }
    EvictOverBudget(absl::Now());
  }
}

std::vector<std::string> ProjectRegistry::EvictOverBudget(absl::Time now) {
  std::vector<std::string> evicted;
  int64_t budget = 0;
  absl::Duration idle;
  {
    absl::ReaderMutexLock lock(&mu_);
    budget = budget_bytes_;
    idle = evict_after_idle_;
  }
  if (budget <= 0) return evicted;
  // Sizes are read outside the registry's lock (each takes its project's lock).
  struct Candidate {
    std::shared_ptr<LiveProject> project;
    int64_t bytes;
    absl::Time last_used;
  };
  std::vector<Candidate> loaded;
  int64_t total = 0;
  for (const std::shared_ptr<LiveProject>& project : All()) {
    const int64_t bytes = project->EstimatedBytes();
    total += bytes;
    loaded.push_back({project, bytes, project->last_used()});
  }
  if (total <= budget) return evicted;
  std::sort(loaded.begin(), loaded.end(),
            [](const Candidate& a, const Candidate& b) { return a.last_used < b.last_used; });
  absl::MutexLock lock(&mu_);
  for (const Candidate& c : loaded) {
    if (total <= budget) break;
    // In use: used lately, fitting, or held by someone else than the registry and this pass
    // (an open ingest stream keeps its project between batches; a call in flight holds it).
    if (now - c.last_used < idle || c.project->Counts().training || c.project.use_count() > 2) {
      continue;
    }
    auto it = projects_.find(c.project->identity().name);
    if (it == projects_.end() || it->second != c.project) continue;
    unloaded_[c.project->identity().name] = c.project->Summary();
    projects_.erase(it);
    total -= c.bytes;
    evicted.push_back(c.project->identity().name);
    LogEvent("project_evicted", {{"project", c.project->identity().name},
                                 {"estimated_bytes", absl::StrCat(c.bytes)},
                                 {"idle_s", absl::StrCat(absl::ToInt64Seconds(now - c.last_used))}});
  }
  return evicted;
}

std::shared_ptr<LiveProject> ProjectRegistry::IfLoaded(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = projects_.find(name);
  return it == projects_.end() ? nullptr : it->second;
}

std::optional<ProjectCounts> ProjectRegistry::CountsIfUnloaded(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  if (projects_.contains(name)) return std::nullopt;
  auto it = unloaded_.find(name);
  if (it == unloaded_.end()) return std::nullopt;
  return it->second.counts;
}

std::vector<ProjectSummary> ProjectRegistry::UnloadedSummaries() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<ProjectSummary> summaries;
  for (const auto& [name, summary] : unloaded_) {
    if (!projects_.contains(name)) summaries.push_back(summary);
  }
  std::sort(summaries.begin(), summaries.end(),
            [](const ProjectSummary& a, const ProjectSummary& b) { return a.name < b.name; });
  return summaries;
}

bool ProjectRegistry::LoadingOrFailed(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  if (loading_.contains(name)) return true;
  auto failure = failed_.find(name);
  return failure != failed_.end() && absl::Now() - failure->second.at < load_retry_interval_;
}

absl::StatusOr<ProjectCounts> ProjectRegistry::StoredCounts(const storage::ProjectRecord& record,
                                                            absl::Time now) {
  ProjectCounts counts;
  counts.num_items = record.num_items;
  counts.num_annotators = record.num_annotators;
  counts.num_revisions = record.history_rows;
  {
    absl::MutexLock lock(&mu_);
    auto it = stored_label_counts_.find(record.name);
    if (it != stored_label_counts_.end() &&
        (now - it->second.counted_at < kStoredLabelCountReuse || it->second.recounting)) {
      counts.num_labels = it->second.labels;
      return counts;
    }
    // This caller recounts; listings meanwhile keep the old count. (Two first listings of a
    // project at once may both count.)
    if (it != stored_label_counts_.end()) it->second.recounting = true;
  }
  // Counted without the lock.
  absl::StatusOr<int64_t> labels = storage_.annotations->CountLiveAnnotations(record.project_id);
  absl::MutexLock lock(&mu_);
  if (!labels.ok()) {
    auto it = stored_label_counts_.find(record.name);
    if (it != stored_label_counts_.end()) it->second.recounting = false;
    return labels.status();
  }
  counts.num_labels = *labels;
  stored_label_counts_[record.name] = {now, *labels, false};
  return counts;
}

absl::StatusOr<std::shared_ptr<LiveProject>> ProjectRegistry::Get(absl::string_view name) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = projects_.find(name);
    if (it != projects_.end()) {
      it->second->MarkUsed(absl::Now());
      return it->second;
    }
    if (auto loading = loading_.find(name); loading != loading_.end()) {
      return absl::UnavailableError(absl::StrCat(
          "project \"", name, "\" is loading (for ",
          absl::FormatDuration(absl::Trunc(absl::Now() - loading->second, absl::Milliseconds(1))),
          " so far, since the server started); retry"));
    }
    auto failure = failed_.find(name);
    if (failure != failed_.end() && absl::Now() - failure->second.at < load_retry_interval_) {
      return failure->second.status;
    }
  }
  // One load per project at a time: callers that arrive while it loads wait for its result
  // (a burst of first calls on a large project would otherwise build a copy each, past the
  // memory budget).
  std::shared_ptr<PendingLoad> pending;
  bool leader = false;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = projects_.find(name); it != projects_.end()) {
      it->second->MarkUsed(absl::Now());
      return it->second;
    }
    // A background loader took it since the check above: as there, answer "loading".
    if (auto loading = loading_.find(name); loading != loading_.end()) {
      return absl::UnavailableError(absl::StrCat("project \"", name,
                                                 "\" is loading (since the server started); retry"));
    }
    auto [it, first] = pending_loads_.try_emplace(std::string(name));
    if (first) it->second = std::make_shared<PendingLoad>();
    pending = it->second;
    leader = first;
  }
  if (!leader) {
    absl::MutexLock wait(&pending->mu, absl::Condition(&pending->done));
    return pending->result;
  }
  // Hands the result to the waiting callers however the load ends (an exception included:
  // they would otherwise wait for good).
  struct Handoff {
    ProjectRegistry& registry;
    absl::string_view name;
    PendingLoad& pending;
    absl::StatusOr<std::shared_ptr<LiveProject>> result =
        absl::InternalError("the project's load ended without a result");
    ~Handoff() {
      {
        absl::MutexLock lock(&registry.mu_);
        registry.pending_loads_.erase(name);
      }
      absl::MutexLock done(&pending.mu);
      pending.result = result;
      pending.done = true;
    }
  } handoff{*this, name, *pending};
  handoff.result = LoadAndRegister(name);
  return handoff.result;
}

absl::StatusOr<std::shared_ptr<LiveProject>> ProjectRegistry::LoadAndRegister(
    absl::string_view name) {
  if (before_load_) before_load_(std::string(name));
  auto record = storage_.projects->GetProjectByName(std::string(name));
  if (!record.ok()) {
    if (absl::IsNotFound(record.status())) {
      return absl::NotFoundError(absl::StrCat("project \"", name, "\" does not exist"));
    }
    return record.status();
  }
  auto project = Load(*record);
  if (!project.ok()) {
    absl::Status unavailable = CannotLoad(name, project.status());
    absl::MutexLock lock(&mu_);
    failed_[name] = {absl::Now(), unavailable};
    return unavailable;
  }
  absl::MutexLock lock(&mu_);
  failed_.erase(name);
  unloaded_.erase(name);
  // A concurrent Create may have registered it meanwhile: every caller gets that one.
  auto [it, inserted] = projects_.emplace(std::string(name), std::move(*project));
  return it->second;
}

absl::StatusOr<std::shared_ptr<LiveProject>> ProjectRegistry::Create(const v1::Project& requested) {
  // A new project without a method gets auto (issue 18), stored explicitly: projects created
  // before, whose stored method is UNSPECIFIED, keep being served by ds (MethodName).
  v1::Project project = requested;
  if (project.settings().model().method() == v1::TRUTH_METHOD_UNSPECIFIED) {
    project.mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_AUTO);
  }
  if (absl::StatusOr<std::string> m = MethodName(project.settings().model().method()); !m.ok()) {
    return m.status();
  }
  storage::ProjectRecord record;
  record.name = project.name();
  record.classes.assign(project.classes().begin(), project.classes().end());
  record.item_feature_dim = project.item_feature_dim();
  record.annotator_feature_dim = project.annotator_feature_dim();
  record.settings = project.settings().SerializeAsString();
  auto created = storage_.projects->CreateProject(record);
  if (!created.ok()) {
    if (absl::IsAlreadyExists(created.status())) {
      return absl::AlreadyExistsError(absl::StrCat("project \"", project.name(), "\" already exists"));
    }
    return created.status();
  }
  if (after_create_stored_) after_create_stored_();
  auto live = LiveProject::Create(IdentityOf(*created), project.settings(), {});
  if (!live.ok()) return live.status();
  (*live)->MarkUsed(absl::Now());
  absl::MutexLock lock(&mu_);
  // Once the row is committed a concurrent Get can load and register the project; it then holds
  // the same state (nothing can be added before Create returns), and every caller must share one
  // LiveProject, or labels ingested through the other would never be served.
  auto [it, inserted] = projects_.emplace(project.name(), std::move(*live));
  return it->second;
}

absl::Status ProjectRegistry::UpdateSettings(
    LiveProject& project, const v1::ProjectSettings& requested,
    const std::function<absl::Status(const v1::ProjectSettings& current)>& admit) {
  if (absl::StatusOr<std::string> m = MethodName(requested.model().method()); !m.ok()) {
    return m.status();
  }
  // Held across the write and the memory update: memory applies them in commit order.
  absl::MutexLock order(&project.write_order_mu());
  // `admit` and the method kept are decided on the stored settings, under the project row's
  // lock: this server's copy may not have followed an update through another replica yet.
  v1::ProjectSettings settings;
  int64_t change_seq = 0;
  absl::Status s = storage_.projects->UpdateSettingsFrom(
      project.identity().project_id,
      [&](absl::string_view stored_blob) -> absl::StatusOr<std::string> {
        v1::ProjectSettings stored;
        if (!stored.ParseFromArray(stored_blob.data(), static_cast<int>(stored_blob.size()))) {
          return absl::DataLossError(absl::StrCat("the stored settings of project ",
                                                  project.identity().name, " do not parse"));
        }
        if (admit) {
          if (absl::Status s = admit(stored); !s.ok()) return s;
        }
        // An unset method keeps the project's own: an update of other settings must not move
        // a project created with the default, auto, onto ds.
        settings = requested;
        if (settings.model().method() == v1::TRUTH_METHOD_UNSPECIFIED) {
          settings.mutable_model()->set_method(stored.model().method());
        }
        return settings.SerializeAsString();
      },
      &change_seq);
  if (!s.ok()) return s;
  if (between_write_and_apply_) between_write_and_apply_();
  project.SetSettings(settings);
  project.NoteOwnChange(change_seq);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ProjectRegistry::AddItems(
    LiveProject& project, std::vector<storage::ItemWrite> writes,
    const std::function<absl::Status()>& admit) {
  absl::MutexLock order(&project.write_order_mu());  // As in UpdateSettings.
  FollowStoredChanges(project);
  if (admit) {
    if (absl::Status s = admit(); !s.ok()) return s;
  }
  int64_t change_seq = 0;
  auto indices = storage_.items->UpsertItems(project.identity().project_id, writes, &change_seq);
  if (!indices.ok()) return indices.status();
  if (between_write_and_apply_) between_write_and_apply_();
  std::vector<ItemChange> changes;
  changes.reserve(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    changes.push_back({(*indices)[i], std::move(writes[i].external_id), writes[i].gold_label,
                       writes[i].priority, std::move(writes[i].features)});
  }
  project.ApplyItems(changes);
  project.NoteOwnChange(change_seq);
  return indices;
}

std::vector<std::shared_ptr<LiveProject>> ProjectRegistry::All() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::shared_ptr<LiveProject>> all;
  all.reserve(projects_.size());
  for (const auto& [name, project] : projects_) all.push_back(project);
  return all;
}

}  // namespace verity::server
