#include "storage/cursor_reader.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace verity {
namespace storage {
namespace cursor_reader_internal {

absl::Status FetchAll(
    pqxx::work& txn, int batch_rows,
    const std::function<absl::Status(const pqxx::result&)>& on_batch) {
  const std::string fetch = absl::StrCat("FETCH FORWARD ", batch_rows > 0 ? batch_rows : 1,
                                         " FROM ", kCursorName);
  while (true) {
    const pqxx::result rows = txn.exec(fetch);
    if (rows.empty()) break;
    absl::Status status = on_batch(rows);
    if (!status.ok()) return status;
    if (static_cast<int>(rows.size()) < batch_rows) break;
  }
  txn.exec0(absl::StrCat("CLOSE ", kCursorName));
  return absl::OkStatus();
}

}  // namespace cursor_reader_internal
}  // namespace storage
}  // namespace verity
