-- A search of the runs by the text of why they ended (GET /v1/runs?reason=)
-- finds its candidates in a trigram index of the reasons, so that a text
-- that no reason holds is answered without reading every failed run. The
-- index keeps its own copy of each reason with its run's ID (sluice_run_ends
-- has no INTEGER PRIMARY KEY, whose rowids VACUUM could renumber under an
-- index that pointed at them). A reason that changes (a cancel the run then
-- completes with where it was) is added again; the old text stays as a
-- candidate that the search's exact match on sluice_run_ends turns away.
-- Case counts, as in the search itself.
CREATE VIRTUAL TABLE sluice_run_end_text USING fts5(
    run_id UNINDEXED,
    reason,
    tokenize = 'trigram case_sensitive 1'
);

INSERT INTO sluice_run_end_text (run_id, reason) SELECT run_id, reason FROM sluice_run_ends;

CREATE TRIGGER sluice_run_end_text_insert AFTER INSERT ON sluice_run_ends BEGIN
    INSERT INTO sluice_run_end_text (run_id, reason) VALUES (new.run_id, new.reason);
END;

CREATE TRIGGER sluice_run_end_text_update AFTER UPDATE OF reason ON sluice_run_ends
WHEN new.reason <> old.reason BEGIN
    INSERT INTO sluice_run_end_text (run_id, reason) VALUES (new.run_id, new.reason);
END;
