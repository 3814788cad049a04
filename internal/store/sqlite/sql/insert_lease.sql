INSERT INTO sluice_leases (key, id, node, at_ms, until_ms, requests, input, output, money)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9);
