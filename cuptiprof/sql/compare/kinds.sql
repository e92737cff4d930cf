-- kinds: per file: time per step of each kind (kernel, memcpy per direction, memset, sync, idle), median over the recorded steps
-- run: file position (0 is the baseline)
-- kind: 'kernel' | 'memcpy' | 'memset' | 'sync' (host waits) | 'idle' (GPU window minus busy time)
-- detail: copy direction for memcpys ('HtoD', 'DtoH', 'DtoD', ...), else NULL
-- ms: median over the recorded steps of the summed time per step (a step without it counts 0)
-- min_ms: fastest step
-- max_ms: slowest step
-- mad_ms: median absolute deviation of the per-step time
-- p75_ms: upper quartile of the per-step time (a quarter of the steps took longer)
-- p25_ms: lower quartile of the per-step time (a quarter of the steps took less)
-- pct_gpu_time: for kernel, memcpy and memset, ms as a share of the step's GPU work (the sum of their ms), so that they add to 100%, as report --by kind's pct_gpu_time; NULL for sync and idle, which are no GPU work
-- pct_window: for sync (host wait time, which overlaps the GPU work it waits for) and idle, ms as a share of the median step's GPU window (summed over devices); NULL for GPU work, whose share is pct_gpu_time
-- bytes_per_step: median bytes moved or set per step (copies and memsets)
-- base_ms: the same kind's ms in the first file
-- ratio: ms / base_ms
WITH stepset AS (SELECT run, step FROM cmp_stepset),   -- empty steps too: they count 0
parts AS (
    SELECT run, step, kind, CASE WHEN kind = 'memcpy' THEN substr(name, 8) END AS detail,
           sum(end_ns - start_ns) AS ns, sum(bytes) AS bytes
    FROM cmp_act GROUP BY ALL
    UNION ALL
    SELECT run, step, 'idle', NULL, idle_ms * 1e6, NULL FROM cmp_steps
), items AS (SELECT DISTINCT run, kind, detail FROM parts),
filled AS (
    SELECT i.run, i.kind, i.detail, s.step, coalesce(p.ns, 0) AS ns, p.bytes
    FROM items i JOIN stepset s USING (run)
    LEFT JOIN parts p ON p.run = i.run AND p.kind = i.kind AND p.detail IS NOT DISTINCT FROM i.detail
                     AND p.step = s.step
), med AS (
    SELECT run, kind, detail, median(ns) AS m, min(ns) AS lo, max(ns) AS hi,
           quantile_cont(ns, 0.75) AS p75, quantile_cont(ns, 0.25) AS p25,
           median(coalesce(bytes, 0)) FILTER (WHERE kind IN ('memcpy', 'memset')) AS bytes_per_step
    FROM filled GROUP BY ALL
), mad AS (
    SELECT f.run, f.kind, f.detail, median(abs(f.ns - med.m)) AS mad
    FROM filled f JOIN med ON med.run = f.run AND med.kind = f.kind AND med.detail IS NOT DISTINCT FROM f.detail
    GROUP BY ALL
), win AS (SELECT run, median(window_ms) AS w FROM cmp_steps GROUP BY run),
res AS (
    SELECT med.run, med.kind, med.detail, med.m / 1e6 AS ms, med.lo / 1e6 AS min_ms, med.hi / 1e6 AS max_ms,
           mad.mad / 1e6 AS mad_ms, med.p75 / 1e6 AS p75_ms, med.p25 / 1e6 AS p25_ms,
           CASE WHEN med.kind IN ('kernel', 'memcpy', 'memset') THEN 100.0 * med.m / nullif(sum(med.m)
                FILTER (WHERE med.kind IN ('kernel', 'memcpy', 'memset')) OVER (PARTITION BY med.run), 0)
           END AS pct_gpu_time,
           CASE WHEN med.kind IN ('sync', 'idle') THEN 100.0 * med.m / 1e6 / nullif(win.w, 0) END AS pct_window,
           med.bytes_per_step
    FROM med JOIN mad ON mad.run = med.run AND mad.kind = med.kind AND mad.detail IS NOT DISTINCT FROM med.detail
    LEFT JOIN win ON win.run = med.run
)
SELECT r.*, b.ms AS base_ms, r.ms / nullif(b.ms, 0) AS ratio
FROM res r LEFT JOIN res b ON b.run = 0 AND b.kind = r.kind AND b.detail IS NOT DISTINCT FROM r.detail
ORDER BY r.run, CASE r.kind WHEN 'kernel' THEN 0 WHEN 'memcpy' THEN 1 WHEN 'memset' THEN 2
                            WHEN 'sync' THEN 3 ELSE 4 END, r.detail
