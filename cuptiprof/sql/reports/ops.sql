-- ops: top GPU ops in scope: kernels by readable name, memcpys per direction, memsets
-- name: readable op name (demangled kernel name, 'Memcpy HtoD', 'Memset')
-- kind: 'kernel' | 'memcpy' | 'memset'
-- calls: instances in scope
-- total_ms: summed duration
-- mean_us: mean duration per call
-- min_us: shortest call
-- p50_us: median call
-- p95_us: 95th percentile call
-- max_us: longest call
-- pct_gpu_time: share of the summed duration of all GPU ops in scope (the column sums to 100)
-- pct_busy: share of GPU busy time in scope (union of work intervals per device and step); ops on concurrent streams can together exceed 100
WITH a AS (
    SELECT kind, name, end_ns - start_ns AS d FROM sel_activities WHERE kind <> 'sync'
), tot AS (SELECT sum(d) AS t FROM a),
busy AS (SELECT sum(end_ns - start_ns) AS b FROM sel_islands)
SELECT name, kind, count(*) AS calls,
       sum(d) / 1e6 AS total_ms,
       avg(d) / 1e3 AS mean_us,
       min(d) / 1e3 AS min_us,
       quantile_cont(d, 0.5) / 1e3 AS p50_us,
       quantile_cont(d, 0.95) / 1e3 AS p95_us,
       max(d) / 1e3 AS max_us,
       100.0 * sum(d) / nullif((SELECT t FROM tot), 0) AS pct_gpu_time,
       100.0 * sum(d) / nullif((SELECT b FROM busy), 0) AS pct_busy
FROM a
GROUP BY name, kind
ORDER BY total_ms DESC, name
