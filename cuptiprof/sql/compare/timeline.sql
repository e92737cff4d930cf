-- timeline: the GPU work of one step (the step is the query parameter), for a per-stream timeline plot; one lane per run, process, device and stream
-- run_id: run inside the file
-- pid: process (device ordinals and streams are per process)
-- device_id: CUDA ordinal
-- stream_id: CUDA stream
-- kind: 'kernel' | 'memcpy' | 'memset'
-- name: readable op name
-- start_ns: start on the record clock
-- end_ns: end on the record clock
SELECT run_id, pid, device_id, stream_id, kind, name, start_ns, end_ns
FROM sel_activities
WHERE step = ? AND kind <> 'sync'
ORDER BY run_id, pid, device_id, stream_id, start_ns
LIMIT 5000
