-- Webhooks (issue 14): a job may name a URL that warren POSTs to when the
-- job closes, signed with its secret. Jobs without one have ''.
ALTER TABLE jobs ADD COLUMN webhook_url TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN webhook_secret TEXT NOT NULL DEFAULT '';

-- The outbox of webhook deliveries. A close (FinishJob, CancelJob) of a
-- job with a webhook writes its delivery in the same transaction; the
-- deliverer claims due ones, POSTs body, and records each attempt.
-- Deleting a job deletes its deliveries (deleteJobs, with the foreign
-- keys off, does it itself).
CREATE TABLE webhook_deliveries (
    -- A ULID: the X-Warren-Delivery header of every attempt.
    id              TEXT    NOT NULL PRIMARY KEY,
    job_id          TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    event           TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending'
        CHECK (state = 'pending' OR state = 'delivered' OR state = 'failed'),
    -- The exact bytes every attempt POSTs.
    body            BLOB    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_status     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    -- When a pending delivery is due; NULL once delivered or failed.
    next_attempt_at INTEGER,
    delivered_at    INTEGER
) STRICT;

-- A job's deliveries, oldest first (ids are ULIDs).
CREATE INDEX webhook_deliveries_by_job ON webhook_deliveries (job_id, id);

-- Pending deliveries by when they are due: the deliverer's claim.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
