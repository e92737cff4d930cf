-- Kernel launches and summed kernel time per run, process, device, step and kernel name in
-- scope. Aggregated on kernel_rows' integer keys (lane, step, kernel) first; only then are the
-- few rows of `lanes` and `launch_configs` joined (joining every row costs more than the sums).
-- run_id, pid, device_id, step: as in sel_work
-- name_id: strings.string_id of the kernel name (one per readable name: sel_name_keys)
-- n: kernel launches
-- t: summed kernel time, ns
-- ({kernel_where}: the scope's filter as kernel_rows can read it, keyed by lane)
SELECT l.run_id, l.pid, l.device_id, a.step, coalesce(m.key_id, c.name_id) AS name_id, sum(a.n)::BIGINT AS n, sum(a.t) AS t
FROM (SELECT lane_id, step, config_id, count(*) AS n, sum(end_ns - start_ns) AS t
      FROM kernel_rows WHERE {kernel_where} GROUP BY lane_id, step, config_id) a
JOIN lanes l ON l.lane_id = a.lane_id
LEFT JOIN launch_configs c ON c.config_id = a.config_id
LEFT JOIN sel_name_keys m ON m.string_id = c.name_id
GROUP BY l.run_id, l.pid, l.device_id, a.step, coalesce(m.key_id, c.name_id)
