-- A job's concurrency cap (warren.Policy.MaxConcurrency): the most of its
-- tasks queued (published and not yet recorded) at once; 0 is no cap.
-- The relay counts a capped job's queued tasks on tasks_by_state
-- (job_id, state, task_id), so no index is added.
ALTER TABLE jobs ADD COLUMN max_concurrency INTEGER NOT NULL DEFAULT 0;
