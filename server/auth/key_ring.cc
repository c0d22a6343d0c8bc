#include "server/auth/key_ring.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "server/api/validation.h"
#include "server/observability/log.h"

namespace verity::server {
namespace {

constexpr size_t kMaxKeyNameBytes = 256;
// An unknown key id reloads the cache at most this often.
constexpr absl::Duration kMissRefreshInterval = absl::Seconds(1);

}  // namespace

KeyRing::KeyRing(storage::ApiKeyStore& store, absl::Duration refresh_interval)
    : store_(store), refresh_interval_(refresh_interval) {}

absl::StatusOr<KeyRing::Entry> KeyRing::EntryFor(const storage::ApiKeyRecord& record) {
  absl::StatusOr<Role> role = ParseRole(record.role);
  if (!role.ok()) return role.status();
  auto principal = std::make_shared<Principal>();
  principal->key_id = record.key_id;
  principal->role = *role;
  principal->projects = record.projects;
  return Entry{record.salt, record.secret_hash, std::move(principal)};
}

absl::Status KeyRing::Load() {
  const absl::Time started = absl::Now();
  absl::StatusOr<std::vector<storage::ApiKeyRecord>> records =
      store_.List(/*include_revoked=*/false);
  if (!records.ok()) return records.status();
  if (after_list_) after_list_();
  absl::flat_hash_map<std::string, Entry> keys;
  for (const storage::ApiKeyRecord& record : *records) {
    absl::StatusOr<Entry> entry = EntryFor(record);
    if (!entry.ok()) return entry.status();
    keys.emplace(record.key_id, *std::move(entry));
  }
  absl::MutexLock lock(&mu_);
  // Keys created through the ring since this Load started, which its list may lack.
  for (const auto& [key_id, entry] : keys_) {
    if (entry.cached_at >= started) keys.emplace(key_id, entry);
  }
  // Keys revoked here while the list was read (revocation is final, so the set only grows).
  for (const std::string& key_id : revoked_) keys.erase(key_id);
  keys_ = std::move(keys);
  loaded_at_ = started;
  return absl::OkStatus();
}

absl::Status KeyRing::RefreshIfOlderThan(absl::Duration max_age) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Now() - loaded_at_ < max_age) return absl::OkStatus();
  }
  if (!reload_mu_.TryLock()) return absl::OkStatus();  // Another caller is reloading.
  absl::Status status = Load();
  reload_mu_.Unlock();
  if (!status.ok()) {
    LogEvent("api_keys_refresh_failed", {{"error", status.ToString()}});
  }
  return status;
}

absl::StatusOr<std::shared_ptr<const Principal>> KeyRing::Authenticate(
    absl::string_view key_text) {
  absl::StatusOr<ApiKeyParts> parts = ParseApiKey(key_text);
  if (!parts.ok()) return parts.status();
  (void)RefreshIfOlderThan(refresh_interval_);  // A failure keeps the cache; logged.
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      absl::MutexLock lock(&mu_);
      auto it = keys_.find(parts->key_id);
      if (it != keys_.end()) {
        if (!SecretMatches(it->second.salt, it->second.secret_hash, parts->secret)) break;
        return it->second.principal;
      }
    }
    if (attempt == 0) {
      // Perhaps created on another server since the last refresh.
      if (absl::Status s = RefreshIfOlderThan(kMissRefreshInterval); !s.ok()) {
        return absl::UnavailableError(
            absl::StrCat("cannot check the API key now: ", s.message()));
      }
    }
  }
  return absl::UnauthenticatedError("unknown or revoked API key");
}

absl::StatusOr<storage::ApiKeyRecord> KeyRing::NewRecord(
    absl::string_view name, Role role, std::vector<std::string> projects,
    absl::string_view created_by, std::string* text) {
  if (name.size() > kMaxKeyNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: longer than ", kMaxKeyNameBytes, " bytes"));
  }
  for (size_t i = 0; i < projects.size(); ++i) {
    if (absl::Status s = ValidateProjectName(projects[i]); !s.ok()) {
      // "project: name ..." becomes "projects[i]: name ...".
      absl::string_view reason = s.message();
      absl::ConsumePrefix(&reason, "project: ");
      return absl::InvalidArgumentError(absl::StrCat("projects[", i, "]: ", reason));
    }
  }
  absl::StatusOr<GeneratedApiKey> generated = GenerateApiKey();
  if (!generated.ok()) return generated.status();
  storage::ApiKeyRecord record;
  record.key_id = generated->key_id;
  record.name = std::string(name);
  record.role = RoleName(role);
  record.projects = std::move(projects);
  record.salt = generated->salt;
  record.secret_hash = generated->secret_hash;
  record.created_by = std::string(created_by);
  *text = generated->text;
  return record;
}

absl::Status KeyRing::Cache(const storage::ApiKeyRecord& stored) {
  absl::StatusOr<Entry> entry = EntryFor(stored);
  if (!entry.ok()) return entry.status();
  entry->cached_at = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    keys_.insert_or_assign(stored.key_id, *std::move(entry));
  }
  LogEvent("api_key_created", {{"key_id", stored.key_id},
                               {"role", stored.role},
                               {"created_by", stored.created_by}});
  return absl::OkStatus();
}

absl::StatusOr<KeyRing::CreatedKey> KeyRing::Create(absl::string_view name, Role role,
                                                    std::vector<std::string> projects,
                                                    absl::string_view created_by) {
  std::string text;
  absl::StatusOr<storage::ApiKeyRecord> record =
      NewRecord(name, role, std::move(projects), created_by, &text);
  if (!record.ok()) return record.status();
  absl::StatusOr<storage::ApiKeyRecord> stored = store_.Insert(*record);
  if (!stored.ok()) return stored.status();
  if (absl::Status s = Cache(*stored); !s.ok()) return s;
  return CreatedKey{*std::move(stored), std::move(text)};
}

absl::StatusOr<storage::ApiKeyRecord> KeyRing::Revoke(absl::string_view key_id) {
  absl::StatusOr<storage::ApiKeyRecord> revoked = store_.Revoke(key_id);
  if (!revoked.ok()) return revoked.status();
  {
    absl::MutexLock lock(&mu_);
    keys_.erase(revoked->key_id);
    // A refresh that read the keys before this revocation must not install the key again.
    revoked_.insert(revoked->key_id);
  }
  LogEvent("api_key_revoked", {{"key_id", revoked->key_id}});
  return revoked;
}

absl::StatusOr<std::vector<storage::ApiKeyRecord>> KeyRing::List(bool include_revoked) {
  return store_.List(include_revoked);
}

absl::StatusOr<std::optional<std::string>> KeyRing::EnsureAdminKey() {
  std::string text;
  absl::StatusOr<storage::ApiKeyRecord> record =
      NewRecord("bootstrap admin", Role::kAdmin, {}, "", &text);
  if (!record.ok()) return record.status();
  // The check and the insert are one transaction under an advisory lock: of several servers
  // starting at once on an empty database, one mints the key.
  absl::StatusOr<std::optional<storage::ApiKeyRecord>> stored =
      store_.InsertIfNoAdminForEveryProject(*record);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) return std::nullopt;
  if (absl::Status s = Cache(**stored); !s.ok()) return s;
  return std::optional<std::string>(std::move(text));
}

}  // namespace verity::server
