-- islands: busy islands (union of kernel, copy and memset intervals) per file, run, process, device and step
-- run: file position
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA ordinal
-- step: step
-- start_ns: island start
-- end_ns: island end
WITH g AS (
    SELECT run, run_id, pid, device_id, step, start_ns, end_ns
    FROM cmp_act WHERE kind <> 'sync' AND end_ns >= start_ns
), o AS (
    SELECT *, max(end_ns) OVER (PARTITION BY run, run_id, pid, device_id, step ORDER BY start_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM g
), f AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run, run_id, pid, device_id, step ORDER BY start_ns, end_ns
                        ROWS UNBOUNDED PRECEDING) AS island
    FROM o
)
SELECT run, run_id, pid, device_id, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM f GROUP BY run, run_id, pid, device_id, step, island
