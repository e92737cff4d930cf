-- quality: what the data does not contain (dropped records, unclaimed rows, missing kinds, empty steps, ...)
-- run_id: run inside the file
-- pid: process
-- check_name: what was checked
-- subject: activity kind, step or category concerned
-- count: records concerned
-- value_ms: a duration where that makes sense (e.g. CUPTI's own overhead)
-- detail: one readable sentence
SELECT run_id, pid, check_name, subject, count, value_ns / 1e6 AS value_ms, detail
FROM data_quality
ORDER BY run_id, pid, check_name, subject
