-- ops: top GPU ops in scope: kernels by readable name, memcpys per direction, memsets
-- name: readable op name (demangled kernel name, 'Memcpy HtoD', 'Memset'); '(unnamed)' for a kernel recorded without a name, as compare and diff key it
-- kind: 'kernel' | 'memcpy' | 'memset'
-- calls: instances in scope
-- total_ms: summed duration
-- mean_us: mean duration per call
-- min_us: shortest call
-- p50_us: median call
-- p95_us: 95th percentile call
-- max_us: longest call
-- pct_gpu_time: share of ALL GPU time, i.e. of the summed duration of every GPU op in scope (the column sums to 100)
-- pct_busy: share of step BUSY time, i.e. of the union of work intervals per device and step; ops on concurrent streams can together exceed 100
-- Kernels group on their integer name id alone (a cheap key), an id of an empty name counting as
-- no name so that both are one '(unnamed)' row; copies and memsets group on their name.
WITH empty_names AS (SELECT string_id FROM strings WHERE value = ''),
agg AS (
    SELECT 'kernel' AS kind, name_id, NULL::VARCHAR AS name, count(*) AS calls, sum(d) AS total,
           min(d) AS mn, max(d) AS mx, quantile_cont(d, [0.5, 0.95]) AS q
    FROM (SELECT CASE WHEN name_id IN (SELECT string_id FROM empty_names) THEN NULL ELSE name_id END
                 AS name_id, end_ns - start_ns AS d
          FROM sel_work WHERE kind = 'kernel')
    GROUP BY name_id
    UNION ALL
    SELECT kind, NULL, name, count(*), sum(d), min(d), max(d), quantile_cont(d, [0.5, 0.95])
    FROM (SELECT kind, name, end_ns - start_ns AS d FROM sel_work WHERE kind <> 'kernel')
    GROUP BY kind, name
), tot AS (SELECT sum(total) AS t FROM agg),
busy AS (SELECT sum(busy_ns) AS b FROM sel_busy)
SELECT coalesce(nullif(coalesce(a.name, s.demangled, s.value), ''), '(unnamed)') AS name, a.kind, a.calls,
       a.total / 1e6 AS total_ms,
       a.total / a.calls / 1e3 AS mean_us,
       a.mn / 1e3 AS min_us,
       a.q[1] / 1e3 AS p50_us,
       a.q[2] / 1e3 AS p95_us,
       a.mx / 1e3 AS max_us,
       100.0 * a.total / nullif((SELECT t FROM tot), 0) AS pct_gpu_time,
       100.0 * a.total / nullif((SELECT b FROM busy), 0) AS pct_busy
FROM agg a LEFT JOIN strings s ON s.string_id = a.name_id
ORDER BY total_ms DESC, name, a.kind
