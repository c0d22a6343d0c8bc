#include "storage/schema_migrations.h"

#include <vector>

namespace verity {
namespace storage {

const std::vector<Migration>& SchemaMigrations() {
  static const std::vector<Migration>* const kMigrations =
      new std::vector<Migration>{
          {1, "projects", R"sql(
CREATE TABLE projects (
  project_id            bigserial PRIMARY KEY,
  name                  text NOT NULL UNIQUE CHECK (name <> ''),
  -- Ordered class names; K = cardinality(classes) >= 2.
  classes               text[] NOT NULL
                        CHECK (cardinality(classes) >= 2 AND array_ndims(classes) = 1),
  -- 0 means "no features".
  item_feature_dim      integer NOT NULL DEFAULT 0 CHECK (item_feature_dim >= 0),
  annotator_feature_dim integer NOT NULL DEFAULT 0 CHECK (annotator_feature_dim >= 0),
  -- Opaque to storage/: owned by the server (model, policy, ...).
  settings              bytea NOT NULL DEFAULT '',
  -- Next dense index to allocate; only changed with this row locked.
  next_item_index       integer NOT NULL DEFAULT 0 CHECK (next_item_index >= 0),
  next_annotator_index  integer NOT NULL DEFAULT 0 CHECK (next_annotator_index >= 0),
  created_at            timestamptz NOT NULL DEFAULT now()
);
)sql"},
          {2, "items and annotators", R"sql(
CREATE TABLE items (
  project_id   bigint NOT NULL REFERENCES projects (project_id),
  item_index   integer NOT NULL CHECK (item_index >= 0),
  external_id  text NOT NULL CHECK (external_id <> ''),
  features     real[],
  gold_label   integer CHECK (gold_label >= 0),
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, item_index),
  UNIQUE (project_id, external_id)
);

CREATE TABLE annotators (
  project_id      bigint NOT NULL REFERENCES projects (project_id),
  annotator_index integer NOT NULL CHECK (annotator_index >= 0),
  external_id     text NOT NULL CHECK (external_id <> ''),
  features        real[],
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, annotator_index),
  UNIQUE (project_id, external_id)
);
)sql"},
          {3, "annotations and annotation history", R"sql(
-- Global and commit-ordered per project (writers hold the project row lock
-- while drawing values); NO CACHE so that values are handed out in order.
CREATE SEQUENCE annotation_seq AS bigint CACHE 1;

-- No foreign keys on the ingest hot path: indices are resolved from items /
-- annotators in the same transaction, under the project row lock.
CREATE TABLE annotations (
  project_id      bigint NOT NULL,
  item_index      integer NOT NULL,
  annotator_index integer NOT NULL,
  label           integer NOT NULL CHECK (label >= 0),
  seq             bigint NOT NULL,
  revision        integer NOT NULL DEFAULT 0,
  client_time     timestamptz,
  committed_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, item_index, annotator_index)
);
-- Labels since a watermark.
CREATE INDEX annotations_project_seq ON annotations (project_id, seq);

-- Every superseded live label: the row as it was before each revision.
CREATE TABLE annotation_history (
  project_id      bigint NOT NULL,
  item_index      integer NOT NULL,
  annotator_index integer NOT NULL,
  label           integer NOT NULL,
  seq             bigint NOT NULL,
  revision        integer NOT NULL,
  client_time     timestamptz,
  committed_at    timestamptz NOT NULL,
  superseded_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, item_index, annotator_index, revision)
);
)sql"},
          {4, "model versions", R"sql(
CREATE TABLE model_versions (
  project_id     bigint NOT NULL REFERENCES projects (project_id),
  version        integer NOT NULL CHECK (version >= 1),
  method         text NOT NULL,
  parameters     bytea NOT NULL DEFAULT '',
  watermark      bigint NOT NULL DEFAULT 0,
  log_likelihood double precision NOT NULL DEFAULT 'NaN',
  iterations     integer NOT NULL DEFAULT 0,
  duration_ms    double precision NOT NULL DEFAULT 0,
  num_labels     bigint NOT NULL DEFAULT 0,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, version)
);
-- Checkpoints are mostly incompressible floats: skip TOAST compression.
ALTER TABLE model_versions ALTER COLUMN parameters SET STORAGE EXTERNAL;
)sql"},
          {5, "model version outputs", R"sql(
-- What a version said when it was fitted: the posteriors of the items it saw and the
-- annotator profiles. Kept apart from model_versions so listing versions stays cheap.
-- Encodings are owned by the server (server/state/version_outputs.h).
CREATE TABLE model_version_outputs (
  project_id         bigint NOT NULL,
  version            integer NOT NULL,
  posteriors         bytea NOT NULL,
  annotator_profiles bytea NOT NULL,
  PRIMARY KEY (project_id, version),
  FOREIGN KEY (project_id, version) REFERENCES model_versions (project_id, version)
);
ALTER TABLE model_version_outputs ALTER COLUMN posteriors SET STORAGE EXTERNAL;
ALTER TABLE model_version_outputs ALTER COLUMN annotator_profiles SET STORAGE EXTERNAL;
)sql"},
          {6, "assignment: item priority and leases", R"sql(
ALTER TABLE items ADD COLUMN priority double precision NOT NULL DEFAULT 0;
-- A suggestion reserves one label slot on an item for an annotator until expires_at, or until
-- that annotator's label for the item arrives (a lease whose pair has a live annotation is
-- released).
CREATE TABLE assignment_leases (
  project_id      bigint NOT NULL,
  item_index      integer NOT NULL,
  annotator_index integer NOT NULL,
  expires_at      timestamptz NOT NULL,
  PRIMARY KEY (project_id, item_index, annotator_index)
);
)sql"},
          {7, "training jobs", R"sql(
-- Fits run as jobs so that separate worker processes (verity_worker) can train. A worker
-- claims a queued job, or a running one whose lease expired (its worker died), with
-- FOR UPDATE SKIP LOCKED, and renews the lease while it fits. The version it trains is
-- committed in the same transaction that marks the job done, and only while the worker still
-- owns it, so every job yields exactly one version.
CREATE TABLE training_jobs (
  job_id           bigserial PRIMARY KEY,
  project_id       bigint NOT NULL REFERENCES projects (project_id),
  state            text NOT NULL DEFAULT 'queued'
                   CHECK (state IN ('queued', 'running', 'done', 'failed')),
  attempts         integer NOT NULL DEFAULT 0,
  worker           text,
  lease_expires_at timestamptz,
  version          integer,
  error            text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  started_at       timestamptz,
  finished_at      timestamptz
);
-- At most one open (queued or running) job per project.
CREATE UNIQUE INDEX training_jobs_one_open_per_project ON training_jobs (project_id)
  WHERE state IN ('queued', 'running');
CREATE INDEX training_jobs_claimable ON training_jobs (job_id) WHERE state IN ('queued', 'running');
)sql"},
          {8, "api keys", R"sql(
-- API keys. The secret part of a key is never stored: only a random salt and
-- SHA-256(salt || secret). key_id is the public part (it is in the key's text) and the
-- lookup key. projects: names the key may touch; an empty array = every project.
CREATE TABLE api_keys (
  key_id      text PRIMARY KEY,
  name        text NOT NULL DEFAULT '',
  role        text NOT NULL CHECK (role IN ('reader', 'writer', 'admin')),
  projects    text[] NOT NULL DEFAULT '{}',
  salt        bytea NOT NULL,
  secret_hash bytea NOT NULL,
  created_by  text NOT NULL DEFAULT '',
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);
)sql"},
          {9, "items and annotators: no foreign key on the ingest path", R"sql(
-- Ingest creates items and annotators in bulk (COPY); the foreign key to projects ran one
-- lookup per new row, which made a new item cost about three times a new annotation. Like
-- annotations (migration 3), entity rows are written only by storage/ under the project's
-- row lock (LockProjects fails for a missing project), and projects are never deleted.
ALTER TABLE items DROP CONSTRAINT items_project_id_fkey;
ALTER TABLE annotators DROP CONSTRAINT annotators_project_id_fkey;
)sql"},
          {10, "annotation seqs from a counter per project", R"sql(
-- A commit reserves its seqs with one update of the project row it already holds locked,
-- instead of one nextval per label. seq only ever promised order within a project (the
-- watermark of its model versions), and the project row lock already serialised the draws
-- per project. Every project continues past every value the global sequence handed out, so
-- seqs keep growing in every project.
ALTER TABLE projects ADD COLUMN next_seq bigint NOT NULL DEFAULT 1 CHECK (next_seq >= 1);
UPDATE projects SET next_seq =
  (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM annotation_seq);
DROP SEQUENCE annotation_seq;
)sql"},
          {11, "assignment leases claimed across server replicas", R"sql(
-- Several server replicas suggest items of one project: each claims its leases under the
-- project's advisory lock and first reads the leases the others claimed since its last claim,
-- by claim_seq (storage/lease_store.h, ClaimLeases). Leases written otherwise keep 0.
CREATE SEQUENCE assignment_lease_claim_seq;
ALTER TABLE assignment_leases ADD COLUMN claim_seq bigint NOT NULL DEFAULT 0;
CREATE INDEX assignment_leases_project_claim ON assignment_leases (project_id, claim_seq);
)sql"},
          {12, "a change counter of each project's items, annotators and settings", R"sql(
-- Bumped by every write of a project's items, annotator features or settings
-- (storage/project_changes.h): server replicas re-read those when theirs is behind.
ALTER TABLE projects ADD COLUMN change_seq bigint NOT NULL DEFAULT 0;
)sql"},
          {13, "a count of each project's annotation_history rows", R"sql(
-- Kept by the commit that writes the history rows (storage/annotation_store.h), so that a
-- project's limit on them (ProjectLimits.max_revisions) can be checked without counting.
ALTER TABLE projects ADD COLUMN history_rows bigint NOT NULL DEFAULT 0;
UPDATE projects p SET history_rows = h.n
  FROM (SELECT project_id, count(*) AS n FROM annotation_history GROUP BY project_id) h
  WHERE p.project_id = h.project_id;
)sql"},
          {14, "model versions: old checkpoints freed", R"sql(
-- Set when a newer version freed this version's checkpoint (its parameters and stored
-- outputs; storage/model_version_store.h, kCheckpointsKept); the metadata stays listed.
ALTER TABLE model_versions ADD COLUMN checkpoint_freed boolean NOT NULL DEFAULT false;
)sql"},
          {15, "model versions: labels of the fit from scratch their warm starts began with", R"sql(
-- ModelVersionRecord::scratch_num_labels: 0 (not known) for the versions stored before, whose
-- project then refits from scratch after a restart.
ALTER TABLE model_versions ADD COLUMN scratch_num_labels bigint NOT NULL DEFAULT 0;
)sql"},
      };
  return *kMigrations;
}

absl::StatusOr<std::vector<int32_t>> ApplySchemaMigrations(
    ConnectionPool& pool) {
  return ApplyMigrations(pool, SchemaMigrations());
}

}  // namespace storage
}  // namespace verity
