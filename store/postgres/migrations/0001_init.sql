-- Jobs: one row per job, with its policy, counters and lifecycle.
CREATE TABLE jobs (
    id                        text PRIMARY KEY,
    type                      text NOT NULL DEFAULT '',
    state                     text NOT NULL,
    expected_tasks            bigint NOT NULL DEFAULT 0,
    completed_tasks           bigint NOT NULL DEFAULT 0,
    failed_tasks              bigint NOT NULL DEFAULT 0,
    reduce                    text NOT NULL DEFAULT '',
    max_retries               integer NOT NULL DEFAULT 0,
    tolerated_failures        bigint NOT NULL DEFAULT 0,
    tolerated_failure_percent double precision NOT NULL DEFAULT 0,
    fail_fast                 boolean NOT NULL DEFAULT false,
    -- bytea, not jsonb: metadata comes back byte for byte as it was given.
    metadata                  bytea,
    -- NULL when the job has none, so that UNIQUE only binds real keys.
    idempotency_key           text UNIQUE,
    created_at                timestamptz NOT NULL,
    started_at                timestamptz,
    finished_at               timestamptz,
    result_location           text NOT NULL DEFAULT '',
    error                     text NOT NULL DEFAULT '',
    CONSTRAINT jobs_state_check CHECK (state IN ('pending', 'running', 'completed', 'failed', 'cancelled'))
);

-- ListJobs pages newest first, optionally by state.
CREATE INDEX jobs_created_idx ON jobs (created_at, id);
CREATE INDEX jobs_state_created_idx ON jobs (state, created_at, id);

-- JobsToClose and RelayBatch only look at open jobs.
CREATE INDEX jobs_open_idx ON jobs (id) WHERE state IN ('pending', 'running');

-- Tasks: one row per task; the pending rows are the outbox.
--
-- job_id has no foreign key on purpose: tasks are only ever written by
-- CreateJob, in the transaction that writes their job, and the per-row
-- check of a foreign key makes the COPY of a large job about 40% slower.
-- Whatever deletes a job deletes its tasks too.
CREATE TABLE tasks (
    job_id      text NOT NULL,
    task_id     bigint NOT NULL,
    state       text NOT NULL,
    -- bytea keeps the payload's exact bytes.
    payload     bytea,
    attempts    integer NOT NULL DEFAULT 0,
    queued_at   timestamptz,
    started_at  timestamptz,
    finished_at timestamptz,
    worker      text NOT NULL DEFAULT '',
    result      bytea,
    error       text NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, task_id),
    CONSTRAINT tasks_state_check CHECK (state IN ('pending', 'queued', 'completed', 'failed', 'cancelled'))
);

-- The outbox: the relay reads pending tasks in (job_id, task_id) order.
CREATE INDEX tasks_pending_idx ON tasks (job_id, task_id) WHERE state = 'pending';

-- JobErrors reads a job's failed tasks in task order.
CREATE INDEX tasks_failed_idx ON tasks (job_id, task_id) WHERE state = 'failed';

-- The reduced result of a closed job.
CREATE TABLE job_results (
    job_id text PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    data   bytea NOT NULL
);
