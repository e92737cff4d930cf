-- Kernel launches and summed kernel time per run, process, device, step and kernel name in
-- scope. Aggregated on kernel_rows' integer keys (lane, step, kernel) first; only then are the
-- few rows of `lanes` and `launch_configs` joined (joining every row costs more than the sums).
-- run_id, pid, device_id, step: as in sel_work
-- name_id: strings.string_id of the kernel name (one per readable name)
-- n: kernel launches
-- t: summed kernel time, ns
-- ({kernel_where}: the scope's filter as kernel_rows can read it, keyed by lane)
SELECT l.run_id, l.pid, l.device_id, a.step, coalesce(m.key_id, c.name_id) AS name_id, sum(a.n)::BIGINT AS n, sum(a.t) AS t
FROM (SELECT lane_id, step, config_id, count(*) AS n, sum(end_ns - start_ns) AS t
      FROM kernel_rows WHERE {kernel_where} GROUP BY lane_id, step, config_id) a
JOIN lanes l ON l.lane_id = a.lane_id
LEFT JOIN launch_configs c ON c.config_id = a.config_id
-- a kernel recorded mangled in one run (an Nsight Systems export) and readable in
-- another (a Kineto trace) of a merged file is one op, as compare and diff key it by its
-- readable name: such names (no others: most files have none) map to one name_id
LEFT JOIN (SELECT string_id, key_id FROM (
               SELECT string_id, min(string_id) OVER (PARTITION BY coalesce(demangled, value)) AS key_id
               FROM strings WHERE string_id IN (SELECT name_id FROM launch_configs))
           WHERE key_id <> string_id) m ON m.string_id = c.name_id
GROUP BY l.run_id, l.pid, l.device_id, a.step, coalesce(m.key_id, c.name_id)
