-- A large reduced result is stored in parts of resultPartBytes, so that
-- the API streams it a part at a time (JobResultRange): SQLite reads a
-- BLOB value whole, whatever part of it a query asks for. parts counts
-- them (0: the result is job_results.data itself, as before).
ALTER TABLE job_results ADD COLUMN parts INTEGER NOT NULL DEFAULT 0;
CREATE TABLE job_result_parts (
    job_id TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    part   INTEGER NOT NULL,
    data   BLOB    NOT NULL,
    PRIMARY KEY (job_id, part)
) STRICT;
