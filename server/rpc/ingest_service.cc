#include "server/rpc/ingest_service.h"

#include <deque>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/api/grpc_status.h"
#include "server/api/validation.h"

namespace verity::server {
namespace {

// One batch between read and ack.
struct InFlightBatch {
  v1::BatchAck ack;  // batch_id, rejections and whole-batch errors filled at read time.
  std::optional<std::future<IngestPipeline::Result>> commit;
};

void FailBatch(v1::BatchAck& ack, const absl::Status& status) {
  ack.set_error_code(static_cast<int32_t>(status.code()));
  ack.set_error_message(std::string(status.message()));
}

void FillOutcomes(v1::BatchAck& ack, const IngestPipeline::Result& result) {
  if (!result.ok()) {
    FailBatch(ack, result.status());
    return;
  }
  for (const storage::WriteResult& r : *result) {
    switch (r.outcome) {
      case storage::WriteOutcome::kAccepted: ack.set_accepted(ack.accepted() + 1); break;
      case storage::WriteOutcome::kDuplicate: ack.set_duplicate(ack.duplicate() + 1); break;
      case storage::WriteOutcome::kRevised: ack.set_revised(ack.revised() + 1); break;
      case storage::WriteOutcome::kStale: ack.set_stale(ack.stale() + 1); break;
    }
  }
}

// OK when `batches` (all of `project`) keep it within its limits, counted against what the
// project holds now. Exact counting (which items, annotators and (item, annotator) pairs are
// new, which writes change a pair's label) only near a limit: far below every one, the
// batches' size bounds what they can add. Near the limit the revision count errs high, never
// low: a write that changes its pair's label counts; after a write with client_time (which the
// store may find stale, keeping the older live label) every later write of that pair counts.
absl::Status CheckBatchQuota(
    const LiveProject& project,
    absl::Span<const std::vector<storage::AnnotationWrite>* const> batches,
    const ProjectQuota& defaults) {
  const ProjectQuota quota = EffectiveQuota(project.settings(), defaults);
  const ProjectCounts counts = project.Counts();
  const ProjectGrowth current{counts.num_items, counts.num_annotators, counts.num_labels,
                              counts.num_revisions};
  int64_t n = 0;
  for (const auto* writes : batches) n += static_cast<int64_t>(writes->size());
  const int64_t k = DenseConfusionCellsPerAnnotator(project.settings().model().method(),
                                                    project.num_classes());
  const int64_t item_dim = project.identity().item_feature_dim;
  const int64_t annotator_dim = project.identity().annotator_feature_dim;
  if (CheckProjectQuota(quota, current, {n, n, n, n}, k, item_dim, annotator_dim).ok()) {
    return absl::OkStatus();
  }
  absl::flat_hash_set<absl::string_view> new_items, new_annotators;
  absl::flat_hash_set<std::pair<absl::string_view, absl::string_view>> new_labels;
  // The label each pair the batches touch holds after their writes so far, unless `unsure`
  // (a write with client_time may have been stale).
  struct PairLabel {
    int32_t label;
    bool unsure;
  };
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, PairLabel> label_now;
  int64_t revisions = 0;
  for (const auto* writes : batches) {
    for (const storage::AnnotationWrite& w : *writes) {
      const std::optional<int32_t> item = project.FindItem(w.item_id);
      const std::optional<int32_t> annotator = project.FindAnnotator(w.annotator_id);
      if (!item.has_value()) new_items.insert(w.item_id);
      if (!annotator.has_value()) new_annotators.insert(w.annotator_id);
      const std::pair<absl::string_view, absl::string_view> pair{w.item_id, w.annotator_id};
      auto [it, first_write] =
          label_now.try_emplace(pair, PairLabel{w.label, w.client_time.has_value()});
      if (first_write) {
        const std::optional<int32_t> live = item.has_value() && annotator.has_value()
                                                ? project.LiveLabelOf(*item, *annotator)
                                                : std::nullopt;
        if (!live.has_value()) {
          new_labels.insert(pair);
        } else if (*live != w.label) {
          ++revisions;
        }
      } else {
        if (it->second.unsure || it->second.label != w.label) ++revisions;
        it->second.label = w.label;
        it->second.unsure = it->second.unsure || w.client_time.has_value();
      }
    }
  }
  return CheckProjectQuota(quota, current,
                           {static_cast<int64_t>(new_items.size()),
                            static_cast<int64_t>(new_annotators.size()),
                            static_cast<int64_t>(new_labels.size()), revisions},
                           k, item_dim, annotator_dim);
}

// State shared by a stream's reader (the handler thread) and its ack writer.
struct StreamState {
  absl::Mutex mu;
  std::deque<InFlightBatch> in_flight ABSL_GUARDED_BY(mu);
  bool reading_done ABSL_GUARDED_BY(mu) = false;
  bool write_failed ABSL_GUARDED_BY(mu) = false;

  bool HasWorkOrDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return !in_flight.empty() || reading_done;
  }
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return in_flight.size() < static_cast<size_t>(IngestServiceImpl::kMaxBatchesInFlight);
  }
};

}  // namespace

