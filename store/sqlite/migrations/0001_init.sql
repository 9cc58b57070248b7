-- Jobs, their tasks (pending task rows are the outbox) and reduced results.
-- Timestamps are INTEGER microseconds since the Unix epoch, UTC.
--
-- The state CHECKs are OR chains, not IN lists: SQLite tests an IN list of
-- more than two constants through a temporary b-tree built per statement,
-- which made inserting a job's tasks several times slower.

CREATE TABLE jobs (
    -- seq orders jobs by creation: the relay serves the oldest first and
    -- ListJobs pages newest first by it. AUTOINCREMENT never reuses a value,
    -- so a cursor never skips or repeats a job.
    seq                       INTEGER PRIMARY KEY AUTOINCREMENT,
    id                        TEXT    NOT NULL UNIQUE,
    type                      TEXT    NOT NULL,
    state                     TEXT    NOT NULL
        CHECK (state = 'pending' OR state = 'running' OR state = 'completed' OR state = 'failed' OR state = 'cancelled'),
    expected_tasks            INTEGER NOT NULL DEFAULT 0,
    completed_tasks           INTEGER NOT NULL DEFAULT 0,
    failed_tasks              INTEGER NOT NULL DEFAULT 0,
    reduce                    TEXT    NOT NULL DEFAULT '',
    max_retries               INTEGER NOT NULL DEFAULT 0,
    tolerated_failures        INTEGER NOT NULL DEFAULT 0,
    tolerated_failure_percent REAL    NOT NULL DEFAULT 0,
    fail_fast                 INTEGER NOT NULL DEFAULT 0,
    metadata                  BLOB,
    idempotency_key           TEXT    UNIQUE,
    created_at                INTEGER NOT NULL,
    started_at                INTEGER,
    finished_at               INTEGER,
    result_location           TEXT    NOT NULL DEFAULT '',
    error                     TEXT    NOT NULL DEFAULT ''
) STRICT;

-- ListJobs filtered by state, newest first.
CREATE INDEX jobs_by_state ON jobs (state, seq);

-- Open jobs in creation order: the relay's and JobsToClose's starting point.
CREATE INDEX jobs_open ON jobs (seq) WHERE state IN ('pending', 'running');

CREATE TABLE tasks (
    job_id      TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    task_id     INTEGER NOT NULL,
    state       TEXT    NOT NULL DEFAULT 'pending'
        CHECK (state = 'pending' OR state = 'queued' OR state = 'completed' OR state = 'failed' OR state = 'cancelled'),
    payload     BLOB    NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    queued_at   INTEGER,
    started_at  INTEGER,
    finished_at INTEGER,
    worker      TEXT    NOT NULL DEFAULT '',
    result      BLOB,
    error       TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, task_id)
) STRICT;

-- A job's tasks in one state in task id order: the outbox (state pending),
-- failure samples (state failed), cancelling, and ListTasks by state.
CREATE INDEX tasks_by_state ON tasks (job_id, state, task_id);

CREATE TABLE job_results (
    job_id TEXT NOT NULL PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    data   BLOB NOT NULL
) STRICT;
