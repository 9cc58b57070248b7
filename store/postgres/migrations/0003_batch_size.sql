-- Task batching (issue 6): how many consecutive tasks of a job the relay
-- packs into one task message. A constant default: existing rows (which
-- get 1, one message per task) are not rewritten.
ALTER TABLE jobs ADD COLUMN batch_size integer NOT NULL DEFAULT 1;
