"""Where a Session's GPU records come from: CUPTI, the fake CUPTI, a source of the program's
own or none (NullSource, host-side ranges only); switched on and off, and given up on when
CUPTI fails mid-run."""
from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, Callable, Iterable

from cuptiprof import markers
from cuptiprof.collect.errors import CollectorProblem
from cuptiprof.errors import stderr_line

FAKE_ENV = "CUPTIPROF_FAKE_CUPTI"


class NullSource:
    """Host-side only: no GPU records (no GPU, no CUPTI, or CUPTI held by another tool)."""

    name = "none"
    gpu = False
    kind_enum = SimpleNamespace(DEVICE=8, DRIVER=4)  # what Sink/Resolver ask for
    missing: dict = {}
    enabled: list = []
    ext_kind = 0

    def open(self, on_records: Callable) -> None: ...
    def enable(self, kinds: Iterable[str]) -> None: ...
    def disable(self) -> None: ...
    def close(self) -> None: ...
    def release(self) -> None: ...
    def push(self, range_id: int) -> None: ...
    def pop(self) -> None: ...
    def synchronize(self) -> None: ...
    def flush(self, forced: bool = False) -> None: ...
    def dropped(self) -> int: return 0
    def api_name(self, driver: bool, cbid: int) -> str: return str(cbid)


class _Sources:
    """Session's methods that open, switch and give up its source."""

    def _open_source(self) -> Any:
        from cuptiprof.collect import cupti_source, fake

        src = self._source_arg
        if src is None:
            src = "fake" if os.environ.get(FAKE_ENV, "") not in ("", "0") else "cupti"
        if isinstance(src, str):
            if src == "none":
                self._fallback(None)
                return self.source
            if src == "fake":
                s = cupti_source.CuptiSource(fake.FakeCupti(auto=True), nvtx_capture=True)
                s.name = "fake"
                return s
            try:
                from cuptiprof.collect import nvtx_setup

                m = cupti_source.load_cupti()
                injected, _why = nvtx_setup.prepare()  # before the first NVTX call, if any left
                markers.reload_env()
                live = injected and nvtx_setup.domain_is_live()
                return cupti_source.CuptiSource(m, nvtx_capture=live)
            except CollectorProblem as exc:
                self._fallback(exc)
                return self.source
        if isinstance(src, fake.FakeCupti):
            s = cupti_source.CuptiSource(src, nvtx_capture=True)
            s.name = "fake"
            return s
        return src

    def _fallback(self, exc: CollectorProblem | None) -> None:
        """Host-side ranges only; say why once on stderr (unless asked not to use a GPU)."""
        self.problem = exc
        self.source = NullSource()
        if exc is not None and not self.quiet:
            stderr_line(f"cuptiprof: notice: no GPU activity captured: {exc}; recording host-side "
                        f"ranges only into {self.path}")

    def _collect(self, on: bool) -> None:
        if on == self.collecting or not self.source.gpu:
            self.collecting = on and self.source.gpu
            return
        try:
            if on:
                self.source.enable(self.kinds)
            else:
                self.source.disable()
            self.collecting = on
        except Exception as exc:
            self._gpu_failed(exc)

    def _gpu_failed(self, exc: BaseException) -> None:
        """A CUPTI failure mid-run: keep the program and the host ranges going."""
        self._note_problem("cupti_error", f"CUPTI failed mid-run ({exc}); GPU records after this "
                           "point were not captured")
        if not self.quiet:
            stderr_line(f"cuptiprof: warning: CUPTI failed ({exc}); no further GPU activity is "
                        "captured")
        try:
            self.source.close()
        except Exception:
            pass
        self.source = NullSource()
        self.collecting = False


def _kind_enum(src: Any) -> Any:
    m = getattr(src, "m", None)
    return m.ActivityKind if m is not None else src.kind_enum


def _driver_kind(src: Any) -> int:
    return int(_kind_enum(src).DRIVER)
