-- busy: busy time (union of kernel, copy and memset intervals across streams) per file, run, process, device and step, folded from the rows of the files {runs} lists (those whose step_busy is incomplete: busy_stored.sql reads the others)
-- run: file position
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA ordinal
-- step: step
-- busy_ns: summed length of the busy islands
WITH g AS (
    SELECT run, run_id, pid, device_id, step, start_ns, end_ns
    FROM cmp_act WHERE kind <> 'sync' AND end_ns >= start_ns AND run IN ({runs})
), o AS (
    SELECT *, max(end_ns) OVER (PARTITION BY run, run_id, pid, device_id, step ORDER BY start_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM g
), f AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run, run_id, pid, device_id, step ORDER BY start_ns, end_ns
                        ROWS UNBOUNDED PRECEDING) AS island
    FROM o
), islands AS (
    SELECT run, run_id, pid, device_id, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM f GROUP BY run, run_id, pid, device_id, step, island
)
SELECT run, run_id, pid, device_id, step, sum(end_ns - start_ns) AS busy_ns
FROM islands GROUP BY ALL
