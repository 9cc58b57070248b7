-- Search (issue 25, store.ListJobsOpts.Search): what a job is found by,
-- indexed by trigrams in FTS5 tables, so that a substring query reads
-- the index, not every job.
--
-- search_text is the job's type, queue and metadata values, one a line
-- (engine.SearchText, written by InsertJob). The jobs that exist before
-- this migration get it from the same columns here, their metadata
-- values through json_tree: numbers as SQLite writes them (1e3 as
-- 1000.0), which only such old jobs show.
ALTER TABLE jobs ADD COLUMN search_text TEXT NOT NULL DEFAULT '';
UPDATE jobs SET search_text = substr(type || char(10) || CASE queue WHEN '' THEN 'default' ELSE queue END ||
    CASE WHEN metadata IS NOT NULL AND json_valid(CAST(metadata AS TEXT)) THEN
        COALESCE((SELECT char(10) || group_concat(CASE t.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE t.value END, char(10))
                  FROM json_tree(CAST(jobs.metadata AS TEXT)) AS t
                  WHERE t.type NOT IN ('object', 'array', 'null')), '')
    ELSE '' END, 1, 4096);

-- One row per job, its rowid the job's seq (stable: an INTEGER PRIMARY
-- KEY, which VACUUM keeps): doc is search_text, err the job's error.
CREATE VIRTUAL TABLE job_search USING fts5(doc, err, tokenize = 'trigram');
INSERT INTO job_search (rowid, doc, err) SELECT seq, search_text, error FROM jobs;

CREATE TRIGGER job_search_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_search (rowid, doc, err) VALUES (new.seq, new.search_text, new.error);
END;
CREATE TRIGGER job_search_error AFTER UPDATE OF error ON jobs WHEN new.error IS NOT old.error BEGIN
    UPDATE job_search SET err = new.error WHERE rowid = new.seq;
END;
-- One row per task with an error, its rowid the job's seq * 2^32 + the
-- task id (the tasks' own rowids are not stable: VACUUM may renumber
-- them), so that the job's rows are one rowid range and the job's seq is
-- rowid / 2^32. A task id of 2^32 or more is not indexed. Contentless
-- (the text is the task row's): only the index is written, and
-- contentless_delete lets a row go by its rowid alone.
CREATE VIRTUAL TABLE task_error_search USING fts5(err, tokenize = 'trigram', content = '', contentless_delete = 1);
INSERT INTO task_error_search (rowid, err)
    SELECT j.seq * 4294967296 + t.task_id, t.error FROM tasks AS t JOIN jobs AS j ON j.id = t.job_id
    WHERE t.error <> '' AND t.task_id >= 0 AND t.task_id < 4294967296;

CREATE TRIGGER task_error_search_insert AFTER INSERT ON tasks
WHEN new.error <> '' AND new.task_id >= 0 AND new.task_id < 4294967296 BEGIN
    INSERT INTO task_error_search (rowid, err)
        SELECT seq * 4294967296 + new.task_id, new.error FROM jobs WHERE id = new.job_id;
END;
CREATE TRIGGER task_error_search_update AFTER UPDATE OF error ON tasks
WHEN new.error IS NOT old.error AND new.task_id >= 0 AND new.task_id < 4294967296 BEGIN
    DELETE FROM task_error_search
        WHERE old.error <> '' AND rowid = (SELECT seq * 4294967296 + new.task_id FROM jobs WHERE id = new.job_id);
    INSERT INTO task_error_search (rowid, err)
        SELECT seq * 4294967296 + new.task_id, new.error FROM jobs WHERE id = new.job_id AND new.error <> '';
END;

-- A job's deletion leaves its task rows for PurgeDeletedTasks, in
-- batches, so that a large job never holds the one writer long; its
-- tasks' entries go with those rows, the job's seq kept here for them
-- until its deleted_jobs row goes (its last tasks purged). Until then
-- they find nothing: no job row has that seq any more (AUTOINCREMENT
-- never reuses one).
CREATE TABLE deleted_job_search (
    job_id TEXT    NOT NULL PRIMARY KEY,
    seq    INTEGER NOT NULL
) STRICT;

CREATE TRIGGER job_search_delete AFTER DELETE ON jobs BEGIN
    DELETE FROM job_search WHERE rowid = old.seq;
    INSERT OR REPLACE INTO deleted_job_search (job_id, seq) VALUES (old.id, old.seq);
END;
CREATE TRIGGER task_error_search_delete AFTER DELETE ON tasks
WHEN old.error <> '' AND old.task_id >= 0 AND old.task_id < 4294967296 BEGIN
    DELETE FROM task_error_search WHERE rowid = coalesce(
        (SELECT seq FROM jobs WHERE id = old.job_id),
        (SELECT seq FROM deleted_job_search WHERE job_id = old.job_id)) * 4294967296 + old.task_id;
END;
CREATE TRIGGER deleted_job_search_done AFTER DELETE ON deleted_jobs BEGIN
    DELETE FROM deleted_job_search WHERE job_id = old.job_id;
END;
