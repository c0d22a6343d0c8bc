#include "storage/api_key_store.h"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/testing/postgres_fixture.h"

namespace verity {
namespace storage {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

ApiKeyRecord Key(const std::string& id, const std::string& role) {
  ApiKeyRecord key;
  key.key_id = id;
  key.name = "ci " + id;
  key.role = role;
  key.salt = std::string("\x00\x01salt\xff", 7);
  key.secret_hash = std::string(32, '\x7f');
  return key;
}

class ApiKeyStoreTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    store_ = std::make_unique<ApiKeyStore>(&pool());
  }
  std::unique_ptr<ApiKeyStore> store_;
};

TEST_F(ApiKeyStoreTest, InsertThenGetRoundTripsEveryField) {
  ApiKeyRecord key = Key("00aa", "writer");
  key.projects = {"birds", "with,comma"};
  key.created_by = "ffff";
  const absl::Time before = absl::Now() - absl::Seconds(5);
  absl::StatusOr<ApiKeyRecord> created = store_->Insert(key);
  ASSERT_THAT(created, IsOk());
  EXPECT_GT(created->created_at, before);
  EXPECT_FALSE(created->revoked_at.has_value());

  absl::StatusOr<ApiKeyRecord> got = store_->Get("00aa");
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->name, "ci 00aa");
  EXPECT_EQ(got->role, "writer");
  EXPECT_EQ(got->projects, key.projects);
  EXPECT_EQ(got->salt, key.salt);
  EXPECT_EQ(got->secret_hash, key.secret_hash);
  EXPECT_EQ(got->created_by, "ffff");
  EXPECT_EQ(got->created_at, created->created_at);
  EXPECT_FALSE(got->revoked_at.has_value());
}

