// API keys: their text form, their generation, and the salted hash the database keeps.
//
// A key reads "vk_<key_id>_<secret>": key_id is 16 hex digits (64 random bits, public: it
// names the key in lists and revocations), secret is 64 hex digits (256 random bits). Only
// SHA-256(salt || secret) and a 16-byte random salt are stored. A slow password hash (bcrypt,
// argon2) would add nothing here: the secret is 256 random bits, not something a person chose,
// so it cannot be guessed from its hash, and a fast hash keeps each call's check in
// microseconds.
//
// Thread-safety: the functions are thread-safe.
#ifndef VERITY_SERVER_AUTH_API_KEYS_H_
#define VERITY_SERVER_AUTH_API_KEYS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace verity::server {

// Ordered: each role may do everything the ones below it may.
enum class Role { kReader = 1, kWriter = 2, kAdmin = 3 };

// "reader", "writer", "admin" (the database's spelling).
const char* RoleName(Role role);
// INVALID_ARGUMENT for anything else.
absl::StatusOr<Role> ParseRole(absl::string_view name);

// Who is calling: what an authenticated key may do.
struct Principal {
  std::string key_id;                 // "" when authentication is off.
  Role role = Role::kReader;
  std::vector<std::string> projects;  // Empty = every project.

  bool AllProjects() const { return projects.empty(); }
  bool MayTouch(absl::string_view project) const;
};

struct ApiKeyParts {
  std::string key_id;
  std::string secret;
};

// Splits a key's text. UNAUTHENTICATED (without echoing the text) when it is not a well-formed
// key.
absl::StatusOr<ApiKeyParts> ParseApiKey(absl::string_view text);

// A fresh key: its text (shown once), its id, and what the database stores.
struct GeneratedApiKey {
  std::string text;
  std::string key_id;
  std::string salt;         // 16 raw bytes.
  std::string secret_hash;  // 32 raw bytes.
};
// INTERNAL if the system's random source fails.
absl::StatusOr<GeneratedApiKey> GenerateApiKey();

// SHA-256(salt || secret), 32 raw bytes.
std::string HashSecret(absl::string_view salt, absl::string_view secret);
// Whether `secret` hashes to `secret_hash` under `salt`, compared in constant time.
bool SecretMatches(absl::string_view salt, absl::string_view secret_hash,
                   absl::string_view secret);

}  // namespace verity::server

#endif  // VERITY_SERVER_AUTH_API_KEYS_H_
