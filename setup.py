"""Builds the optional native Kineto scanner; all other metadata is in pyproject.toml.

Without a C compiler the install still succeeds (optional=True) and imports use the msgspec
path only.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("cuptiprof.interop._kineto_scan",
                             ["cuptiprof/interop/_kineto_scan.c"],
                             extra_compile_args=["-O2", "-std=c99"], optional=True),
                   Extension("cuptiprof.store._islands", ["cuptiprof/store/_islands.c"],
                             extra_compile_args=["-O2", "-std=c99"], optional=True),
                   Extension("cuptiprof.store._dedupe", ["cuptiprof/store/_dedupe.c"],
                             extra_compile_args=["-O3", "-std=c99"], optional=True)])
