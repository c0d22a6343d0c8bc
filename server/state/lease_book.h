// LeaseBook: the open assignment leases of one project, in memory.
//
// A lease reserves one label slot on an item for an annotator until it expires or that
// annotator's label for the item is committed. Outstanding leases count toward an item's
// labels when deciding whether it is full, so two annotators are not sent to its last slot.
// The book is the serving copy; storage::LeaseStore keeps them across restarts.
//
// Thread-safety: thread-safe. Expiry is lazy: every query first drops the leases that expired
// at or before the `now` it is given.
#ifndef VERITY_SERVER_STATE_LEASE_BOOK_H_
#define VERITY_SERVER_STATE_LEASE_BOOK_H_

#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace verity::server {

class LeaseBook {
 public:
  // Creates or extends the lease of (item, annotator).
  void Add(int32_t item, int32_t annotator, absl::Time expires_at) ABSL_LOCKS_EXCLUDED(mu_);
  // Releases the lease of (item, annotator); false if there was none.
  bool Release(int32_t item, int32_t annotator) ABSL_LOCKS_EXCLUDED(mu_);

  // Outstanding leases per item at `now` (items without leases are absent).
  absl::flat_hash_map<int32_t, int32_t> OutstandingPerItem(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls fn(item, count) for every item with outstanding leases at `now`, under the book's
  // lock (fn must not call back into the book).
  template <typename Fn>
  void ForEachOutstanding(absl::Time now, Fn fn) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ExpireLocked(now);
    for (const auto& [item, count] : per_item_) fn(item, count);
  }
  // Outstanding leases at `now` on each of `items` (0 where none), in their order.
  std::vector<int32_t> OutstandingOn(absl::Span<const int32_t> items, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Has(int32_t item, int32_t annotator, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static uint64_t Key(int32_t item, int32_t annotator) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(item)) << 32) |
           static_cast<uint32_t>(annotator);
  }
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, absl::Time> leases_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int32_t, int32_t> per_item_ ABSL_GUARDED_BY(mu_);
  // Min-heap of (expiry, key); entries whose expiry no longer matches leases_ are stale.
  std::priority_queue<std::pair<absl::Time, uint64_t>, std::vector<std::pair<absl::Time, uint64_t>>,
                      std::greater<>>
      expiry_ ABSL_GUARDED_BY(mu_);
};

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_LEASE_BOOK_H_
