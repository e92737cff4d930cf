-- steps: per step and device: host window, GPU window, busy (union across streams), idle and the top op
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA device ordinal
-- step: step index
-- host_ms: duration of the step range on the host (NULL when the file has no step ranges)
-- gpu_window_ms: first start to last end of the GPU work launched in the step
-- busy_ms: union of the step's GPU work intervals across streams (not the summed durations)
-- idle_ms: gpu_window_ms - busy_ms
-- idle_pct: idle share of the GPU window
-- kernels: kernel launches in the step
-- kernel_ms: summed kernel time
-- memcpy_ms: summed copy time
-- memset_ms: summed memset time
-- sync_ms: host time spent waiting in synchronization calls
-- top_op: the op with the most summed time in the step
-- top_op_ms: its summed time
-- busy_vs_median_pct: busy time relative to the median step of the same device (step-to-step spread)
WITH act AS (
    SELECT run_id, pid, device_id, step, kind, name, start_ns, end_ns FROM sel_activities
    WHERE step IS NOT NULL
), per AS (
    SELECT run_id, pid, device_id, step,
           min(start_ns) FILTER (WHERE kind <> 'sync') AS gs,
           max(end_ns) FILTER (WHERE kind <> 'sync') AS ge,
           count(*) FILTER (WHERE kind = 'kernel') AS kernels,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE kind = 'kernel'), 0) AS kernel_ns,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE kind = 'memcpy'), 0) AS memcpy_ns,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE kind = 'memset'), 0) AS memset_ns,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE kind = 'sync'), 0) AS sync_ns
    FROM act GROUP BY run_id, pid, device_id, step
), busy AS (
    SELECT run_id, pid, device_id, step, sum(end_ns - start_ns) AS busy_ns
    FROM sel_islands GROUP BY run_id, pid, device_id, step
), optot AS (
    SELECT run_id, pid, device_id, step, name, sum(end_ns - start_ns) AS t
    FROM act WHERE kind <> 'sync' GROUP BY run_id, pid, device_id, step, name
), top AS (
    SELECT run_id, pid, device_id, step, arg_max(name, t) AS top_op, max(t) AS top_ns
    FROM optot GROUP BY run_id, pid, device_id, step
), joined AS (
    SELECT coalesce(p.run_id, h.run_id) AS run_id, coalesce(p.pid, h.pid) AS pid, p.device_id,
           coalesce(p.step, h.step) AS step,
           (h.end_ns - h.start_ns) / 1e6 AS host_ms,
           (p.ge - p.gs) / 1e6 AS gpu_window_ms,
           b.busy_ns / 1e6 AS busy_ms,
           (p.ge - p.gs - b.busy_ns) / 1e6 AS idle_ms,
           100.0 * (p.ge - p.gs - b.busy_ns) / nullif(p.ge - p.gs, 0) AS idle_pct,
           coalesce(p.kernels, 0) AS kernels,
           p.kernel_ns / 1e6 AS kernel_ms, p.memcpy_ns / 1e6 AS memcpy_ms,
           p.memset_ns / 1e6 AS memset_ms, p.sync_ns / 1e6 AS sync_ms,
           t.top_op, t.top_ns / 1e6 AS top_op_ms
    FROM per p
    LEFT JOIN busy b USING (run_id, pid, device_id, step)
    LEFT JOIN top t USING (run_id, pid, device_id, step)
    FULL OUTER JOIN sel_steps h ON h.run_id = p.run_id AND h.pid = p.pid AND h.step = p.step
)
SELECT *, 100.0 * (busy_ms / nullif(median(busy_ms) OVER (PARTITION BY run_id, pid, device_id), 0) - 1)
          AS busy_vs_median_pct
FROM joined
ORDER BY run_id, pid, device_id NULLS LAST, step
