-- Follow-up jobs (issue 23): a job's follow-up spec (warren.Job.Then,
-- store.NewJob.Then) as JSON, NULL for none, its webhook secrets
-- included; the follow-up it started (next_job) and the job that started
-- it (previous_job), '' for none. The close that completes a job creates
-- its follow-up and sets both in one transaction.
ALTER TABLE jobs ADD COLUMN then_spec BLOB;
ALTER TABLE jobs ADD COLUMN next_job TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN previous_job TEXT NOT NULL DEFAULT '';
