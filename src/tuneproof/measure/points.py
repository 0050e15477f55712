"""Timed points: a `width,seconds` CSV, one row per timed repeat (what `tuneproof probe --out` writes
and `tuneproof fit` and `tuneproof plan --points` read), the units a point must be in, and the
kept repeats per width (`Samples`) every fit and resampling works on."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import input_file
from tuneproof.measure import robust

MAX_WIDTH = 1 << 30  # tokens: beyond any context length, and w^2 stays far from float overflow
MIN_SECONDS, MAX_SECONDS = 1e-9, 1e7  # a nanosecond to four months per step: outside is a unit mistake
MIN_WIDTHS = 3  # the fit's coefficients
MIN_SPAN = 4.0  # narrowest to widest: closer widths cannot tell w from w^2


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
                bad = [f"{k} {clean.get(k)!r}" for k, v in (("width", w), ("seconds", t)) if v is None]
                raise TuneproofError(
                    f"{p}:{line}: not a finite number: {', '.join(bad)}",
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


@dataclass(frozen=True, slots=True)
class Samples:
    """Kept repeats per width (outliers set aside), the unit every resampling works on."""

    widths: np.ndarray  # distinct widths, ascending
    kept: list[np.ndarray]
    outliers: list[np.ndarray]

    @classmethod
    def of(cls, widths: np.ndarray, seconds: np.ndarray) -> Samples:
        w, t = np.asarray(widths, dtype=float), np.asarray(seconds, dtype=float)
        if w.shape != t.shape or w.ndim != 1:
            raise TuneproofError(
                "widths and seconds must be two lists of the same length", "one width per time"
            )
        if not (np.isfinite(w).all() and np.isfinite(t).all()) or (w <= 0).any() or (t <= 0).any():
            raise TuneproofError(
                "widths and seconds must be finite and > 0", "drop or re-measure the bad rows"
            )
        if (w > MAX_WIDTH).any() or (t > MAX_SECONDS).any() or (t < MIN_SECONDS).any():
            raise TuneproofError(
                f"widths must be <= {MAX_WIDTH:,} and seconds in [{MIN_SECONDS:g}, {MAX_SECONDS:g}]",
                "check the units of the rows",
            )
        distinct = np.unique(w)
        if len(distinct) < MIN_WIDTHS:
            raise TuneproofError(
                f"{len(distinct)} distinct width(s): the fit needs at least {MIN_WIDTHS}",
                "time more widths, e.g. 2048, 8192, 16384",
            )
        span = distinct[-1] / distinct[0]
        if span < MIN_SPAN:
            raise TuneproofError(
                f"widths span {span:.2f}x: the fit needs at least {MIN_SPAN:g}x",
                f"add a width below {distinct[-1] / MIN_SPAN:g} or above {distinct[0] * MIN_SPAN:g}",
            )
        kept, out = [], []
        scale = robust.pooled_scale([t[w == x] for x in distinct])  # one noise scale for every width
        for x in distinct:
            rows = t[w == x]
            flags = robust.outliers(rows, scale)
            kept.append(rows[~flags])
            out.append(rows[flags])
        return cls(distinct, kept, out)

    @property
    def medians(self) -> np.ndarray:
        return np.array([np.median(k) for k in self.kept])

    @property
    def resamplable(self) -> bool:
        """Every width has the repeats a 95 % interval of its median needs."""
        return all(k.size >= robust.MIN_FOR_INTERVAL for k in self.kept)
