-- Host-side step windows in scope: one row per (run, process, step) from ranges of kind 'step'.
SELECT run_id, pid, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM ranges WHERE kind = 'step' AND {where}
GROUP BY run_id, pid, step
