#include "server/state/posterior_table.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace verity::server {

PosteriorTableBuilder::PosteriorTableBuilder(const PosteriorTable& base)
    : table_(base), owned_(base.chunks_.size(), false), writable_(base.chunks_.size()) {}

void PosteriorTableBuilder::Resize(int32_t num_items) {
  if (num_items <= table_.num_items_) return;
  const int32_t k = table_.num_classes_;
  const size_t chunks_needed = (num_items + PosteriorTable::kChunkItems - 1) / PosteriorTable::kChunkItems;
  while (table_.chunks_.size() < chunks_needed) {
    auto chunk = std::make_shared<PosteriorTable::Chunk>();
    chunk->probabilities.assign(static_cast<size_t>(PosteriorTable::kChunkItems) * k, 1.0 / k);
    chunk->num_labels.assign(PosteriorTable::kChunkItems, 0);
    chunk->newest_seq.assign(PosteriorTable::kChunkItems, 0);
    chunk->is_gold.assign(PosteriorTable::kChunkItems, 0);
    chunk->entropy.assign(PosteriorTable::kChunkItems, std::log(static_cast<double>(k)));
    chunk->priority.assign(PosteriorTable::kChunkItems, 0.0);
    writable_.push_back(chunk);
    table_.chunks_.push_back(std::move(chunk));
    owned_.push_back(true);
  }
  table_.num_items_ = num_items;
}

PosteriorTable::Chunk& PosteriorTableBuilder::MutableChunk(int32_t item) {
  const size_t c = item / PosteriorTable::kChunkItems;
  if (!owned_[c]) {
    writable_[c] = std::make_shared<PosteriorTable::Chunk>(*table_.chunks_[c]);
    table_.chunks_[c] = writable_[c];
    owned_[c] = true;
  }
  return *writable_[c];
}

absl::Span<double> PosteriorTableBuilder::mutable_probabilities(int32_t item) {
  PosteriorTable::Chunk& c = MutableChunk(item);
  const int32_t k = table_.num_classes_;
  return absl::MakeSpan(c.probabilities.data() + (item % PosteriorTable::kChunkItems) * k, k);
}

namespace {

// The bounds of items [begin, end) of a chunk's columns.
PosteriorTable::ScanBounds BoundsOf(const std::vector<int32_t>& num_labels,
                                    const std::vector<uint8_t>& is_gold,
                                    const std::vector<double>& entropy,
                                    const std::vector<double>& priority, size_t begin,
                                    size_t end) {
  PosteriorTable::ScanBounds b;
  for (size_t i = begin; i < end; ++i) {
    if (is_gold[i] != 0) continue;
    b.max_priority = std::max(b.max_priority, priority[i]);
    b.max_entropy = std::max(b.max_entropy, entropy[i]);
    b.max_discounted_entropy =
        std::max(b.max_discounted_entropy, entropy[i] * (1.0 / (1.0 + num_labels[i])));
    b.min_num_labels = std::min(b.min_num_labels, num_labels[i]);
  }
  return b;
}

// The union of two ranges' bounds.
PosteriorTable::ScanBounds Union(const PosteriorTable::ScanBounds& a,
                                 const PosteriorTable::ScanBounds& b) {
  PosteriorTable::ScanBounds u;
  u.max_priority = std::max(a.max_priority, b.max_priority);
  u.max_entropy = std::max(a.max_entropy, b.max_entropy);
  u.max_discounted_entropy = std::max(a.max_discounted_entropy, b.max_discounted_entropy);
  u.min_num_labels = std::min(a.min_num_labels, b.min_num_labels);
  return u;
}

}  // namespace

PosteriorTable PosteriorTableBuilder::Build() && {
  for (size_t c = 0; c < writable_.size(); ++c) {
    if (!owned_[c]) continue;
    PosteriorTable::Chunk& chunk = *writable_[c];
    chunk.discounted_entropy.resize(PosteriorTable::kChunkItems);
    for (int32_t i = 0; i < PosteriorTable::kChunkItems; ++i) {
      chunk.discounted_entropy[i] = chunk.entropy[i] * (1.0 / (1.0 + chunk.num_labels[i]));
    }
    chunk.block_bounds.resize(PosteriorTable::kBlocksPerChunk);
    chunk.bounds = PosteriorTable::ScanBounds();
    for (int32_t b = 0; b < PosteriorTable::kBlocksPerChunk; ++b) {
      const size_t begin = static_cast<size_t>(b) * PosteriorTable::kBlockItems;
      chunk.block_bounds[b] = BoundsOf(chunk.num_labels, chunk.is_gold, chunk.entropy,
                                       chunk.priority, begin, begin + PosteriorTable::kBlockItems);
      chunk.bounds = Union(chunk.bounds, chunk.block_bounds[b]);
    }
  }
  writable_.clear();
  owned_.clear();
  return std::move(table_);
}

}  // namespace verity::server
