-- Kernel names that are one op under another string: a kernel recorded mangled in one run (an
-- Nsight Systems export) and readable in another (a Kineto trace) of a merged file is one op,
-- as compare and diff key it by its readable name. Only such names have a row (most files
-- have none), so joining it costs nothing where there are none.
-- string_id: strings.string_id of a kernel name
-- key_id: the string_id its op is counted under (the lowest of the names that read the same)
SELECT string_id, key_id FROM (
    SELECT string_id, min(string_id) OVER (PARTITION BY coalesce(demangled, value)) AS key_id
    FROM strings WHERE string_id IN (SELECT name_id FROM launch_configs))
WHERE key_id <> string_id
