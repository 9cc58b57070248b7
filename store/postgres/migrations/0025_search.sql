-- Search (issue 25, store.ListJobsOpts.Search).
--
-- search_text is the job's type, queue and metadata values, one a line,
-- lowercase
-- (engine.SearchText, written by InsertJob). The jobs that exist before
-- this migration get it from the same columns here, their metadata
-- values through jsonb (numbers as jsonb writes them, 1e3 as 1000), which
-- only such old jobs show; metadata that is not JSON adds nothing.
ALTER TABLE jobs ADD COLUMN search_text text NOT NULL DEFAULT '';

CREATE FUNCTION warren_search_backfill(t text, q text, md bytea) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    doc text := t || E'\n' || CASE q WHEN '' THEN 'default' ELSE q END;
    v jsonb;
BEGIN
    IF md IS NOT NULL THEN
        BEGIN
            FOR v IN SELECT jsonb_path_query(convert_from(md, 'UTF8')::jsonb, 'strict $.**') LOOP
                IF jsonb_typeof(v) IN ('string', 'number', 'boolean') THEN
                    doc := doc || E'\n' || (v #>> '{}');
                END IF;
            END LOOP;
        EXCEPTION WHEN others THEN
            NULL; -- not JSON: no values
        END;
    END IF;
    RETURN left(lower(doc), 4096);
END $$;
UPDATE jobs SET search_text = warren_search_backfill(type, queue, metadata);
DROP FUNCTION warren_search_backfill(text, text, bytea);

-- The id prefix (LIKE 'p%'), which the primary key's collation-ordered
-- index cannot serve; and ListJobsOpts.Queue, newest first.
CREATE INDEX jobs_id_pattern_idx ON jobs (id text_pattern_ops);
CREATE INDEX jobs_queue_created_idx ON jobs (queue, created_at, id);

-- The substrings (ILIKE '%q%') are served by trigram indexes of pg_trgm
-- when it is installed or may be: it is created in the schema public
-- (once per database, whatever schema warren's tables are in), under a
-- lock of the whole database so that two schemas migrating at once do
-- not both create it. Where it cannot be (not available, no privilege,
-- no schema public), the search still works and scans; the indexes can
-- be added later with the statements below (docs/store.md).
DO $$
DECLARE
    ops text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('warren.pg_trgm'));
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        BEGIN
            CREATE EXTENSION pg_trgm SCHEMA public;
        EXCEPTION WHEN others THEN
            RAISE NOTICE 'warren: search without trigram indexes (pg_trgm: %)', SQLERRM;
            RETURN;
        END;
    END IF;
    SELECT quote_ident(n.nspname) || '.gin_trgm_ops' INTO ops
        FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace
        JOIN pg_am a ON a.oid = c.opcmethod
        WHERE c.opcname = 'gin_trgm_ops' AND a.amname = 'gin';
    EXECUTE format('CREATE INDEX jobs_search_trgm_idx ON jobs USING gin (search_text %s, error %s)', ops, ops);
    EXECUTE format('CREATE INDEX tasks_error_trgm_idx ON tasks USING gin (error %s) WHERE error <> %L', ops, '');
END $$;
