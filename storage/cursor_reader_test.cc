#include "storage/cursor_reader.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/result"
#include "pqxx/transaction"
#include "storage/testing/postgres_fixture.h"

namespace verity {
namespace storage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::verity::storage::testing::PostgresTest;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

class CursorReaderTest : public PostgresTest {
 protected:
  // Reads `query` (with `$1` bound to `n`) in batches of `batch_rows` inside
  // one transaction; fills `sizes` with each batch's row count and `values`
  // with the first column of every row, in order.
  absl::Status Read(const std::string& query, int n, int batch_rows,
                    std::vector<int>& sizes, std::vector<int>& values) {
    return pool().RunInTransaction("reading in batches", [&](pqxx::work& txn) {
      return ReadInBatches(
          txn, query, batch_rows,
          [&](const pqxx::result& rows) -> absl::Status {
            sizes.push_back(static_cast<int>(rows.size()));
            for (const pqxx::row& row : rows) values.push_back(row[0].as<int>());
            return absl::OkStatus();
          },
          n);
    });
  }
};

// cursor_reader.h: on_batch gets "successive batches of at most batch_rows
// rows": 7 rows in batches of 3 are 3, 3, 1, every row once, in query order.
TEST_F(CursorReaderTest, DeliversEveryRowInBatchesOfAtMostBatchRows) {
  std::vector<int> sizes, values;
  ASSERT_THAT(Read("SELECT g FROM generate_series(1, $1::int) AS g ORDER BY g", 7, 3,
                   sizes, values),
              IsOk());
  EXPECT_THAT(sizes, ElementsAre(3, 3, 1));
  EXPECT_THAT(values, ElementsAre(1, 2, 3, 4, 5, 6, 7));
}

// cursor_reader.h: "A batch_rows below 1 reads one row at a time": every row
// is still delivered, in batches of one.
TEST_F(CursorReaderTest, ABatchSizeBelowOneReadsOneRowAtATime) {
  for (int batch_rows : {0, -5}) {
    std::vector<int> sizes, values;
    ASSERT_THAT(Read("SELECT g FROM generate_series(1, $1::int) AS g ORDER BY g", 3, batch_rows,
                     sizes, values),
                IsOk());
    EXPECT_THAT(sizes, ElementsAre(1, 1, 1)) << "batch_rows " << batch_rows;
    EXPECT_THAT(values, ElementsAre(1, 2, 3)) << "batch_rows " << batch_rows;
  }
}

// cursor_reader.h: "never with an empty one": 6 rows in batches of 3 are
// exactly two full batches, with no empty third call.
TEST_F(CursorReaderTest, AnExactMultipleEndsWithoutAnEmptyBatch) {
  std::vector<int> sizes, values;
  ASSERT_THAT(Read("SELECT g FROM generate_series(1, $1::int) AS g ORDER BY g", 6, 3,
                   sizes, values),
              IsOk());
  EXPECT_THAT(sizes, ElementsAre(3, 3));
  EXPECT_THAT(values, ElementsAre(1, 2, 3, 4, 5, 6));
}

// "Never with an empty one": a query without rows calls on_batch not at all.
TEST_F(CursorReaderTest, NoRowsMeansNoBatch) {
  std::vector<int> sizes, values;
  ASSERT_THAT(Read("SELECT g FROM generate_series(1, $1::int) AS g", 0, 3, sizes, values),
              IsOk());
  EXPECT_THAT(sizes, IsEmpty());
}

// cursor_reader.h: reading stops "at the first non-OK status, which it
// returns": no further batch is delivered after it.
TEST_F(CursorReaderTest, StopsAtTheFirstFailingBatchAndReturnsItsStatus) {
  int calls = 0;
  absl::Status status = pool().RunInTransaction("reading", [&](pqxx::work& txn) {
    return ReadInBatches(
        txn, "SELECT g FROM generate_series(1, $1::int) AS g ORDER BY g", 2,
        [&](const pqxx::result&) -> absl::Status {
          ++calls;
          return absl::DataLossError("bad batch");
        },
        10);
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad batch")));
  EXPECT_EQ(calls, 1);
}

// "One cursor per transaction at a time": a completed read closes its cursor,
// so a second read in the same transaction works and sees its own rows.
TEST_F(CursorReaderTest, ACompletedReadClosesItsCursor) {
  std::vector<int> first, second;
  ASSERT_THAT(pool().RunInTransaction("two reads", [&](pqxx::work& txn) {
    const auto collect = [](std::vector<int>& out) {
      return [&out](const pqxx::result& rows) -> absl::Status {
        for (const pqxx::row& row : rows) out.push_back(row[0].as<int>());
        return absl::OkStatus();
      };
    };
    absl::Status s = ReadInBatches(
        txn, "SELECT g FROM generate_series(1, $1::int) AS g ORDER BY g", 2,
        collect(first), 3);
    if (!s.ok()) return s;
    return ReadInBatches(txn, "SELECT g FROM generate_series(10, $1::int) AS g ORDER BY g",
                         2, collect(second), 12);
  }),
              IsOk());
  EXPECT_THAT(first, ElementsAre(1, 2, 3));
  EXPECT_THAT(second, ElementsAre(10, 11, 12));
}

}  // namespace
}  // namespace storage
}  // namespace verity
