-- gpu_step_matches_range: every GPU row that names its range carries that range's step
SELECT g.kind, g.run_id, g.pid, g.correlation_id, g.step, r.step AS range_step, g.range_id
FROM gpu_activities g
JOIN ranges r ON r.run_id = g.run_id AND r.pid = g.pid AND r.range_id = g.range_id
WHERE g.step IS DISTINCT FROM r.step
UNION ALL
-- ... and never names a range that does not exist.
SELECT g.kind, g.run_id, g.pid, g.correlation_id, g.step, NULL, g.range_id
FROM gpu_activities g
WHERE g.range_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM ranges r WHERE r.run_id = g.run_id AND r.pid = g.pid AND r.range_id = g.range_id)
