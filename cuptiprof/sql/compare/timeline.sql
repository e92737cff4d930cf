-- timeline: the GPU work of one step, for a per-stream timeline plot; one lane per run, process, device and stream. Parameters: the step, the pixels across the plot, the ops a lane may hold before it is thinned, the ops the whole step may hold before every lane is. In a lane with more ops than that, ops less than a pixel apart (a pixel of their process's window in the step) are one box, so a lane never holds many more boxes than the plot has pixels; in a step with more ops than its cap (many processes or streams), every lane is thinned, and ops less than lanes x pixels / cap pixels apart are one box, so that the step holds about as many boxes as its cap (each gap left between boxes is wider than that); every lane and the whole window stay.
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
-- merge_px: pixels closer than which ops were drawn as one box in this row's lane (0: every op drawn)
-- on_cpu: TRUE where the lane is a CPU device (torch.profiler's CPU ops of a run without a GPU, device -1): its ops are CPU ops, not GPU work
WITH p AS (
    SELECT ?::BIGINT AS step, greatest(1, ?::DOUBLE) AS pixels, ?::BIGINT AS lane_cap,
           greatest(1, ?::BIGINT) AS step_cap
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
           count(*) OVER () AS step_ops,
           max(end_ns) OVER (PARTITION BY a.run_id, a.pid, device_id, stream_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM a JOIN w ON a.run_id IS NOT DISTINCT FROM w.run_id AND a.pid IS NOT DISTINCT FROM w.pid
), m AS (   -- pixels within which ops are one box (0: each op its own box)
    SELECT o.*, CASE WHEN step_ops > (SELECT step_cap FROM p)
                     THEN greatest(1.0, (SELECT count(DISTINCT (run_id, pid, device_id, stream_id)) FROM a)
                                        * (SELECT pixels FROM p) / (SELECT step_cap FROM p))
                     WHEN lane_ops > (SELECT lane_cap FROM p) THEN 1.0 ELSE 0.0 END AS merge_px
    FROM o
), g AS (
    SELECT *, sum(CASE WHEN merge_px = 0 OR prev_end IS NULL
                            OR start_ns - prev_end > px_ns * merge_px THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id, pid, device_id, stream_id ORDER BY start_ns, end_ns
                        ROWS UNBOUNDED PRECEDING) AS box
    FROM m
)
-- kind and name of one op, the longest (equal lengths: the first by name, kind), whatever the row order
SELECT run_id, pid, device_id, stream_id, arg_min(kind, (start_ns - end_ns, name, kind)) AS kind,
       arg_min(name, (start_ns - end_ns, name, kind)) AS name, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
       count(*) AS ops, sum(end_ns - start_ns) AS busy_ns, any_value(merge_px) AS merge_px,
       bool_or(on_cpu) AS on_cpu
FROM g
GROUP BY run_id, pid, device_id, stream_id, box
-- boxes of one start (ops of equal times drawn one each): by end, then name, whatever the row order
ORDER BY run_id, pid, device_id, stream_id, start_ns, end_ns, name, kind
