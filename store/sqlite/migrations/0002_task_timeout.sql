-- Failures (issue 4): each job's task timeout, and what the reconciler
-- needs to find tasks that were queued too long ago.

-- How long a task may stay queued before the reconciler republishes or
-- fails it, in milliseconds; 0 means warren.DefaultTaskTimeout. Existing
-- jobs get 0.
ALTER TABLE jobs ADD COLUMN task_timeout_ms INTEGER NOT NULL DEFAULT 0;

-- Queued tasks oldest publish first: ReconcileStale reads only the tasks
-- queued before its cutoff, without touching the rest.
CREATE INDEX tasks_queued ON tasks (queued_at) WHERE state = 'queued';
