// KeyRing against a real PostgreSQL: a revoked key never comes back into the cache, and two
// servers bootstrapping one database at once mint one admin key.
#include "server/auth/key_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/api_key_store.h"
#include "storage/testing/postgres_fixture.h"

namespace verity::server {
namespace {

class KeyRingTest : public storage::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<storage::ApiKeyStore>(&pool());
  }
  std::unique_ptr<storage::ApiKeyStore> store_;
};

TEST_F(KeyRingTest, ALoadThatReadTheKeysBeforeARevocationDoesNotBringTheKeyBack) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  auto created = ring.Create("victim", Role::kWriter, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(ring.Authenticate(created->text).ok());

  // The refresh reads the key list, then the key is revoked before the refresh installs it.
  bool revoked = false;
  ring.SetAfterListHookForTesting([&] {
    if (revoked) return;
    revoked = true;
    ASSERT_TRUE(ring.Revoke(created->record.key_id).ok());
  });
  ASSERT_TRUE(ring.Load().ok());
  ASSERT_TRUE(revoked);

  auto after = ring.Authenticate(created->text);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnauthenticated)
      << "the revoked key authenticates again: " << after.status();
}

TEST_F(KeyRingTest, ALoadThatReadTheKeysBeforeACreationKeepsTheNewKey) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  // The refresh reads the key list, then a key is created before the refresh installs it.
  std::optional<KeyRing::CreatedKey> created;
  ring.SetAfterListHookForTesting([&] {
    if (created.has_value()) return;
    auto key = ring.Create("newcomer", Role::kWriter, {}, "");
    ASSERT_TRUE(key.ok()) << key.status();
    created = *std::move(key);
  });
  ASSERT_TRUE(ring.Load().ok());
  ASSERT_TRUE(created.has_value());
  auto principal = ring.Authenticate(created->text);
  EXPECT_TRUE(principal.ok()) << "the new key was dropped: " << principal.status();
}

// key_ring.h: a key created on another server reaches this one "at once for an unknown key
// id", not only at the next periodic refresh (here an hour away).
TEST_F(KeyRingTest, AKeyCreatedOnAnotherServerAuthenticatesAtOnce) {
  std::unique_ptr<storage::ConnectionPool> other_pool = NewPool(1);
  storage::ApiKeyStore other_store(other_pool.get());
  KeyRing here(*store_, absl::Hours(1));
  KeyRing there(other_store, absl::Hours(1));
  ASSERT_TRUE(here.Load().ok());
  ASSERT_TRUE(there.Load().ok());
  // Past the one-refresh-per-second bound on unknown ids.
  absl::SleepFor(absl::Milliseconds(1100));
  auto created = there.Create("made-elsewhere", Role::kWriter, {}, "");
  ASSERT_TRUE(created.ok()) << created.status();
  auto principal = here.Authenticate(created->text);
  EXPECT_TRUE(principal.ok()) << principal.status();
}

// With the database down, a key the ring cannot check is UNAVAILABLE (retry later), not
// UNAUTHENTICATED (a wrong key); a key already in the cache still authenticates; a key that is
// not even well-formed is UNAUTHENTICATED without the database.
TEST_F(KeyRingTest, WithTheDatabaseDownUnknownKeysAreUnavailableAndCachedOnesStillWork) {
  KeyRing ring(*store_, absl::Hours(1));
  ASSERT_TRUE(ring.Load().ok());
  auto cached = ring.Create("cached", Role::kWriter, {}, "");
  ASSERT_TRUE(cached.ok()) << cached.status();
  // A well-formed key this ring has never seen (made, then revoked, through another ring).
  std::unique_ptr<storage::ConnectionPool> other_pool = NewPool(1);
  storage::ApiKeyStore other_store(other_pool.get());
  KeyRing other(other_store, absl::Hours(1));
  auto unknown = other.Create("unknown", Role::kWriter, {}, "");
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  ASSERT_TRUE(other.Revoke(unknown->record.key_id).ok());
  absl::SleepFor(absl::Milliseconds(1100));

  ASSERT_TRUE(cluster().Stop().ok());
  auto unavailable = ring.Authenticate(unknown->text);
  auto still = ring.Authenticate(cached->text);
  auto malformed = ring.Authenticate("not-a-key");
  ASSERT_TRUE(cluster().Start().ok());
  EXPECT_EQ(unavailable.status().code(), absl::StatusCode::kUnavailable) << unavailable.status();
  EXPECT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kUnauthenticated) << malformed.status();
}

TEST_F(KeyRingTest, ServersBootstrappingOneDatabaseAtOnceMintOneAdminKey) {
  constexpr int kServers = 6;
  constexpr int kRounds = 20;  // The race is a matter of timing: give it many chances.
  std::vector<std::unique_ptr<storage::ConnectionPool>> pools;
  std::vector<std::unique_ptr<storage::ApiKeyStore>> stores;
  for (int i = 0; i < kServers; ++i) {
    pools.push_back(NewPool(1));
    stores.push_back(std::make_unique<storage::ApiKeyStore>(pools.back().get()));
  }
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_TRUE(pool().RunInTransaction("emptying api_keys", [](pqxx::work& txn) {
                        txn.exec("DELETE FROM api_keys");
                        return absl::OkStatus();
                      }).ok());
    std::vector<std::unique_ptr<KeyRing>> rings;
    for (int i = 0; i < kServers; ++i) {
      rings.push_back(std::make_unique<KeyRing>(*stores[i], absl::Seconds(10)));
    }
    std::atomic<int> minted{0};
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kServers; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kServers) {
        }
        auto key = rings[i]->EnsureAdminKey();
        EXPECT_TRUE(key.ok()) << key.status();
        if (key.ok() && key->has_value()) minted.fetch_add(1);
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(minted.load(), 1) << "round " << round;
    auto keys = store_->List(/*include_revoked=*/true);
    ASSERT_TRUE(keys.ok());
    ASSERT_EQ(keys->size(), 1u) << "round " << round << ": bootstrap admin keys minted";
  }
}

}  // namespace
}  // namespace verity::server
