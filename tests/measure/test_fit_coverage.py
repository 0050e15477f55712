"""`fit`'s intervals and constant test by seeded simulation with a known truth, slow repeats included
(issue 33's audit: the share's interval covered 89 % in its worst cell, a constant at the band edge was
called present 4 % of the time against 2.5 %, and the repeats advice named the count already taken).

Rows: 4 widths (2,048-16,384), the reference run's A and B, a constant C, lognormal noise of 3 %, and
10 % of repeats 1.2-2x slow (a neighbour's burst). tests/measure/test_fit_pooled.py holds the no-outlier
checks of the same intervals."""

from __future__ import annotations

import numpy as np
import pytest

from fakes import A, B
from tuneproof.measure import fit_scaling

WIDTHS = np.array([2048.0, 4096.0, 8192.0, 16384.0])
EDGE = (A * 2048 + B * 2048**2) / 9  # C = 10 % of the smallest width's step: the band's edge


def _rows(rng: np.random.Generator, c: float, repeats: int, slow: float = 0.10, noise: float = 0.03):
    w = np.repeat(WIDTHS, repeats)
    t = (c + A * w + B * w * w) * np.exp(noise * rng.standard_normal(w.size))
    burst = rng.random(w.size) < slow
    t[burst] *= rng.uniform(1.2, 2.0, burst.sum())
    return w, t


def _share(c: float) -> float:
    return B * 16384.0**2 / (c + A * 16384.0 + B * 16384.0**2)


@pytest.mark.parametrize("repeats", [3, 5])
def test_the_share_interval_covers_at_its_nominal_rate_with_slow_repeats(repeats: int) -> None:
    """200 fits a cell (binomial SD 1.5 %): the 95 % interval of the share at the widest width holds the
    truth at least 93 % of the time (measured 96-98 %; the least-squares-on-rows form had 93 %)."""
    rng = np.random.default_rng([33, repeats])
    hits = judged = 0
    for i in range(200):
        ci, _ = fit_scaling(*_rows(rng, EDGE, repeats), seed=i).share_ci(16384.0)
        if ci is not None:
            judged += 1
            hits += ci[0] <= _share(EDGE) <= ci[1]
    assert judged >= 190 and hits / judged >= 0.93, (hits, judged)


def test_a_constant_at_the_band_edge_is_called_present_at_most_at_the_nominal_rate() -> None:
    """C exactly at the margin: "present" (the whole interval above it) is a false call, nominally at
    most 2.5 %; 400 fits at 3 repeats with slow repeats (SD 0.8 %): at most 2.5 % + 2 SD (measured 1.8 %)."""
    rng = np.random.default_rng(34)
    present = sum(fit_scaling(*_rows(rng, EDGE, 3), seed=i).constant.verdict == "present" for i in range(400))
    assert present / 400 <= 0.025 + 2 * 0.0078, present


def test_following_the_repeats_advice_decides_most_of_the_time_and_never_names_a_count_taken() -> None:
    """Pilots of 3 repeats with no constant and 3 % noise are undetermined and name a count; timing that
    many decides most of the time (the advice plans for 80 %, reading the pilot's estimate as the truth;
    pilots scatter). Counts above 60 are left out to keep the test fast."""
    rng = np.random.default_rng(35)
    decided = trials = advised = 0
    for i in range(40):
        fit = fit_scaling(*_rows(rng, 0.0, 3, slow=0.0), seed=i)
        n = fit.constant.repeats_to_decide
        if fit.constant.verdict != "undetermined" or n is None:
            continue
        assert n > 3 and f"about {n} repeats per width" in fit.constant.reason
        advised += 1
        if n > 60:
            continue
        for j in range(6):
            decided += fit_scaling(*_rows(rng, 0.0, n, slow=0.0), seed=j).constant.verdict != "undetermined"
            trials += 1
    assert advised >= 30 and trials >= 30
    assert decided / trials >= 0.7, (decided, trials)


def test_plain_scatter_at_3_repeats_is_not_set_aside() -> None:
    """Fresh eyes (issue 33): of 30 fits of 4 widths x 3 repeats with 3 % noise and nothing slow, 6 set
    a repeat aside (each width's MAD is the smaller of two distances). Pooled over widths: 200 fits, at
    most 4 % set any repeat aside (measured 1.1 % over 2,000 in robust's docstring)."""
    rng = np.random.default_rng(36)
    flagged = sum(
        any(len(o) for o in fit_scaling(*_rows(rng, 0.0, 3, slow=0.0), seed=i).outliers.values())
        for i in range(200)
    )
    assert flagged <= 8, flagged
