"""Run examples/denoise.py under torch.profiler and export a Kineto JSON trace, for the
parity check against `cuptiprof run` (scripts/parity.py).

    python scripts/torch_profile_example.py --trace tp.json --skip 1 --record 5 -- \
        --size medium --warmup 2 --steps 6 --seed 0
    cuptiprof import tp.json -o tp.duckdb

The profiler starts when denoising step SKIP begins and stops when step SKIP+RECORD-1 ends
(the same steps `cuptiprof run --warmup SKIP --steps RECORD` records); each of those steps is
a record_function named ProfilerStep#<step>, which the importer turns into step <step>.
CUDA activities are collected when torch sees a GPU; without one (the dry run) CPU ops only.
"""
from __future__ import annotations

import argparse
import sys

from _denoise import load


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", required=True, help="Kineto JSON trace to write")
    p.add_argument("--skip", type=int, default=1, help="denoising steps before the profiler starts")
    p.add_argument("--record", type=int, default=5, help="denoising steps profiled")
    p.add_argument("example_args", nargs=argparse.REMAINDER, help="-- then examples/denoise.py arguments")
    a = p.parse_args(argv)
    ex_args = a.example_args[1:] if a.example_args[:1] == ["--"] else a.example_args

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    else:
        print("torch_profile_example: no CUDA device: CPU activities only (dry run)", file=sys.stderr)
    prof = profile(activities=acts)
    state = {"on": False, "done": False, "rf": None}
    last = a.skip + a.record - 1

    def enter(step):
        if step == a.skip and not state["on"] and not state["done"]:
            prof.start()
            state["on"] = True
        if state["on"]:
            state["rf"] = record_function(f"ProfilerStep#{step}")
            state["rf"].__enter__()

    def exit_(step):
        if state["rf"] is not None:
            state["rf"].__exit__(None, None, None)
            state["rf"] = None
        if state["on"] and step == last:
            prof.stop()
            state["on"], state["done"] = False, True

    mod = load()
    from _denoise import timed_markers

    timed_markers(mod, on_enter=enter, on_exit=exit_)
    rc = mod.main(ex_args)
    if state["on"]:  # fewer steps than asked for
        prof.stop()
        state["done"] = True
    if not state["done"]:
        print(f"torch_profile_example: step {a.skip} never ran; nothing profiled", file=sys.stderr)
        return 1
    prof.export_chrome_trace(a.trace)
    print(f"torch_profile_example: steps {a.skip}..{last} -> {a.trace}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
