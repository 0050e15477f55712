"""Checks for input fields, shared by every spec: one wording for every field, raised where the value
enters (a dataclass `__post_init__`, a file reader), before any work starts.

Each check names the field (`{seq_len}`) so that the CLI can show its own flag instead.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

from tuneproof.core.errors import field_error

# No accelerator holds a sequence of 2**31 tokens, and kernels index tokens with int32: a larger width
# or length is a typo, and numpy arrays sized by it would not fit in memory.
MAX_TOKENS = 2**31 - 1


def integer(field: str, value: Any, *, low: int = 1, high: int = MAX_TOKENS, hint: str | None = None) -> int:
    """An int in [low, high]; bools, floats and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise field_error(field, f"must be an integer, got {value!r}", hint)
    v = int(value)
    if v < low:
        raise field_error(field, f"must be >= {low}, got {v}", hint)
    if v > high:
        raise field_error(field, f"must be <= {high:,}, got {v:,}", hint)
    return v


def real(
    field: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    hint: str | None = None,
) -> float:
    """A finite float inside the given bounds (open or closed); NaN and infinity are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise field_error(field, f"must be a number, got {value!r}", hint)
    v = float(value)
    if not math.isfinite(v):
        raise field_error(field, f"must be a finite number, got {v}", hint)
    if low is not None and (v <= low if low_open else v < low):
        raise field_error(field, f"must be {'>' if low_open else '>='} {low:g}, got {v:g}", hint)
    if high is not None and (v >= high if high_open else v > high):
        raise field_error(field, f"must be {'<' if high_open else '<='} {high:g}, got {v:g}", hint)
    return v


def choice(field: str, value: Any, choices: Iterable[str]) -> str:
    """One of `choices` (exact match)."""
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        raise field_error(field, f"{value!r} is not known", "use one of: " + ", ".join(options))
    return value


def integers(field: str, values: Any, *, low: int = 1, high: int = MAX_TOKENS) -> tuple[int, ...]:
    """A non-empty sequence of ints, each checked like `integer`."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise field_error(field, f"must be a list of integers, got {values!r}")
    out = tuple(integer(field, v, low=low, high=high) for v in values)
    if not out:
        raise field_error(field, "is empty", "give at least one value")
    return out
