-- Fenced outcomes (issue 11): each task's generation, which a redrive, a
-- dead-letter replay and the reconciler's requeue bump. Its messages carry
-- it, and an outcome of an older generation never changes the task.
-- Existing tasks start at 1, as new ones do.
ALTER TABLE tasks ADD COLUMN generation INTEGER NOT NULL DEFAULT 1;
