-- Kernel intervals in scope, nothing else: the cheapest scan of the kernel rows (no names, no
-- launch configuration). lane_id keys the lane (run, process, device, stream) the kernel ran on.
SELECT k.lane_id, l.run_id, l.pid, l.device_id, k.start_ns, k.end_ns
FROM kernel_rows k JOIN lanes l ON l.lane_id = k.lane_id WHERE {where}
