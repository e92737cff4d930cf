-- outside: template per attached file ({db}; {skip}: a condition leaving out its processes without steps, noted apart): the GPU work (kernels, copies, memsets) that no step claims, warm-up work left out: work launched inside a range that began in a warm-up range, or, launched in no range, by a call that began while a warm-up range of its process was open (on any thread: as the importer and the run without a GPU put such work into the recorded step open at its launch)
-- activities: kernels, copies and memsets outside every step
-- ns: their summed duration
WITH u AS (
    SELECT a.run_id, a.pid, a.range_id, a.correlation_id, a.end_ns - a.start_ns AS d
    FROM {db}.gpu_activities a WHERE a.step IS NULL AND a.kind <> 'sync' AND {skip}
), w AS (SELECT run_id, pid, start_ns, end_ns FROM {db}.ranges WHERE kind = 'warmup'),
o AS (
    SELECT * FROM u WHERE NOT EXISTS (
        SELECT 1 FROM {db}.ranges r JOIN w ON w.run_id = r.run_id AND w.pid = r.pid
        WHERE r.run_id = u.run_id AND r.pid = u.pid AND r.range_id = u.range_id
          AND r.start_ns >= w.start_ns AND r.start_ns <= coalesce(w.end_ns, r.start_ns))
    AND (u.range_id IS NOT NULL OR NOT EXISTS (
        SELECT 1 FROM {db}.api_call_rows c JOIN w ON w.run_id = c.run_id AND w.pid = c.pid
        WHERE c.run_id = u.run_id AND c.pid = u.pid AND c.correlation_id = u.correlation_id
          AND c.start_ns >= w.start_ns AND c.start_ns <= coalesce(w.end_ns, c.start_ns)))
)
SELECT count(*) AS activities, coalesce(sum(d), 0) AS ns FROM o
