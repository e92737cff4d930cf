-- step_spread: step-to-step spread of busy time and GPU window per device, over the steps in scope
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA device ordinal
-- steps: complete steps (the statistics below are over these); a step that launched no GPU work in the process counts as a step of 0, as in compare and diff, and so does one that launched none on this device while the process worked on another
-- incomplete: steps left out because the program's exception ended them early (data_quality 'step_incomplete')
-- busy_median_ms: median busy time per step
-- busy_min_ms: fastest step
-- busy_max_ms: slowest step
-- busy_cv_pct: coefficient of variation of busy time (stddev / mean), in percent
-- window_median_ms: median GPU window per step
-- window_spread_pct: (slowest - fastest GPU window) / median window, in percent
WITH marked AS (
    SELECT run_id, pid, device_id, step, busy_ns / 1e6 AS busy_ms, window_ns / 1e6 AS window_ms, cut
    FROM sel_step_busy
)
SELECT run_id, pid, device_id, count(*) FILTER (WHERE NOT cut) AS steps,
       count(*) FILTER (WHERE cut) AS incomplete,
       median(busy_ms) FILTER (WHERE NOT cut) AS busy_median_ms,
       min(busy_ms) FILTER (WHERE NOT cut) AS busy_min_ms,
       max(busy_ms) FILTER (WHERE NOT cut) AS busy_max_ms,
       100.0 * stddev_samp(busy_ms) FILTER (WHERE NOT cut)
             / nullif(avg(busy_ms) FILTER (WHERE NOT cut), 0) AS busy_cv_pct,
       median(window_ms) FILTER (WHERE NOT cut) AS window_median_ms,
       100.0 * (max(window_ms) FILTER (WHERE NOT cut) - min(window_ms) FILTER (WHERE NOT cut))
             / nullif(median(window_ms) FILTER (WHERE NOT cut), 0) AS window_spread_pct
FROM marked
GROUP BY run_id, pid, device_id
ORDER BY run_id, pid, device_id NULLS LAST
