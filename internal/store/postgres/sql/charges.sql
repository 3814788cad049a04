SELECT id, flow, at, requests, input, output, money
FROM sluice_quota_charges
WHERE key = $1 AND at >= $2
ORDER BY at, id;
