-- steps_wall: per file and recorded step, the step's GPU window split by what ran, summed over processes and devices, for the HTML comparison's steps plots: the parts add up to the window (steps' window_ms) exactly (a copy under a kernel, or two kernels on two streams at once, count once), where steps' kernel_ms, memcpy_ms and memset_ms sum durations; a step without GPU work has no row
-- run: file position (0 is the baseline)
-- step: step index
-- kernel_ms: time at least one kernel ran (the union of the kernel intervals across streams)
-- memcpy_ms: time a copy ran while no kernel did
-- memset_ms: time a memset ran while no kernel or copy did
-- idle_ms: time no GPU work ran inside the window (steps' idle_ms)
-- One ordered pass per device and step (the wall_parts macro), then summed as steps sums them.
SELECT run, step, sum(u.bk) / 1e6 AS kernel_ms, sum(u.bc - u.bk) / 1e6 AS memcpy_ms,
       sum(u.b - u.bc) / 1e6 AS memset_ms, sum(end_ns - start_ns - u.b) / 1e6 AS idle_ms
FROM (
    SELECT run, run_id, pid, device_id, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           wall_parts(list({'s': start_ns, 'e': end_ns, 'k': kind = 'kernel', 'c': kind <> 'memset'}
                           ORDER BY start_ns, end_ns)) AS u
    FROM cmp_act WHERE kind <> 'sync' AND end_ns >= start_ns
    GROUP BY run, run_id, pid, device_id, step
)
GROUP BY run, step
ORDER BY run, step
