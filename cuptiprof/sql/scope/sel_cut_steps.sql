-- Steps the program's exception (a Ctrl-C, an error) ended early (data_quality 'step_incomplete'):
-- their numbers cover only the part of the step that ran.
SELECT DISTINCT run_id, pid, TRY_CAST(subject AS INTEGER) AS step
FROM data_quality WHERE check_name = 'step_incomplete'
