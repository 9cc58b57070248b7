-- Retention (issue 12): a closed job is deleted, with its tasks, its
-- reduced result and its idempotency key, once its retention has passed
-- since it closed (finished_at; a reopened job has none until it closes
-- again).

-- The job's own retention in milliseconds; 0 means the server's
-- (server.Config.Retention). A constant default: existing rows (which get
-- 0) are not rewritten.
ALTER TABLE jobs ADD COLUMN retention_ms bigint NOT NULL DEFAULT 0;

-- When a job with a retention of its own expires. Declared IMMUTABLE so
-- that an index can hold it, which is true of this use: PostgreSQL marks
-- timestamptz + interval only STABLE because adding days or months
-- depends on the time zone, and an interval of milliseconds has neither.
CREATE FUNCTION warren_expires_at(finished_at timestamptz, retention_ms bigint) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT finished_at + retention_ms * interval '1 millisecond' $$;

-- Closed jobs without a retention of their own, by when they closed:
-- DeleteExpiredJobs reads only those that closed before the server's
-- cutoff.
CREATE INDEX jobs_expiring_by_default_idx ON jobs (finished_at)
    WHERE retention_ms = 0 AND state IN ('completed', 'failed', 'cancelled');

-- Closed jobs with a retention of their own, by when it ends.
CREATE INDEX jobs_expiring_by_own_idx ON jobs (warren_expires_at(finished_at, retention_ms))
    WHERE retention_ms > 0 AND state IN ('completed', 'failed', 'cancelled');

-- Deleted jobs whose task rows are not all purged yet. A job's row goes
-- at once; its tasks go in batches (PurgeDeletedTasks), by task id
-- range, so that deleting a large job never holds a transaction long.
-- tasks has no foreign key to jobs, so nothing else removes them.
CREATE TABLE deleted_jobs (
    job_id     text PRIMARY KEY,
    deleted_at timestamptz NOT NULL,
    -- The job's expected_tasks: its task ids are 1..tasks.
    tasks      bigint NOT NULL,
    -- Its tasks 1..purged are deleted.
    purged     bigint NOT NULL DEFAULT 0
);

-- PurgeDeletedTasks takes the jobs deleted first first.
CREATE INDEX deleted_jobs_order_idx ON deleted_jobs (deleted_at, job_id);
