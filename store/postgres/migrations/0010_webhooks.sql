-- Webhooks (issue 14): a job may name a URL that warren POSTs to when the
-- job closes, signed with its secret. Jobs without one have ''. Constant
-- defaults: existing rows are not rewritten.
ALTER TABLE jobs ADD COLUMN webhook_url text NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN webhook_secret text NOT NULL DEFAULT '';

-- The outbox of webhook deliveries. A close (FinishJob, CancelJob) of a
-- job with a webhook writes its delivery in the same transaction; the
-- deliverers claim due ones (FOR UPDATE SKIP LOCKED), POST body, and
-- record each attempt. Deleting a job deletes its deliveries.
CREATE TABLE webhook_deliveries (
    -- A ULID: the X-Warren-Delivery header of every attempt.
    id              text PRIMARY KEY,
    job_id          text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    event           text NOT NULL,
    state           text NOT NULL DEFAULT 'pending',
    -- The exact bytes every attempt POSTs.
    body            bytea NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    last_status     integer NOT NULL DEFAULT 0,
    last_error      text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    -- When a pending delivery is due; NULL once delivered or failed.
    next_attempt_at timestamptz,
    delivered_at    timestamptz,
    CONSTRAINT webhook_deliveries_state_check CHECK (state IN ('pending', 'delivered', 'failed'))
);

-- A job's deliveries, oldest first (ids are ULIDs); also the foreign
-- key's index for deleting a job.
CREATE INDEX webhook_deliveries_job_idx ON webhook_deliveries (job_id, id);

-- Pending deliveries by when they are due: the deliverers' claim.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
