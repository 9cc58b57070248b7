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
    job_id      TEXT    NOT NULL,
    task_id     INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    generation  INTEGER NOT NULL,
    outcome     TEXT    NOT NULL
        CHECK (outcome = 'completed' OR outcome = 'failed' OR outcome = 'retried'),
    worker      TEXT    NOT NULL DEFAULT '',
    started_at  INTEGER,
    finished_at INTEGER NOT NULL,
    error       TEXT    NOT NULL DEFAULT '',
    traceback   TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, task_id, attempt)
) STRICT, WITHOUT ROWID;
