#include "storage/pg_status.h"

#include <new>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/except"

namespace verity {
namespace storage {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::verity::testing::StatusIs;

template <typename E>
absl::Status Convert(const E& exception) {
  try {
    throw exception;
  } catch (...) {
    return StatusFromCurrentException("doing work");
  }
}

TEST(PgStatusTest, BrokenConnectionIsUnavailable) {
  EXPECT_THAT(Convert(pqxx::broken_connection("server closed")),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("doing work"), HasSubstr("server closed"))));
  EXPECT_THAT(Convert(pqxx::in_doubt_error("lost during commit")),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("unknown")));
}

TEST(PgStatusTest, UniqueViolationIsAlreadyExists) {
  EXPECT_THAT(
      Convert(pqxx::unique_violation("duplicate key", "INSERT ...", "23505")),
      StatusIs(absl::StatusCode::kAlreadyExists,
               AllOf(HasSubstr("duplicate key"), HasSubstr("SQLSTATE 23505"))));
}

TEST(PgStatusTest, OtherConstraintAndDataErrorsAreInvalidArgument) {
  EXPECT_THAT(Convert(pqxx::check_violation("check", "INSERT", "23514")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SQLSTATE 23514")));
  EXPECT_THAT(Convert(pqxx::foreign_key_violation("fk", "INSERT", "23503")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Convert(pqxx::data_exception("bad input", "SELECT", "22P02")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SQLSTATE 22P02")));
}

TEST(PgStatusTest, SerializationFailureAndDeadlockAreAborted) {
  EXPECT_THAT(Convert(pqxx::serialization_failure("could not serialize")),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("40001")));
  EXPECT_THAT(Convert(pqxx::deadlock_detected("deadlock")),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("40P01")));
}

TEST(PgStatusTest, ShutdownAndConnectionClassSqlStatesAreUnavailable) {
  EXPECT_THAT(Convert(pqxx::sql_error("terminating", "SELECT", "57P01")),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Convert(pqxx::sql_error("conn failure", "SELECT", "08006")),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Convert(pqxx::sql_error("too many", "", "53300")),
              StatusIs(absl::StatusCode::kUnavailable));
}

// pg_status.h: a query whose result does not fit in memory is RESOURCE_EXHAUSTED, not INTERNAL
// (the caller can ask for less).
TEST(PgStatusTest, OutOfMemoryIsResourceExhausted) {
  EXPECT_THAT(Convert(std::bad_alloc()), StatusIs(absl::StatusCode::kResourceExhausted,
                                                  HasSubstr("doing work")));
}

TEST(PgStatusTest, AnythingElseIsInternal) {
  EXPECT_THAT(Convert(pqxx::syntax_error("syntax", "SELEC", "42601")),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("42601")));
  EXPECT_THAT(Convert(pqxx::conversion_error("cannot convert")),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(Convert(std::runtime_error("boom")),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("boom")));
  EXPECT_THAT(Convert(42), StatusIs(absl::StatusCode::kInternal));
}

TEST(PgStatusTest, CatchPqxxPassesResultsThroughAndConvertsExceptions) {
  EXPECT_EQ(*CatchPqxx("x", []() -> absl::StatusOr<int> { return 3; }), 3);
  EXPECT_THAT(CatchPqxx("x",
                        []() -> absl::StatusOr<int> {
                          throw pqxx::broken_connection("gone");
                        }),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(PgStatusTest, StatusCodeForSqlState) {
  EXPECT_EQ(StatusCodeForSqlState("23505"), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(StatusCodeForSqlState("23502"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusCodeForSqlState("40001"), absl::StatusCode::kAborted);
  EXPECT_EQ(StatusCodeForSqlState("57014"), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StatusCodeForSqlState("XX000"), absl::StatusCode::kInternal);
  EXPECT_EQ(StatusCodeForSqlState(""), absl::StatusCode::kInternal);
}

// pg_status.h: every SQLSTATE of the table maps to its code, the ones named singly included.
TEST(PgStatusTest, StatusCodeForSqlStateFollowsEveryRowOfTheTable) {
  for (const char* state : {"08000", "08003", "08006", "57P01", "57P02", "57P03", "53300"}) {
    EXPECT_EQ(StatusCodeForSqlState(state), absl::StatusCode::kUnavailable) << state;
  }
  EXPECT_EQ(StatusCodeForSqlState("23505"), absl::StatusCode::kAlreadyExists);
  for (const char* state : {"23502", "23503", "23514", "22001", "22P02", "22012"}) {
    EXPECT_EQ(StatusCodeForSqlState(state), absl::StatusCode::kInvalidArgument) << state;
  }
  EXPECT_EQ(StatusCodeForSqlState("40001"), absl::StatusCode::kAborted);
  EXPECT_EQ(StatusCodeForSqlState("40P01"), absl::StatusCode::kAborted);
  EXPECT_EQ(StatusCodeForSqlState("57014"), absl::StatusCode::kDeadlineExceeded);
  // 40003 statement_completion_unknown: the outcome is unknown, as for a lost COMMIT.
  EXPECT_EQ(StatusCodeForSqlState("40003"), absl::StatusCode::kUnavailable);
  // Other states of the same classes, and what is not a five-character SQLSTATE, are INTERNAL.
  for (const char* state : {"57P04", "40002", "42P01", "2350", "08", "235050"}) {
    EXPECT_EQ(StatusCodeForSqlState(state), absl::StatusCode::kInternal) << state;
  }
}

// pg_status.h: a lost connection and an unknown outcome are UNAVAILABLE; libpqxx reports some
// losses mid-statement as an sql_error without SQLSTATE, recognised by libpq's message.
TEST(PgStatusTest, ConnectionLostWithoutSqlStateAndUnknownOutcomeAreUnavailable) {
  EXPECT_THAT(Convert(pqxx::statement_completion_unknown("lost")),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("outcome unknown")));
  for (const char* what : {"server closed the connection unexpectedly",
                           "no connection to the server", "terminating connection due to"}) {
    EXPECT_THAT(Convert(pqxx::sql_error(what, "SELECT 1", "")),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr(what)))
        << what;
  }
  EXPECT_THAT(Convert(pqxx::sql_error("something else", "SELECT 1", "")),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("something else")));
}

// A status stays on one line: libpq's trailing newline is dropped after the context.
TEST(PgStatusTest, MessageIsTheContextThenTheErrorOnOneLine) {
  const absl::Status status = Convert(std::runtime_error("boom\n"));
  EXPECT_EQ(status.message(), "doing work: boom");
}

}  // namespace
}  // namespace storage
}  // namespace verity
