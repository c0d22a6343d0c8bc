#include "storage/project_store.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pqxx/binarystring"
#include "pqxx/result"
#include "storage/project_changes.h"
#include "storage/sql_values.h"

namespace verity {
namespace storage {
namespace {

std::string SelectProjectsSql(absl::string_view where) {
  return absl::StrCat(
      "SELECT project_id, name, classes, item_feature_dim, "
      "annotator_feature_dim, settings, ",
      MicrosFromTimestampSql("created_at"),
      ", change_seq, next_item_index, next_annotator_index, history_rows FROM projects ",
      where);
}

absl::StatusOr<ProjectRecord> ProjectFromRow(const pqxx::row& row) {
  ProjectRecord p;
  p.project_id = row[0].as<int64_t>();
  p.name = row[1].as<std::string>();
  VERITY_ASSIGN_OR_RETURN(p.classes, ParseTextArray(row[2].c_str()));
  p.item_feature_dim = row[3].as<int32_t>();
  p.annotator_feature_dim = row[4].as<int32_t>();
  p.settings = pqxx::binarystring(row[5]).str();
  p.created_at = MicrosToTime(row[6].as<int64_t>());
  p.change_seq = row[7].as<int64_t>();
  p.num_items = row[8].as<int64_t>();
  p.num_annotators = row[9].as<int64_t>();
  p.history_rows = row[10].as<int64_t>();
  return p;
}

}  // namespace

absl::StatusOr<ProjectRecord> ProjectStore::CreateProject(
    const ProjectRecord& project) {
  for (const std::string& c : project.classes) {
    if (c.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("class names must not contain NUL");
    }
  }
  if (project.name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("project name must not contain NUL");
  }
  const std::string classes = TextArrayLiteral(project.classes);
  return pool_->WithTransaction(
      absl::StrCat("creating project '", project.name, "'"),
      [&](pqxx::work& txn) -> absl::StatusOr<ProjectRecord> {
        const pqxx::row row = txn.exec_params1(
            absl::StrCat("INSERT INTO projects (name, classes, "
                         "item_feature_dim, annotator_feature_dim, settings) "
                         "VALUES ($1, $2::text[], $3, $4, $5) "
                         "RETURNING project_id, ",
                         MicrosFromTimestampSql("created_at")),
            project.name, classes, project.item_feature_dim,
            project.annotator_feature_dim,
            pqxx::binarystring(project.settings));
        ProjectRecord created = project;
        created.project_id = row[0].as<int64_t>();
        created.created_at = MicrosToTime(row[1].as<int64_t>());
        return created;
      });
}

absl::StatusOr<ProjectRecord> ProjectStore::GetProject(int64_t project_id) {
  return pool_->WithTransaction(
      "reading a project",
      [&](pqxx::work& txn) -> absl::StatusOr<ProjectRecord> {
        const pqxx::result rows = txn.exec_params(
            SelectProjectsSql("WHERE project_id = $1"), project_id);
        if (rows.empty()) {
          return absl::NotFoundError(
              absl::StrCat("project ", project_id, " not found"));
        }
        return ProjectFromRow(rows[0]);
      });
}

absl::StatusOr<ProjectRecord> ProjectStore::GetProjectByName(
    absl::string_view name) {
  if (name.find('\0') != absl::string_view::npos) {
    return absl::NotFoundError("project name contains NUL: no such project");
  }
  return pool_->WithTransaction(
      "reading a project",
      [&](pqxx::work& txn) -> absl::StatusOr<ProjectRecord> {
        const pqxx::result rows = txn.exec_params(
            SelectProjectsSql("WHERE name = $1"), std::string(name));
        if (rows.empty()) {
          return absl::NotFoundError(
              absl::StrCat("project '", name, "' not found"));
        }
        return ProjectFromRow(rows[0]);
      });
}

absl::StatusOr<std::vector<ProjectRecord>> ProjectStore::ListProjects() {
  return pool_->WithTransaction(
      "listing projects",
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<ProjectRecord>> {
        std::vector<ProjectRecord> projects;
        for (const pqxx::row& row :
             txn.exec(SelectProjectsSql("ORDER BY project_id"))) {
          VERITY_ASSIGN_OR_RETURN(ProjectRecord p, ProjectFromRow(row));
          projects.push_back(std::move(p));
        }
        return projects;
      });
}

absl::Status ProjectStore::UpdateSettings(int64_t project_id,
                                          absl::string_view settings,
                                          int64_t* change_seq) {
  return UpdateSettingsFrom(
      project_id,
      [settings](absl::string_view) -> absl::StatusOr<std::string> {
        return std::string(settings);
      },
      change_seq);
}

absl::Status ProjectStore::UpdateSettingsFrom(
    int64_t project_id,
    const std::function<absl::StatusOr<std::string>(absl::string_view stored)>& next,
    int64_t* change_seq) {
  return pool_->RunInTransaction(
      "updating project settings", [&](pqxx::work& txn) -> absl::Status {
        const pqxx::result stored = txn.exec_params(
            "SELECT settings FROM projects WHERE project_id = $1 FOR NO KEY UPDATE", project_id);
        if (stored.empty()) {
          return absl::NotFoundError(absl::StrCat("project ", project_id, " not found"));
        }
        absl::StatusOr<std::string> settings = next(pqxx::binarystring(stored[0][0]).str());
        if (!settings.ok()) return settings.status();
        txn.exec_params("UPDATE projects SET settings = $2 WHERE project_id = $1", project_id,
                        pqxx::binarystring(settings->data(), settings->size()));
        const int64_t seq = MarkProjectChanged(txn, project_id);
        if (change_seq != nullptr) *change_seq = seq;
        return absl::OkStatus();
      });
}

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>>
ProjectStore::ListChangeSeqs() {
  return pool_->WithTransaction(
      "listing the projects' change counters",
      [&](pqxx::work& txn)
          -> absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> {
        std::vector<std::pair<int64_t, int64_t>> seqs;
        for (const pqxx::row& row : txn.exec(
                 "SELECT project_id, change_seq FROM projects ORDER BY project_id")) {
          seqs.emplace_back(row[0].as<int64_t>(), row[1].as<int64_t>());
        }
        return seqs;
      });
}

}  // namespace storage
}  // namespace verity
