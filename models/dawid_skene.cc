#include "models/dawid_skene.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/binary_codec.h"

namespace verity::models {
namespace {

using Entry = AnnotationMatrix::Entry;

// Whether an item with `num_labels` labels and gold `gold_label` adds
// expected counts to the M-step (see the file comment of dawid_skene.h).
bool InformsParameters(size_t num_labels, int32_t gold_label) {
  return gold_label >= 0 || num_labels >= 2;
}

int32_t GoldOf(absl::Span<const int32_t> gold, int32_t item) {
  return gold.empty() ? -1 : gold[item];
}

// Whether the relative change of the log-likelihood from `previous` to
// `current` is within `tolerance` (the stopping rule of every EM loop here).
bool Converged(double previous, double current, double tolerance) {
  return std::abs(current - previous) <= tolerance * std::abs(current);
}

// Kept-state serialization (inside the checksummed blob of
// SerializeConfusionModel). Arrays of u32 are written as strings of
// little-endian values, in chunks that fit a string's u32 length.
constexpr uint32_t kStateLayoutVersion = 1;
constexpr size_t kMaxValuesPerChunk = size_t{1} << 28;

void WriteU32Array(ByteWriter& writer, const std::vector<uint32_t>& values) {
  writer.WriteU64(values.size());
  std::string chunk;
  for (size_t begin = 0; begin < values.size(); begin += kMaxValuesPerChunk) {
    const size_t end = std::min(values.size(), begin + kMaxValuesPerChunk);
    chunk.resize(4 * (end - begin));
    for (size_t j = begin; j < end; ++j) {
      const uint32_t v = values[j];
      char* p = chunk.data() + 4 * (j - begin);
      p[0] = static_cast<char>(v & 0xff);
      p[1] = static_cast<char>((v >> 8) & 0xff);
      p[2] = static_cast<char>((v >> 16) & 0xff);
      p[3] = static_cast<char>((v >> 24) & 0xff);
    }
    writer.WriteString(chunk);
  }
}

absl::StatusOr<std::vector<uint32_t>> ReadU32Array(ByteReader& reader) {
  absl::StatusOr<uint64_t> n = reader.ReadU64();
  if (!n.ok()) return n.status();
  if (*n > reader.remaining() / 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized ds state is truncated: ", *n,
                     " values, have ", reader.remaining(), " bytes"));
  }
  std::vector<uint32_t> values(*n);
  for (size_t begin = 0; begin < values.size(); begin += kMaxValuesPerChunk) {
    const size_t end = std::min(values.size(), begin + kMaxValuesPerChunk);
    absl::StatusOr<std::string_view> chunk = reader.ReadString();
    if (!chunk.ok()) return chunk.status();
    if (chunk->size() != 4 * (end - begin)) {
      return absl::InvalidArgumentError(
          "serialized ds state is corrupt: bad array chunk");
    }
    for (size_t j = begin; j < end; ++j) {
      const unsigned char* p =
          reinterpret_cast<const unsigned char*>(chunk->data()) +
          4 * (j - begin);
      values[j] = static_cast<uint32_t>(p[0]) |
                  (static_cast<uint32_t>(p[1]) << 8) |
                  (static_cast<uint32_t>(p[2]) << 16) |
                  (static_cast<uint32_t>(p[3]) << 24);
    }
  }
  return values;
}

// The labels and gold of every item at the last full EM, in item-major CSR
// form, as AnnotationMatrix sorts them. Immutable once built; shared by the
// states of the incremental refits that follow that EM.
struct LabelSnapshot {
  int32_t num_items() const { return static_cast<int32_t>(gold.size()); }
  absl::Span<const Entry> LabelsOfItem(int32_t item) const {
    return absl::MakeConstSpan(entries.data() + offsets[item],
                               entries.data() + offsets[item + 1]);
  }

  std::vector<int64_t> offsets = {0};  // num_items + 1
  std::vector<Entry> entries;
  std::vector<int32_t> gold;  // -1: none
};

