-- Idempotency-Key reuse (issue 11): the digest of the submission that
-- created the job, so that the same key with another body is refused
-- instead of answered with the first job. Jobs created before it have
-- none, and any replay of theirs is accepted as before.
ALTER TABLE jobs ADD COLUMN request_hash TEXT NOT NULL DEFAULT '';
