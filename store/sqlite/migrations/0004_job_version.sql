-- Guarded closes (issue 11): every change to a job's counters or state
-- bumps its version, and FinishJob closes a job only at the version its
-- reduce was computed from, so that a close never undoes a concurrent
-- reopen. Existing jobs start at 0.
ALTER TABLE jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