std::shared_ptr<const LabelSnapshot> SnapshotLabels(
    const AnnotationMatrix& data, absl::Span<const int32_t> gold) {
  auto snapshot = std::make_shared<LabelSnapshot>();
  const int32_t n = data.num_items();
  snapshot->offsets.resize(static_cast<size_t>(n) + 1);
  snapshot->gold.resize(n);
  // The item-major CSR of AnnotationMatrix holds the items' labels one after
  // the other: one copy of the whole array, unless a row is elsewhere.
  const Entry* first = n > 0 ? data.LabelsOfItem(0).data() : nullptr;
  bool contiguous = true;
  int64_t offset = 0;
  for (int32_t i = 0; i < n; ++i) {
    const absl::Span<const Entry> labels = data.LabelsOfItem(i);
    contiguous =
        contiguous && (labels.empty() || labels.data() == first + offset);
    offset += static_cast<int64_t>(labels.size());
    snapshot->offsets[i + 1] = offset;
    snapshot->gold[i] = GoldOf(gold, i);
  }
  if (contiguous) {
    snapshot->entries.assign(first, first + offset);
  } else {
    snapshot->entries.reserve(static_cast<size_t>(offset));
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      snapshot->entries.insert(snapshot->entries.end(), labels.begin(),
                               labels.end());
    }
  }
  return snapshot;
}

// The items whose labels or gold changed since the last full EM, by
// increasing item id: their labels and gold now, and the parameter set (an
// index into RefitState::estep_params) their responsibility was computed with.
struct ChangedItems {
  size_t size() const { return item.size(); }
  absl::Span<const Entry> LabelsAt(size_t r) const {
    return absl::MakeConstSpan(entries.data() + offsets[r],
                               entries.data() + offsets[r + 1]);
  }
  void Append(int32_t item_id, absl::Span<const Entry> labels,
              int32_t gold_label, uint8_t estep_index) {
    item.push_back(item_id);
    gold.push_back(gold_label);
    estep.push_back(estep_index);
    entries.insert(entries.end(), labels.begin(), labels.end());
    offsets.push_back(static_cast<int64_t>(entries.size()));
  }

  std::vector<int32_t> item;
  std::vector<int32_t> gold;
  std::vector<uint8_t> estep;
  std::vector<int64_t> offsets = {0};  // size() + 1
  std::vector<Entry> entries;
};

bool SameLabels(absl::Span<const Entry> a, absl::Span<const Entry> b) {
  static_assert(sizeof(Entry) == 2 * sizeof(int32_t), "Entry has padding");
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(Entry)) == 0);
}

}  // namespace

// What a warm Fit needs to refit incrementally: every item's labels and gold
// as of its last E-step (the snapshot of the last full EM, overridden by the
// changed items), the parameters each responsibility was computed with, and
// the expected counts they sum to.
struct DawidSkeneModel::RefitState {
  explicit RefitState(ConfusionCounts c) : counts(std::move(c)) {}

  // An item as of its last E-step.
  struct KeptItem {
    absl::Span<const Entry> labels;
    int32_t gold = -1;
    uint8_t estep = 0;
    bool has_data() const { return gold >= 0 || !labels.empty(); }
  };

  // Reads the kept items in increasing item order.
  class Cursor {
   public:
    explicit Cursor(const RefitState& state) : state_(state) {}
    // Precondition: `item` is not below the last one asked for.
    KeptItem Get(int32_t item) {
      const ChangedItems& changed = state_.changed;
      while (next_ < changed.size() && changed.item[next_] < item) ++next_;
      if (next_ < changed.size() && changed.item[next_] == item) {
        return {changed.LabelsAt(next_), changed.gold[next_],
                changed.estep[next_]};
      }
      if (item < state_.base->num_items()) {
        return {state_.base->LabelsOfItem(item), state_.base->gold[item], 0};
      }
      return {};
    }

   private:
    const RefitState& state_;
    size_t next_ = 0;
  };

  // Drops the parameter sets no changed item refers to (set 0, that of the
  // snapshot, is always kept) and renumbers the rest.
  void DropUnusedParameters() {
    std::vector<int32_t> remap(estep_params.size(), -1);
    remap[0] = 0;
    for (size_t r = 0; r < changed.size(); ++r) {
      if (changed.gold[r] >= 0 || changed.offsets[r + 1] > changed.offsets[r]) {
        remap[changed.estep[r]] = 0;
      }
    }
    std::vector<ConfusionParameters> kept;
    for (size_t v = 0; v < estep_params.size(); ++v) {
      if (remap[v] < 0) continue;
      remap[v] = static_cast<int32_t>(kept.size());
      kept.push_back(std::move(estep_params[v]));
    }
    for (uint8_t& v : changed.estep) {
      v = static_cast<uint8_t>(std::max(0, remap[v]));
    }
    estep_params = std::move(kept);
  }

