"""Data-quality rows that more than one recorder writes (the CUPTI collector and the no-GPU
recorder), worded once."""
from __future__ import annotations

STEP_INCOMPLETE = "step_incomplete"
# GPU records CUPTI could not time (0 or reversed timestamps): counted per kind and step, never
# written as rows (the CUPTI collector).
UNTIMED_RECORDS = "untimed_records"
# Records the cupti-python bindings could not read, counted per kind and left out (the CUPTI
# collector).
DECODE_ERROR = "decode_error"


def incomplete_detail(step, exc_name: str) -> str:
    """The detail of a step that the program's exception (a Ctrl-C, an error) ended early."""
    return (f"step {step} was ended early by {exc_name}: its numbers cover only the part of the "
            "step that ran")
