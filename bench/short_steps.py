"""A loop of 300 short steps (5 ms of busy host work each), for the cost of commits at a step's
end: run it bare and under `cuptiprof run --light` with CUPTIPROF_FLUSH_EVERY_S=0 (a commit at
every step's end) and =1 (the default), side by side:

    python bench/short_steps.py
    CUPTIPROF_FLUSH_EVERY_S=0 python -m cuptiprof run --light --no-report -o a.duckdb -- python bench/short_steps.py
    CUPTIPROF_FLUSH_EVERY_S=1 python -m cuptiprof run --light --no-report -o b.duckdb -- python bench/short_steps.py
"""
import time

import cuptiprof

t = time.perf_counter()
for i in range(300):
    with cuptiprof.range("step", step=i):
        end = time.perf_counter() + 0.005
        while time.perf_counter() < end:
            pass
print(f"loop {time.perf_counter() - t:.3f} s")
