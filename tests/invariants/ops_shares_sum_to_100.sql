-- ops_shares_sum_to_100: the ops report's pct_gpu_time column sums to 100 (when there is GPU work)
SELECT sum(pct_gpu_time) AS total FROM report_ops
HAVING count(*) > 0 AND abs(sum(pct_gpu_time) - 100) > 1e-6
