-- Retention (issue 12): a closed job is deleted, with its tasks, its
-- reduced result and its idempotency key, once its retention has passed
-- since it closed (finished_at; a reopened job has none until it closes
-- again).

-- The job's own retention in milliseconds; 0 means the server's
-- (server.Config.Retention). Existing jobs get 0.
ALTER TABLE jobs ADD COLUMN retention_ms INTEGER NOT NULL DEFAULT 0;

-- Closed jobs without a retention of their own, by when they closed:
-- DeleteExpiredJobs reads only those that closed before the server's
-- cutoff.
CREATE INDEX jobs_expiring_by_default ON jobs (finished_at)
    WHERE retention_ms = 0 AND finished_at IS NOT NULL;

-- Closed jobs with a retention of their own, by when it ends
-- (microseconds, as finished_at).
CREATE INDEX jobs_expiring_by_own ON jobs (finished_at + 1000 * retention_ms)
    WHERE retention_ms > 0 AND finished_at IS NOT NULL;

-- Deleted jobs whose task rows are not all purged yet, in the order they
-- were deleted (rowid). A job's row goes at once; its tasks go in
-- batches (PurgeDeletedTasks), by task id range, so that deleting a
-- large job never holds the one writer long.
CREATE TABLE deleted_jobs (
    job_id     TEXT    NOT NULL PRIMARY KEY,
    deleted_at INTEGER NOT NULL,
    -- The job's expected_tasks: its task ids are 1..tasks.
    tasks      INTEGER NOT NULL,
    -- Its tasks 1..purged are deleted.
    purged     INTEGER NOT NULL DEFAULT 0
) STRICT;
