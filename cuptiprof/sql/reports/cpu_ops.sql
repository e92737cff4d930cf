-- cpu_ops: framework ops (torch aten::*, imported CPU ops) and the GPU work they launched in scope; each GPU row counts for the innermost op open when it was launched
-- op: framework op name (ranges with kind 'op'), e.g. aten::mm
-- op_calls: times the op ran on the host in scope, counted in the processes (of every run in the file) where it launched GPU work in scope, so that calls and GPU time come from the same processes; there calls that launched nothing count too, while a process or run where it launched none (a data-loader worker, a run recorded without GPU kinds) is left out. An op called straight from an op of the same name is the same call, as torch's profiler views count it
-- host_ms: summed host duration of those calls (inclusive of child ops)
-- gpu_calls: kernels, memcpys and memsets it launched
-- gpu_ms: summed GPU duration of that work
-- gpu_us_per_call: gpu_ms per op call, in microseconds
-- kernels: distinct kernel names it launched
-- top_kernel: the kernel (readable name) with the most GPU time under this op
-- pct_gpu_time: share of the summed duration of all GPU work in scope (ops with no launches are not listed)
WITH ops AS (
    SELECT r.run_id, r.pid, r.range_id, r.name, r.end_ns - r.start_ns AS d
    FROM sel_ranges r
    WHERE r.kind = 'op'
), work AS (
    SELECT a.run_id, a.pid, a.op_id, a.kind, a.name, a.end_ns - a.start_ns AS d
    FROM sel_activities a WHERE a.kind <> 'sync' AND a.op_id IS NOT NULL
), launches AS (
    SELECT o.run_id, o.pid, o.name AS op, w.name AS kname, w.kind, w.d
    FROM work w JOIN ops o ON o.run_id = w.run_id AND o.pid = w.pid AND o.range_id = w.op_id
), per_op AS (
    SELECT op, kname, kind, count(*) AS n, sum(d) AS d FROM launches GROUP BY ALL
), launched AS (   -- the processes whose calls of an op count: those where it launched GPU work
    SELECT DISTINCT run_id, pid, op FROM launches
), tot AS (SELECT sum(end_ns - start_ns) AS t FROM sel_activities WHERE kind <> 'sync'),
calls AS (
    SELECT o.name AS op, count(*) AS op_calls, sum(o.d) AS host_d
    FROM ops o JOIN launched l ON l.run_id = o.run_id AND l.pid = o.pid AND l.op = o.name
    JOIN sel_ranges r ON r.run_id = o.run_id AND r.pid = o.pid AND r.range_id = o.range_id
    LEFT JOIN ranges up ON up.run_id = r.run_id AND up.pid = r.pid AND up.range_id = r.parent_id
    WHERE up.kind IS DISTINCT FROM 'op' OR up.name IS DISTINCT FROM o.name
    GROUP BY o.name
)
SELECT p.op, c.op_calls, c.host_d / 1e6 AS host_ms,
       sum(p.n)::BIGINT AS gpu_calls, sum(p.d) / 1e6 AS gpu_ms,
       sum(p.d) / 1e3 / c.op_calls AS gpu_us_per_call,
       count(DISTINCT p.kname) FILTER (WHERE p.kind = 'kernel') AS kernels,
       -- equal times: the first name, not whichever row came first
       arg_min(p.kname, (-p.d, p.kname)) FILTER (WHERE p.kind = 'kernel') AS top_kernel,
       100.0 * sum(p.d) / nullif((SELECT t FROM tot), 0) AS pct_gpu_time
FROM per_op p JOIN calls c USING (op)
GROUP BY p.op, c.op_calls, c.host_d
ORDER BY gpu_ms DESC, p.op
