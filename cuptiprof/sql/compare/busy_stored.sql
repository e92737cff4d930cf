-- busy_stored: template, one SELECT per attached file ({db}) whose step_busy is complete for every run: the busy time the writer stored, for the rows cmp_act holds ({step} and {where} as in act.sql); the same numbers busy.sql folds from the rows, without reading them
-- run: file position
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA ordinal
-- step: step (0 for every row when the file has no steps)
-- busy_ns: union of the work intervals across streams
SELECT {run} AS run, a.run_id, a.pid, a.device_id, {step} AS step, a.busy_ns
FROM {db}.step_busy a
WHERE {where}
