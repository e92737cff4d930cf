-- steps: per step and device: host window, GPU window, busy (union across streams), idle and the top op
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA device ordinal (NULL for rows whose device is unknown: work or host waits recorded without it, or a step of 0 of a process that worked on no device in scope)
-- step: step index (NULL: work of a file without steps)
-- host_ms: duration of the step range on the host (NULL when the file has no step ranges)
-- gpu_window_ms: first start to last end of the GPU work launched in the step (0 for a step that launched none on the device, in a process that records GPU work; NULL in one that records none)
-- busy_ms: union of the step's GPU work intervals across streams (not the summed durations)
-- idle_ms: gpu_window_ms - busy_ms
-- idle_pct: idle share of the GPU window
-- kernels: kernel launches in the step
-- kernel_ms: summed kernel time (kernels on several streams at once each count: with memcpy_ms and memset_ms it can add up to more than busy_ms)
-- memcpy_ms: summed copy time
-- memset_ms: summed memset time
-- sync_ms: host time spent waiting in synchronization calls
-- top_op: the op with the most summed time in the step
-- top_op_ms: its summed time
-- complete: FALSE for a step the program's exception (a Ctrl-C, an error) ended early (data_quality 'step_incomplete'): its numbers cover only the part that ran
-- busy_vs_median_pct: busy time relative to the median complete step of the same device (a step that launched no GPU work counting 0, as in step_spread), in percent (step-to-step spread); NULL for a row of host waits alone (on an unknown device, or one the process launched nothing on), which is no step of any device's spread
-- Kernels group on integer keys alone (name ids); copies and memsets on their name.
WITH optot AS (
    SELECT run_id, pid, device_id, step, 'kernel' AS kind, name_id, NULL::VARCHAR AS name, n, t
    FROM sel_kernel_time
    UNION ALL
    SELECT run_id, pid, device_id, step, kind, NULL, name, count(*), sum(end_ns - start_ns)
    FROM sel_work WHERE kind <> 'kernel' GROUP BY run_id, pid, device_id, step, kind, name
), named AS (   -- equal times: the top op is the first readable name, whatever the row order
    SELECT o.*, coalesce(o.name, s.demangled, s.value) AS label
    FROM optot o LEFT JOIN strings s ON s.string_id = o.name_id
), per AS (
    SELECT run_id, pid, device_id, step,
           sum(n) FILTER (WHERE kind = 'kernel') AS kernels,
           sum(t) FILTER (WHERE kind = 'kernel') AS kernel_ns,
           sum(t) FILTER (WHERE kind = 'memcpy') AS memcpy_ns,
           sum(t) FILTER (WHERE kind = 'memset') AS memset_ns,
           arg_min(struct_pack(kind, name_id, name), (-t, label, kind)) AS top, max(t) AS top_ns
    FROM named GROUP BY run_id, pid, device_id, step
), syncs AS (
    SELECT run_id, pid, device_id, step, sum(end_ns - start_ns) AS sync_ns
    FROM sel_activities WHERE kind = 'sync' GROUP BY ALL
), gpu AS (
    SELECT p.*, b.busy_ns, b.start_ns AS gs, b.end_ns AS ge
    FROM per p
    LEFT JOIN sel_busy b ON b.run_id = p.run_id AND b.pid = p.pid AND b.step IS NOT DISTINCT FROM p.step
          AND b.device_id IS NOT DISTINCT FROM p.device_id
), joined0 AS (
    SELECT coalesce(p.run_id, h.run_id) AS run_id, coalesce(p.pid, h.pid) AS pid,
           coalesce(p.device_id, z.device_id) AS device_id,
           coalesce(p.step, h.step) AS step,
           (h.end_ns - h.start_ns) / 1e6 AS host_ms,
           coalesce(p.ge - p.gs, z.zero) / 1e6 AS gpu_window_ms,
           coalesce(p.busy_ns, z.zero) / 1e6 AS busy_ms,
           coalesce(p.ge - p.gs - p.busy_ns, z.zero) / 1e6 AS idle_ms,
           100.0 * (p.ge - p.gs - p.busy_ns) / nullif(p.ge - p.gs, 0) AS idle_pct,
           coalesce(p.kernels, 0)::BIGINT AS kernels,
           coalesce(p.kernel_ns, 0) / 1e6 AS kernel_ms, coalesce(p.memcpy_ns, 0) / 1e6 AS memcpy_ms,
           coalesce(p.memset_ns, 0) / 1e6 AS memset_ms,
           coalesce(p.top.name, s.demangled, s.value) AS top_op, p.top_ns / 1e6 AS top_op_ms
    FROM gpu p
    LEFT JOIN strings s ON s.string_id = p.top.name_id
    FULL OUTER JOIN sel_steps h ON h.run_id = p.run_id AND h.pid = p.pid AND h.step = p.step
    -- a step without GPU work of a process that records some: a step of 0 on each device the
    -- process worked on, so that it has a median to be measured against
    LEFT JOIN (SELECT DISTINCT run_id, pid, device_id, step, 0 AS zero FROM sel_step_busy
               WHERE busy_ns = 0 AND window_ns = 0) z
           ON p.run_id IS NULL AND z.run_id = h.run_id AND z.pid = h.pid AND z.step = h.step
), joined AS (
    SELECT * FROM joined0
    UNION ALL   -- a step of 0 on a device of the process that launched nothing on it in the step
    SELECT z.run_id, z.pid, z.device_id, z.step, (h.end_ns - h.start_ns) / 1e6, 0.0, 0.0, 0.0,
           NULL, 0, 0.0, 0.0, 0.0, NULL, NULL
    FROM sel_step_busy z
    LEFT JOIN sel_steps h ON h.run_id = z.run_id AND h.pid = z.pid AND h.step = z.step
    WHERE z.busy_ns = 0 AND z.window_ns = 0
      AND NOT EXISTS (SELECT 1 FROM joined0 j WHERE j.run_id = z.run_id AND j.pid = z.pid
                      AND j.step = z.step AND j.device_id IS NOT DISTINCT FROM z.device_id)
), rows AS (
    -- host waits join the row of their device and step; waits with no such row (a step that
    -- launched no GPU work on that device, a wait whose device is unknown) get a row of their
    -- own, so that every wait of the step is counted once
    SELECT coalesce(j.run_id, y.run_id) AS run_id, coalesce(j.pid, y.pid) AS pid,
           CASE WHEN j.run_id IS NULL THEN y.device_id ELSE j.device_id END AS device_id,
           coalesce(j.step, y.step) AS step,
           CASE WHEN j.run_id IS NULL THEN (h.end_ns - h.start_ns) / 1e6 ELSE j.host_ms END AS host_ms,
           -- a row of waits alone launched no GPU work there: a window of 0
           CASE WHEN j.run_id IS NULL THEN 0.0 ELSE j.gpu_window_ms END AS gpu_window_ms,
           CASE WHEN j.run_id IS NULL THEN 0.0 ELSE j.busy_ms END AS busy_ms,
           CASE WHEN j.run_id IS NULL THEN 0.0 ELSE j.idle_ms END AS idle_ms,
           j.idle_pct, coalesce(j.kernels, 0) AS kernels,
           coalesce(j.kernel_ms, 0) AS kernel_ms, coalesce(j.memcpy_ms, 0) AS memcpy_ms,
           coalesce(j.memset_ms, 0) AS memset_ms, coalesce(y.sync_ns, 0) / 1e6 AS sync_ms,
           j.top_op, j.top_op_ms,
           j.run_id IS NULL AS waits_alone
    FROM joined j
    FULL OUTER JOIN syncs y ON y.run_id = j.run_id AND y.pid = j.pid
          AND y.step IS NOT DISTINCT FROM j.step AND y.device_id IS NOT DISTINCT FROM j.device_id
    LEFT JOIN sel_steps h ON j.run_id IS NULL AND h.run_id = y.run_id AND h.pid = y.pid AND h.step = y.step
), med AS (   -- each device's median complete step, steps without GPU work counting 0
    SELECT run_id, pid, device_id, median(busy_ns) FILTER (WHERE NOT cut) / 1e6 AS busy_median_ms
    FROM sel_step_busy GROUP BY ALL
)
, marked AS (
    SELECT j.*, NOT EXISTS (SELECT 1 FROM sel_cut_steps c WHERE c.run_id = j.run_id
                            AND c.pid = j.pid AND c.step = j.step) AS complete
    FROM rows j
)
SELECT m.* EXCLUDE (waits_alone),
       100.0 * (m.busy_ms / nullif(d.busy_median_ms, 0) - 1) AS busy_vs_median_pct
FROM marked m
-- a row of waits alone is no step of the median's: waits on an unknown device (NULL) in a step
-- whose work had a device are not among the device-less work's steps, and compared with their
-- median read -100%
LEFT JOIN med d ON NOT m.waits_alone AND d.run_id = m.run_id AND d.pid = m.pid
      AND d.device_id IS NOT DISTINCT FROM m.device_id
ORDER BY run_id, pid, device_id NULLS LAST, step
