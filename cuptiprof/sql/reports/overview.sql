-- overview: one row per run: what was recorded, from where, and how much
-- run_id: run inside the file
-- label: run label
-- source: 'cupti' | 'cpu' | 'light' | 'kineto' | 'nsys' | 'synthetic'
-- status: 'complete', 'interrupted', 'failed', or 'running' (the writer died)
-- devices: device names seen
-- processes: processes recorded
-- steps: distinct steps with GPU work or a step range
-- kernels: kernel rows in the whole file, whatever the scope (rows of no step included; the kinds and steps reports count those in scope)
-- memcpys: memcpy rows in the whole file, whatever the scope
-- gpu_ms: summed GPU work in scope
-- busy_ms: union of GPU work intervals in scope (per device and step, summed)
-- command: what was profiled
SELECT r.run_id, r.label, r.source, r.status,
       (SELECT string_agg(DISTINCT d.name, ', ') FROM devices d WHERE d.run_id = r.run_id) AS devices,
       (SELECT count(*) FROM processes p WHERE p.run_id = r.run_id) AS processes,
       (SELECT count(DISTINCT step) FROM (SELECT step FROM sel_busy a WHERE a.run_id = r.run_id
                                          UNION ALL SELECT step FROM sel_steps s WHERE s.run_id = r.run_id)) AS steps,
       (SELECT count(*) FROM kernel_rows k JOIN lanes l ON l.lane_id = k.lane_id WHERE l.run_id = r.run_id) AS kernels,
       (SELECT count(*) FROM memcpys m WHERE m.run_id = r.run_id) AS memcpys,
       (SELECT sum(end_ns - start_ns) / 1e6 FROM sel_work a WHERE a.run_id = r.run_id) AS gpu_ms,
       (SELECT sum(busy_ns) / 1e6 FROM sel_busy b WHERE b.run_id = r.run_id) AS busy_ms,
       r.command
FROM runs r ORDER BY r.run_id
