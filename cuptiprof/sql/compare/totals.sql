-- totals: template, one row per attached file ({db}), in one pass over its GPU activities: how many there are, how many a step claims, and the work (kernels, copies, memsets) the steps claim, against which the work outside every step is weighed (outside.sql)
-- activities: every GPU activity, syncs included
-- stepped: activities a step claims
-- in_steps: kernels, copies and memsets a step claims
-- in_steps_ns: their summed duration
SELECT count(*) AS activities, count(step) AS stepped,
       count(*) FILTER (WHERE step IS NOT NULL AND kind <> 'sync') AS in_steps,
       coalesce(sum(end_ns - start_ns) FILTER (WHERE step IS NOT NULL AND kind <> 'sync'), 0) AS in_steps_ns
FROM {db}.gpu_activities
