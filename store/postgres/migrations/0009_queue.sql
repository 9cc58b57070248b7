-- The job's work queue (warren.Policy.Queue); '' is the default queue.
ALTER TABLE jobs ADD COLUMN queue TEXT NOT NULL DEFAULT '';
