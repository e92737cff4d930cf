-- outliers: op instances at least 3x (and 1 us) slower than their op's median (ops with 5+ calls), the most times their median first
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
    SELECT kind, name_id, name, step, device_id, stream_id, start_ns, end_ns - start_ns AS d FROM sel_work
), m AS (
    SELECT kind, name_id, name, median(d) AS med, count(*) AS calls FROM a GROUP BY kind, name_id, name
    HAVING count(*) >= 5
)
SELECT coalesce(a.name, s.demangled, s.value) AS name, a.kind, a.step, a.device_id, a.stream_id,
       a.start_ns, a.d / 1e3 AS dur_us, m.med / 1e3 AS median_us, a.d / nullif(m.med, 0) AS x_median, m.calls
FROM a JOIN m ON m.kind = a.kind AND m.name_id IS NOT DISTINCT FROM a.name_id
              AND m.name IS NOT DISTINCT FROM a.name
LEFT JOIN strings s ON s.string_id = a.name_id
WHERE a.d >= 3 * m.med AND a.d - m.med >= 1000
-- instances of equal times: by where they ran, then by name, not in whichever order DuckDB met them
ORDER BY x_median DESC, dur_us DESC, a.start_ns, a.device_id, a.stream_id, name, a.kind, a.step
