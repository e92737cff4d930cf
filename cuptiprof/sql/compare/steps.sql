-- steps: per file and recorded step (a complete step without GPU work too, as 0): GPU window, busy and idle time and the time of each kind, summed over processes and devices
-- run: file position (0 is the baseline)
-- step: step index
-- window_ms: first start to last end of the step's GPU work, summed over devices
-- busy_ms: union of the step's GPU work intervals per device, summed over devices
-- idle_ms: window_ms - busy_ms (the GPU waits inside the step)
-- gpu_ms: summed duration of kernels, copies and memsets
-- kernel_ms: summed kernel time
-- memcpy_ms: summed copy time
-- memset_ms: summed memset time
-- sync_ms: host time spent in synchronization calls
WITH dev AS (
    SELECT run, run_id, pid, device_id, step,
           max(end_ns) FILTER (WHERE kind <> 'sync') - min(start_ns) FILTER (WHERE kind <> 'sync') AS window_ns,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE kind = 'kernel'), 0) AS kernel_ns,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE kind = 'memcpy'), 0) AS memcpy_ns,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE kind = 'memset'), 0) AS memset_ns,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE kind = 'sync'), 0) AS sync_ns
    FROM cmp_act GROUP BY run, run_id, pid, device_id, step
), busy AS (
    SELECT run, run_id, pid, device_id, step, busy_ns FROM cmp_busy
), per AS (
    SELECT d.run, d.step,
           coalesce(sum(window_ns), 0) / 1e6 AS window_ms,
           coalesce(sum(busy_ns), 0) / 1e6 AS busy_ms,
           coalesce(sum(window_ns - coalesce(busy_ns, 0)), 0) / 1e6 AS idle_ms,
           sum(kernel_ns + memcpy_ns + memset_ns) / 1e6 AS gpu_ms,
           sum(kernel_ns) / 1e6 AS kernel_ms, sum(memcpy_ns) / 1e6 AS memcpy_ms,
           sum(memset_ns) / 1e6 AS memset_ms, sum(sync_ns) / 1e6 AS sync_ms
    -- work whose device is unknown (NULL) has its busy time too: not a USING join
    FROM dev d LEFT JOIN busy b ON b.run = d.run AND b.run_id = d.run_id AND b.pid = d.pid
                                AND b.device_id IS NOT DISTINCT FROM d.device_id AND b.step = d.step
    GROUP BY d.run, d.step
)
-- a step without GPU work (cmp_stepset holds it) is a step of 0
SELECT run, step, coalesce(window_ms, 0) AS window_ms, coalesce(busy_ms, 0) AS busy_ms,
       coalesce(idle_ms, 0) AS idle_ms, coalesce(gpu_ms, 0) AS gpu_ms, coalesce(kernel_ms, 0) AS kernel_ms,
       coalesce(memcpy_ms, 0) AS memcpy_ms, coalesce(memset_ms, 0) AS memset_ms,
       coalesce(sync_ms, 0) AS sync_ms
FROM cmp_stepset LEFT JOIN per USING (run, step)
ORDER BY run, step
