-- keyed: cmp_act with the comparison key chosen by --by ({key}, {key_type} substituted)
-- key: exact op name (--by op), kernel family (--by family), enclosing op / range (--by range) or
--      innermost of the program's own ranges (--by region)
--      kernels recorded without a name (NULL or '') are one key, '(unnamed)', as in the report's
--      per-op view and the families: a NULL key would match no row and drop out of the op rows
--      while it still counts in the kind and step totals
-- key_type: 'name' | 'family' | 'op' | 'range' | 'none': which key the row was matched on
SELECT *, coalesce(nullif({key}, ''), '(unnamed)') AS key, {key_type} AS key_type FROM cmp_act WHERE kind <> 'sync'
