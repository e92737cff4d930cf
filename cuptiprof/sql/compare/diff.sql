-- diff: BASE (file 0) against NEW (file 1) per item, with the noise band and a verdict ($pct, $sigmas, $min_ms are the options)
-- item_type: 'step' | 'kind' | 'op'
-- item: 'gpu window', a kind ('memcpy HtoD', 'idle', ...) or an op key
-- key_type: for ops, which key matched
-- base_ms: BASE median time per step
-- new_ms: NEW median time per step
-- delta_ms: new_ms - base_ms
-- delta_pct: 100 * delta_ms / base_ms
-- noise_ms: $sigmas * 1.4826 * sqrt(base_mad_ms^2 + new_mad_ms^2): the step-to-step noise of both files, in robust standard deviations
-- allowed_ms: base_ms * $pct / 100 + noise_ms: how much slower NEW may be
-- status: 'regression' (delta_ms > allowed_ms and delta_ms >= $min_ms and, unless $sigmas is 0, new_ms above BASE's upper quartile of the time per step; for the step and kinds also from a BASE of 0, where an op is 'new'), 'slower' (within the allowance), 'faster' (the mirror of a regression: -delta_ms > allowed_ms and -delta_ms >= $min_ms and, unless $sigmas is 0, new_ms below BASE's lower quartile), 'same', 'new' (only in NEW), 'gone' (only in BASE), 'duplicate' (a regression of a kind whose time is exactly one op key's in both files, e.g. kind 'memcpy HtoD' and op 'Memcpy HtoD': listed and counted once, as that op)
WITH b AS (SELECT * FROM cmp_items WHERE run = 0), n AS (SELECT * FROM cmp_items WHERE run = 1),
j AS (
    SELECT coalesce(b.item_type, n.item_type) AS item_type, coalesce(b.item, n.item) AS item,
           coalesce(b.key_type, n.key_type) AS key_type,
           b.ms AS base_ms, n.ms AS new_ms, b.mad_ms AS base_mad_ms, n.mad_ms AS new_mad_ms, b.p75_ms AS base_p75_ms,
           b.p25_ms AS base_p25_ms
    FROM b FULL OUTER JOIN n ON n.item_type = b.item_type AND n.item = b.item
), v AS (
    SELECT *, new_ms - base_ms AS delta_ms, 100.0 * (new_ms - base_ms) / nullif(base_ms, 0) AS delta_pct,
           $sigmas * 1.4826 * sqrt(coalesce(base_mad_ms, 0) ^ 2 + coalesce(new_mad_ms, 0) ^ 2) AS noise_ms
    FROM j
), a AS (SELECT *, base_ms * $pct / 100.0 + noise_ms AS allowed_ms FROM v),
-- Beyond the allowance, and (within the noise judgement) NEW's median above the upper quartile of
-- BASE's steps: where over half the steps of a file take the same time (a trace with microsecond
-- timestamps, idle time with or without one gap as two streams race) the MAD is 0, and the median
-- of a second run of the same program can land on the other common value; NEW's typical step
-- within BASE's own upper quarter is then noise, not a slowdown. For smooth noise this never
-- decides: the band is some 4 robust sigmas wide, the upper quartile 0.67 sigmas above the median.
-- 'faster' is the mirror: beyond the allowance the other way and NEW's median below BASE's lower
-- quartile, so that the same flip downwards (8 -> 7 us) reads 'same', not 'faster'.
o AS (SELECT *, delta_ms > allowed_ms AND delta_ms >= $min_ms
                AND ($sigmas = 0 OR new_ms > coalesce(base_p75_ms, 0)) AS over,
             -delta_ms > allowed_ms AND -delta_ms >= $min_ms
                AND ($sigmas = 0 OR new_ms < base_p25_ms) AS under FROM a),
-- A kind and an op key made of the same rows in both files (every copy of a direction is one op,
-- 'Memcpy HtoD'; a single kernel name is the kernel kind; under --by range one op may launch all
-- the copies) have the same times and the same verdict: one slowdown would count twice. The op
-- keeps it: it is the more specific of the two (it names the kernel, copy or range the --by key
-- chose), and the kind row stays in the items, marked 'duplicate'. A kind made of several keys, or
-- a key that spans kinds, is another view of the work and keeps its own verdict.
pairs AS (
    SELECT DISTINCT kind || coalesce(' ' || CASE WHEN kind = 'memcpy' THEN substr(name, 8) END, '') AS kitem, key
    FROM cmp_keyed
), twins AS (
    SELECT kitem FROM pairs p
    WHERE (SELECT count(*) FROM pairs q WHERE q.kitem = p.kitem) = 1
      AND (SELECT count(*) FROM pairs q WHERE q.key = p.key) = 1
), t AS (
    SELECT o.*, coalesce(item_type = 'kind' AND item IN (SELECT kitem FROM twins), FALSE) AS twin FROM o
)
SELECT item_type, item, key_type, base_ms, new_ms, delta_ms, delta_pct, noise_ms, allowed_ms,
       CASE WHEN base_ms IS NULL THEN 'new'
            WHEN new_ms IS NULL THEN 'gone'
            WHEN over AND base_ms > 0 AND twin THEN 'duplicate'
            WHEN over AND base_ms > 0 THEN 'regression'
            -- a metric (the step's window, a kind, idle) that BASE holds at 0 and NEW beyond the
            -- allowance got slower: the noise band still applies; an op at 0 per step is as new
            WHEN over AND base_ms = 0 AND item_type <> 'op' THEN 'regression'
            WHEN over AND base_ms = 0 THEN 'new'
            WHEN delta_ms > 0 AND delta_ms > noise_ms THEN 'slower'
            WHEN under THEN 'faster'
            ELSE 'same' END AS status
FROM t
ORDER BY CASE status WHEN 'regression' THEN 0 ELSE 1 END,
         CASE item_type WHEN 'step' THEN 0 WHEN 'kind' THEN 1 ELSE 2 END,
         coalesce(delta_ms, 0) DESC, item
