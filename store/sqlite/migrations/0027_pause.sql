-- Pause and resume (docs/operations.md, "Pausing a job or a queue").
-- paused_at is when the job was paused, NULL while it is not; resumed_at
-- is when it was last resumed, NULL if never: the reconciler counts a
-- queued task's timeout from the later of its queued_at and resumed_at,
-- so that the time a job spent paused never makes its tasks look lost.
-- Both are unix microseconds, as every time of this schema.
ALTER TABLE jobs ADD COLUMN paused_at INTEGER;
ALTER TABLE jobs ADD COLUMN resumed_at INTEGER;

-- A paused work queue, by its effective name (protocol.QueueOrDefault:
-- "default" for the jobs that name none); a resumed queue keeps its row
-- with paused_at NULL, for its resumed_at, as a job does. The relay and
-- the reconciler read it for every open job: it holds one row per queue
-- ever paused.
CREATE TABLE queue_pauses (
    queue TEXT PRIMARY KEY,
    paused_at INTEGER,
    resumed_at INTEGER
) WITHOUT ROWID;
