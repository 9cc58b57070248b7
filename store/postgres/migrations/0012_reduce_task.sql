-- A job's reduce task (warren.Policy.ReduceTask) as JSON, NULL for none
-- (bytea, not jsonb: its payload comes back byte for byte), and where it
-- stands (warren.Job.ReduceState): '' none started, 'running',
-- 'completed' or 'failed'. The reduce task itself is the job's task row
-- of task_id 0.
ALTER TABLE jobs ADD COLUMN reduce_task bytea;
ALTER TABLE jobs ADD COLUMN reduce_state text NOT NULL DEFAULT '';
