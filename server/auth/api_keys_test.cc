#include "server/auth/api_keys.h"

#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity::server {
namespace {

using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

TEST(ApiKeysTest, AGeneratedKeyParsesBackAndItsSecretMatchesOnlyItsHash) {
  absl::StatusOr<GeneratedApiKey> key = GenerateApiKey();
  ASSERT_THAT(key, IsOk());
  EXPECT_EQ(key->text.size(), 3u + 16u + 1u + 64u);
  EXPECT_EQ(key->salt.size(), 16u);
  EXPECT_EQ(key->secret_hash.size(), 32u);
  absl::StatusOr<ApiKeyParts> parts = ParseApiKey(key->text);
  ASSERT_THAT(parts, IsOk());
  EXPECT_EQ(parts->key_id, key->key_id);
  EXPECT_TRUE(SecretMatches(key->salt, key->secret_hash, parts->secret));
  // The stored hash is not the secret, and another secret or salt does not match.
  EXPECT_EQ(key->text.find(key->secret_hash), std::string::npos);
  std::string wrong = parts->secret;
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  EXPECT_FALSE(SecretMatches(key->salt, key->secret_hash, wrong));
  EXPECT_FALSE(SecretMatches(std::string(16, 'x'), key->secret_hash, parts->secret));
  EXPECT_FALSE(SecretMatches(key->salt, key->secret_hash.substr(1), parts->secret));
}

TEST(ApiKeysTest, KeysAndSaltsAreFreshEachTime) {
  std::set<std::string> ids, salts;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<GeneratedApiKey> key = GenerateApiKey();
    ASSERT_THAT(key, IsOk());
    ids.insert(key->key_id);
    salts.insert(key->salt);
  }
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(salts.size(), 100u);
}

TEST(ApiKeysTest, HashIsSha256OfSaltThenSecret) {
  // sha256("abc") from FIPS 180-2, split as salt "a" and secret "bc".
  EXPECT_EQ(absl::BytesToHexString(HashSecret("a", "bc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiKeysTest, MalformedKeysAreUnauthenticated) {
  const std::string good = "vk_0123456789abcdef_" + std::string(64, 'a');
  EXPECT_THAT(ParseApiKey(good), IsOk());
  for (const std::string& bad :
       {std::string(""), std::string("vk_"), good.substr(1), "xk" + good.substr(2),
        good + "a", "vk_0123456789abcdeF_" + std::string(64, 'a'),
        "vk_0123456789abcdef-" + std::string(64, 'a'),
        "vk_0123456789abcdef_" + std::string(63, 'a') + "g"}) {
    EXPECT_THAT(ParseApiKey(bad), StatusIs(absl::StatusCode::kUnauthenticated)) << bad;
  }
}

TEST(ApiKeysTest, RolesAreOrderedAndParsed) {
  EXPECT_LT(Role::kReader, Role::kWriter);
  EXPECT_LT(Role::kWriter, Role::kAdmin);
  for (Role role : {Role::kReader, Role::kWriter, Role::kAdmin}) {
    EXPECT_THAT(ParseRole(RoleName(role)), IsOkAndHolds(role));
  }
  EXPECT_THAT(ParseRole("root"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ApiKeysTest, APrincipalTouchesItsProjectsOrAllWhenUnscoped) {
  Principal scoped{"k", Role::kWriter, {"birds", "cats"}};
  EXPECT_TRUE(scoped.MayTouch("cats"));
  EXPECT_FALSE(scoped.MayTouch("dogs"));
  EXPECT_FALSE(scoped.AllProjects());
  Principal all{"k", Role::kReader, {}};
  EXPECT_TRUE(all.MayTouch("dogs"));
}

// api_keys.h SecretMatches: whether `secret` hashes to `secret_hash`: a stored hash with extra
// bytes after the right digest is not that digest.
TEST(ApiKeysTest, AHashWithTheRightDigestAsItsPrefixDoesNotMatch) {
  const std::string salt(16, 's');
  const std::string secret(64, 'a');
  const std::string digest = HashSecret(salt, secret);
  ASSERT_EQ(digest.size(), 32u);
  EXPECT_TRUE(SecretMatches(salt, digest, secret));
  EXPECT_FALSE(SecretMatches(salt, digest + "x", secret));
  EXPECT_FALSE(SecretMatches(salt, digest + std::string(32, '\0'), secret));
  EXPECT_FALSE(SecretMatches(salt, "", secret));
}

// api_keys.h ParseApiKey: UNAUTHENTICATED "without echoing the text" (a mistyped key is still
// mostly a secret, and errors end up in logs and on clients' screens).
TEST(ApiKeysTest, AMalformedKeyIsRefusedWithoutEchoingIt) {
  const std::string secret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg";
  for (const std::string& bad : {"vk_fedcba9876543210_" + secret, "vk_fedcba9876543210_" + secret + "0",
                                 "xk_fedcba9876543210_" + secret.substr(0, 63) + "0"}) {
    absl::StatusOr<ApiKeyParts> parts = ParseApiKey(bad);
    ASSERT_THAT(parts, StatusIs(absl::StatusCode::kUnauthenticated)) << bad;
    EXPECT_EQ(parts.status().message().find("fedcba9876543210"), absl::string_view::npos)
        << parts.status();
    EXPECT_EQ(parts.status().message().find(secret.substr(0, 32)), absl::string_view::npos)
        << parts.status();
  }
}

// api_keys.h SecretMatches: the whole 32-byte digest is compared: a stored hash that differs
// from the secret's digest in any one byte, the last included, does not match.
TEST(ApiKeysTest, AHashThatDiffersInAnyOneByteDoesNotMatch) {
  const std::string salt(16, 's');
  const std::string secret(64, 'b');
  const std::string digest = HashSecret(salt, secret);
  ASSERT_EQ(digest.size(), 32u);
  for (size_t i = 0; i < digest.size(); ++i) {
    std::string other = digest;
    other[i] = static_cast<char>(other[i] ^ 0x01);
    EXPECT_FALSE(SecretMatches(salt, other, secret)) << "byte " << i;
  }
}

// api_keys.h ParseRole: "reader", "writer", "admin" (the database's spelling); INVALID_ARGUMENT
// for anything else -- an empty name, another case or a longer word is no role.
TEST(ApiKeysTest, OnlyTheExactRoleNamesParse) {
  for (const char* bad : {"", "Reader", "ADMIN", "admins", " writer", "read"}) {
    EXPECT_THAT(ParseRole(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

// api_keys.h Principal.projects: "Empty = every project"; a key scoped to one project touches
// that project and no other.
TEST(ApiKeysTest, APrincipalOfOneProjectTouchesOnlyThatProject) {
  Principal one{"k", Role::kAdmin, {"birds"}};
  EXPECT_FALSE(one.AllProjects());
  EXPECT_TRUE(one.MayTouch("birds"));
  EXPECT_FALSE(one.MayTouch("cats"));
  EXPECT_FALSE(one.MayTouch("bird"));
  EXPECT_FALSE(one.MayTouch(""));
}

}  // namespace
}  // namespace verity::server
