-- kinds_shares_sum_to_100: the kinds report's pct_gpu_time sums to 100 and agrees with the ops total
SELECT sum(k.pct_gpu_time) AS total, (SELECT sum(total_ms) FROM report_ops) AS ops_ms,
       sum(k.total_ms) FILTER (WHERE k.kind <> 'sync') AS kinds_ms
FROM report_kinds k
HAVING count(*) > 0 AND (abs(sum(k.pct_gpu_time) - 100) > 1e-6
    OR abs((SELECT sum(total_ms) FROM report_ops) - sum(k.total_ms) FILTER (WHERE k.kind <> 'sync')) > 1e-6)
