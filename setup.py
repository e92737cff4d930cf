"""Builds the optional native parts; all other metadata is in pyproject.toml.

- cuptiprof.interop._kineto_scan: reads Kineto trace text into columns (imports);
- cuptiprof.store._islands: busy-time islands per step while writing;
- cuptiprof.store._dedupe: distinct lanes and launch configurations while writing;
- cuptiprof.run._exit_status: the exit status a process of `cuptiprof run` ends with.

Without a C compiler the install still succeeds (optional=True): imports use msgspec and the
writer numpy, with the same results (CUPTIPROF_NATIVE=0 chooses those paths on purpose); a
`cuptiprof run` whose launcher is killed after its program ended then knows less of how it
ended (a `raise SystemExit(n)` reads as 0).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("cuptiprof.interop._kineto_scan",
                             ["cuptiprof/interop/_kineto_scan.c"],
                             extra_compile_args=["-O2", "-std=c99"], optional=True),
                   Extension("cuptiprof.store._islands", ["cuptiprof/store/_islands.c"],
                             extra_compile_args=["-O2", "-std=c99"], optional=True),
                   Extension("cuptiprof.store._dedupe", ["cuptiprof/store/_dedupe.c"],
                             extra_compile_args=["-O3", "-std=c99"], optional=True),
                   Extension("cuptiprof.run._exit_status", ["cuptiprof/run/_exit_status.c"],
                             extra_compile_args=["-O2", "-std=gnu99"], optional=True)])
