-- outliers: op instances at least 3x slower than their op's median (ops with 5+ calls), slowest first
-- name: readable op name
-- kind: 'kernel' | 'memcpy' | 'memset'
-- step: step of the slow instance
-- device_id: CUDA ordinal
-- stream_id: stream it ran on
-- start_ns: when it started
-- dur_us: its duration
-- median_us: the op's median duration in scope
-- x_median: dur_us / median_us
-- calls: instances of the op in scope
WITH a AS (
    SELECT kind, name, step, device_id, stream_id, start_ns, end_ns - start_ns AS d
    FROM sel_activities WHERE kind <> 'sync'
), m AS (
    SELECT kind, name, quantile_cont(d, 0.5) AS med, count(*) AS calls FROM a GROUP BY kind, name
)
SELECT a.name, a.kind, a.step, a.device_id, a.stream_id, a.start_ns, a.d / 1e3 AS dur_us,
       m.med / 1e3 AS median_us, a.d / nullif(m.med, 0) AS x_median, m.calls
FROM a JOIN m USING (kind, name)
WHERE m.calls >= 5 AND a.d >= 3 * m.med AND a.d - m.med >= 1000
ORDER BY x_median DESC, dur_us DESC
