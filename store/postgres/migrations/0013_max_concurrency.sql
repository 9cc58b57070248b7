-- A job's concurrency cap (warren.Policy.MaxConcurrency): the most of its
-- tasks queued (published and not yet recorded) at once; 0 is no cap.
ALTER TABLE jobs ADD COLUMN max_concurrency INTEGER NOT NULL DEFAULT 0;
-- The relay counts a capped job's queued tasks every round, up to its
-- cap: an index range of the job's queued rows, as tasks_pending_idx is
-- of its pending ones (the primary key would walk every task of the job).
CREATE INDEX tasks_queued_by_job_idx ON tasks (job_id, task_id) WHERE state = 'queued';
-- The open capped jobs, which each relay round reads: an empty range when
-- there are none, so uncapped jobs cost the round nothing more.
CREATE INDEX jobs_open_capped_idx ON jobs (id) WHERE max_concurrency > 0 AND state IN ('pending', 'running');
