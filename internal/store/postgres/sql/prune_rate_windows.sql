DELETE FROM sluice_rate_counts WHERE function = $1 AND rate_key = $2 AND window_start < $3;
