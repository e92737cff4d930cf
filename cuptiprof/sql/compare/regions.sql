-- regions: template, one SELECT per attached file ({db}, position {run}); the union is the temp table cmp_regions
-- run: 0-based position of the file on the command line
-- run_id: run inside that file
-- pid: process
-- range_id: a range GPU work was launched in (its innermost one: a framework op or the program's own)
-- region: the innermost of the program's own ranges (macro own_range) around it, itself included
WITH RECURSIVE up(run_id, pid, leaf_id, anc_id, lvl) AS (
    SELECT DISTINCT run_id, pid, range_id, range_id, 0 FROM {db}.gpu_activities
    WHERE range_id IS NOT NULL
    UNION ALL
    SELECT u.run_id, u.pid, u.leaf_id, r.parent_id, u.lvl + 1
    FROM up u JOIN {db}.ranges r ON r.run_id = u.run_id AND r.pid = u.pid AND r.range_id = u.anc_id
    WHERE r.parent_id IS NOT NULL   -- the innermost one found: stop there
      AND NOT own_range(r.kind, r.domain)
)
SELECT {run} AS run, u.run_id, u.pid, u.leaf_id AS range_id, arg_min(r.name, u.lvl) AS region
FROM up u JOIN {db}.ranges r ON r.run_id = u.run_id AND r.pid = u.pid AND r.range_id = u.anc_id
WHERE own_range(r.kind, r.domain)
GROUP BY ALL
