"""Robust statistics for repeated measurements: outlier repeats, the median and its interval.

- Outliers: the modified z-score of Iglewicz and Hoaglin, |x - median| / (1.4826 * MAD), above 5
  rather than their 3.5: MAD from a handful of repeats is itself noisy, and 3.5 flags at least one of
  6 normal (or lognormal) draws 15 % of the time, 5 flags 6.5 % (of 20 draws: 10 % and 1.4 %;
  simulated, 50,000 samples each). A repeat ten times its width's median is flagged either way. The
  scale is floored at 1 % of the median (a run of identical timings has MAD 0, and a repeat 1 % off is
  clock jitter). It needs 3 values; with fewer nothing is flagged. Only slow repeats are flagged:
  a neighbour's burst, a page fault or a clock drop can only lengthen a step, so a repeat faster
  than the rest is the machine running free, not an error (a fresh-eyes trial under load saw the one
  uncontended 0.32 s repeat set aside among 6.4 s ones when both tails were flagged). Outliers are
  rare by definition: when more than a fifth of the repeats (and more than one) would be flagged,
  the timings are two regimes (a neighbour holding a core for part of the run), not a few bursts,
  and none is set aside: the median and its interval then show the whole spread (a fresh-eyes
  trial saw 11 of 29 repeats at 0.24 s set aside and a +-4 % interval around the 0.11 s ones).
- Across widths (`pooled_scale`, what `fit` uses): one relative scale for every width, the MAD of each
  repeat's relative distance from its width's median, pooled (an odd width's own median, at distance 0,
  left out). The MAD of 3 repeats is the smaller of two distances, so it flagged plain scatter: of 4
  widths x 3 repeats with 3 % noise and nothing slow, 15 % of fits set a repeat aside (a fresh-eyes
  trial: 1.856 s beside 1.741 and 1.749 s). A width's scale is the larger of the pooled one and its
  own (one noisy width among quiet ones keeps its own spread): 1.1 % of such fits set a repeat aside
  (4 repeats: 9.5 % before, 2.4 %; 5: 14 % and 0.7 %), and a 1.2-2x slow repeat is caught nearly as
  often (62 % against 67 % at 3 repeats, 63 % and 64 % at 5; 2,000 simulated fits each); one kept
  moves a median, not the fit's line.
- The median's 95 % interval is distribution-free: the order statistics that bracket the median with
  binomial coverage (scipy.stats.quantile_test). It needs 6 values (with 5, [min, max] covers only
  93.75 %); with fewer the interval is unknown, not guessed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

OUTLIER_Z = 5.0  # Iglewicz & Hoaglin (1993) suggest 3.5; see the module docstring for why 5
MAD_TO_SD = 1.4826  # MAD * 1.4826 estimates the standard deviation of a normal sample
SCALE_FLOOR = 0.01  # relative: below 1 % of the median, a difference is timer jitter
MIN_FOR_OUTLIERS = 3
MIN_FOR_INTERVAL = 6
MAX_OUTLIER_SHARE = 0.2  # more flagged than this: two regimes, nothing set aside (see the docstring)
CONFIDENCE = 0.95


def outliers(values: Sequence[float] | np.ndarray, relative_scale: float | None = None) -> np.ndarray:
    """A boolean mask of the outlying values (see the module docstring); `relative_scale`: a scale as a
    fraction of the median, pooled over groups (`pooled_scale`), where it exceeds these values' own."""
    x = np.asarray(values, dtype=float)
    if x.size < MIN_FOR_OUTLIERS:
        return np.zeros(x.size, dtype=bool)
    med = float(np.median(x))
    own = MAD_TO_SD * float(np.median(np.abs(x - med)))
    scale = max(own, (relative_scale or 0.0) * abs(med), SCALE_FLOOR * abs(med))
    if scale == 0.0:
        return np.zeros(x.size, dtype=bool)
    flagged = (x - med) / scale > OUTLIER_Z
    if flagged.sum() > max(1.0, MAX_OUTLIER_SHARE * x.size):
        return np.zeros(x.size, dtype=bool)
    return flagged


def pooled_scale(groups: Sequence[np.ndarray]) -> float | None:
    """The standard deviation, relative to the median, that the repeats of every group show together
    (1.4826 x the MAD of |x / median - 1| over the groups of 3 or more, an odd group's median left out);
    None when no group has 3."""
    distances: list[float] = []
    for g in groups:
        x = np.asarray(g, dtype=float)
        med = float(np.median(x))
        if x.size < MIN_FOR_OUTLIERS or med == 0:
            continue
        d = np.abs(x / med - 1.0)
        distances.extend(np.delete(d, np.argmin(d)) if x.size % 2 else d)
    return MAD_TO_SD * float(np.median(distances)) if distances else None


def two_regimes(values: Sequence[float] | np.ndarray) -> bool:
    """Whether more than a fifth of the repeats lie outlier-far above the median (so `outliers` sets
    none aside and the timing should say its repeats fall into two regimes)."""
    x = np.asarray(values, dtype=float)
    if x.size < MIN_FOR_OUTLIERS:
        return False
    med = float(np.median(x))
    scale = max(MAD_TO_SD * float(np.median(np.abs(x - med))), SCALE_FLOOR * abs(med))
    return bool(scale and ((x - med) / scale > OUTLIER_Z).sum() > max(1.0, MAX_OUTLIER_SHARE * x.size))


def median_interval(values: Sequence[float] | np.ndarray) -> tuple[float, float] | None:
    """The distribution-free 95 % interval of the median, or None with fewer than 6 values."""
    x = np.asarray(values, dtype=float)
    if x.size < MIN_FOR_INTERVAL:
        return None
    from scipy.stats import quantile_test

    ci = quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(CONFIDENCE)
    lo, hi = float(ci.low), float(ci.high)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def relative_halfwidth(values: Sequence[float] | np.ndarray) -> float | None:
    """Half the median interval's width over the median, or None when the interval is unknown."""
    ci = median_interval(values)
    if ci is None:
        return None
    med = float(np.median(np.asarray(values, dtype=float)))
    return (ci[1] - ci[0]) / 2 / abs(med) if med else None
