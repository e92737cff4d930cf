-- busy_within_window: per device and step, busy time is at most the GPU window and at least the longest single piece of work
SELECT b.run_id, b.pid, b.device_id, b.step, b.busy_ns, b.end_ns - b.start_ns AS window_ns, w.longest
FROM sel_busy b
JOIN (SELECT run_id, pid, device_id, step, max(end_ns - start_ns) AS longest FROM sel_work
      GROUP BY ALL) w
  ON w.run_id = b.run_id AND w.pid = b.pid AND w.step IS NOT DISTINCT FROM b.step
 AND w.device_id IS NOT DISTINCT FROM b.device_id
WHERE b.busy_ns > b.end_ns - b.start_ns OR b.busy_ns < w.longest
