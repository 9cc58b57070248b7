-- Spawned tasks (issue 23): how many of a job's tasks its tasks spawned
-- (warren.Job.SpawnedTasks), counted in expected_tasks too and raised
-- with it in the transaction that records the spawning outcome.
ALTER TABLE jobs ADD COLUMN spawned_tasks bigint NOT NULL DEFAULT 0;

-- The staged parts of spawns too large for one message (one row per part
-- of a run of a task at a generation), until the run's last part is
-- recorded with all of them, or the job is deleted.
CREATE TABLE spawn_parts (
    job_id     text    NOT NULL,
    task_id    bigint  NOT NULL,
    generation integer NOT NULL,
    run        text    NOT NULL,
    part       integer NOT NULL,
    parts      integer NOT NULL,
    spawn      bytea   NOT NULL,
    head       bytea,
    PRIMARY KEY (job_id, task_id, generation, run, part)
);