  void Serialize(ByteWriter& writer) const;
  static absl::StatusOr<std::shared_ptr<RefitState>> Parse(
      ByteReader& reader, int32_t num_classes);

  int32_t num_items = 0;
  std::shared_ptr<const LabelSnapshot> base;  // never null
  ChangedItems changed;                       // override `base`
  // The responsibility of an item is estep_params[estep].Posterior(labels,
  // gold) of its KeptItem; every item of `base` not in `changed` has set 0.
  std::vector<ConfusionParameters> estep_params;
  // The sum of the responsibilities of the items that inform the parameters
  // (InformsParameters); the model's parameters are EstimateParameters of it.
  ConfusionCounts counts;
  // Sum over items with labels or gold of their log-likelihood terms under
  // the parameters of their responsibilities.
  double log_likelihood = 0.0;
  bool converged = false;  // of the fit that made this state
  int32_t incremental_refits = 0;  // in a row since the last full EM
  int64_t incremental_labels = 0;  // labels of items they E-stepped
};

namespace {

// Writes the sizes of `offsets`' rows and the entries of a CSR table.
void WriteLabelTable(ByteWriter& writer, absl::Span<const int64_t> offsets,
                     absl::Span<const Entry> entries) {
  std::vector<uint32_t> values(offsets.size() - 1);
  for (size_t r = 0; r + 1 < offsets.size(); ++r) {
    values[r] = static_cast<uint32_t>(offsets[r + 1] - offsets[r]);
  }
  WriteU32Array(writer, values);
  values.resize(2 * entries.size());
  for (size_t j = 0; j < entries.size(); ++j) {
    values[2 * j] = static_cast<uint32_t>(entries[j].other);
    values[2 * j + 1] = static_cast<uint32_t>(entries[j].label);
  }
  WriteU32Array(writer, values);
}

absl::Status CorruptState(const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("serialized ds state is corrupt: ", what));
}

// Reads what WriteLabelTable wrote; every annotator must be below
// num_annotators and every label below num_classes.
absl::Status ReadLabelTable(ByteReader& reader, int32_t num_annotators,
                            int32_t num_classes, std::vector<int64_t>& offsets,
                            std::vector<Entry>& entries) {
  absl::StatusOr<std::vector<uint32_t>> sizes = ReadU32Array(reader);
  if (!sizes.ok()) return sizes.status();
  offsets.assign(sizes->size() + 1, 0);
  for (size_t r = 0; r < sizes->size(); ++r) {
    offsets[r + 1] = offsets[r] + (*sizes)[r];
  }
  absl::StatusOr<std::vector<uint32_t>> values = ReadU32Array(reader);
  if (!values.ok()) return values.status();
  if (values->size() != 2 * static_cast<uint64_t>(offsets.back())) {
    return CorruptState("label count mismatch");
  }
  entries.resize(values->size() / 2);
  for (size_t j = 0; j < entries.size(); ++j) {
    const uint32_t annotator = (*values)[2 * j];
    const uint32_t label = (*values)[2 * j + 1];
    if (annotator >= static_cast<uint32_t>(num_annotators) ||
        label >= static_cast<uint32_t>(num_classes)) {
      return CorruptState("label out of range");
    }
    entries[j] = {static_cast<int32_t>(annotator), static_cast<int32_t>(label)};
  }
  return absl::OkStatus();
}

// Writes gold classes (-1: none) as u32 values gold + 1.
void WriteGold(ByteWriter& writer, absl::Span<const int32_t> gold) {
  std::vector<uint32_t> values(gold.size());
  for (size_t i = 0; i < gold.size(); ++i) {
    values[i] = static_cast<uint32_t>(gold[i] + 1);
  }
  WriteU32Array(writer, values);
}

absl::Status ReadGold(ByteReader& reader, int32_t num_classes, size_t size,
                      std::vector<int32_t>& gold) {
  absl::StatusOr<std::vector<uint32_t>> values = ReadU32Array(reader);
  if (!values.ok()) return values.status();
  if (values->size() != size) return CorruptState("gold size");
  gold.resize(size);
  for (size_t i = 0; i < size; ++i) {
    if ((*values)[i] > static_cast<uint32_t>(num_classes)) {
      return CorruptState("gold out of range");
    }
    gold[i] = static_cast<int32_t>((*values)[i]) - 1;
  }
  return absl::OkStatus();
}

}  // namespace