grpc::Status IngestServiceImpl::SubmitAnnotations(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream) {
  // The key and its role; each batch's project is checked again below, after its Read.
  auto admitted = core_.auth->Admit(context);
  if (!admitted.ok()) return ToGrpcStatus(admitted.status());
  const std::string key_id = (*admitted)->key_id;  // "" with authentication off.
  if (!key_id.empty()) {
    absl::MutexLock lock(&key_streams_mu_);
    int& open = open_streams_by_key_[key_id];
    if (open >= max_streams_per_key_) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("API key ", key_id, " has ", open,
                                       " open SubmitAnnotations streams: the limit is ",
                                       max_streams_per_key_,
                                       " per key (--max_streams_per_key); retry later"));
    }
    ++open;
  }
  struct ReleaseKey {
    IngestServiceImpl& self;
    const std::string& key_id;
    ~ReleaseKey() {
      if (key_id.empty()) return;
      absl::MutexLock lock(&self.key_streams_mu_);
      if (--self.open_streams_by_key_[key_id] == 0) self.open_streams_by_key_.erase(key_id);
    }
  } release_key{*this, key_id};
  if (open_streams_.fetch_add(1) >= max_streams_) {
    open_streams_.fetch_sub(1);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("too many open SubmitAnnotations streams: the limit is ",
                                     max_streams_, " (--max_streams); retry later"));
  }
  struct Release {
    std::atomic<int>& open;
    ~Release() { open.fetch_sub(1); }
  } release{open_streams_};
  StreamState state;

  std::thread writer([&] {
    while (true) {
      InFlightBatch batch;
      {
        absl::MutexLock lock(&state.mu);
        state.mu.Await(absl::Condition(&state, &StreamState::HasWorkOrDone));
        if (state.in_flight.empty()) return;
        batch = std::move(state.in_flight.front());
        state.in_flight.pop_front();
      }
      if (batch.commit.has_value()) FillOutcomes(batch.ack, batch.commit->get());
      if (!stream->Write(batch.ack)) {
        absl::MutexLock lock(&state.mu);
        state.write_failed = true;
      }
    }
  });

  std::shared_ptr<LiveProject> project;
  std::string project_name;
  v1::AnnotationBatch batch;
  while (!context->IsCancelled() && stream->Read(&batch)) {
    InFlightBatch item;
    item.ack.set_batch_id(batch.batch_id());
    const absl::StatusOr<std::shared_ptr<const Principal>> principal =
        core_.auth->Admit(context);
    absl::Status batch_status = principal.status();
    // A batch that names another project, and that the authorization interceptor admitted for
    // it, makes it the stream's project whatever becomes of the batch: later batches that leave
    // the project out are authorized against it, so they must go to it too (or fail as it
    // does), never to the project named before. A batch refused for its key changes nothing,
    // in the interceptor as here.
    if (batch_status.ok() && !batch.project().empty() && batch.project() != project_name) {
      project_name = batch.project();
      project = nullptr;
    }
    if (batch_status.ok()) batch_status = ValidateBatchShape(batch);
    if (batch_status.ok() && project == nullptr && !project_name.empty()) {
      batch_status = ValidateProjectName(project_name);
      if (batch_status.ok()) {
        auto found = core_.registry->Get(project_name);
        if (found.ok()) {
          project = *found;
        } else {
          batch_status = found.status();
        }
      }
    }
    if (batch_status.ok() && project == nullptr) {
      batch_status = absl::InvalidArgumentError("project: required on the first batch of a stream");
    }
    // Every batch is a use of the stream's project (registry->Get marks only the first).
    if (batch_status.ok()) project->MarkUsed(absl::Now());
    if (!batch_status.ok()) {
      FailBatch(item.ack, batch_status);
    } else {
      std::vector<storage::AnnotationWrite> writes;
      writes.reserve(batch.annotations_size());
      const int32_t k = project->num_classes();
      const int64_t project_id = project->identity().project_id;
      int32_t rejected = 0;
      for (int i = 0; i < batch.annotations_size(); ++i) {
        v1::Annotation* a = batch.mutable_annotations(i);
        absl::Status s = ValidateAnnotation(absl::StrCat("annotations[", i, "]"), *a, k);
        if (!s.ok()) {
          if (++rejected <= ApiLimits::kMaxListedRejections) {
            v1::Rejection* r = item.ack.add_rejections();
            r->set_index(i);
            r->set_reason(std::string(s.message()));
          }
          continue;
        }
        storage::AnnotationWrite w;
        w.project_id = project_id;
        w.item_id = std::move(*a->mutable_item());
        w.annotator_id = std::move(*a->mutable_annotator());
        w.label = a->label();
        if (a->has_client_time()) {
          w.client_time = absl::FromUnixSeconds(a->client_time().seconds()) +
                          absl::Nanoseconds(a->client_time().nanos());
        }
        writes.push_back(std::move(w));
      }
      item.ack.set_rejected(rejected);
      // Checked twice: here, against the project as committed so far, so that a batch that
      // cannot fit is refused at once; and in the commit lane, exactly, with the batches
      // committed or admitted meanwhile (other streams' batches in flight included).
      const std::vector<storage::AnnotationWrite>* const own[] = {&writes};
      if (absl::Status quota = CheckBatchQuota(*project, own, core_.quota_defaults);
          !quota.ok()) {
        FailBatch(item.ack, quota);  // rejected and rejections stay, as in the commit lane.
      } else {
        item.commit = core_.ingest->Submit(
            project, std::move(writes),
            [defaults = core_.quota_defaults](
                const LiveProject& p,
                absl::Span<const std::vector<storage::AnnotationWrite>* const> batches) {
              return CheckBatchQuota(p, batches, defaults);
            },
            principal.ok() ? (*principal)->key_id : "",
            EffectiveQuota(project->settings(), core_.quota_defaults).max_revisions);
      }
    }
    absl::MutexLock lock(&state.mu);
    // Back-pressure: stop reading while too many batches of this stream wait for commit.
    state.mu.Await(absl::Condition(&state, &StreamState::HasRoom));
    state.in_flight.push_back(std::move(item));
    if (state.write_failed) break;
  }
  {
    absl::MutexLock lock(&state.mu);
    state.reading_done = true;
  }
  writer.join();
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
  return grpc::Status::OK;
}

}  // namespace verity::server
