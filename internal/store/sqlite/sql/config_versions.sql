-- The versions from ?1 on, and each source's last before ?1: the one in
-- effect when the window starts.
SELECT v.at, v.source, v.hash, v.code, v.config
FROM sluice_config_versions AS v
WHERE v.at >= ?1 OR v.id = (
    SELECT p.id FROM sluice_config_versions AS p
    WHERE p.source = v.source AND p.at < ?1
    ORDER BY p.at DESC, p.id DESC
    LIMIT 1
)
ORDER BY v.at, v.id;
