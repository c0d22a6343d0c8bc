// PosteriorTable: the immutable per-item truth state a snapshot serves (posterior
// probabilities, live label count, newest label sequence number, gold flag).
//
// Items are stored in fixed-size chunks held by shared_ptr<const Chunk>, so a new table that
// changes a few items shares every untouched chunk with its predecessor: an online update of
// a committed batch costs O(touched chunks + items / kChunkItems), not O(items).
//
// Thread-safety: a PosteriorTable is immutable and safe to read from any number of threads.
// A Builder is thread-compatible (one writer) and never modifies the table it started from.
#ifndef VERITY_SERVER_POSTERIOR_TABLE_H_
#define VERITY_SERVER_POSTERIOR_TABLE_H_

#include <cstdint>
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

  PosteriorTable Build() &&;

 private:
  PosteriorTable::Chunk& MutableChunk(int32_t item);

  PosteriorTable table_;
  std::vector<bool> owned_;  // owned_[c]: chunk c was cloned by this builder.
  std::vector<std::shared_ptr<PosteriorTable::Chunk>> writable_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_POSTERIOR_TABLE_H_
