#include "storage/pg_status.h"

#include <exception>
#include <new>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "pqxx/except"

namespace verity {
namespace storage {
namespace {

std::string Describe(absl::string_view context, absl::string_view what) {
  // libpq messages end with a newline; keep the status on one line.
  return absl::StrCat(context, ": ",
                      absl::StripTrailingAsciiWhitespace(what));
}

}  // namespace

absl::StatusCode StatusCodeForSqlState(absl::string_view sqlstate) {
  if (sqlstate.size() != 5) return absl::StatusCode::kInternal;
  if (sqlstate == "23505") return absl::StatusCode::kAlreadyExists;
  if (sqlstate == "40001" || sqlstate == "40P01") {
    return absl::StatusCode::kAborted;
  }
  if (sqlstate == "57014") return absl::StatusCode::kDeadlineExceeded;
  if (sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03" ||
      sqlstate == "53300" || sqlstate == "40003") {
    return absl::StatusCode::kUnavailable;
  }
  const absl::string_view sql_class = sqlstate.substr(0, 2);
  if (sql_class == "08") return absl::StatusCode::kUnavailable;
  if (sql_class == "22" || sql_class == "23") {
    return absl::StatusCode::kInvalidArgument;
  }
  return absl::StatusCode::kInternal;
}

absl::Status StatusFromCurrentException(absl::string_view context) {
  try {
    throw;
  } catch (const pqxx::broken_connection& e) {
    return absl::UnavailableError(
        Describe(context, absl::StrCat("connection to PostgreSQL lost: ",
                                       e.what())));
  } catch (const pqxx::in_doubt_error& e) {
    return absl::UnavailableError(Describe(
        context,
        absl::StrCat("connection lost during COMMIT; the outcome is unknown: ",
                     e.what())));
  } catch (const pqxx::sql_error& e) {
    const std::string& sqlstate = e.sqlstate();
    // libpqxx reports a lost connection mid-statement as sql_error without a
    // SQLSTATE in some paths; treat it as a broken connection.
    absl::StatusCode code = StatusCodeForSqlState(sqlstate);
    if (sqlstate.empty() &&
        (absl::StrContains(e.what(), "server closed the connection") ||
         absl::StrContains(e.what(), "no connection to the server") ||
         absl::StrContains(e.what(), "terminating connection"))) {
      code = absl::StatusCode::kUnavailable;
    }
    return absl::Status(
        code, absl::StrCat(Describe(context, e.what()), " [SQLSTATE ",
                           sqlstate.empty() ? "none" : sqlstate, "]"));
  } catch (const pqxx::statement_completion_unknown& e) {
    return absl::UnavailableError(Describe(
        context,
        absl::StrCat("statement outcome unknown (connection lost): ",
                     e.what(), " [SQLSTATE 40003]")));
  } catch (const pqxx::serialization_failure& e) {
    // libpqxx 6.4's transaction_rollback family carries no sqlstate().
    return absl::AbortedError(
        absl::StrCat(Describe(context, e.what()), " [SQLSTATE 40001]"));
  } catch (const pqxx::deadlock_detected& e) {
    return absl::AbortedError(
        absl::StrCat(Describe(context, e.what()), " [SQLSTATE 40P01]"));
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(Describe(context, e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(Describe(context, e.what()));
  } catch (...) {
    return absl::InternalError(Describe(context, "unknown exception"));
  }
}

}  // namespace storage
}  // namespace verity
