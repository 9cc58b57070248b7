-- True numbers (issue 25): a job's started_at is when its first task
-- started, the earliest start its outcomes reported (engine.CounterDelta
-- Started); published_at is what started_at held until now, when the
-- relay had published every task and the job became running;
-- last_finished_at is the latest finish of its recorded outcomes, which
-- the running job's rate counts up to.
--
-- The jobs that exist before this migration get published_at from their
-- started_at, and started_at and last_finished_at from what their task
-- rows still hold: NULL for a job none of whose tasks reported a start.
-- A task a redrive sent back lost its first start, so such a job's
-- started_at may be later than its first task's.
ALTER TABLE jobs ADD COLUMN published_at INTEGER;
ALTER TABLE jobs ADD COLUMN last_finished_at INTEGER;
UPDATE jobs SET published_at = started_at,
    started_at = (SELECT min(t.started_at) FROM tasks AS t WHERE t.job_id = jobs.id),
    last_finished_at = (SELECT max(t.finished_at) FROM tasks AS t WHERE t.job_id = jobs.id);
