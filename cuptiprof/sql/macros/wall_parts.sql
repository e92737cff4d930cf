-- wall_parts(spans): the union of kernel intervals (bk), of kernel and copy intervals (bc) and of all intervals (b), in ns, of a list of work intervals {'s': start, 'e': end, 'k': is a kernel, 'c': is a kernel or a copy} sorted by start then end: the fold of sel_busy.sql kept three times over in one pass (m*: the latest end so far). A subset of a sorted list is still sorted, so each fold is its own subset's union; the HTML steps plots split a window with them (kernel bk, copy alone bc - bk, memset alone b - bc, idle window - b).
list_reduce(spans,
            lambda acc, x: {
                'mk': CASE WHEN x.k THEN greatest(acc.mk, x.e) ELSE acc.mk END,
                'bk': acc.bk + CASE WHEN x.k THEN greatest(0, x.e - greatest(x.s, acc.mk)) ELSE 0 END,
                'mc': CASE WHEN x.c THEN greatest(acc.mc, x.e) ELSE acc.mc END,
                'bc': acc.bc + CASE WHEN x.c THEN greatest(0, x.e - greatest(x.s, acc.mc)) ELSE 0 END,
                'm': greatest(acc.m, x.e),
                'b': acc.b + greatest(0, x.e - greatest(x.s, acc.m))},
            {'mk': -9223372036854775807::BIGINT, 'bk': 0::BIGINT,
             'mc': -9223372036854775807::BIGINT, 'bc': 0::BIGINT,
             'm': -9223372036854775807::BIGINT, 'b': 0::BIGINT})
