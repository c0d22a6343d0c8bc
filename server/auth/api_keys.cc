#include "server/auth/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/evp.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace verity::server {
namespace {

constexpr absl::string_view kPrefix = "vk_";
constexpr size_t kKeyIdBytes = 8;    // 16 hex digits.
constexpr size_t kSecretBytes = 32;  // 64 hex digits.
constexpr size_t kSaltBytes = 16;

bool IsLowerHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n)) != 1) {
    return absl::InternalError("the system's random source failed (RAND_bytes)");
  }
  return bytes;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kReader: return "reader";
    case Role::kWriter: return "writer";
    case Role::kAdmin: return "admin";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role role : {Role::kReader, Role::kWriter, Role::kAdmin}) {
    if (name == RoleName(role)) return role;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("role: must be reader, writer or admin, got \"", std::string(name), "\""));
}

bool Principal::MayTouch(absl::string_view project) const {
  return AllProjects() || std::find(projects.begin(), projects.end(), project) != projects.end();
}

absl::StatusOr<ApiKeyParts> ParseApiKey(absl::string_view text) {
  const absl::Status malformed = absl::UnauthenticatedError(
      "malformed API key: expected vk_<16 hex digits>_<64 hex digits>");
  if (text.size() != kPrefix.size() + 2 * kKeyIdBytes + 1 + 2 * kSecretBytes ||
      text.substr(0, kPrefix.size()) != kPrefix) {
    return malformed;
  }
  text.remove_prefix(kPrefix.size());
  const absl::string_view key_id = text.substr(0, 2 * kKeyIdBytes);
  if (text[2 * kKeyIdBytes] != '_') return malformed;
  const absl::string_view secret = text.substr(2 * kKeyIdBytes + 1);
  if (!IsLowerHex(key_id) || !IsLowerHex(secret)) return malformed;
  return ApiKeyParts{std::string(key_id), std::string(secret)};
}

absl::StatusOr<GeneratedApiKey> GenerateApiKey() {
  absl::StatusOr<std::string> id = RandomBytes(kKeyIdBytes);
  if (!id.ok()) return id.status();
  absl::StatusOr<std::string> secret = RandomBytes(kSecretBytes);
  if (!secret.ok()) return secret.status();
  absl::StatusOr<std::string> salt = RandomBytes(kSaltBytes);
  if (!salt.ok()) return salt.status();
  GeneratedApiKey key;
  key.key_id = absl::BytesToHexString(*id);
  const std::string secret_hex = absl::BytesToHexString(*secret);
  key.text = absl::StrCat(kPrefix, key.key_id, "_", secret_hex);
  key.salt = *std::move(salt);
  key.secret_hash = HashSecret(key.salt, secret_hex);
  return key;
}

std::string HashSecret(absl::string_view salt, absl::string_view secret) {
  const std::string message = absl::StrCat(salt, secret);
  std::string digest(EVP_MAX_MD_SIZE, '\0');
  unsigned int length = 0;
  EVP_Digest(message.data(), message.size(), reinterpret_cast<unsigned char*>(digest.data()),
             &length, EVP_sha256(), nullptr);
  digest.resize(length);
  return digest;
}

bool SecretMatches(absl::string_view salt, absl::string_view secret_hash,
                   absl::string_view secret) {
  const std::string digest = HashSecret(salt, secret);
  return secret_hash.size() == digest.size() &&
         CRYPTO_memcmp(digest.data(), secret_hash.data(), digest.size()) == 0;
}

}  // namespace verity::server