TEST_F(ApiKeyStoreTest, RefusesADuplicateIdAndAnUnknownRole) {
  ASSERT_THAT(store_->Insert(Key("01", "reader")), IsOk());
  EXPECT_THAT(store_->Insert(Key("01", "admin")), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(store_->Insert(Key("02", "root")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->Get("02"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ApiKeyStoreTest, RevokeKeepsTheRowAndHidesItFromTheActiveList) {
  ASSERT_THAT(store_->Insert(Key("a1", "reader")), IsOk());
  ASSERT_THAT(store_->Insert(Key("a2", "admin")), IsOk());
  absl::StatusOr<ApiKeyRecord> revoked = store_->Revoke("a1");
  ASSERT_THAT(revoked, IsOk());
  ASSERT_TRUE(revoked->revoked_at.has_value());

  // Revoking again changes nothing.
  absl::StatusOr<ApiKeyRecord> again = store_->Revoke("a1");
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->revoked_at, revoked->revoked_at);
  EXPECT_THAT(store_->Revoke("nope"), StatusIs(absl::StatusCode::kNotFound));

  EXPECT_THAT(store_->List(/*include_revoked=*/false),
              IsOkAndHolds(ElementsAre(Field(&ApiKeyRecord::key_id, "a2"))));
  absl::StatusOr<std::vector<ApiKeyRecord>> all = store_->List(/*include_revoked=*/true);
  ASSERT_THAT(all, IsOk());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_TRUE((*all)[0].revoked_at.has_value());
  EXPECT_FALSE((*all)[1].revoked_at.has_value());
}

// api_key_store.h: InsertIfNoAdminForEveryProject inserts the bootstrap key
// "unless an unrevoked one exists" — an unrevoked admin key for every project
// (projects empty = every project). Keys that are not that do not count: a
// revoked all-project admin, an admin scoped to one project, an unscoped
// writer. Each case below starts from an empty table (a fresh database).
class BootstrapKeyTest : public ApiKeyStoreTest {
 protected:
  // Whether the bootstrap key gets minted next to `existing` (inserted, then
  // revoked if `revoke`).
  bool MintsBesides(ApiKeyRecord existing, bool revoke) {
    EXPECT_THAT(store_->Insert(existing), IsOk());
    if (revoke) {
      EXPECT_THAT(store_->Revoke(existing.key_id), IsOk());
    }
    absl::StatusOr<std::optional<ApiKeyRecord>> minted =
        store_->InsertIfNoAdminForEveryProject(Key("boot", "admin"));
    EXPECT_THAT(minted, IsOk());
    const bool was_minted = minted.ok() && minted->has_value();
    // What it answered is what the table holds.
    EXPECT_EQ(store_->Get("boot").ok(), was_minted);
    return was_minted;
  }
};

TEST_F(BootstrapKeyTest, MintedBesidesOnlyARevokedAllProjectAdmin) {
  EXPECT_TRUE(MintsBesides(Key("old-admin", "admin"), /*revoke=*/true));
}

TEST_F(BootstrapKeyTest, MintedBesidesAnAdminScopedToOneProject) {
  ApiKeyRecord scoped = Key("scoped-admin", "admin");
  scoped.projects = {"birds"};
  EXPECT_TRUE(MintsBesides(scoped, /*revoke=*/false));
}

TEST_F(BootstrapKeyTest, MintedBesidesAnUnscopedNonAdmin) {
  EXPECT_TRUE(MintsBesides(Key("writer", "writer"), /*revoke=*/false));
}

TEST_F(BootstrapKeyTest, NotMintedBesidesAnUnrevokedAllProjectAdmin) {
  EXPECT_FALSE(MintsBesides(Key("admin", "admin"), /*revoke=*/false));
}

TEST_F(BootstrapKeyTest, MintedOnceOnAnEmptyTable) {
  absl::StatusOr<std::optional<ApiKeyRecord>> first =
      store_->InsertIfNoAdminForEveryProject(Key("boot1", "admin"));
  ASSERT_THAT(first, IsOk());
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->key_id, "boot1");
  absl::StatusOr<std::optional<ApiKeyRecord>> second =
      store_->InsertIfNoAdminForEveryProject(Key("boot2", "admin"));
  ASSERT_THAT(second, IsOk());
  EXPECT_FALSE(second->has_value());
  EXPECT_THAT(store_->Get("boot2"), StatusIs(absl::StatusCode::kNotFound));
}

// api_key_store.h: InsertIfNoAdminForEveryProject is "serialised across servers", so that
// "servers starting at once on an empty database mint one bootstrap key between them". Server A
// has checked the table and is inserting its key (held up here by an uncommitted row with the
// same id) when server B asks: B must wait for A and then find A's key, not mint a second.
TEST_F(BootstrapKeyTest, ServersStartingAtOnceMintOneKeyBetweenThem) {
  std::unique_ptr<ConnectionPool> pool = NewPool(2);
  ApiKeyStore store(pool.get());
  pqxx::connection observer(url());
  // Whether a session waits for a lock of `kind` it has not been granted.
  auto waits_for = [&](const std::string& kind) {
    return pqxx::nontransaction(observer)
        .exec_params1("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = $1 AND NOT granted)",
                      kind)[0]
        .as<bool>();
  };
  auto wait_until = [](const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!done()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  };
  pqxx::connection blocker_connection(url());
  pqxx::work blocker(blocker_connection);
  blocker.exec(
      "INSERT INTO api_keys (key_id, role, salt, secret_hash) "
      "VALUES ('boot1', 'reader', '\\x00', '\\x00')");

  absl::StatusOr<std::optional<ApiKeyRecord>> a, b;
  std::atomic<bool> b_done{false};
  std::thread server_a([&] { a = store.InsertIfNoAdminForEveryProject(Key("boot1", "admin")); });
  std::thread server_b;
  // A's insert waits for the blocker's row.
  if (wait_until([&] { return waits_for("transactionid"); })) {
    server_b = std::thread([&] {
      b = store.InsertIfNoAdminForEveryProject(Key("boot2", "admin"));
      b_done = true;
    });
    // B waits for A's advisory lock (or, were there none, has finished already).
    EXPECT_TRUE(wait_until([&] { return b_done || waits_for("advisory"); }));
  } else {
    ADD_FAILURE() << "server A never reached its insert";
  }
  blocker.abort();  // A's insert goes ahead.
  server_a.join();
  if (server_b.joinable()) server_b.join();

  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_TRUE(a->has_value());
  EXPECT_FALSE(b->has_value());
  EXPECT_THAT(store.List(/*include_revoked=*/true),
              IsOkAndHolds(ElementsAre(Field(&ApiKeyRecord::key_id, "boot1"))));
}

// api_key_store.h: Revoke "sets revoked_at to now": a key created a day ago and revoked now has
// revoked_at now, in what Revoke, Get and List return, not its creation time.
TEST_F(ApiKeyStoreTest, RevokedAtIsTheTimeOfTheRevocation) {
  ASSERT_THAT(store_->Insert(Key("old", "reader")), IsOk());
  ASSERT_THAT(pool().RunInTransaction("ageing a key",
                                      [&](pqxx::work& txn) {
                                        txn.exec(
                                            "UPDATE api_keys SET created_at = "
                                            "created_at - interval '1 day'");
                                        return absl::OkStatus();
                                      }),
              IsOk());
  const absl::Time before = absl::Now() - absl::Minutes(1);
  absl::StatusOr<ApiKeyRecord> revoked = store_->Revoke("old");
  const absl::Time after = absl::Now() + absl::Minutes(1);
  ASSERT_THAT(revoked, IsOk());
  ASSERT_TRUE(revoked->revoked_at.has_value());
  EXPECT_GT(*revoked->revoked_at, before);
  EXPECT_LT(*revoked->revoked_at, after);
  EXPECT_LT(revoked->created_at, before);
  absl::StatusOr<ApiKeyRecord> got = store_->Get("old");
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->revoked_at, revoked->revoked_at);
  absl::StatusOr<std::vector<ApiKeyRecord>> all = store_->List(/*include_revoked=*/true);
  ASSERT_THAT(all, IsOk());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].revoked_at, revoked->revoked_at);
}

