"""Honest timing: warm-up runs excluded, device synchronised before each clock read, repeats
reported as median, min and spread (max - min) with their count. Never a single run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuneproof.errors import TuneproofError


@dataclass(frozen=True, slots=True)
class Timing:
    median_s: float
    min_s: float
    spread_s: float  # max - min over the timed repeats
    repeats: int
    warmup: int
    times_s: tuple[float, ...] = ()  # every timed repeat, in order

    def to_dict(self) -> dict[str, object]:
        return {
            "median_s": self.median_s,
            "min_s": self.min_s,
            "spread_s": self.spread_s,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "times_s": list(self.times_s),
        }

    def __str__(self) -> str:
        return (
            f"median {self.median_s * 1e3:.3f} ms (min {self.min_s * 1e3:.3f}, spread "
            f"{self.spread_s * 1e3:.3f}; {self.repeats} repeats after {self.warmup} warm-up)"
        )


def _sync(device: str) -> Callable[[], None]:
    if device == "cuda":
        import torch

        return torch.cuda.synchronize
    return lambda: None


def time_fn(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 2, device: str = "cpu") -> Timing:
    """Time `fn` `repeats` times after `warmup` untimed calls, synchronising `device` around each."""
    if repeats < 2:
        raise TuneproofError(f"repeats must be >= 2, got {repeats}", "a single run is not a measurement")
    if warmup < 0:
        raise TuneproofError(f"warmup must be >= 0, got {warmup}", "pass 0 or more warm-up runs")
    sync = _sync(device)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return Timing(
        statistics.median(times), min(times), max(times) - min(times), repeats, warmup, tuple(times)
    )
