-- One task, whole (issue 25): every attempt of a task, kept as data.
--
-- A row per run of a task that the store heard of: a terminal outcome's run
-- (written with it, in its transaction) and each retried run before it (the
-- worker's attempt message, store.Outcome.Retry); but a map task completed on
-- its first run, the common case, gets no row: its task row, final, is its
-- one attempt (engine.WithFirstRun), and the hot path writes nothing more. Keyed by attempt number: a
-- repeated message is a no-op, and a row of a later generation (a rerun of
-- the same attempt number after the reconciler's requeue) replaces it. The
-- engine keeps the last store.DefaultKeepAttempts (or Outcome.KeepAttempts)
-- of each task and caps each error and traceback (store.MaxAttemptErrorBytes,
-- store.MaxTracebackBytes). No foreign key: the rows go with their tasks'
-- (PurgeDeletedTasks), range by range, as task rows do.
CREATE TABLE task_attempts (
    job_id      text        NOT NULL,
    task_id     bigint      NOT NULL,
    attempt     integer     NOT NULL,
    generation  integer     NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('completed', 'failed', 'retried')),
    worker      text        NOT NULL DEFAULT '',
    started_at  timestamptz,
    finished_at timestamptz NOT NULL,
    error       text        NOT NULL DEFAULT '',
    traceback   text        NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, task_id, attempt)
);