void DawidSkeneModel::RefitState::Serialize(ByteWriter& writer) const {
  writer.WriteU32(kStateLayoutVersion);
  writer.WriteU32(static_cast<uint32_t>(num_items));
  counts.Serialize(writer);
  WriteLabelTable(writer, base->offsets, base->entries);
  WriteGold(writer, base->gold);
  std::vector<uint32_t> items(changed.item.begin(), changed.item.end());
  WriteU32Array(writer, items);
  WriteLabelTable(writer, changed.offsets, changed.entries);
  WriteGold(writer, changed.gold);
  writer.WriteString(std::string_view(
      reinterpret_cast<const char*>(changed.estep.data()),
      changed.estep.size()));
  writer.WriteU32(static_cast<uint32_t>(estep_params.size()));
  for (const ConfusionParameters& p : estep_params) p.Serialize(writer);
  writer.WriteF64(log_likelihood);
  writer.WriteU32(converged ? 1 : 0);
  writer.WriteU32(static_cast<uint32_t>(incremental_refits));
  writer.WriteU64(static_cast<uint64_t>(incremental_labels));
}

absl::StatusOr<std::shared_ptr<DawidSkeneModel::RefitState>>
DawidSkeneModel::RefitState::Parse(ByteReader& reader, int32_t num_classes) {
  absl::StatusOr<uint32_t> layout = reader.ReadU32();
  if (!layout.ok()) return layout.status();
  if (*layout != kStateLayoutVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("serialized ds state has layout version ", *layout,
                     "; this build reads version ", kStateLayoutVersion));
  }
  absl::StatusOr<uint32_t> num_items = reader.ReadU32();
  if (!num_items.ok()) return num_items.status();
  if (*num_items > static_cast<uint32_t>(INT32_MAX - 1)) {
    return CorruptState("too many items");
  }
  absl::StatusOr<ConfusionCounts> counts =
      ConfusionCounts::Parse(reader, num_classes);
  if (!counts.ok()) return counts.status();
  const int32_t num_annotators = counts->num_annotators();
  auto state = std::make_shared<RefitState>(*std::move(counts));
  state->num_items = static_cast<int32_t>(*num_items);

  auto base = std::make_shared<LabelSnapshot>();
  absl::Status s = ReadLabelTable(reader, num_annotators, num_classes,
                                  base->offsets, base->entries);
  if (!s.ok()) return s;
  s = ReadGold(reader, num_classes, base->offsets.size() - 1, base->gold);
  if (!s.ok()) return s;
  if (base->num_items() > state->num_items) return CorruptState("item count");
  state->base = std::move(base);

  ChangedItems& changed = state->changed;
  absl::StatusOr<std::vector<uint32_t>> items = ReadU32Array(reader);
  if (!items.ok()) return items.status();
  for (size_t r = 0; r < items->size(); ++r) {
    if ((*items)[r] >= *num_items ||
        (r > 0 && (*items)[r] <= (*items)[r - 1])) {
      return CorruptState("changed items out of order");
    }
  }
  changed.item.assign(items->begin(), items->end());
  s = ReadLabelTable(reader, num_annotators, num_classes, changed.offsets,
                     changed.entries);
  if (!s.ok()) return s;
  if (changed.offsets.size() != changed.item.size() + 1) {
    return CorruptState("changed item count");
  }
  s = ReadGold(reader, num_classes, changed.item.size(), changed.gold);
  if (!s.ok()) return s;
  absl::StatusOr<std::string_view> estep = reader.ReadString();
  if (!estep.ok()) return estep.status();
  if (estep->size() != changed.item.size()) {
    return CorruptState("parameter index count");
  }
  changed.estep.assign(estep->begin(), estep->end());

  absl::StatusOr<uint32_t> num_params = reader.ReadU32();
  if (!num_params.ok()) return num_params.status();
  if (*num_params < 1 || *num_params > 256) {
    return CorruptState("bad number of parameter sets");
  }
  for (uint8_t v : changed.estep) {
    if (v >= *num_params) return CorruptState("parameter index out of range");
  }
  for (uint32_t v = 0; v < *num_params; ++v) {
    absl::StatusOr<ConfusionParameters> p =
        ConfusionParameters::Parse(reader, num_classes);
    if (!p.ok()) return p.status();
    state->estep_params.push_back(*std::move(p));
  }
  absl::StatusOr<double> ll = reader.ReadF64();
  if (!ll.ok()) return ll.status();
  if (!std::isfinite(*ll)) return CorruptState("log-likelihood");
  state->log_likelihood = *ll;
  absl::StatusOr<uint32_t> converged = reader.ReadU32();
  if (!converged.ok()) return converged.status();
  if (*converged > 1) return CorruptState("convergence flag");
  state->converged = *converged == 1;
  absl::StatusOr<uint32_t> refits = reader.ReadU32();
  if (!refits.ok()) return refits.status();
  // Not bounded by kMaxIncrementalRefits: a build with a smaller bound still
  // reads the state, and its next warm Fit is a full one.
  state->incremental_refits =
      static_cast<int32_t>(std::min<uint32_t>(*refits, INT32_MAX));
  absl::StatusOr<uint64_t> refit_labels = reader.ReadU64();
  if (!refit_labels.ok()) return refit_labels.status();
  if (*refit_labels > static_cast<uint64_t>(INT64_MAX)) {
    return CorruptState("incremental label count");
  }
  state->incremental_labels = static_cast<int64_t>(*refit_labels);
  return state;
}

