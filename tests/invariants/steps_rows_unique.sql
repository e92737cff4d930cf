-- steps_rows_unique: the steps report has one row per run, process, device and step
SELECT run_id, pid, device_id, step, count(*) AS n FROM report_steps
GROUP BY ALL HAVING count(*) > 1
