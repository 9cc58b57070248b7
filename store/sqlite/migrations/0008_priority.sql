-- A job's share of the relay's window: the tasks published in each round
-- are shared between open jobs in proportion to their priorities. 0 is
-- the default priority (warren.DefaultPriority).
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
