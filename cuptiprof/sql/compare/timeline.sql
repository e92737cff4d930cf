-- timeline: the GPU work of one step, for a per-stream timeline plot; one lane per run, process, device and stream. Parameters: the step, the pixels across the plot, the ops a lane may hold before it is thinned. In a lane with more ops than that, ops less than a pixel apart (a pixel of their process's window in the step) are one box, so a lane never holds many more boxes than the plot has pixels; every lane and the whole window stay.
-- run_id: run inside the file
-- pid: process (device ordinals and streams are per process)
-- device_id: CUDA ordinal
-- stream_id: CUDA stream
-- kind: 'kernel' | 'memcpy' | 'memset' (of the longest op in the box)
-- name: readable op name (of the longest op in the box)
-- start_ns: start on the record clock
-- end_ns: end on the record clock
-- ops: ops drawn as this box (1: the op itself)
-- busy_ns: summed duration of those ops
-- on_cpu: TRUE where the lane is a CPU device (torch.profiler's CPU ops of a run without a GPU, device -1): its ops are CPU ops, not GPU work
WITH p AS (
    SELECT ?::BIGINT AS step, greatest(1, ?::DOUBLE) AS pixels, ?::BIGINT AS lane_cap
), a AS (
    SELECT run_id, pid, device_id, stream_id, kind, name, start_ns, end_ns,
           EXISTS (SELECT 1 FROM devices c WHERE c.run_id = s.run_id AND c.pid = s.pid
                   AND c.device_id = s.device_id AND c.kind = 'cpu') AS on_cpu
    FROM sel_activities s
    WHERE step = (SELECT step FROM p) AND kind <> 'sync'
), w AS (   -- the time one pixel spans in each process's window
    SELECT run_id, pid, (max(end_ns) - min(start_ns)) / (SELECT pixels FROM p) AS px_ns
    FROM a GROUP BY run_id, pid
), o AS (
    SELECT a.*, w.px_ns,
           count(*) OVER (PARTITION BY a.run_id, a.pid, device_id, stream_id) AS lane_ops,
           max(end_ns) OVER (PARTITION BY a.run_id, a.pid, device_id, stream_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM a JOIN w ON a.run_id IS NOT DISTINCT FROM w.run_id AND a.pid IS NOT DISTINCT FROM w.pid
), g AS (
    SELECT *, sum(CASE WHEN lane_ops <= (SELECT lane_cap FROM p) OR prev_end IS NULL
                            OR start_ns - prev_end > px_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id, pid, device_id, stream_id ORDER BY start_ns, end_ns
                        ROWS UNBOUNDED PRECEDING) AS box
    FROM o
)
SELECT run_id, pid, device_id, stream_id, arg_max(kind, end_ns - start_ns) AS kind,
       arg_max(name, end_ns - start_ns) AS name, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
       count(*) AS ops, sum(end_ns - start_ns) AS busy_ns, bool_or(on_cpu) AS on_cpu
FROM g
GROUP BY run_id, pid, device_id, stream_id, box
ORDER BY run_id, pid, device_id, stream_id, start_ns
