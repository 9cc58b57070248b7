-- Task batching (issue 6): how many consecutive tasks of a job the relay
-- packs into one task message. Existing jobs get 1, one message per task.
ALTER TABLE jobs ADD COLUMN batch_size INTEGER NOT NULL DEFAULT 1;
