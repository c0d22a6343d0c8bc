// PosteriorTable: the immutable per-item truth state a snapshot serves (posterior
// probabilities, live label count, newest label sequence number, gold flag).
//
// Items are stored in fixed-size chunks held by shared_ptr<const Chunk>, so a new table that
// changes a few items shares every untouched chunk with its predecessor: an online update of
// a committed batch costs O(touched chunks + items / kChunkItems), not O(items).
//
// Thread-safety: a PosteriorTable is immutable and safe to read from any number of threads.
// A Builder is thread-compatible (one writer) and never modifies the table it started from.
#ifndef VERITY_SERVER_STATE_POSTERIOR_TABLE_H_
#define VERITY_SERVER_STATE_POSTERIOR_TABLE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/types/span.h"

namespace verity::server {

class PosteriorTableBuilder;

class PosteriorTable {
 public:
  static constexpr int32_t kChunkItems = 1024;

  explicit PosteriorTable(int32_t num_classes) : num_classes_(num_classes) {}

  int32_t num_classes() const { return num_classes_; }
  int32_t num_items() const { return num_items_; }

  // Preconditions for all accessors: 0 <= item < num_items().
  absl::Span<const double> probabilities(int32_t item) const {
    const Chunk& c = *chunks_[item / PosteriorTable::kChunkItems];
    return absl::MakeConstSpan(c.probabilities.data() + (item % kChunkItems) * num_classes_,
                               num_classes_);
  }
  int32_t num_labels(int32_t item) const {
    return chunks_[item / PosteriorTable::kChunkItems]->num_labels[item % PosteriorTable::kChunkItems];
  }
  // Sequence number of the newest live label of the item (0 if none).
  int64_t newest_seq(int32_t item) const {
    return chunks_[item / PosteriorTable::kChunkItems]->newest_seq[item % PosteriorTable::kChunkItems];
  }
  bool is_gold(int32_t item) const {
    return chunks_[item / PosteriorTable::kChunkItems]->is_gold[item % PosteriorTable::kChunkItems] != 0;
  }
  // Entropy of probabilities(item) in nats (kept so assignment can bound scores cheaply).
  double entropy(int32_t item) const {
    return chunks_[item / kChunkItems]->entropy[item % kChunkItems];
  }
  // Assignment priority set by the client (default 0).
  double priority(int32_t item) const {
    return chunks_[item / kChunkItems]->priority[item % kChunkItems];
  }

  // Bounds over the non-gold items of a range of items (a chunk of kChunkItems items, or a
  // block of kBlockItems within it), so that a scan for the best items can skip a range none
  // of whose items can win. The unused slots of the last chunk count as the unlabelled,
  // uniform items they start as. A range of gold items only has the initial values (every
  // bound below every item's).
  static constexpr int32_t kBlockItems = 64;
  static constexpr int32_t kBlocksPerChunk = kChunkItems / kBlockItems;
  struct ScanBounds {
    double max_priority = -std::numeric_limits<double>::infinity();
    double max_entropy = -std::numeric_limits<double>::infinity();
    // The largest entropy(i) * (1.0 / (1.0 + num_labels(i))), computed in exactly that form.
    double max_discounted_entropy = -std::numeric_limits<double>::infinity();
    int32_t min_num_labels = std::numeric_limits<int32_t>::max();
  };
  int32_t num_chunks() const { return static_cast<int32_t>(chunks_.size()); }
  // Items chunk * kChunkItems onwards.
  const ScanBounds& chunk_bounds(int32_t chunk) const { return chunks_[chunk]->bounds; }
  // Items chunk * kChunkItems + block * kBlockItems onwards; 0 <= block < kBlocksPerChunk.
  const ScanBounds& block_bounds(int32_t chunk, int32_t block) const {
    return chunks_[chunk]->block_bounds[block];
  }
  // One chunk's columns for scans, each kChunkItems long (slot i is item
  // chunk * kChunkItems + i; slots past num_items() hold the initial values).
  struct ChunkColumns {
    const double* priority;
    const uint8_t* is_gold;
    // entropy(i) * (1.0 / (1.0 + num_labels(i))), as in ScanBounds.
    const double* discounted_entropy;
  };
  ChunkColumns chunk_columns(int32_t chunk) const {
    const Chunk& c = *chunks_[chunk];
    return {c.priority.data(), c.is_gold.data(), c.discounted_entropy.data()};
  }

  // Copy-on-write editor (PosteriorTableBuilder, below).
  using Builder = PosteriorTableBuilder;

 private:
  friend class PosteriorTableBuilder;

  struct Chunk {
    std::vector<double> probabilities;  // kChunkItems * num_classes
    std::vector<int32_t> num_labels;
    std::vector<int64_t> newest_seq;
    std::vector<uint8_t> is_gold;
    std::vector<double> entropy;
    std::vector<double> priority;
    // Computed by Build() for every chunk the builder wrote.
    std::vector<double> discounted_entropy;
    ScanBounds bounds;
    std::vector<ScanBounds> block_bounds;  // kBlocksPerChunk
  };

  int32_t num_classes_;
  int32_t num_items_ = 0;
  std::vector<std::shared_ptr<const Chunk>> chunks_;
};

// Copy-on-write editor of a PosteriorTable: starts from `base`, clones a chunk the first time one of its items
// is written.
class PosteriorTableBuilder {
 public:
  explicit PosteriorTableBuilder(const PosteriorTable& base);

  // Grows to `num_items`; new items start with uniform probabilities and no labels.
  void Resize(int32_t num_items);
  int32_t num_items() const { return table_.num_items_; }

  absl::Span<double> mutable_probabilities(int32_t item);
  void set_num_labels(int32_t item, int32_t n) { MutableChunk(item).num_labels[item % PosteriorTable::kChunkItems] = n; }
  void set_newest_seq(int32_t item, int64_t seq) { MutableChunk(item).newest_seq[item % PosteriorTable::kChunkItems] = seq; }
  void set_is_gold(int32_t item, bool gold) { MutableChunk(item).is_gold[item % PosteriorTable::kChunkItems] = gold; }
  void set_entropy(int32_t item, double h) { MutableChunk(item).entropy[item % PosteriorTable::kChunkItems] = h; }
  void set_priority(int32_t item, double p) { MutableChunk(item).priority[item % PosteriorTable::kChunkItems] = p; }

  // The table, with the ScanBounds of every chunk (and its blocks) this builder wrote or added.
  PosteriorTable Build() &&;

 private:
  PosteriorTable::Chunk& MutableChunk(int32_t item);

  PosteriorTable table_;
  std::vector<bool> owned_;  // owned_[c]: chunk c was cloned by this builder.
  std::vector<std::shared_ptr<PosteriorTable::Chunk>> writable_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_POSTERIOR_TABLE_H_
