-- items: what `cuptiprof diff` checks, per file: the step's GPU window, every kind, every op key; median and noise per step
-- run: file position (0: BASE, 1: NEW)
-- item_type: 'step' | 'kind' | 'op'
-- item: 'gpu window' for the step; 'kernel', 'memcpy HtoD', 'memset', 'sync', 'idle' for kinds; the key for ops
-- key_type: for ops, which key matched ('name' | 'family' | 'op' | 'range' | 'none')
-- ms: median over recorded steps of the time per step
-- mad_ms: median absolute deviation of the time per step
-- p75_ms: upper quartile of the time per step
-- p25_ms: lower quartile of the time per step
-- steps: recorded steps in the file
WITH w AS (
    SELECT run, median(window_ms) AS ms, count(*) AS steps, quantile_cont(window_ms, 0.75) AS p75_ms,
           quantile_cont(window_ms, 0.25) AS p25_ms
    FROM cmp_steps GROUP BY run
), wm AS (
    SELECT s.run, median(abs(s.window_ms - w.ms)) AS mad_ms FROM cmp_steps s JOIN w USING (run) GROUP BY s.run
), n AS (SELECT run, count(*) AS steps FROM cmp_steps GROUP BY run)
SELECT run, 'step' AS item_type, 'gpu window' AS item, NULL AS key_type, ms, mad_ms, p75_ms, p25_ms, steps FROM w JOIN wm USING (run)
UNION ALL
SELECT k.run, 'kind', k.kind || coalesce(' ' || k.detail, ''), NULL, k.ms, k.mad_ms, k.p75_ms, k.p25_ms, n.steps
FROM compare_kinds k JOIN n USING (run)
UNION ALL
SELECT run, 'op', key, key_type, ms, mad_ms, p75_ms, p25_ms, steps FROM compare_ops
