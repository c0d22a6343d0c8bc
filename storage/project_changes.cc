#include "storage/project_changes.h"

#include <string>

namespace verity::storage {

int64_t MarkProjectChanged(pqxx::work& txn, int64_t project_id) {
  const int64_t change_seq =
      txn.exec_params1("UPDATE projects SET change_seq = change_seq + 1 WHERE project_id = $1 "
                       "RETURNING change_seq",
                       project_id)[0]
          .as<int64_t>();
  txn.exec_params("SELECT pg_notify($1, $2)", kProjectChangesChannel,
                  std::to_string(project_id));
  return change_seq;
}

}  // namespace verity::storage
