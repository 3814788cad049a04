-- Records the version unless the source's latest, by time and then the
-- order recorded, has the same hash (IS DISTINCT FROM: true when there is
-- none).
INSERT INTO sluice_config_versions (at, source, hash, code, config)
SELECT $1::bigint, $2::text, $3::text, $4::text, $5::text
WHERE $3::text IS DISTINCT FROM (
    SELECT hash FROM sluice_config_versions
    WHERE source = $2::text
    ORDER BY at DESC, id DESC
    LIMIT 1
);
