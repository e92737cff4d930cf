-- Busy time and GPU window of every recorded step in scope, per process and device, the steps
-- that launched no GPU work included: a complete step of a process that records GPU work but
-- launched none in that step is a step of 0 (busy_ns and window_ns 0) on each device the
-- process worked on in scope (device NULL when it worked on none), as compare and diff count
-- it; so is a step that launched work on some of those devices, on each of the others (known).
-- A process without any GPU work (a --light run) has no rows. cut: the program's exception
-- ended the step early (sel_cut_steps); per-step statistics leave such steps out.
WITH work AS (
    SELECT run_id, pid, device_id, step, busy_ns, end_ns - start_ns AS window_ns
    FROM sel_busy WHERE step IS NOT NULL
), gpu_procs AS (
    SELECT run_id, pid FROM lanes
    UNION SELECT run_id, pid FROM memcpys
    UNION SELECT run_id, pid FROM memsets
), empty AS (
    SELECT DISTINCT s.run_id, s.pid, s.step FROM sel_steps s
    WHERE (s.run_id, s.pid) IN (SELECT run_id, pid FROM gpu_procs)
      AND NOT EXISTS (SELECT 1 FROM work w WHERE w.run_id = s.run_id AND w.pid = s.pid
                      AND w.step = s.step)
), devs AS (
    SELECT DISTINCT run_id, pid, device_id FROM work
), gaps AS (   -- a step with GPU work on some devices of the process: 0 on its other ones
    SELECT s.run_id, s.pid, d.device_id, s.step
    FROM (SELECT DISTINCT run_id, pid, step FROM work) s
    JOIN devs d ON d.run_id = s.run_id AND d.pid = s.pid AND d.device_id IS NOT NULL
    WHERE NOT EXISTS (SELECT 1 FROM work w WHERE w.run_id = s.run_id AND w.pid = s.pid
                      AND w.step = s.step AND w.device_id = d.device_id)
), steps AS (
    SELECT * FROM work
    UNION ALL
    SELECT e.run_id, e.pid, d.device_id, e.step, 0::BIGINT, 0::BIGINT
    FROM empty e LEFT JOIN devs d ON d.run_id = e.run_id AND d.pid = e.pid
    UNION ALL
    SELECT run_id, pid, device_id, step, 0::BIGINT, 0::BIGINT FROM gaps
)
SELECT s.*, EXISTS (SELECT 1 FROM sel_cut_steps c WHERE c.run_id = s.run_id AND c.pid = s.pid
                    AND c.step = s.step) AS cut
FROM steps s
