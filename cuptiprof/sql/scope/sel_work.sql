-- GPU work in scope, cheap to aggregate: kernels keep their integer name_id (names are joined
-- after aggregation, never per row); memcpys and memsets carry their readable op name. Syncs
-- (host-side waits) are not GPU work and are left out.
SELECT 'kernel' AS kind, run_id, pid, device_id, stream_id, step, start_ns, end_ns, name_id,
       NULL::VARCHAR AS name, NULL::BIGINT AS bytes
FROM kernel_rows WHERE {where}
UNION ALL
SELECT 'memcpy', run_id, pid, device_id, stream_id, step, start_ns, end_ns, NULL, 'Memcpy ' || copy_kind, bytes
FROM memcpys WHERE {where}
UNION ALL
SELECT 'memset', run_id, pid, device_id, stream_id, step, start_ns, end_ns, NULL, 'Memset', bytes
FROM memsets WHERE {where}
