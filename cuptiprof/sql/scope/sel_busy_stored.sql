-- GPU busy time per run, process, device and step as stored at write time (step_busy): the same
-- rows sel_busy.sql computes from every work interval, used when every run of the file has them.
SELECT run_id, pid, device_id, step, busy_ns, start_ns, end_ns
FROM step_busy WHERE {where}
