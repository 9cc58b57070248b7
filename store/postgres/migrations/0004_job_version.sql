-- Guarded closes (issue 11): every change to a job's counters or state
-- bumps its version, and FinishJob closes a job only at the version its
-- reduce was computed from, so that a close never undoes a concurrent
-- reopen. A constant default: existing rows (which start at 0) are not
-- rewritten.
ALTER TABLE jobs ADD COLUMN version bigint NOT NULL DEFAULT 0;
