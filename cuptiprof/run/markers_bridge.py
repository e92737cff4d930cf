"""cuptiprof.range() in a process the Recorder records (no CUPTI collector: the no-GPU
fallback, light mode, --overhead timing): markers.py hands ranges to whatever object is set as
its session; this adapter turns them into Recorder ranges and steps."""
from __future__ import annotations

from typing import Any

from cuptiprof.markers import given_step


class RecorderRanges:
    def __init__(self, markers: Any, rec: Any):
        self.markers = markers
        self.rec = rec

    def _enter(self, name: str, attrs: dict):
        named = self.rec.s.step_range is not None and name == self.rec.s.step_range
        if named:
            self.rec.step_range_seen = True   # --step-range matched (child.ending._note_step_option)
        if name == "step" or named:
            def begin():
                return self.rec.begin(name, is_step=True, step=given_step(attrs.get("step")),
                                      attrs={k: v for k, v in attrs.items() if k != "step"} or None)
            if name == "step":   # the program's own step
                return begin()
            from cuptiprof.run.child import steps   # --step-range's, told from the program's (steps_mixed)
            return steps._count_marked(begin)
        return self.rec.begin(name, attrs=attrs or None)

    def _exit(self, tok, exc_type=None) -> None:
        # a range opened before a fork, under the parent's collector, is not the Recorder's
        if hasattr(tok, "gen"):
            self.rec.end(tok, exc_type)

    def _detach_ranges(self, exc: BaseException) -> None:
        pass


def install(markers: Any, rec: Any) -> None:
    if getattr(markers, "_session", None) is None and hasattr(markers, "_set_session"):
        markers._set_session(RecorderRanges(markers, rec))
