-- ops: per file and key (op name, family or enclosing range): time per step over the recorded steps, spread, share, rank and change against the first file
-- run: file position (0 is the baseline)
-- key: what the row compares: an op name, a kernel family, an enclosing op / range or the program's own innermost range (see key_type)
-- key_type: 'name' | 'family' | 'op' | 'range' | 'none'
-- kind: 'kernel' | 'memcpy' | 'memset', or 'mixed' when a range key covers several kinds
-- calls_per_step: median number of calls per step
-- ms: median over the file's recorded steps of the key's summed time in the step (a step without the key counts 0)
-- min_ms: fastest step
-- max_ms: slowest step
-- mad_ms: median absolute deviation of the per-step time (the step-to-step noise)
-- p75_ms: upper quartile of the per-step time (a quarter of the steps took longer)
-- p25_ms: lower quartile of the per-step time (a quarter of the steps took less)
-- steps: recorded steps of the file
-- pct_step: ms as a share of the median step's summed GPU work (kernels + copies + memsets)
-- rank: 1 = the key with the most time per step in this file
-- base_ms: ms of the same key in the first file (NULL when it has none)
-- ratio: ms / base_ms (2.0 = twice as slow as the first file)
-- base_rank: rank of the same key in the first file
-- rank_change: base_rank - rank (positive: the key moved up, i.e. takes a larger share of time)
-- runs_with_key: how many of the compared files have this key
-- only_in: the file position when only one file has the key, else NULL
WITH stepset AS (SELECT run, step FROM cmp_stepset),   -- empty steps too: they count 0
per AS (
    SELECT run, key, step, sum(end_ns - start_ns) AS ns, count(*) AS calls
    FROM cmp_keyed GROUP BY run, key, step
), keys AS (
    SELECT run, key, any_value(key_type) AS key_type,
           CASE WHEN count(DISTINCT kind) = 1 THEN any_value(kind) ELSE 'mixed' END AS kind
    FROM cmp_keyed GROUP BY run, key
), filled AS (
    SELECT k.run, k.key, s.step, coalesce(p.ns, 0) AS ns, coalesce(p.calls, 0) AS calls
    FROM keys k JOIN stepset s USING (run) LEFT JOIN per p USING (run, key, step)
), med AS (
    SELECT run, key, median(ns) AS m, median(calls) AS calls_per_step, min(ns) AS lo, max(ns) AS hi,
           quantile_cont(ns, 0.75) AS p75, quantile_cont(ns, 0.25) AS p25,
           count(*) AS steps
    FROM filled GROUP BY run, key
), mad AS (
    SELECT f.run, f.key, median(abs(f.ns - med.m)) AS mad
    FROM filled f JOIN med USING (run, key) GROUP BY f.run, f.key
), steptot AS (
    SELECT run, median(gpu_ms) AS step_gpu_ms FROM cmp_steps GROUP BY run
), ranked AS (
    SELECT k.run, k.key, k.key_type, k.kind, med.calls_per_step, med.m / 1e6 AS ms,
           med.lo / 1e6 AS min_ms, med.hi / 1e6 AS max_ms, mad.mad / 1e6 AS mad_ms, med.p75 / 1e6 AS p75_ms,
           med.p25 / 1e6 AS p25_ms, med.steps,
           100.0 * med.m / 1e6 / nullif(st.step_gpu_ms, 0) AS pct_step,
           row_number() OVER (PARTITION BY k.run ORDER BY med.m DESC, k.key) AS rank
    FROM keys k JOIN med USING (run, key) JOIN mad USING (run, key) LEFT JOIN steptot st USING (run)
), presence AS (
    SELECT key, count(DISTINCT run) AS runs_with_key, min(run) AS first_run FROM keys GROUP BY key
)
SELECT r.run, r.key, r.key_type, r.kind, r.calls_per_step, r.ms, r.min_ms, r.max_ms, r.mad_ms, r.p75_ms, r.p25_ms, r.steps,
       r.pct_step, r.rank, b.ms AS base_ms, r.ms / nullif(b.ms, 0) AS ratio, b.rank AS base_rank,
       b.rank - r.rank AS rank_change, p.runs_with_key,
       CASE WHEN p.runs_with_key = 1 THEN p.first_run END AS only_in
FROM ranked r
LEFT JOIN ranked b ON b.run = 0 AND b.key = r.key
JOIN presence p ON p.key = r.key
ORDER BY r.run, r.rank
