-- no_negative_durations: no activity, API call or closed range ends before it starts
SELECT 'gpu_activities' AS source, kind, start_ns, end_ns FROM gpu_activities WHERE end_ns < start_ns
UNION ALL
SELECT 'api_calls', name, start_ns, end_ns FROM api_calls WHERE end_ns < start_ns
UNION ALL
SELECT 'ranges', name, start_ns, end_ns FROM ranges WHERE end_ns < start_ns
