-- Spawned tasks (issue 23): how many of a job's tasks its tasks spawned
-- (warren.Job.SpawnedTasks), counted in expected_tasks too and raised
-- with it in the transaction that records the spawning outcome.
ALTER TABLE jobs ADD COLUMN spawned_tasks bigint NOT NULL DEFAULT 0;
