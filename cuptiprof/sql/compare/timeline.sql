-- timeline: the GPU work of one step (the step is the query parameter), for a per-stream timeline plot
-- device_id: CUDA ordinal
-- stream_id: CUDA stream
-- kind: 'kernel' | 'memcpy' | 'memset'
-- name: readable op name
-- start_ns: start on the record clock
-- end_ns: end on the record clock
SELECT device_id, stream_id, kind, name, start_ns, end_ns
FROM sel_activities
WHERE step = ? AND kind <> 'sync'
ORDER BY device_id, stream_id, start_ns
LIMIT 5000
