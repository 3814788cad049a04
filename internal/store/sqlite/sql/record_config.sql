-- Records the version unless the source's latest, by time and then the
-- order recorded, has the same hash (IS NOT: true when there is none).
INSERT INTO sluice_config_versions (at, source, hash, code, config)
SELECT ?1, ?2, ?3, ?4, ?5
WHERE ?3 IS NOT (
    SELECT hash FROM sluice_config_versions
    WHERE source = ?2
    ORDER BY at DESC, id DESC
    LIMIT 1
);
