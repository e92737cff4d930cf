-- kinds: time split by kind (kernel, memcpy per direction, memset, sync) with exposed copy time
-- kind: 'kernel' | 'memcpy' | 'memset' | 'sync'
-- detail: copy direction for memcpys, sync type for syncs
-- count: instances in scope
-- total_ms: summed duration
-- pct_gpu_time: share of summed GPU work (kernel + memcpy + memset; NULL for syncs, which are host waits)
-- exposed_ms: for memcpys and memsets, the time not hidden under kernels running on the same device
-- bytes: bytes moved or set
-- gbps: achieved bandwidth, bytes / total time (GB/s)
WITH a AS (
    SELECT kind, run_id, pid, device_id, start_ns, end_ns, bytes,
           CASE kind WHEN 'memcpy' THEN substr(name, 8) END AS detail
    FROM sel_work
    UNION ALL
    SELECT kind, run_id, pid, device_id, start_ns, end_ns, NULL, substr(name, 6)
    FROM sel_activities WHERE kind = 'sync'
), ov AS (
    SELECT a.kind, a.detail, a.run_id, a.pid, a.device_id, a.start_ns, a.end_ns,
           sum(least(a.end_ns, k.end_ns) - greatest(a.start_ns, k.start_ns)) AS hidden
    FROM a JOIN sel_kernel_islands k
      ON k.run_id = a.run_id AND k.pid = a.pid AND k.device_id IS NOT DISTINCT FROM a.device_id
     AND k.start_ns < a.end_ns AND k.end_ns > a.start_ns
    WHERE a.kind IN ('memcpy', 'memset')
    GROUP BY ALL
), hidden AS (
    SELECT kind, detail, sum(hidden) AS hidden_ns FROM ov GROUP BY kind, detail
), tot AS (SELECT sum(end_ns - start_ns) AS t FROM a WHERE kind <> 'sync')
SELECT a.kind, a.detail, count(*) AS count,
       sum(end_ns - start_ns) / 1e6 AS total_ms,
       CASE WHEN a.kind <> 'sync' THEN 100.0 * sum(end_ns - start_ns) / nullif((SELECT t FROM tot), 0) END
           AS pct_gpu_time,
       CASE WHEN a.kind IN ('memcpy', 'memset')
            THEN (sum(end_ns - start_ns) - coalesce(any_value(h.hidden_ns), 0)) / 1e6 END AS exposed_ms,
       sum(bytes) AS bytes,
       sum(bytes) / nullif(sum(end_ns - start_ns), 0) AS gbps
FROM a LEFT JOIN hidden h ON h.kind = a.kind AND h.detail IS NOT DISTINCT FROM a.detail
GROUP BY a.kind, a.detail
ORDER BY CASE a.kind WHEN 'kernel' THEN 0 WHEN 'memcpy' THEN 1 WHEN 'memset' THEN 2 ELSE 3 END, total_ms DESC
