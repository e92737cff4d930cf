-- Ranges in the report scope: those of the steps in scope (a range's step is the step that
-- encloses it), or every range when the file has no steps (the --steps filter is {where}).
SELECT * FROM ranges WHERE {where}
