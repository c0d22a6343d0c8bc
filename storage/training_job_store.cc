#include "storage/training_job_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "pqxx/pqxx"

namespace verity::storage {
namespace {

constexpr char kColumns[] =
    "job_id, project_id, state, attempts, COALESCE(worker, ''), version, COALESCE(error, '')";

TrainingJob JobFromRow(const pqxx::row& row) {
  TrainingJob job;
  job.job_id = row[0].as<int64_t>();
  job.project_id = row[1].as<int64_t>();
  job.state = row[2].as<std::string>();
  job.attempts = row[3].as<int32_t>();
  job.worker = row[4].as<std::string>();
  if (!row[5].is_null()) job.version = row[5].as<int32_t>();
  job.error = row[6].as<std::string>();
  return job;
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

absl::StatusOr<TrainingJob> TrainingJobStore::Enqueue(int64_t project_id) {
  return pool_->WithTransaction(
      absl::StrCat("enqueueing a training job of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<TrainingJob> {
        if (txn.exec_params("SELECT 1 FROM projects WHERE project_id = $1", project_id).empty()) {
          return absl::NotFoundError(absl::StrCat("project ", project_id, " not found"));
        }
        pqxx::result rows = txn.exec_params(
            absl::StrCat("INSERT INTO training_jobs (project_id) VALUES ($1) "
                         "ON CONFLICT (project_id) WHERE state IN ('queued', 'running') "
                         "DO NOTHING RETURNING ", kColumns),
            project_id);
        const bool created = !rows.empty();
        if (rows.empty()) {
          rows = txn.exec_params(
              absl::StrCat("SELECT ", kColumns, " FROM training_jobs WHERE project_id = $1 "
                           "AND state IN ('queued', 'running')"),
              project_id);
        }
        if (rows.empty()) {
          return absl::AbortedError("the project's open training job ended while enqueueing");
        }
        TrainingJob job = JobFromRow(rows[0]);
        job.created = created;
        return job;
      });
}

absl::StatusOr<std::optional<TrainingJob>> TrainingJobStore::Claim(absl::string_view worker,
                                                                   absl::Duration lease,
                                                                   int32_t max_attempts) {
  if (worker.empty()) return absl::InvalidArgumentError("worker name must not be empty");
  if (max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts must be at least 1, not ", max_attempts));
  }
  return pool_->WithTransaction(
      "claiming a training job",
      [&](pqxx::work& txn) -> absl::StatusOr<std::optional<TrainingJob>> {
        // A job whose lease expired lost its worker (it died or hung): that attempt counts like
        // a failed one, so a job that kills its workers ends 'failed' after max_attempts claims
        // instead of being taken back forever, and its project can train again.
        txn.exec_params(
            "UPDATE training_jobs SET state = 'failed', finished_at = now(), "
            "    lease_expires_at = NULL, "
            "    error = 'attempt ' || attempts || ' of ' || $1::int || ': worker ' || "
            "            coalesce(worker, '') || ' lost its lease (it died or hung)' "
            "WHERE state = 'running' AND lease_expires_at < now() AND attempts >= $1::int",
            max_attempts);
        const pqxx::result rows = txn.exec_params(
            absl::StrCat(
                "UPDATE training_jobs SET state = 'running', worker = $1, "
                "    attempts = attempts + 1, started_at = now(), "
                "    lease_expires_at = now() + make_interval(secs => $2) "
                "WHERE job_id = (SELECT job_id FROM training_jobs "
                "    WHERE state = 'queued' OR (state = 'running' AND lease_expires_at < now()) "
                "    ORDER BY job_id LIMIT 1 FOR UPDATE SKIP LOCKED) "
                "RETURNING ", kColumns),
            std::string(worker), Seconds(lease));
        if (rows.empty()) return std::optional<TrainingJob>();
        return std::optional<TrainingJob>(JobFromRow(rows[0]));
      });
}

absl::Status TrainingJobStore::Renew(int64_t job_id, absl::string_view worker,
                                     absl::Duration lease) {
  return pool_->RunInTransaction("renewing a training job lease", [&](pqxx::work& txn) {
    const pqxx::result rows = txn.exec_params(
        "UPDATE training_jobs SET lease_expires_at = now() + make_interval(secs => $3) "
        "WHERE job_id = $1 AND worker = $2 AND state = 'running' RETURNING 1",
        job_id, std::string(worker), Seconds(lease));
    if (rows.empty()) {
      return absl::AbortedError(absl::StrCat("training job ", job_id, " is no longer owned by ",
                                             std::string(worker)));
    }
    return absl::OkStatus();
  });
}

absl::Status TrainingJobStore::Fail(int64_t job_id, absl::string_view worker,
                                    absl::string_view error, int32_t max_attempts) {
  return pool_->RunInTransaction("failing a training job", [&](pqxx::work& txn) {
    const pqxx::result rows = txn.exec_params(
        "UPDATE training_jobs SET error = $3, lease_expires_at = NULL, "
        "    state = CASE WHEN attempts >= $4 THEN 'failed' ELSE 'queued' END, "
        "    finished_at = CASE WHEN attempts >= $4 THEN now() END "
        "WHERE job_id = $1 AND worker = $2 AND state = 'running' RETURNING 1",
        job_id, std::string(worker), std::string(error), max_attempts);
    if (rows.empty()) {
      return absl::AbortedError(absl::StrCat("training job ", job_id, " is no longer owned by ",
                                             std::string(worker)));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<TrainingJob> TrainingJobStore::GetJob(int64_t job_id) {
  return pool_->WithTransaction("reading a training job", [&](pqxx::work& txn)
                                    -> absl::StatusOr<TrainingJob> {
    const pqxx::result rows = txn.exec_params(
        absl::StrCat("SELECT ", kColumns, " FROM training_jobs WHERE job_id = $1"), job_id);
    if (rows.empty()) return absl::NotFoundError(absl::StrCat("training job ", job_id, " not found"));
    return JobFromRow(rows[0]);
  });
}

absl::StatusOr<std::vector<TrainingJob>> TrainingJobStore::ListJobs(int64_t project_id) {
  return pool_->WithTransaction("listing training jobs", [&](pqxx::work& txn)
                                    -> absl::StatusOr<std::vector<TrainingJob>> {
    const pqxx::result rows = txn.exec_params(
        absl::StrCat("SELECT ", kColumns, " FROM training_jobs WHERE project_id = $1 "
                     "ORDER BY job_id"),
        project_id);
    std::vector<TrainingJob> jobs;
    for (const pqxx::row& row : rows) jobs.push_back(JobFromRow(row));
    return jobs;
  });
}

absl::StatusOr<bool> TrainingJobStore::HasRunningJob(int64_t project_id) {
  return pool_->WithTransaction("reading running training jobs",
                                [&](pqxx::work& txn) -> absl::StatusOr<bool> {
    return txn
        .exec_params1("SELECT EXISTS (SELECT 1 FROM training_jobs WHERE project_id = $1 "
                      "AND state = 'running' AND lease_expires_at > now())",
                      project_id)[0]
        .as<bool>();
  });
}

}  // namespace verity::storage
