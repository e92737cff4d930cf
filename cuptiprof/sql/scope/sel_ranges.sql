-- Ranges in the report scope: those of the steps in scope (a range's step is the step that
-- encloses it), or every range when the file has no steps (the --steps filter is {where}).
-- Ranges inside a warm-up step carry its index but are not in any step's scope: warm-up
-- calls (a first call compiling, say) would weigh on every per-call number.
SELECT * FROM ranges r WHERE {where}
  AND NOT EXISTS (SELECT 1 FROM ranges w WHERE w.kind = 'warmup' AND w.step = r.step
                  AND w.run_id = r.run_id AND w.pid = r.pid)
