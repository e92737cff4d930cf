-- GPU busy time per run, process, device and step: the union of the work intervals of
-- sel_work across streams (overlapping work counts once). One ordered pass per group: each
-- interval adds the part of it that ends after everything that started before it (`m` is the
-- latest end so far, `b` the busy time so far). A list fold measured 2-3x faster than the
-- equivalent window query in DuckDB.
SELECT run_id, pid, device_id, step, busy.b AS busy_ns, start_ns, end_ns
FROM (
    SELECT run_id, pid, device_id, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           list_reduce(list({'s': start_ns, 'e': end_ns} ORDER BY start_ns, end_ns),
                       lambda acc, x: {'m': greatest(acc.m, x.e),
                                       'b': acc.b + greatest(0, x.e - greatest(x.s, acc.m))},
                       {'m': -9223372036854775807::BIGINT, 'b': 0::BIGINT}) AS busy
    FROM sel_work WHERE end_ns >= start_ns
    GROUP BY run_id, pid, device_id, step
)