// api_key_store.h: List returns keys "oldest first" — in the order they were
// inserted, not by key_id.
TEST_F(ApiKeyStoreTest, ListsKeysOldestFirst) {
  ASSERT_THAT(store_->Insert(Key("zz", "reader")), IsOk());
  ASSERT_THAT(store_->Insert(Key("mm", "writer")), IsOk());
  ASSERT_THAT(store_->Insert(Key("aa", "admin")), IsOk());
  for (bool include_revoked : {false, true}) {
    EXPECT_THAT(store_->List(include_revoked),
                IsOkAndHolds(ElementsAre(Field(&ApiKeyRecord::key_id, "zz"),
                                         Field(&ApiKeyRecord::key_id, "mm"),
                                         Field(&ApiKeyRecord::key_id, "aa"))));
  }
}

// api_key_store.h: Get and Revoke act on the key with exactly that key_id:
// another key (here one whose id sorts after it) is neither returned nor
// revoked, and an id that sorts before every stored key is NOT_FOUND.
TEST_F(ApiKeyStoreTest, GetAndRevokeActOnExactlyTheNamedKey) {
  ASSERT_THAT(store_->Insert(Key("b1", "admin")), IsOk());
  ASSERT_THAT(store_->Insert(Key("a1", "reader")), IsOk());

  EXPECT_THAT(store_->Get("a1"), IsOkAndHolds(Field(&ApiKeyRecord::role, "reader")));
  EXPECT_THAT(store_->Get("a0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->Revoke("a0"), StatusIs(absl::StatusCode::kNotFound));

  absl::StatusOr<ApiKeyRecord> revoked = store_->Revoke("a1");
  ASSERT_THAT(revoked, IsOk());
  EXPECT_EQ(revoked->key_id, "a1");
  EXPECT_EQ(revoked->role, "reader");
  EXPECT_TRUE(revoked->revoked_at.has_value());
  absl::StatusOr<ApiKeyRecord> other = store_->Get("b1");
  ASSERT_THAT(other, IsOk());
  EXPECT_FALSE(other->revoked_at.has_value());
}

// api_key_store.h: Insert ignores the record's revoked_at: the key is stored
// unrevoked and returned so.
TEST_F(ApiKeyStoreTest, InsertIgnoresAGivenRevokedAt) {
  ApiKeyRecord key = Key("c1", "writer");
  key.revoked_at = absl::Now() - absl::Hours(1);
  absl::StatusOr<ApiKeyRecord> created = store_->Insert(key);
  ASSERT_THAT(created, IsOk());
  EXPECT_FALSE(created->revoked_at.has_value());
  absl::StatusOr<ApiKeyRecord> got = store_->Get("c1");
  ASSERT_THAT(got, IsOk());
  EXPECT_FALSE(got->revoked_at.has_value());
  EXPECT_THAT(store_->List(/*include_revoked=*/false),
              IsOkAndHolds(ElementsAre(Field(&ApiKeyRecord::key_id, "c1"))));
}

// PostgreSQL text cannot hold a NUL byte (libpq would cut the value at it): a
// key whose created_by or project names contain one is INVALID_ARGUMENT, as
// for project names (storage/project_store.h), and is not stored.
TEST_F(ApiKeyStoreTest, RefusesNulBytesInCreatedByAndProjects) {
  ApiKeyRecord nul_creator = Key("d1", "writer");
  nul_creator.created_by = std::string("ff\0ff", 5);
  EXPECT_THAT(store_->Insert(nul_creator), StatusIs(absl::StatusCode::kInvalidArgument));
  ApiKeyRecord nul_project = Key("d2", "writer");
  nul_project.projects = {"birds", std::string("bi\0rds", 6)};
  EXPECT_THAT(store_->Insert(nul_project), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->List(/*include_revoked=*/true), IsOkAndHolds(::testing::IsEmpty()));
}

// A key_id with a NUL byte names no stored key (key ids hold no NUL): Get and
// Revoke refuse it rather than act on the key named by its prefix.
TEST_F(ApiKeyStoreTest, AnIdWithANulByteIsNotThePrefixKey) {
  ASSERT_THAT(store_->Insert(Key("e1", "admin")), IsOk());
  const std::string nul_id("e1\0zz", 5);
  absl::StatusOr<ApiKeyRecord> got = store_->Get(nul_id);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().code(), ::testing::AnyOf(absl::StatusCode::kNotFound,
                                                     absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(store_->Revoke(nul_id).ok());
  absl::StatusOr<ApiKeyRecord> e1 = store_->Get("e1");
  ASSERT_THAT(e1, IsOk());
  EXPECT_FALSE(e1->revoked_at.has_value());
}

// As for created_by and project names: a key whose key_id or name holds a NUL byte is
// INVALID_ARGUMENT, from Insert and from InsertIfNoAdminForEveryProject, and nothing is stored
// (libpq would store the value cut at the NUL).
TEST_F(ApiKeyStoreTest, RefusesNulBytesInKeyIdAndName) {
  ApiKeyRecord nul_id = Key(std::string("f1\0x", 4), "reader");
  nul_id.name = "plain";
  EXPECT_THAT(store_->Insert(nul_id), StatusIs(absl::StatusCode::kInvalidArgument));
  ApiKeyRecord nul_name = Key("f2", "reader");
  nul_name.name = std::string("ci\0f2", 5);
  EXPECT_THAT(store_->Insert(nul_name), StatusIs(absl::StatusCode::kInvalidArgument));
  ApiKeyRecord nul_boot = Key("boot", "admin");
  nul_boot.name = std::string("boot\0strap", 10);
  EXPECT_THAT(store_->InsertIfNoAdminForEveryProject(nul_boot),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->List(/*include_revoked=*/true), IsOkAndHolds(::testing::IsEmpty()));
}

}  // namespace
}  // namespace storage
}  // namespace verity
