// LeaseStore: assignment leases in PostgreSQL, so they survive a restart.
//
// A lease reserves one label slot on an item for an annotator until it expires or that
// annotator's label for the item arrives. The server keeps the live set in memory
// (server/state/lease_book.h) and writes through here.
//
// Lease writes use asynchronous commit (SET LOCAL synchronous_commit = off): a lease is a
// hint, not data — a crash may forget the last few hundred milliseconds of leases, which at
// worst lets an item get one label more than planned; in exchange a suggestion does not wait
// for a WAL flush. Thread-safe.
#ifndef VERITY_STORAGE_LEASE_STORE_H_
#define VERITY_STORAGE_LEASE_STORE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "storage/connection_pool.h"

namespace verity::storage {

struct LeaseRecord {
  int32_t item_index = 0;
  int32_t annotator_index = 0;
  absl::Time expires_at;
};

class LeaseStore {
 public:
  explicit LeaseStore(ConnectionPool* pool) : pool_(pool) {}

  // Creates or extends the leases (one transaction). A pair listed more than once takes its
  // last entry's expiry.
  absl::Status UpsertLeases(int64_t project_id, absl::Span<const LeaseRecord> leases);

  // The leases still open at `now`: not expired, and whose (item, annotator) has no live
  // annotation yet. Expired or answered leases of the project are deleted on the way.
  absl::StatusOr<std::vector<LeaseRecord>> LoadOpenLeases(int64_t project_id, absl::Time now);

  // Claims the leases of one suggestion, exclusively among every server replica of the
  // database. In one transaction, under the project's assignment lock (an advisory lock held
  // until COMMIT, so claims of a project run one at a time):
  //  1. reads the leases claimed since `after_claim` (claim_seq > after_claim) that are open at
  //     `now` (not expired, their pair not labelled): what the other replicas leased;
  //  2. calls `choose` with them; it ranks with them counted and returns the leases to take;
  //  3. writes those with new claim_seqs (the claim is visible to the next claimant at once;
  //     synchronous_commit is off as for every lease write, so a crash may forget it).
  // Returns the newest claim_seq the caller has seen, its own included: its next
  // `after_claim`. `choose` may run again if the transaction is retried.
  using ChooseLeases =
      std::function<std::vector<LeaseRecord>(const std::vector<LeaseRecord>& claimed_by_others)>;
  absl::StatusOr<int64_t> ClaimLeases(int64_t project_id, int64_t after_claim, absl::Time now,
                                      const ChooseLeases& choose);

  // Without taking the claim lock: the open leases claimed since `after_claim` (as step 1
  // above) and the newest claim_seq stored, for a replica that must count the other replicas'
  // leases without claiming any. Claims commit in claim_seq order (under the claim lock), so
  // what this sees is every claim up to the newest it returns.
  struct Claims {
    int64_t newest = 0;
    std::vector<LeaseRecord> open;
  };
  absl::StatusOr<Claims> ReadClaimsSince(int64_t project_id, int64_t after_claim, absl::Time now);

  // The advisory lock key of a project's lease claims: kClaimKeySpace in the high 32 bits.
  static constexpr int64_t kClaimKeySpace = 0x56524c53;  // "VRLS"

 private:
  ConnectionPool* const pool_;
};

}  // namespace verity::storage

#endif  // VERITY_STORAGE_LEASE_STORE_H_
