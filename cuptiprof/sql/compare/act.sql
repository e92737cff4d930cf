-- act: template, one SELECT per attached file ({db}); the union is the temp table cmp_act
-- run: 0-based position of the file on the command line (0 is the baseline)
-- kind: 'kernel' | 'memcpy' | 'memset' | 'sync'
-- run_id: run inside that file
-- pid: process
-- device_id: CUDA ordinal
-- stream_id: CUDA stream
-- start_ns: start on the file's clock
-- end_ns: end on the file's clock
-- step: recorded step (0 for every row when the file has no steps)
-- name: readable op name ('Memcpy HtoD', 'Memset', demangled kernel name)
-- bytes: bytes moved or set (copies and memsets)
-- family: normalised kernel family (cuptiprof.analyse.families)
-- range_key: name of the enclosing framework op, else of the innermost range (past Python frames of with_stack traces: the region), else '(step, no inner range)' inside a step, else '(no range)'
-- range_key_type: 'op' | 'range' | 'none' (which of the above range_key is)
-- region: the innermost of the program's own ranges around the launch, framework ops passed over (cmp_regions), else '(no range)'
-- region_type: 'range' | 'none'
SELECT {run} AS run, a.kind, a.run_id, a.pid, a.device_id, a.stream_id, a.start_ns, a.end_ns,
       {step} AS step, a.name, a.bytes,
       coalesce(f.family, a.name) AS family,
       CASE WHEN o.name IS NOT NULL THEN o.name
            WHEN r.domain = 'python_function' THEN coalesce(g.region, '(no range)')
            WHEN r.kind IN ('step', 'warmup') THEN '(step, no inner range)'
            WHEN r.name IS NOT NULL THEN r.name
            ELSE '(no range)' END AS range_key,
       CASE WHEN o.name IS NOT NULL THEN 'op'
            WHEN r.domain = 'python_function' THEN CASE WHEN g.region IS NULL THEN 'none' ELSE 'range' END
            WHEN r.kind IN ('step', 'warmup') THEN 'none'   -- '(step, no inner range)' is no range
            WHEN r.name IS NOT NULL THEN 'range' ELSE 'none' END AS range_key_type,
       coalesce(g.region, '(no range)') AS region,
       CASE WHEN g.region IS NOT NULL THEN 'range' ELSE 'none' END AS region_type
FROM {db}.gpu_activities a
LEFT JOIN cmp_regions g ON g.run = {run} AND g.run_id = a.run_id AND g.pid = a.pid
                       AND g.range_id = a.range_id
LEFT JOIN cmp_families f ON f.name = a.name
LEFT JOIN {db}.ranges o ON a.op_id IS NOT NULL AND o.run_id = a.run_id AND o.pid = a.pid
                       AND o.range_id = a.op_id AND o.kind = 'op'
LEFT JOIN {db}.ranges r ON a.range_id IS NOT NULL AND r.run_id = a.run_id AND r.pid = a.pid
                       AND r.range_id = a.range_id
WHERE {where}
