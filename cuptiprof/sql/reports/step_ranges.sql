-- step_ranges: per step, the GPU work in scope split by the innermost of the program's own ranges around its launch (each piece of work counted once)
-- step: step index (NULL: work of a file without steps)
-- range: the innermost of the program's own ranges open when the work was launched ('(no range)' where none; NULL on the one row of a step that launched no GPU work, so that every step is listed as in the steps report)
-- gpu_calls: kernels, memcpys and memsets
-- gpu_ms: their summed GPU duration
-- pct_step: share of the step's summed GPU work (NULL for a step without any)
WITH inner_range AS (
    SELECT run_id, pid, leaf_id, arg_min(name, lvl) AS range FROM sel_range_up GROUP BY ALL
), per AS (
    SELECT a.step, coalesce(i.range, '(no range)') AS range, count(*) AS gpu_calls,
           sum(a.end_ns - a.start_ns) AS d
    FROM sel_activities a
    LEFT JOIN inner_range i ON i.run_id = a.run_id AND i.pid = a.pid AND i.leaf_id = a.range_id
    WHERE a.kind <> 'sync'
    GROUP BY ALL
)
SELECT step, range, gpu_calls, d / 1e6 AS gpu_ms,
       100.0 * d / nullif(sum(d) OVER (PARTITION BY step), 0) AS pct_step
FROM per
UNION ALL
SELECT DISTINCT step, NULL, 0, 0.0, NULL::DOUBLE FROM sel_step_busy
WHERE step NOT IN (SELECT step FROM per WHERE step IS NOT NULL)
ORDER BY step NULLS LAST, gpu_ms DESC, range
