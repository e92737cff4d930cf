-- quality: what the data does not contain (dropped records, unclaimed rows, missing kinds, empty steps, ...) and the program's ranges that ran outside every recorded step
-- run_id: run inside the file
-- pid: process
-- check_name: what was checked: a data_quality check_name (`cuptiprof schema` lists them), or one computed here and not stored: 'outside_steps', 'step_repeated' (a thread recorded one step number more than once: those steps are pooled under it), and 'process_ended_early' for a process whose writer died
-- subject: activity kind, step, category or range name concerned (step_repeated: the first repeated step number)
-- count: records concerned (step_repeated: the step ranges beyond the first of each repeated number)
-- value_ms: a duration where that makes sense (e.g. CUPTI's own overhead; the host time of ranges outside steps)
-- detail: one readable sentence
WITH outside AS (   -- own ranges of a process with steps, in none and around none (after the loop, say)
    SELECT r.run_id, r.pid, r.name, count(*) AS n, sum(r.end_ns - r.start_ns) AS d
    FROM ranges r
    WHERE own_range(r.kind, r.domain) AND r.step IS NULL
      AND EXISTS (SELECT 1 FROM ranges s WHERE s.kind = 'step' AND s.run_id = r.run_id
                  AND s.pid = r.pid)
      AND NOT EXISTS (SELECT 1 FROM ranges s WHERE s.kind IN ('step', 'warmup')
                      AND s.run_id = r.run_id AND s.pid = r.pid
                      AND s.start_ns >= r.start_ns AND s.start_ns < coalesce(r.end_ns, s.start_ns + 1))
    GROUP BY ALL
), repeated AS (   -- step numbers a thread recorded more than once (a loop that numbers from 0 again)
    SELECT run_id, pid, step, count(*) - 1 AS extra
    FROM ranges
    WHERE kind = 'step' AND step IS NOT NULL
    GROUP BY run_id, pid, thread_id, step
    HAVING count(*) > 1
)
SELECT run_id, pid, check_name, subject, count, value_ns / 1e6 AS value_ms, detail
FROM data_quality
UNION ALL
SELECT run_id, pid, 'outside_steps', name, n, d / 1e6,
       n || CASE WHEN n = 1 THEN ' call' ELSE ' calls' END || ' of range ''' || name || ''' ran outside every recorded step: out of the ' ||
       'reports'' scope (in the file: ranges WHERE step IS NULL)'
FROM outside
UNION ALL
SELECT run_id, pid, 'step_repeated', CAST(min(step) AS VARCHAR), CAST(sum(extra) AS BIGINT), NULL,
       count(DISTINCT step) || CASE WHEN count(DISTINCT step) = 1 THEN ' step number' ELSE ' step numbers' END ||
       ' (first ' || min(step) || ') recorded more than once on one thread: each number''s steps are pooled ' ||
       'in every report; number steps across the run (e.g. step=epoch * steps_per_epoch + i)'
FROM repeated
GROUP BY run_id, pid
UNION ALL   -- a writer killed mid-run (profile() in a killed program) could not say so itself
SELECT run_id, pid, 'process_ended_early', CAST(pid AS VARCHAR), NULL, NULL,
       'process ' || pid || ' had not closed its collector when the file was last written ' ||
       '(killed, crashed or os._exit, or still running): records it had not flushed are missing'
FROM processes p
WHERE ended_early AND NOT EXISTS (SELECT 1 FROM data_quality d WHERE d.run_id = p.run_id
                                  AND d.pid = p.pid AND d.check_name = 'process_ended_early')
-- one check of one subject recorded twice (two writers, a merge): by its detail, whatever the row order
ORDER BY run_id, pid, check_name, subject, detail, count, value_ms
