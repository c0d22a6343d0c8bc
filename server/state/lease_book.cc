#include "server/state/lease_book.h"

namespace verity::server {

void LeaseBook::Add(int32_t item, int32_t annotator, absl::Time expires_at) {
  absl::MutexLock lock(&mu_);
  const uint64_t key = Key(item, annotator);
  auto [it, inserted] = leases_.try_emplace(key, expires_at);
  if (inserted) {
    ++per_item_[item];
  } else {
    it->second = expires_at;
  }
  expiry_.emplace(expires_at, key);
}

bool LeaseBook::Release(int32_t item, int32_t annotator) {
  absl::MutexLock lock(&mu_);
  const uint64_t key = Key(item, annotator);
  if (!leases_.contains(key)) return false;
  EraseLocked(key);
  return true;
}

void LeaseBook::EraseLocked(uint64_t key) {
  leases_.erase(key);
  const int32_t item = static_cast<int32_t>(key >> 32);
  auto it = per_item_.find(item);
  if (it != per_item_.end() && --it->second <= 0) per_item_.erase(it);
}

void LeaseBook::ExpireLocked(absl::Time now) {
  while (!expiry_.empty() && expiry_.top().first <= now) {
    auto [when, key] = expiry_.top();
    expiry_.pop();
    auto it = leases_.find(key);
    if (it != leases_.end() && it->second == when) EraseLocked(key);
  }
}

absl::flat_hash_map<int32_t, int32_t> LeaseBook::OutstandingPerItem(absl::Time now) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  return per_item_;
}

std::vector<int32_t> LeaseBook::OutstandingOn(absl::Span<const int32_t> items, absl::Time now) {
  std::vector<int32_t> counts(items.size(), 0);
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  for (size_t i = 0; i < items.size(); ++i) {
    if (auto it = per_item_.find(items[i]); it != per_item_.end()) counts[i] = it->second;
  }
  return counts;
}

bool LeaseBook::Has(int32_t item, int32_t annotator, absl::Time now) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  return leases_.contains(Key(item, annotator));
}

size_t LeaseBook::size(absl::Time now) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  return leases_.size();
}

}  // namespace verity::server
