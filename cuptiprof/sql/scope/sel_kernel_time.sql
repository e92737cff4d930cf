-- Kernel launches and summed kernel time per run, process, device, step and kernel name in
-- scope. Aggregated on kernel_rows' integer keys (lane, step, kernel) first; only then are the
-- few rows of `lanes` and `launch_configs` joined (joining every row costs more than the sums).
-- run_id, pid, device_id, step: as in sel_work
-- name_id: strings.string_id of the kernel name (one per readable name)
-- n: kernel launches
-- t: summed kernel time, ns
-- ({kernel_where}: the scope's filter as kernel_rows can read it, keyed by lane)
SELECT l.run_id, l.pid, l.device_id, a.step, c.name_id, sum(a.n)::BIGINT AS n, sum(a.t) AS t
FROM (SELECT lane_id, step, config_id, count(*) AS n, sum(end_ns - start_ns) AS t
      FROM kernel_rows WHERE {kernel_where} GROUP BY lane_id, step, config_id) a
JOIN lanes l ON l.lane_id = a.lane_id
LEFT JOIN (
    -- one name_id per readable name: a kernel recorded mangled in one run (an Nsight Systems
    -- export) and readable in another (a Kineto trace) of a merged file is one op, as compare
    -- and diff key it by its readable name (launch_configs is small: no cost per row)
    SELECT lc.config_id, min(lc.name_id) OVER (PARTITION BY coalesce(s.demangled, s.value)) AS name_id
    FROM launch_configs lc LEFT JOIN strings s ON s.string_id = lc.name_id
) c ON c.config_id = a.config_id
GROUP BY l.run_id, l.pid, l.device_id, a.step, c.name_id
