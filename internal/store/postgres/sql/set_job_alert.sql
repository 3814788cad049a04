-- The test and the change are one statement: of concurrent callers with
-- the same from, the first changes the row; the others, once it commits,
-- find the row no longer matches and change nothing.
UPDATE sluice_jobs SET alert = $3
WHERE name = $1 AND alert = $2
RETURNING name;
