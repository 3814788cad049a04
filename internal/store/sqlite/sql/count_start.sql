-- One statement increments and reads the window's count, so concurrent
-- starts never both see the last slot free.
INSERT INTO sluice_rate_counts (function, rate_key, window_start, count)
VALUES (?1, ?2, ?3, 1)
ON CONFLICT (function, rate_key, window_start) DO UPDATE SET count = sluice_rate_counts.count + 1
RETURNING count;
