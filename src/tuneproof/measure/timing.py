"""Honest timing of several workloads (one per width) on a machine that may be shared.

- Warm-up calls run first and are never timed.
- The clock is `torch.utils.benchmark`'s `timer`, which synchronises the accelerator before reading
  the time, so a timed call includes its device work.
- Workloads are interleaved: each round runs every width once, in an order rotated per round, so a
  neighbour's burst of load hits every width alike instead of biasing the one being timed.
- A repeat far from its width's median (`tuneproof.measure.robust.outliers`) is excluded, said so,
  and made up for by further rounds.
- Rounds continue until every width's median is known to within `target` (its distribution-free
  95 % interval, which needs 6 repeats) or the time budget ends; a floor of 3 rounds always runs.

Why not `torch.utils.benchmark.Timer.adaptive_autorange` alone: it measures one statement until its
own IQR is small, so a burst during width 1024's turn lands on width 1024 only and bends the fit;
it keeps outliers. bench/timing_under_load.py measures both under a bursty neighbour process.
(`measure_peak`, one GEMM, does use adaptive_autorange.)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.measure import robust

K = TypeVar("K", bound=Hashable)
MIN_ROUNDS = 3  # outliers cannot be told from two repeats


def default_clock() -> float:
    """Seconds, after synchronising the accelerator when one is present (torch.utils.benchmark)."""
    from torch.utils.benchmark.utils.timer import timer

    return float(timer())


@dataclass(frozen=True, slots=True)
class Timing:
    """The timed repeats of one workload, in order, and which were excluded as outliers."""

    times_s: tuple[float, ...]
    outlier: tuple[bool, ...]
    warmup: int

    def __post_init__(self) -> None:
        assert len(self.times_s) == len(self.outlier)

    @property
    def kept(self) -> np.ndarray:
        t = np.asarray(self.times_s, dtype=float)
        return t[~np.asarray(self.outlier, dtype=bool)] if t.size else t

    @property
    def excluded(self) -> list[float]:
        """The repeats set aside as outliers, in order."""
        return [self.times_s[i] for i in np.flatnonzero(np.asarray(self.outlier, dtype=bool))]

    @property
    def repeats(self) -> int:
        return int(self.kept.size)

    @property
    def num_outliers(self) -> int:
        return int(sum(self.outlier))

    @property
    def median_s(self) -> float:
        return float(np.median(self.kept))

    @property
    def min_s(self) -> float:
        return float(self.kept.min())

    @property
    def spread_s(self) -> float:
        """max - min of the kept repeats."""
        return float(self.kept.max() - self.kept.min())

    @property
    def median_interval(self) -> tuple[float, float] | None:
        return robust.median_interval(self.kept)

    @property
    def relative_halfwidth(self) -> float | None:
        return robust.relative_halfwidth(self.kept)

    def to_dict(self) -> dict[str, object]:
        ci = self.median_interval
        return {
            "median_s": self.median_s,
            "median_ci_s": list(ci) if ci else None,
            "min_s": self.min_s,
            "spread_s": self.spread_s,
            "repeats": self.repeats,
            "outliers_excluded": self.excluded,
            "warmup": self.warmup,
            "times_s": list(self.times_s),
        }

    def __str__(self) -> str:
        ci = self.median_interval
        where = f", 95 % interval {ci[0] * 1e3:.3f}-{ci[1] * 1e3:.3f}" if ci else ""
        out = f"; {self.num_outliers} outlier(s) excluded" if self.num_outliers else ""
        return (
            f"median {self.median_s * 1e3:.3f} ms{where} (min {self.min_s * 1e3:.3f}, spread "
            f"{self.spread_s * 1e3:.3f}; {self.repeats} repeats after {self.warmup} warm-up{out})"
        )


class Skip(Exception):
    """Raised by a workload that cannot run (out of memory): its width is dropped with this reason."""


@dataclass(kw_only=True, slots=True)
class Interleaved(Generic[K]):
    timings: dict[K, Timing]
    skipped: dict[K, str]
    rounds: int
    seconds: float
    stopped: str  # why the rounds ended, in words
    target: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "seconds": self.seconds,
            "stopped": self.stopped,
            "target_relative_halfwidth": self.target,
            "notes": self.notes,
        }


def _tight(t: Timing, min_repeats: int, target: float) -> bool:
    half = t.relative_halfwidth
    return t.repeats >= min_repeats and half is not None and half <= target


def time_interleaved(
    steps: dict[K, Callable[[], Any]],
    *,
    warmup: int = 1,
    min_repeats: int = 6,
    max_repeats: int = 30,
    budget_s: float | None = 60.0,
    target: float = 0.05,
    clock: Callable[[], float] = default_clock,
    progress: Callable[[str], None] | None = None,
    after_first: Callable[[dict[K, float], float], float] | None = None,
    after_round: Callable[[int, float], None] | None = None,
) -> Interleaved[K]:
    """Time every workload in `steps` round-robin (see the module docstring). `budget_s` None: no
    budget, the rounds end at `max_repeats` or when every median is tight. `after_first`, given each
    workload's first timed seconds and the seconds timed so far after round 1, returns the rounds'
    budget from then on (the probe's whole budget, `tuneproof.measure.budget`); it may raise.
    `after_round` hears each round's number and seconds."""
    validate.integer("warmup", warmup, low=0, high=100)
    validate.integer("min_repeats", min_repeats, low=MIN_ROUNDS, high=10_000)
    validate.integer("max_repeats", max_repeats, low=min_repeats, high=10_000)
    if budget_s is not None:
        validate.real("budget_s", budget_s, low=0.0, low_open=True)
    validate.real("target", target, low=0.0, low_open=True, high=1.0)
    if not steps:
        raise TuneproofError("nothing to time", "give at least one workload")
    active = dict(steps)
    skipped: dict[K, str] = {}
    _warm_up(active, skipped, warmup, progress)
    times: dict[K, list[float]] = {k: [] for k in active}
    keys = list(active)
    start = clock()
    rounds, last_round = 0, 0.0
    stopped = f"{max_repeats} rounds (the most allowed)"
    asked = budget_s
    while rounds < max_repeats and keys:
        elapsed = clock() - start
        if budget_s is not None and rounds >= MIN_ROUNDS and elapsed + last_round > budget_s:
            stopped = f"the {asked or budget_s:g} s budget ended after {rounds} rounds"
            break
        round_start = clock()
        shift = rounds % len(keys)
        for key in keys[shift:] + keys[:shift]:
            if key not in active:
                continue
            if progress:
                progress(f"round {rounds + 1}: timing {key}")
            try:
                t0 = clock()
                active[key]()
                times[key].append(clock() - t0)
            except Skip as e:
                skipped[key] = str(e)
                del active[key]
        keys = [k for k in keys if k in active]
        rounds += 1
        last_round = clock() - round_start
        if rounds == 1 and after_first is not None:
            budget_s = after_first({k: times[k][0] for k in keys}, clock() - start)
        if after_round is not None:
            after_round(rounds, last_round)
        current = {k: _timing(times[k], warmup) for k in keys}
        if rounds >= MIN_ROUNDS and current and all(_tight(t, min_repeats, target) for t in current.values()):
            stopped = f"every width's median known to +-{100 * target:g} % after {rounds} rounds"
            break
    timings = {k: _timing(times[k], warmup) for k in keys}
    return Interleaved(
        timings=timings,
        skipped=skipped,
        rounds=rounds,
        seconds=clock() - start,
        stopped=stopped,
        target=target,
        notes=_notes(timings, target),
    )


def _warm_up(
    active: dict[K, Callable[[], Any]],
    skipped: dict[K, str],
    warmup: int,
    progress: Callable[[str], None] | None,
) -> None:
    """Run every workload `warmup` times untimed; one that raises `Skip` moves from `active` to
    `skipped` with its reason."""
    for key, fn in list(active.items()):
        if progress:
            progress(f"warm-up {key}")
        try:
            for _ in range(warmup):
                fn()
        except Skip as e:
            skipped[key] = str(e)
            del active[key]


def _notes(timings: dict[K, Timing], target: float) -> list[str]:
    """What the timings say about themselves: outliers excluded, medians not known to `target`."""
    notes = []
    for key, t in timings.items():
        if t.num_outliers:
            excluded = ", ".join(f"{x:.4g} s" for x in t.excluded)
            notes.append(
                f"{key}: {t.num_outliers} outlier repeat(s) excluded "
                f"({excluded} vs median {t.median_s:.4g} s)"
            )
        if robust.two_regimes(t.times_s):
            notes.append(
                f"{key}: the repeats fall into two regimes (more than a fifth far above the median: "
                "another process held a core for part of the run); none set aside, the interval spans both"
            )
        half = t.relative_halfwidth
        if half is None or half > target:
            known = (
                f"has no 95 % interval ({t.repeats} kept repeats, it needs {robust.MIN_FOR_INTERVAL})"
                if half is None
                else f"is known to +-{100 * half:.1f} %"
            )
            notes.append(f"{key}: the median {known}, not to the +-{100 * target:g} % asked for")
    return notes


def _timing(times: list[float], warmup: int) -> Timing:
    flags = robust.outliers(times)
    return Timing(tuple(times), tuple(bool(f) for f in flags), warmup)


def time_fn(
    fn: Callable[[], Any],
    *,
    repeats: int = 6,
    warmup: int = 1,
    clock: Callable[[], float] = default_clock,
) -> Timing:
    """Time one workload exactly `repeats` times after `warmup` untimed calls (no budget, no early stop;
    outliers are flagged, not re-measured)."""
    validate.integer("repeats", repeats, low=MIN_ROUNDS, high=10_000, hint="outliers need three repeats")
    run = time_interleaved(
        {"fn": fn}, warmup=warmup, min_repeats=repeats, max_repeats=repeats, budget_s=None, clock=clock
    )
    return run.timings["fn"]