absl::StatusOr<std::unique_ptr<DawidSkeneModel>> DawidSkeneModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<DawidSkeneModel>(
      new DawidSkeneModel(num_classes, options));
}

std::unique_ptr<TruthModel> DawidSkeneModel::Clone() const {
  return std::unique_ptr<TruthModel>(new DawidSkeneModel(*this));
}

int32_t DawidSkeneModel::incremental_refits_in_a_row() const {
  return state_ == nullptr ? 0 : state_->incremental_refits;
}

absl::StatusOr<FitReport> DawidSkeneModel::Fit(const AnnotationMatrix& data,
                                               absl::Span<const int32_t> gold,
                                               bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;

  std::optional<FitReport> report;
  if (warm_start && params_.has_value()) {
    report = RefitIncrementally(data, gold);
  }
  if (!report.has_value()) report = FitAllItems(data, gold, warm_start);
  report->seconds = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  return *report;
}

FitReport DawidSkeneModel::FitAllItems(const AnnotationMatrix& data,
                                       absl::Span<const int32_t> gold,
                                       bool warm_start) {
  const double diagonal = options_.population_diagonal_prior;
  auto informs = [](absl::Span<const Entry> labels, int32_t gold_label) {
    return InformsParameters(labels.size(), gold_label);
  };
  FitReport report;
  std::optional<ConfusionParameters> params;
  if (warm_start && params_.has_value()) {
    params = *params_;
    params->ResizeAnnotators(data.num_annotators());
  } else {
    // Initialisation (not counted as an iteration): the M-step on the soft
    // majority vote.
    const double smoothing = options_.vote_smoothing;
    PassResult pass = PassOverItems(
        data, gold, options_.num_threads,
        [smoothing](absl::Span<const Entry> labels, int32_t gold_label,
                    absl::Span<double> out) {
          SoftMajorityVote(labels, gold_label, smoothing, out);
          return 0.0;
        },
        informs);
    params = EstimateParameters(pass.counts, options_, diagonal);
  }

  // Each pass is the E-step of the current parameters (giving their
  // log-likelihood) fused with the M-step that replaces them. The last
  // E-step's parameters and counts become the kept state.
  std::optional<ConfusionParameters> estep_params;
  std::optional<ConfusionCounts> estep_counts;
  std::optional<double> previous_ll;
  while (report.iterations < options_.max_iterations) {
    const ConfusionParameters& current = *params;
    PassResult pass = PassOverItems(
        data, gold, options_.num_threads,
        [&current](absl::Span<const Entry> labels, int32_t gold_label,
                   absl::Span<double> out) {
          return current.Posterior(labels, gold_label, out);
        },
        informs);
    report.log_likelihood = pass.log_likelihood;
    ConfusionParameters next =
        EstimateParameters(pass.counts, options_, diagonal);
    estep_params = std::move(params);
    params = std::move(next);
    estep_counts = std::move(pass.counts);
    ++report.iterations;
    if (previous_ll.has_value() &&
        Converged(*previous_ll, pass.log_likelihood, options_.tolerance)) {
      report.converged = true;
      break;
    }
    previous_ll = pass.log_likelihood;
  }

  auto state = std::make_shared<RefitState>(*std::move(estep_counts));
  state->num_items = data.num_items();
  state->base = SnapshotLabels(data, gold);
  state->estep_params.push_back(*std::move(estep_params));
  state->log_likelihood = report.log_likelihood;
  state->converged = report.converged;
  params_ = std::move(params);
  state_ = std::move(state);
  return report;
}

