// Reading large query results in bounded memory.
//
// libpq materialises a whole result set in client memory; loading millions
// of annotations that way would need several times their size. ReadInBatches
// runs the query through a server-side cursor (DECLARE ... / FETCH n) inside
// the caller's transaction and hands the rows to a callback one batch at a
// time. All batches come from one snapshot (the cursor's).
//
// Stateless and thread-safe; a transaction is used by one thread. libpqxx
// exceptions propagate to the caller's transaction runner.
#ifndef VERITY_STORAGE_CURSOR_READER_H_
#define VERITY_STORAGE_CURSOR_READER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "pqxx/result"
#include "pqxx/transaction"

namespace verity {
namespace storage {

namespace cursor_reader_internal {
inline constexpr char kCursorName[] = "verity_batch_cursor";
// FETCHes `batch_rows` rows at a time until the cursor is exhausted or
// `on_batch` fails, then closes the cursor.
absl::Status FetchAll(
    pqxx::work& txn, int batch_rows,
    const std::function<absl::Status(const pqxx::result&)>& on_batch);
}  // namespace cursor_reader_internal

// Runs `query` (a SELECT using $1.. for `params`) and calls `on_batch` with
// successive batches of at most `batch_rows` rows (never with an empty one),
// stopping at the first non-OK status, which it returns. A `batch_rows` below 1
// reads one row at a time. One cursor per transaction at a time.
template <typename... Params>
absl::Status ReadInBatches(
    pqxx::work& txn, const std::string& query, int batch_rows,
    const std::function<absl::Status(const pqxx::result&)>& on_batch,
    const Params&... params) {
  txn.exec_params0(std::string("DECLARE ") + cursor_reader_internal::kCursorName +
                       " NO SCROLL CURSOR FOR " + query,
                   params...);
  return cursor_reader_internal::FetchAll(txn, batch_rows, on_batch);
}

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_CURSOR_READER_H_
