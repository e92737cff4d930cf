-- ranges: the program's own ranges (cuptiprof.range, NVTX, torch record_function / Kineto user annotations; not the Python frames of with_stack traces) and the GPU work launched inside them, in scope; work inside nested ranges counts for every enclosing one
-- range: range name (a name nested inside itself counts once)
-- depth: shallowest nesting depth it was seen at, counting only steps and the program's own ranges around it (0 = top level)
-- calls: times it was opened in scope, in every process of every run in the file (0 for a range around the steps in scope, opened outside them)
-- host_ms: summed host duration of those calls (a call inside another of the same name, as a recursive function's, counts once, within the outer one)
-- gpu_calls: kernels, memcpys and memsets launched inside it (nested ranges included)
-- gpu_ms: summed GPU duration of that work (inclusive)
-- self_gpu_ms: the part launched with this range as the innermost one of its kind
-- gpu_us_per_call: gpu_ms per call, in microseconds, over the calls in the processes (of every run in the file) where the range has GPU work in scope, so that calls and GPU time come from the same processes: in a merged file a run recorded without GPU activity (cuptiprof run --light) or a process where it launched nothing does not dilute it, while calls that launched nothing in a process where it did count. 0 for a range without GPU work in scope; NULL when it has some but no call in scope there (a range around the steps, opened outside them)
-- pct_gpu_time: gpu_ms as a share of the summed duration of all GPU work in scope (nested ranges make the column add up to more than 100)
-- top_kernel: the kernel (readable name) with the most GPU time inside it
WITH RECURSIVE leaf AS (               -- GPU work per innermost range open at its launch, and kernel
    SELECT run_id, pid, range_id, kind, name, count(*) AS n, sum(end_ns - start_ns) AS d
    FROM sel_activities WHERE kind <> 'sync' AND range_id IS NOT NULL
    GROUP BY ALL
), around AS (SELECT * FROM sel_range_up),
launched AS (   -- the processes where a range has GPU work in scope: its calls there
    SELECT DISTINCT run_id, pid, name FROM around    -- are those gpu_us_per_call divides by
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY run_id, pid, leaf_id ORDER BY lvl) = 1 AS innermost
    FROM around
), per AS (
    SELECT a.name AS range, l.kind, l.name AS kname, sum(l.n) AS n, sum(l.d) AS d,
           sum(l.d) FILTER (WHERE a.innermost) AS self_d
    FROM ranked a JOIN leaf l ON l.run_id = a.run_id AND l.pid = a.pid AND l.range_id = a.leaf_id
    GROUP BY ALL
), per_kernel AS (
    SELECT range, kname, sum(d) AS d FROM per WHERE kind = 'kernel' GROUP BY ALL
), host AS (SELECT * FROM ranges WHERE own_range(kind, domain)),
walk(run_id, pid, range_id, name, anc, n) AS (   -- each own range up to the top: n = steps and
    SELECT run_id, pid, range_id, name, parent_id, 0 FROM host     -- own ranges passed so far
    UNION ALL
    SELECT w.run_id, w.pid, w.range_id, w.name, r.parent_id,
           w.n + CAST(r.kind IN ('step', 'warmup') OR own_range(r.kind, r.domain) AS INTEGER)
    FROM walk w JOIN ranges r ON r.run_id = w.run_id AND r.pid = w.pid AND r.range_id = w.anc
), depths AS (
    SELECT name AS range, min(n) AS depth FROM (SELECT name, max(n) AS n FROM walk GROUP BY run_id, pid, range_id, name)
    GROUP BY name
), nested AS (   -- calls inside another of the same name: their time is in the outer one's
    SELECT DISTINCT w.run_id, w.pid, w.range_id FROM walk w
    JOIN ranges r ON r.run_id = w.run_id AND r.pid = w.pid AND r.range_id = w.anc
    WHERE r.name = w.name AND own_range(r.kind, r.domain)
), calls AS (
    SELECT r.name AS range, count(*) AS calls,
           coalesce(sum(r.end_ns - r.start_ns) FILTER (WHERE n.range_id IS NULL), 0) AS host_d,
           count(l.name) AS work_calls
    FROM sel_ranges r
    LEFT JOIN launched l ON l.run_id = r.run_id AND l.pid = r.pid AND l.name = r.name
    LEFT JOIN nested n ON n.run_id = r.run_id AND n.pid = r.pid AND n.range_id = r.range_id
    WHERE own_range(r.kind, r.domain)
    GROUP BY r.name
), tot AS (SELECT sum(end_ns - start_ns) AS t FROM sel_activities WHERE kind <> 'sync'),
work AS (
    SELECT range, sum(n) AS n, sum(d) AS d, coalesce(sum(self_d), 0) AS self_d FROM per GROUP BY range
)
SELECT range, d.depth,
       coalesce(c.calls, 0) AS calls, coalesce(c.host_d, 0) / 1e6 AS host_ms,
       coalesce(w.n, 0)::BIGINT AS gpu_calls, coalesce(w.d, 0) / 1e6 AS gpu_ms,
       coalesce(w.self_d, 0) / 1e6 AS self_gpu_ms,
       coalesce(w.d, 0) / 1e3
           / nullif(CASE WHEN w.n IS NULL THEN c.calls ELSE c.work_calls END, 0) AS gpu_us_per_call,
       100.0 * coalesce(w.d, 0) / nullif((SELECT t FROM tot), 0) AS pct_gpu_time,
       t.top_kernel
FROM calls c FULL OUTER JOIN work w USING (range)
-- equal times: the first name, not whichever row came first (a round trip reorders rows)
LEFT JOIN (SELECT range, arg_min(kname, (-d, kname)) AS top_kernel FROM per_kernel GROUP BY range) t USING (range)
LEFT JOIN depths d USING (range)
ORDER BY gpu_ms DESC, host_ms DESC, range