std::optional<FitReport> DawidSkeneModel::RefitIncrementally(
    const AnnotationMatrix& data, absl::Span<const int32_t> gold) {
  if (state_ == nullptr || !state_->converged) return std::nullopt;
  const RefitState& old = *state_;
  const int32_t n = data.num_items();
  if (n < old.num_items ||
      data.num_annotators() < old.counts.num_annotators() ||
      old.incremental_refits >= kMaxIncrementalRefits) {
    return std::nullopt;
  }

  // 1. The changed items, and the labels their E-steps will touch.
  std::vector<int32_t> changed;
  int64_t touched_labels = 0;
  {
    RefitState::Cursor kept(old);
    for (int32_t i = 0; i < n; ++i) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(i);
      const int32_t gold_label = GoldOf(gold, i);
      const RefitState::KeptItem before = kept.Get(i);
      if (gold_label == before.gold && SameLabels(labels, before.labels)) {
        continue;
      }
      changed.push_back(i);
      touched_labels += static_cast<int64_t>(
          std::max(labels.size(), before.labels.size()));
    }
  }
  const double budget = options_.incremental_refit_max_fraction *
                        static_cast<double>(data.num_labels());
  if (static_cast<double>(old.incremental_labels + touched_labels) > budget) {
    return std::nullopt;
  }

  FitReport report;
  if (changed.empty()) {
    // Nothing to refit: the parameters and the kept state stay as they are.
    report.log_likelihood = old.log_likelihood;
    report.converged = true;
    return report;
  }

  // 2. Take the changed items' old contributions out.
  const size_t k = static_cast<size_t>(num_classes_);
  ConfusionCounts counts = old.counts;
  counts.ResizeAnnotators(data.num_annotators());
  double unchanged_ll = old.log_likelihood;
  std::vector<double> posterior(k);
  {
    RefitState::Cursor kept(old);
    for (int32_t i : changed) {
      const RefitState::KeptItem before = kept.Get(i);
      if (!before.has_data()) continue;
      unchanged_ll -= old.estep_params[before.estep].Posterior(
          before.labels, before.gold, absl::MakeSpan(posterior));
      if (InformsParameters(before.labels.size(), before.gold)) {
        counts.RemoveItem(before.labels, posterior.data());
      } else if (!before.labels.empty()) {
        counts.RemoveUninformedItem();
      }
    }
  }

  // 3. EM over the changed items that now have labels or gold.
  std::vector<int32_t> active;
  for (int32_t i : changed) {
    if (!data.LabelsOfItem(i).empty() || GoldOf(gold, i) >= 0) {
      active.push_back(i);
    }
  }
  std::vector<double> responsibility(active.size() * k);
  ConfusionParameters params = *params_;
  params.ResizeAnnotators(data.num_annotators());
  std::optional<ConfusionParameters> estep_params;
  std::optional<double> previous_ll;
  const double diagonal = options_.population_diagonal_prior;
  while (report.iterations < options_.max_iterations) {
    double ll = unchanged_ll;
    for (size_t j = 0; j < active.size(); ++j) {
      const absl::Span<const Entry> labels = data.LabelsOfItem(active[j]);
      const int32_t gold_label = GoldOf(gold, active[j]);
      const bool informs = InformsParameters(labels.size(), gold_label);
      double* q = responsibility.data() + j * k;
      if (informs && report.iterations > 0) counts.RemoveItem(labels, q);
      ll += params.Posterior(labels, gold_label, absl::MakeSpan(q, k));
      if (informs) {
        counts.AddItem(labels, q);
      } else if (report.iterations == 0 && !labels.empty()) {
        counts.AddUninformedItem();  // Once: it does not depend on q.
      }
    }
    report.log_likelihood = ll;
    ConfusionParameters next = EstimateParameters(counts, options_, diagonal);
    estep_params = std::move(params);
    params = std::move(next);
    ++report.iterations;
    if (previous_ll.has_value() &&
        Converged(*previous_ll, ll, options_.tolerance)) {
      report.converged = true;
      break;
    }
    previous_ll = ll;
  }

  // 4. The new state: the same snapshot, the changed items merged into the
  // old ones, with the parameters of this refit's last E-step.
  auto state = std::make_shared<RefitState>(std::move(counts));
  state->num_items = n;
  state->base = old.base;
  state->estep_params = old.estep_params;
  state->estep_params.push_back(*std::move(estep_params));
  const uint8_t newest = static_cast<uint8_t>(state->estep_params.size() - 1);
  size_t r = 0;
  for (int32_t i : changed) {
    for (; r < old.changed.size() && old.changed.item[r] <= i; ++r) {
      if (old.changed.item[r] == i) continue;  // replaced below
      state->changed.Append(old.changed.item[r], old.changed.LabelsAt(r),
                            old.changed.gold[r], old.changed.estep[r]);
    }
    const absl::Span<const Entry> labels = data.LabelsOfItem(i);
    const int32_t gold_label = GoldOf(gold, i);
    state->changed.Append(
        i, labels, gold_label,
        labels.empty() && gold_label < 0 ? uint8_t{0} : newest);
  }
  for (; r < old.changed.size(); ++r) {
    state->changed.Append(old.changed.item[r], old.changed.LabelsAt(r),
                          old.changed.gold[r], old.changed.estep[r]);
  }
  state->DropUnusedParameters();
  state->log_likelihood = report.log_likelihood;
  state->converged = report.converged;
  state->incremental_refits = old.incremental_refits + 1;
  state->incremental_labels = old.incremental_labels + touched_labels;
  params_ = std::move(params);
  state_ = std::move(state);
  return report;
}

