-- Failures (issue 4): each job's task timeout, and what the reconciler
-- needs to find tasks that were queued too long ago.

-- How long a task may stay queued before the reconciler republishes or
-- fails it, in milliseconds; 0 means warren.DefaultTaskTimeout. A constant
-- default: existing rows are not rewritten.
ALTER TABLE jobs ADD COLUMN task_timeout_ms bigint NOT NULL DEFAULT 0;

-- Queued tasks oldest publish first: ReconcileStale reads only the tasks
-- queued before its cutoff, without touching the rest.
CREATE INDEX tasks_queued_idx ON tasks (queued_at) WHERE state = 'queued';
