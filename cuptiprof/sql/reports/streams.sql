-- streams: per device and stream: work counts, summed time and share of the device's busy time
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA ordinal
-- stream_id: CUDA stream id
-- kernels: kernel instances
-- memcpys: copy instances
-- memsets: memset instances
-- gpu_ms: summed GPU work on the stream
-- pct_device_busy: gpu_ms as a share of the device's busy time (streams overlap, so shares can sum past 100)
-- first_ns: first start on the stream
-- last_ns: last end on the stream
WITH s AS (
    SELECT run_id, pid, device_id, stream_id,
           count(*) FILTER (WHERE kind = 'kernel') AS kernels,
           count(*) FILTER (WHERE kind = 'memcpy') AS memcpys,
           count(*) FILTER (WHERE kind = 'memset') AS memsets,
           sum(end_ns - start_ns) / 1e6 AS gpu_ms,
           min(start_ns) AS first_ns, max(end_ns) AS last_ns
    FROM sel_work
    GROUP BY run_id, pid, device_id, stream_id
), busy AS (
    SELECT run_id, pid, device_id, sum(busy_ns) / 1e6 AS busy_ms
    FROM sel_busy GROUP BY run_id, pid, device_id
)
SELECT s.run_id, s.pid, s.device_id, s.stream_id, s.kernels, s.memcpys, s.memsets, s.gpu_ms,
       100.0 * s.gpu_ms / nullif(b.busy_ms, 0) AS pct_device_busy, s.first_ns, s.last_ns
FROM s LEFT JOIN busy b ON b.run_id = s.run_id AND b.pid = s.pid AND b.device_id IS NOT DISTINCT FROM s.device_id
ORDER BY gpu_ms DESC, run_id, pid, device_id, stream_id
