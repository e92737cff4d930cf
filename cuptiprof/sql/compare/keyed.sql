-- keyed: cmp_act with the comparison key chosen by --by ({key}, {key_type} substituted)
-- key: exact op name (--by op), kernel family (--by family), enclosing op / range (--by range) or
--      innermost of the program's own ranges (--by region)
-- key_type: 'name' | 'family' | 'op' | 'range' | 'none': which key the row was matched on
SELECT *, {key} AS key, {key_type} AS key_type FROM cmp_act WHERE kind <> 'sync'