void DawidSkeneModel::ItemPosterior(absl::Span<const Entry> labels,
                                    int32_t gold_label,
                                    absl::Span<double> out) const {
  if (!params_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  std::vector<Entry> scratch;
  params_->Posterior(CanonicalLabels(labels, scratch), gold_label, out);
}

std::vector<double> DawidSkeneModel::AnnotatorConfusion(
    int32_t annotator) const {
  if (!params_.has_value()) {
    return std::vector<double>(
        static_cast<size_t>(num_classes_) * num_classes_, 1.0 / num_classes_);
  }
  return params_->Confusion(annotator);
}

std::vector<double> DawidSkeneModel::AnnotatorConfusionDiagonal(
    int32_t annotator) const {
  if (!params_.has_value()) {
    return std::vector<double>(num_classes_, 1.0 / num_classes_);
  }
  return params_->ConfusionDiagonal(annotator);
}

std::vector<double> DawidSkeneModel::ClassPrior() const {
  if (!params_.has_value()) {
    return std::vector<double>(num_classes_, 1.0 / num_classes_);
  }
  return params_->ClassPrior();
}

std::string DawidSkeneModel::Serialize() const {
  if (state_ == nullptr) return SerializeConfusionModel(kMethod, params_);
  const RefitState& state = *state_;
  return SerializeConfusionModel(
      kMethod, params_, [&state](ByteWriter& writer) {
        state.Serialize(writer);
      });
}

absl::Status DawidSkeneModel::Restore(std::string_view serialized) {
  std::shared_ptr<RefitState> state;
  const int32_t k = num_classes_;
  absl::StatusOr<std::optional<ConfusionParameters>> params =
      ParseConfusionModel(serialized, kMethod, k,
                          [&state, k](ByteReader& reader) -> absl::Status {
                            absl::StatusOr<std::shared_ptr<RefitState>> s =
                                RefitState::Parse(reader, k);
                            if (!s.ok()) return s.status();
                            state = *std::move(s);
                            return absl::OkStatus();
                          });
  if (!params.ok()) return params.status();
  if (state != nullptr && !params->has_value()) {
    return absl::InvalidArgumentError(
        "serialized ds model is corrupt: a refit state without parameters");
  }
  params_ = *std::move(params);
  state_ = std::move(state);
  return absl::OkStatus();
}

}  // namespace verity::models
