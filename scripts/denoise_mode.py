"""examples/denoise.py with `--compile` using a torch.compile mode the example has no flag for
(e.g. reduce-overhead: CUDA graphs), so that step attribution can be checked on graph replays.

    cuptiprof run --warmup 1 --steps 3 -- python scripts/denoise_mode.py --mode reduce-overhead \
        -- --size tiny --warmup 3 --steps 4

Everything after `--` goes to the example; --compile is added.
"""
from __future__ import annotations

import argparse
import functools
import sys

from _denoise import load


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", default="reduce-overhead", help="torch.compile mode")
    p.add_argument("example_args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    ex = a.example_args[1:] if a.example_args[:1] == ["--"] else a.example_args
    import torch

    torch.compile = functools.partial(torch.compile, mode=a.mode)
    mod = load()
    return mod.main(ex + ["--compile"])


if __name__ == "__main__":
    sys.exit(main())
