"""The benchmark gate's error rates by seeded simulation with a known truth (tests/gate/power_grid.py):
no verdict above its nominal false-alarm rate, power that grows with documents and runs, and advice that
delivers the power it promises when followed. docs/gate.md shows the table measured here."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import power_grid as pg

from tuneproof.gate.benchmarks import judge_line

DOCS_PAGE = Path(__file__).parent.parent.parent / "docs" / "gate.md"


@pytest.fixture(scope="module")
def grid() -> dict[tuple[int, int, int], tuple[float, int]]:
    return pg.grid()


def _se(rate: float, trials: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 0.01 * 0.99) / trials)


def test_no_change_is_called_a_drop_at_most_at_the_nominal_rate(grid) -> None:  # type: ignore[no-untyped-def]
    """False FAIL at no change: 2.5 % nominal (one tail of the 95 % interval). Pooled over the nine cells
    (3,600 trials, SE 0.26 %) at most 2.5 %; each cell (400 trials, SE 0.78 %) within 2.5 SE of it."""
    null = [grid[d, r, 0] for d in pg.DOCS for r in pg.RUNS]
    pooled = sum(rate * n for rate, n in null) / sum(n for _, n in null)
    assert pooled <= 0.025, pooled
    for (d, r), (rate, n) in zip([(d, r) for d in pg.DOCS for r in pg.RUNS], null, strict=True):
        assert rate <= 0.025 + 2.5 * _se(0.025, n), (d, r, rate)


def test_power_never_falls_as_runs_or_documents_grow(grid) -> None:  # type: ignore[no-untyped-def]
    """Along runs at fixed documents, and along documents at fixed runs: no fall beyond two standard
    errors of the difference of two simulated rates (150 trials each)."""

    def no_fall(a: tuple[float, int], b: tuple[float, int], where: str) -> None:
        slack = 2 * math.hypot(_se(a[0], a[1]), _se(b[0], b[1]))
        assert b[0] >= a[0] - slack, (where, a[0], b[0])

    for drop in pg.DROPS[1:]:
        for docs in pg.DOCS:
            for r1, r2 in zip(pg.RUNS, pg.RUNS[1:], strict=False):
                no_fall(
                    grid[docs, r1, drop], grid[docs, r2, drop], f"{docs} docs, runs {r1}->{r2}, {drop} pts"
                )
        for runs in pg.RUNS:
            for d1, d2 in zip(pg.DOCS, pg.DOCS[1:], strict=False):
                no_fall(
                    grid[d1, runs, drop], grid[d2, runs, drop], f"{runs} runs, docs {d1}->{d2}, {drop} pts"
                )
    # and plainly more: 5 runs against 1, 1,319 documents against 30
    assert grid[300, 5, 5][0] > grid[300, 1, 5][0] + 0.4
    assert grid[1319, 2, 5][0] > grid[30, 2, 5][0] + 0.5


def test_a_5_point_drop_over_300_documents_and_5_runs_is_caught_85_percent_of_the_time() -> None:
    rate = pg.fail_rate(300, 5, 5, 600, seed=1)
    assert rate >= 0.85, rate  # a t test on the per-document means has ~90 % here


def _pilot(rng: np.random.Generator, docs: int, runs: int, drop: float) -> tuple[np.ndarray, np.ndarray]:
    """Documents the tuned model helps or hurts (+-20 pts, mean 0), and a mean drop of `drop`."""
    p = rng.uniform(0.4, 0.6, docs)
    q = p + rng.uniform(-0.2, 0.2, docs) - drop
    base = (rng.random((runs, docs)) < p).astype(float)
    return base, (rng.random((runs, docs)) < q).astype(float)


def test_following_the_advice_detects_the_effect_it_plans_for_80_percent_of_the_time() -> None:
    """A pilot of 60 documents x 2 runs with no change; where its line is INCONCLUSIVE and the advice
    names documents or runs for a floor-sized drop, fresh data at that count with a true drop of the
    pilot's floor is FAILed 80 % +- 10 of the time (pooled over the pilots), and no advice names a count
    already taken. Pilots whose data show a run shift plan for it and get more (at least 70 %)."""
    caught = {False: [0, 0], True: [0, 0]}  # shift seen -> [caught, trials]
    advised = 0
    for seed in range(12):
        rng = np.random.default_rng([7, seed])
        line = judge_line(pg.UNIT, "none", "acc", *_pilot(rng, 60, 2, 0.0), True, "not-worse", None, 2.0)
        if line.result.verdict != "INCONCLUSIVE" or line.power is None:
            continue
        floor = line.result.floor / 100
        docs = re.search(r"about ([\d,]+) documents at these runs \(now 60\)", line.power)
        runs = re.search(r"(\d+) runs per arm at these documents \(now 2 \+ 2\)", line.power)
        plans = [(int(docs.group(1).replace(",", "")), 2)] if docs else []
        plans += [(60, int(runs.group(1)))] if runs else []
        for n, r in plans:
            assert n > 60 or r > 2  # never a count already taken
            advised += 1
            tally = caught["runs shift" in line.result.reason]
            for _ in range(60):
                fresh = _pilot(rng, n, r, floor)
                tally[0] += (
                    judge_line(pg.UNIT, "none", "acc", *fresh, True, "not-worse", None, 2.0).result.verdict
                    == "FAIL"
                )
                tally[1] += 1
    assert advised >= 6
    plain = caught[False][0] / caught[False][1]
    assert 0.70 <= plain <= 0.90, plain
    if caught[True][1]:
        assert caught[True][0] / caught[True][1] >= 0.70


def test_the_docs_show_the_table_the_tests_measure(grid) -> None:  # type: ignore[no-untyped-def]
    assert pg.table(grid) in DOCS_PAGE.read_text(encoding="utf-8")
