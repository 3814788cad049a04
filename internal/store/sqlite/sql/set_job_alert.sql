-- The test and the change are one statement: of concurrent callers with
-- the same from, one changes the row and gets it back.
UPDATE sluice_jobs SET alert = ?3
WHERE name = ?1 AND alert = ?2
RETURNING name;
