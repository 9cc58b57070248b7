-- Spawned tasks (issue 23): how many of a job's tasks its tasks spawned
-- (warren.Job.SpawnedTasks), counted in expected_tasks too and raised
-- with it in the transaction that records the spawning outcome.
ALTER TABLE jobs ADD COLUMN spawned_tasks INTEGER NOT NULL DEFAULT 0;

-- The staged parts of spawns too large for one message (one row per part
-- of a run of a task at a generation), until the run's last part is
-- recorded with all of them, or the job is deleted.
CREATE TABLE spawn_parts (
    job_id     TEXT    NOT NULL,
    task_id    INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    run        TEXT    NOT NULL,
    part       INTEGER NOT NULL,
    parts      INTEGER NOT NULL,
    spawn      BLOB    NOT NULL,
    head       BLOB,
    PRIMARY KEY (job_id, task_id, generation, run, part)
) STRICT;
