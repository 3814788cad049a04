DELETE FROM sluice_quota_charges WHERE key = $1 AND at < $2;
