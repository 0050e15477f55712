"""Timed points: a `width,seconds` CSV, one row per timed repeat (what `tuneproof probe --out` writes
and `tuneproof fit` and `tuneproof plan --points` read), and the units a point must be in."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from tuneproof.errors import TuneproofError
from tuneproof.io import input_file

MAX_WIDTH = 1 << 30  # tokens: beyond any context length, and w^2 stays far from float overflow
MIN_SECONDS, MAX_SECONDS = 1e-9, 1e7  # a nanosecond to four months per step: outside is a unit mistake


def read_points(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a `width,seconds` CSV (one row per repeat; other columns are ignored). Errors name the line."""
    p = input_file(path, "points file", "pass a CSV with a 'width,seconds' header")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TuneproofError(
            f"cannot read {p}: {e}", "pass a text CSV with a 'width,seconds' header"
        ) from None
    try:
        reader = csv.DictReader(text.splitlines())
        header = [h.strip() for h in reader.fieldnames or []]
    except csv.Error as e:
        raise TuneproofError(f"{p}: not a CSV: {e}", "the first line must be 'width,seconds'") from None
    missing = [c for c in ("width", "seconds") if c not in header]
    if missing:
        raise TuneproofError(
            f"{p}: missing column {', '.join(missing)} (header: {','.join(header) or 'none'})",
            "the first line must be 'width,seconds'",
        )
    widths, seconds = [], []
    try:
        for line, row in enumerate(reader, start=2):
            clean = {k.strip(): v for k, v in row.items() if isinstance(k, str)}
            w, t = _number(clean.get("width")), _number(clean.get("seconds"))
            if w is None or t is None:
                raise TuneproofError(
                    f"{p}:{line}: not numbers: {clean.get('width')!r}, {clean.get('seconds')!r}",
                    "each row is an integer width and a time in seconds",
                )
            if w <= 0 or not w.is_integer() or w > MAX_WIDTH:
                raise TuneproofError(
                    f"{p}:{line}: width must be a positive integer up to {MAX_WIDTH:,}, got {clean['width']}",
                    "fix that row",
                )
            if not MIN_SECONDS <= t <= MAX_SECONDS:
                raise TuneproofError(
                    f"{p}:{line}: seconds must be in [{MIN_SECONDS:g}, {MAX_SECONDS:g}], "
                    f"got {clean['seconds']}",
                    "a step time is positive; drop or re-measure that row",
                )
            widths.append(w)
            seconds.append(t)
    except csv.Error as e:
        raise TuneproofError(f"{p}: not a CSV: {e}", "one 'width,seconds' row per repeat") from None
    if not widths:
        raise TuneproofError(f"{p} holds no rows", "one 'width,seconds' row per timed repeat")
    return np.asarray(widths), np.asarray(seconds)


def _number(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None
