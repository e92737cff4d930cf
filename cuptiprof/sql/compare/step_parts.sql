-- step_parts: each step's GPU window split by what the GPU was doing, for the HTML report's steps plot, per run, process, device and step: the parts add up to the window exactly (a copy under a kernel, or two kernels on two streams at once, count once), where report --by step's kernel_ms, memcpy_ms and memset_ms sum durations and add up to more than the window wherever work overlaps
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA device ordinal (NULL: work recorded without it)
-- step: step index (NULL: work of a file without steps)
-- window_ms: first start to last end of the step's GPU work (report --by step's gpu_window_ms)
-- kernel_ms: time at least one kernel ran (the union of the kernel intervals across streams)
-- memcpy_ms: time a copy ran while no kernel did
-- memset_ms: time a memset ran while no kernel or copy did
-- idle_ms: time no GPU work ran (window_ms minus the union of all work: report --by step's idle_ms)
-- One ordered pass per group (the wall_parts macro).
SELECT run_id, pid, device_id, step, (end_ns - start_ns) / 1e6 AS window_ms,
       u.bk / 1e6 AS kernel_ms, (u.bc - u.bk) / 1e6 AS memcpy_ms, (u.b - u.bc) / 1e6 AS memset_ms,
       (end_ns - start_ns - u.b) / 1e6 AS idle_ms
FROM (
    SELECT run_id, pid, device_id, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           wall_parts(list({'s': start_ns, 'e': end_ns, 'k': kind = 'kernel', 'c': kind <> 'memset'}
                           ORDER BY start_ns, end_ns)) AS u
    FROM sel_work WHERE end_ns >= start_ns
    GROUP BY run_id, pid, device_id, step
)
ORDER BY run_id, pid, device_id NULLS LAST, step
