// KeyRing: the server's view of the API keys — the unrevoked keys of the database, cached in
// memory so that checking a call's key costs a hash lookup and one SHA-256, not a query.
//
// Creating and revoking through the ring update the cache at once, and a refresh that read the
// keys before either never undoes it: it keeps a key created since it started, and never
// caches again a key revoked through the ring. Keys created or revoked by
// another server on the same database reach this one when its cache is refreshed: at most
// `refresh_interval` after the last refresh (checked on each call), or at once for an unknown
// key id (at most one such refresh per second, so that made-up ids cannot flood the database).
// When the database cannot be reached the cache keeps serving; an unknown key then fails
// UNAVAILABLE, not UNAUTHENTICATED, since it may be valid.
//
// Thread-safety: thread-safe. The store must outlive the ring.
#ifndef VERITY_SERVER_AUTH_KEY_RING_H_
#define VERITY_SERVER_AUTH_KEY_RING_H_

#include <functional>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/auth/api_keys.h"
#include "storage/api_key_store.h"

namespace verity::server {

class KeyRing {
 public:
  KeyRing(storage::ApiKeyStore& store, absl::Duration refresh_interval);

  // Reads every unrevoked key. UNAVAILABLE if the database cannot be reached.
  absl::Status Load();

  // The principal of a key's text: UNAUTHENTICATED for a malformed, unknown or revoked key or
  // a wrong secret; UNAVAILABLE when the key is unknown and the database cannot be asked.
  absl::StatusOr<std::shared_ptr<const Principal>> Authenticate(absl::string_view key_text);

  struct CreatedKey {
    storage::ApiKeyRecord record;
    std::string text;  // The whole key; the only time it exists outside the client.
  };
  // INVALID_ARGUMENT for a name over 256 bytes or an invalid project name.
  absl::StatusOr<CreatedKey> Create(absl::string_view name, Role role,
                                    std::vector<std::string> projects,
                                    absl::string_view created_by);
  absl::StatusOr<storage::ApiKeyRecord> Revoke(absl::string_view key_id);
  absl::StatusOr<std::vector<storage::ApiKeyRecord>> List(bool include_revoked);

  // For a server whose authentication is on: when no unrevoked admin key valid for every
  // project exists, creates one (named "bootstrap admin") and returns its text; otherwise
  // nullopt. Servers starting at once on one database mint one key between them (the check
  // and the insert hold a PostgreSQL advisory lock).
  absl::StatusOr<std::optional<std::string>> EnsureAdminKey();

  // Test-only: run by Load() after it has read the keys and before it installs them.
  void SetAfterListHookForTesting(std::function<void()> hook) { after_list_ = std::move(hook); }

 private:
  struct Entry {
    std::string salt;
    std::string secret_hash;
    std::shared_ptr<const Principal> principal;
    // When the entry entered the cache: a Load started later reads it from the database, one
    // started earlier may not have (it keeps the entry).
    absl::Time cached_at = absl::InfinitePast();
  };
  static absl::StatusOr<Entry> EntryFor(const storage::ApiKeyRecord& record);
  // A new key's record (validated, with a fresh secret whose text goes to `text`).
  static absl::StatusOr<storage::ApiKeyRecord> NewRecord(absl::string_view name, Role role,
                                                         std::vector<std::string> projects,
                                                         absl::string_view created_by,
                                                         std::string* text);
  // Adds a stored key to the cache and logs its creation.
  absl::Status Cache(const storage::ApiKeyRecord& stored) ABSL_LOCKS_EXCLUDED(mu_);
  // Reloads the cache when it is older than `max_age`; only one caller reloads at a time
  // (others keep the current cache). Returns the reload's status (OK when none was needed).
  absl::Status RefreshIfOlderThan(absl::Duration max_age);

  storage::ApiKeyStore& store_;
  const absl::Duration refresh_interval_;
  absl::Mutex reload_mu_;  // Held by the one caller reloading.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> keys_ ABSL_GUARDED_BY(mu_);
  // Keys revoked through this ring: never cached again, whatever a concurrent Load read.
  absl::flat_hash_set<std::string> revoked_ ABSL_GUARDED_BY(mu_);
  absl::Time loaded_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::function<void()> after_list_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_AUTH_KEY_RING_H_
