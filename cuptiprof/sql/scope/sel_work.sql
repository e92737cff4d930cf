-- GPU work in scope, cheap to aggregate: kernels keep their integer name_id (names are joined
-- after aggregation, never per row) and take where they ran and
-- their name from the few rows of `lanes` and `launch_configs`;
-- memcpys and memsets carry their readable op name. Syncs (host-side waits) are not GPU work
-- and are left out.
SELECT 'kernel' AS kind, run_id, pid, device_id, stream_id, step, start_ns, end_ns, name_id,
       NULL::VARCHAR AS name, NULL::BIGINT AS bytes
FROM (SELECT l.run_id, l.pid, l.device_id, l.stream_id, k.step, k.start_ns, k.end_ns, coalesce(m.key_id, c.name_id) AS name_id
      FROM kernel_rows k JOIN lanes l ON l.lane_id = k.lane_id
      LEFT JOIN launch_configs c ON c.config_id = k.config_id
      LEFT JOIN sel_name_keys m ON m.string_id = c.name_id) WHERE {where}
UNION ALL
SELECT 'memcpy', run_id, pid, device_id, stream_id, step, start_ns, end_ns, NULL, 'Memcpy ' || copy_kind, bytes
FROM memcpys WHERE {where}
UNION ALL
SELECT 'memset', run_id, pid, device_id, stream_id, step, start_ns, end_ns, NULL, 'Memset', bytes
FROM memsets WHERE {where}
