-- step_parts: each step's GPU window split by what the GPU was doing, for the HTML report's steps plot, per run, process, device and step: the parts add up to the window exactly (a copy under a kernel, or two kernels on two streams at once, count once), where report --by step's kernel_ms, memcpy_ms and memset_ms sum durations and add up to more than the window wherever work overlaps
-- run_id: run inside the file
-- pid: process
-- device_id: CUDA device ordinal (NULL: work recorded without it)
-- step: step index (NULL: work of a file without steps)
-- window_ms: first start to last end of the step's GPU work (report --by step's gpu_window_ms)
-- kernel_ms: time at least one kernel ran (the union of the kernel intervals across streams)
-- memcpy_ms: time a copy ran while no kernel did
-- memset_ms: time a memset ran while no kernel or copy did
-- idle_ms: time no GPU work ran (window_ms minus the union of all work: report --by step's idle_ms)
-- One ordered pass per group, the fold of sel_busy.sql kept three times over: for kernels, for
-- kernels and copies, for all work (m*: the latest end so far, b*: the union so far). A subset of
-- intervals sorted by start is still sorted, so each fold is the union of its own subset.
SELECT run_id, pid, device_id, step, (end_ns - start_ns) / 1e6 AS window_ms,
       u.bk / 1e6 AS kernel_ms, (u.bc - u.bk) / 1e6 AS memcpy_ms, (u.b - u.bc) / 1e6 AS memset_ms,
       (end_ns - start_ns - u.b) / 1e6 AS idle_ms
FROM (
    SELECT run_id, pid, device_id, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           list_reduce(list({'s': start_ns, 'e': end_ns, 'k': kind = 'kernel', 'c': kind <> 'memset'}
                            ORDER BY start_ns, end_ns),
                       lambda acc, x: {
                           'mk': CASE WHEN x.k THEN greatest(acc.mk, x.e) ELSE acc.mk END,
                           'bk': acc.bk + CASE WHEN x.k THEN greatest(0, x.e - greatest(x.s, acc.mk)) ELSE 0 END,
                           'mc': CASE WHEN x.c THEN greatest(acc.mc, x.e) ELSE acc.mc END,
                           'bc': acc.bc + CASE WHEN x.c THEN greatest(0, x.e - greatest(x.s, acc.mc)) ELSE 0 END,
                           'm': greatest(acc.m, x.e),
                           'b': acc.b + greatest(0, x.e - greatest(x.s, acc.m))},
                       {'mk': -9223372036854775807::BIGINT, 'bk': 0::BIGINT,
                        'mc': -9223372036854775807::BIGINT, 'bc': 0::BIGINT,
                        'm': -9223372036854775807::BIGINT, 'b': 0::BIGINT}) AS u
    FROM sel_work WHERE end_ns >= start_ns
    GROUP BY run_id, pid, device_id, step
)
ORDER BY run_id, pid, device_id NULLS LAST, step
