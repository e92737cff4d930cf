-- cpu_time: how much of the activity in scope is CPU op time, not GPU work: a run without a CUDA GPU records torch.profiler's CPU ops as kernels on a device of kind 'cpu' (device -1, one stream per thread), and reports then show CPU op times
-- cpu_ms: summed duration of the rows on CPU devices in scope
-- gpu_ms: summed duration of the other rows in scope (GPU work)
-- cpu_runs: labels of the runs holding CPU op rows (in the file), comma-separated; NULL when none (a run without a GPU that recorded no op, such as profile()'s host-side ranges, holds none)
-- light: true when every run in the file is a --light one (ranges and logs only, no GPU or CPU ops by design)
-- gpu_rows: GPU rows in scope (kernels, copies, memsets, syncs), counted whatever their duration: rows all of zero duration (no time measured) are recorded work all the same
-- cpu_rows: rows on CPU devices in scope
WITH a AS (
    SELECT end_ns - start_ns AS d,
           EXISTS (SELECT 1 FROM devices c WHERE c.run_id = s.run_id AND c.pid = s.pid
                   AND c.device_id = s.device_id AND c.kind = 'cpu') AS on_cpu
    FROM sel_activities s
)
SELECT coalesce(sum(d) FILTER (WHERE on_cpu), 0) / 1e6 AS cpu_ms,
       coalesce(sum(d) FILTER (WHERE NOT on_cpu), 0) / 1e6 AS gpu_ms,
       (SELECT string_agg(DISTINCT r.label, ', ' ORDER BY r.label) FROM runs r
        WHERE EXISTS (SELECT 1 FROM lanes l JOIN devices c ON c.run_id = l.run_id AND c.pid = l.pid
                      AND c.device_id = l.device_id
                      WHERE l.run_id = r.run_id AND c.kind = 'cpu')) AS cpu_runs,
       (SELECT coalesce(bool_and(source = 'light'), false) FROM runs) AS light,
       count(*) FILTER (WHERE NOT on_cpu) AS gpu_rows,
       count(*) FILTER (WHERE on_cpu) AS cpu_rows
FROM a
