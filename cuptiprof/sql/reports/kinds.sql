-- kinds: time split by kind (kernel, memcpy per direction, memset; sync: host wait time, not GPU work) with exposed copy time
-- (rows: kernels, memcpys, memsets, syncs; each by total_ms, most first, ties by detail)
-- kind: 'kernel' | 'memcpy' | 'memset' | 'sync'
-- detail: copy direction for memcpys, sync type for syncs
-- count: instances in scope
-- total_ms: summed duration
-- pct_gpu_time: share of summed GPU work (kernel + memcpy + memset: they add to 100%; NULL for syncs, which are host waits)
-- pct_window: for syncs, host wait time as a share of the GPU windows in scope (first start to last end of the GPU work, summed over steps and devices, as report --by step's gpu_window_ms); NULL for GPU work, whose share is pct_gpu_time
-- exposed_ms: for memcpys and memsets, the time not hidden under kernels running on the same device
-- bytes: bytes moved or set
-- gbps: achieved bandwidth, bytes / total time (GB/s)

-- Hidden time of a copy [cs, ce): the length of its intersection with the union of the kernel
-- intervals on the same run, process and device (any step, any stream: the kernels of steps out of
-- scope, and those no step claims, hide copies too). It is found without a range
-- join and without sorting the kernels: time is cut into bins of 2^18 ns (`>> 18`), and every
-- kernel that overlaps a copy is found by a hash-join equality on (device group, bin). `near` takes
-- the kernels whose start bin lies in [copy's first bin - 1, copy's last bin] (each kernel probes
-- once, with its start bin). `far` takes the kernels that start two or more bins before the copy's
-- first bin and run into it: only kernels that span three or more bins list their later bins,
-- matched against the copy's first bin. Each overlapping (copy, kernel) pair is found exactly once;
-- per copy the clipped kernel pieces are folded into their union (the fold of sel_busy.sql). The
-- bin width only moves work between the two branches, never the result.
WITH c AS MATERIALIZED (
    -- materialized: every reader must see the same copy_id numbering
    SELECT row_number() OVER () AS copy_id, kind, CASE kind WHEN 'memcpy' THEN substr(name, 8) END AS detail,
           run_id, pid, device_id, start_ns AS cs, end_ns AS ce
    FROM sel_work WHERE kind IN ('memcpy', 'memset') AND end_ns > start_ns
), g AS (
    -- device groups that ran kernels: one small integer key per (run, process, device)
    SELECT run_id, pid, device_id, dense_rank() OVER (ORDER BY run_id, pid, device_id) AS gid
    FROM (SELECT DISTINCT run_id, pid, device_id FROM lanes)
), lg AS (
    SELECT l.lane_id, g.gid FROM lanes l
    JOIN g ON g.run_id = l.run_id AND g.pid = l.pid AND g.device_id IS NOT DISTINCT FROM l.device_id
), cg AS (
    SELECT c.copy_id, g.gid, c.cs, c.ce
    FROM c JOIN g ON g.run_id = c.run_id AND g.pid = c.pid AND g.device_id IS NOT DISTINCT FROM c.device_id
), cb AS (
    SELECT copy_id, gid, cs, ce, unnest(range((cs >> 18) - 1, ((ce - 1) >> 18) + 1)) AS b FROM cg
), near AS (
    SELECT cb.copy_id, greatest(k.start_ns, cb.cs) AS s, least(k.end_ns, cb.ce) AS e
    FROM cb JOIN (SELECT lg.gid, k.start_ns, k.end_ns
                  FROM kernel_rows k JOIN lg ON lg.lane_id = k.lane_id) k
      ON k.gid = cb.gid AND k.start_ns >> 18 = cb.b
    WHERE k.start_ns < cb.ce AND k.end_ns > cb.cs AND k.end_ns > k.start_ns
), far AS (
    SELECT cg.copy_id, cg.cs AS s, least(k.end_ns, cg.ce) AS e
    FROM cg JOIN (SELECT lg.gid, k.end_ns,
                         unnest(range((k.start_ns >> 18) + 2, ((k.end_ns - 1) >> 18) + 1)) AS b
                  FROM kernel_rows k JOIN lg ON lg.lane_id = k.lane_id
                  WHERE (k.end_ns - 1) >> 18 >= (k.start_ns >> 18) + 2) k
      ON k.gid = cg.gid AND k.b = cg.cs >> 18
    WHERE k.end_ns > cg.cs
), per_copy AS (
    SELECT copy_id,
           list_reduce(list({'s': s, 'e': e} ORDER BY s, e),
                       lambda acc, x: {'m': greatest(acc.m, x.e),
                                       'b': acc.b + greatest(0, x.e - greatest(x.s, acc.m))},
                       {'m': -9223372036854775807::BIGINT, 'b': 0::BIGINT}).b AS hidden
    FROM (SELECT * FROM near UNION ALL SELECT * FROM far) GROUP BY copy_id
), hidden AS (
    SELECT c.kind, c.detail, sum(h.hidden) AS hidden_ns
    FROM per_copy h JOIN c ON c.copy_id = h.copy_id GROUP BY c.kind, c.detail
), a AS (
    SELECT 'kernel' AS kind, NULL::VARCHAR AS detail, count(*) AS n, sum(end_ns - start_ns) AS t,
           NULL::HUGEINT AS bytes
    FROM sel_kernel_spans
    UNION ALL
    SELECT kind, CASE kind WHEN 'memcpy' THEN substr(name, 8) END, count(*), sum(end_ns - start_ns),
           sum(bytes)
    FROM sel_work WHERE kind IN ('memcpy', 'memset') GROUP BY ALL
    UNION ALL
    SELECT kind, substr(name, 6), count(*), sum(end_ns - start_ns), NULL
    FROM sel_activities WHERE kind = 'sync' GROUP BY ALL
)
SELECT a.kind, a.detail, n AS count, t / 1e6 AS total_ms,
       CASE WHEN a.kind <> 'sync'
            THEN 100.0 * t / nullif(sum(t) FILTER (WHERE a.kind <> 'sync') OVER (), 0) END AS pct_gpu_time,
       CASE WHEN a.kind = 'sync'
            THEN 100.0 * t / nullif((SELECT sum(end_ns - start_ns) FROM sel_busy), 0) END AS pct_window,
       CASE WHEN a.kind IN ('memcpy', 'memset') THEN (t - coalesce(h.hidden_ns, 0)) / 1e6 END AS exposed_ms,
       bytes::BIGINT AS bytes, bytes / nullif(t, 0) AS gbps
FROM a LEFT JOIN hidden h ON h.kind = a.kind AND h.detail IS NOT DISTINCT FROM a.detail
WHERE a.n > 0
ORDER BY CASE a.kind WHEN 'kernel' THEN 0 WHEN 'memcpy' THEN 1 WHEN 'memset' THEN 2 ELSE 3 END, total_ms DESC, a.detail NULLS FIRST
