-- The program's own host ranges around GPU work in scope: for each range work was launched in
-- (leaf_id: its innermost range, a framework op or the program's own), every range of kind
-- of the program's own (macro own_range) enclosing it, itself included, at lvl levels up
-- (0 = the leaf).
WITH RECURSIVE up(run_id, pid, leaf_id, anc_id, lvl) AS (
    SELECT DISTINCT run_id, pid, range_id, range_id, 0 FROM sel_activities
    WHERE kind <> 'sync' AND range_id IS NOT NULL
    UNION ALL
    SELECT u.run_id, u.pid, u.leaf_id, r.parent_id, u.lvl + 1
    FROM up u JOIN ranges r ON r.run_id = u.run_id AND r.pid = u.pid AND r.range_id = u.anc_id
    WHERE r.parent_id IS NOT NULL
)
SELECT u.run_id, u.pid, u.leaf_id, r.name, min(u.lvl) AS lvl
FROM up u JOIN ranges r ON r.run_id = u.run_id AND r.pid = u.pid AND r.range_id = u.anc_id
WHERE own_range(r.kind, r.domain)
GROUP BY ALL
