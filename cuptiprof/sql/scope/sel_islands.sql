-- Busy islands: the union of GPU work intervals (kernels, memcpys, memsets; not host-side syncs)
-- per run, process, device and step. Overlapping work on different streams counts once. Reads
-- sel_work (integer keys, syncs already left out), not the named sel_activities.
WITH g AS (
    SELECT run_id, pid, device_id, step, start_ns, end_ns
    FROM sel_work WHERE end_ns >= start_ns
), o AS (
    SELECT *, max(end_ns) OVER (PARTITION BY run_id, pid, device_id, step ORDER BY start_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM g
), f AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id, pid, device_id, step ORDER BY start_ns, end_ns
                        ROWS UNBOUNDED PRECEDING) AS island
    FROM o
)
SELECT run_id, pid, device_id, step, island, min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM f GROUP BY run_id, pid, device_id, step, island
