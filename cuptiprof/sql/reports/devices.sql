-- devices: per device: its specs and the GPU time recorded on it in scope
-- run_id: run inside the file
-- pid: process that saw the device
-- device_id: CUDA ordinal (-1: the host CPU; NULL: rows whose device is unknown)
-- name: device name
-- cc: compute capability
-- sms: streaming multiprocessors
-- memory_gb: global memory, GB
-- peak_bw_gbps: peak DRAM bandwidth, GB/s
-- kernels: kernel instances in scope
-- gpu_ms: summed GPU work (kernel + memcpy + memset)
-- busy_ms: union of GPU work intervals (per step, summed over steps)
-- streams: distinct streams used
WITH act AS (
    SELECT run_id, pid, device_id, count(*) FILTER (WHERE kind = 'kernel') AS kernels,
           sum(end_ns - start_ns) / 1e6 AS gpu_ms, count(DISTINCT stream_id) AS streams
    FROM sel_work GROUP BY run_id, pid, device_id
), busy AS (
    SELECT run_id, pid, device_id, sum(busy_ns) / 1e6 AS busy_ms
    FROM sel_busy GROUP BY run_id, pid, device_id
), dev AS (
    SELECT run_id, pid, device_id, any_value(name) AS name, any_value(compute_capability) AS cc,
           any_value(sm_count) AS sms, any_value(memory_bytes) / 1e9 AS memory_gb,
           any_value(peak_memory_bw_gbps) AS peak_bw_gbps
    FROM devices GROUP BY run_id, pid, device_id
)
SELECT coalesce(a.run_id, d.run_id) AS run_id, coalesce(a.pid, d.pid) AS pid,
       coalesce(a.device_id, d.device_id) AS device_id, d.name, d.cc, d.sms, d.memory_gb,
       d.peak_bw_gbps, coalesce(a.kernels, 0) AS kernels, a.gpu_ms, b.busy_ms, a.streams
FROM act a
LEFT JOIN busy b ON b.run_id = a.run_id AND b.pid = a.pid AND b.device_id IS NOT DISTINCT FROM a.device_id
FULL OUTER JOIN dev d ON d.run_id = a.run_id AND d.pid = a.pid AND d.device_id = a.device_id
ORDER BY run_id, pid, device_id NULLS LAST
