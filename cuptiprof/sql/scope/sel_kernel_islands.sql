-- Kernel-only busy islands per run, process and device: the union of the kernel intervals across
-- streams (the kinds report measures exposed copy time without building these; see kinds.sql).
WITH g AS (
    SELECT run_id, pid, device_id, start_ns, end_ns
    FROM sel_kernel_spans WHERE end_ns >= start_ns
), o AS (
    SELECT *, max(end_ns) OVER (PARTITION BY run_id, pid, device_id ORDER BY start_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM g
), f AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id, pid, device_id ORDER BY start_ns, end_ns
                        ROWS UNBOUNDED PRECEDING) AS island
    FROM o
)
SELECT run_id, pid, device_id, island, min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM f GROUP BY run_id, pid, device_id, island
