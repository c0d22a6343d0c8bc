#include "server/posterior_table.h"

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

PosteriorTable PosteriorTableBuilder::Build() && {
  writable_.clear();
  owned_.clear();
  return std::move(table_);
}

}  // namespace verity::server
