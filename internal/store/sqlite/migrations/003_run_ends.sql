-- Why a run ended without finishing: a run the run deadline stopped
-- (timed_out) or one cancelled on request, with the step it was in.
-- DBOS records such a run only as CANCELLED, with no error, and clears
-- its start time: started_at keeps it (0 when it never started).
CREATE TABLE sluice_run_ends (
    run_id     TEXT   PRIMARY KEY,
    status     TEXT   NOT NULL,
    reason     TEXT   NOT NULL,
    step       TEXT   NOT NULL,
    attempt    BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    ended_at   BIGINT NOT NULL
);
