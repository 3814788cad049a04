-- A search of the runs by the text of why they ended (GET /v1/runs?reason=)
-- finds its candidates in a trigram index of the reasons (pg_trgm), so that
-- a text that no reason holds is answered without reading every failed run.
-- pg_trgm ships with PostgreSQL and is trusted: a role that may create in
-- the database may install it. Where it cannot be installed (a server
-- without PostgreSQL's contrib modules, or a role without that right), the
-- migration leaves the reasons unindexed and the search reads them all, as
-- before: slower on many failed runs, the same answers.
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'sluice: pg_trgm is not available (%); searches by reason read every failed run', SQLERRM;
END
$$;

DO $$
DECLARE
    trgm_schema name;
BEGIN
    SELECT n.nspname INTO trgm_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'pg_trgm';
    IF trgm_schema IS NOT NULL THEN
        EXECUTE format('CREATE INDEX sluice_run_ends_reason ON sluice_run_ends USING gin (reason %I.gin_trgm_ops)', trgm_schema);
    END IF;
END
$$;
