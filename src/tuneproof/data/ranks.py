"""Rank utilisation: how much of a multi-GPU run is spent waiting for the slowest rank.

A plan (micro-batches in run order, index arrays into `lengths`) is dealt to R ranks the way every
sampler here and torch's DistributedSampler-style dealing do it: rank r runs positions r, r + R,
r + 2R, ... (a plan whose length is not a multiple of R is completed by repeating its first
micro-batches, as the samplers do). Ranks synchronise once per optimizer step (DDP: the gradient
all-reduce after G micro-batches, `sync="step"`) or once per micro-batch (FSDP gathers the weights
for every forward and reduces every backward, `sync="micro"`). At each synchronisation every rank
waits for the slowest, so

    utilisation = work done / (R x the slowest rank's work), summed over synchronisations,

and the run's wall time is the sum of the slowest ranks' times. A micro-batch's time comes from a
step-cost model: `StepCost(a=, b=, c=, batch=)`, t = c + (rows / batch) x (a*w + b*w^2) at padded width w
(a fit per sequence has batch 1; a probe's fit has the probe's batch), or any callable of (widths,
rows). Packed rows (`capacity` given) cost the sum over their documents (document masks: no
attention across documents, no padding).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.data.batch_plan import Plan

SYNCS = ("step", "micro")


@dataclass(kw_only=True, frozen=True, slots=True)
class StepCost:
    """Seconds of one micro-batch: c + (rows / batch) x (a*w + b*w^2) at padded width w."""

    a: float
    b: float
    c: float = 0.0
    batch: int = 1

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            value = getattr(self, name)
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            if not ok or value < 0:
                raise TuneproofError(
                    f"step-cost term {name} is {value!r}",
                    "the terms of t = c + a*w + b*w^2 are finite and >= 0: a negative term is no cost",
                )
        if self.a == 0 and self.b == 0:
            raise TuneproofError(
                "step-cost terms a and b are both 0", "give the fit's linear or quadratic term"
            )
        validate.integer("batch", self.batch, high=1 << 20, hint="the batch the fit was measured at")

    def __call__(self, widths: np.ndarray, rows: np.ndarray) -> np.ndarray:
        w = widths.astype(np.float64)
        return self.c + rows / self.batch * (self.a * w + self.b * w * w)


Cost = StepCost | Callable[[np.ndarray, np.ndarray], np.ndarray]


def micro_batch_seconds(
    plan: Sequence[np.ndarray], lengths: np.ndarray, cost: Cost, capacity: int | None = None
) -> np.ndarray:
    """Each micro-batch's time in run order: padded to its longest row, or (packed rows, `capacity`
    given) the sum over its documents, each at its own length."""
    p = Plan.from_batches(plan)
    if not len(p):
        return np.zeros(0)
    ro = np.arange(p.starts.size - 1) if p.run_order is None else p.run_order
    stored = lengths[p.flat]
    if capacity is None:
        widths = np.maximum.reduceat(stored, p.starts[:-1])
        seconds = np.asarray(cost(widths, p.stored_sizes.astype(np.float64)), dtype=np.float64)
    else:
        per_doc = np.asarray(cost(stored, np.ones(stored.size)), dtype=np.float64)
        if isinstance(cost, StepCost):  # the constant is per micro-batch, not per document
            per_doc = per_doc - cost.c
        seconds = np.add.reduceat(per_doc, p.starts[:-1]) + (cost.c if isinstance(cost, StepCost) else 0.0)
    return seconds[ro]


@dataclass(kw_only=True, frozen=True, slots=True)
class RankUse:
    ranks: int
    grad_accum: int
    sync: str
    steps: int  # optimizer steps
    syncs: int  # synchronisations (steps, or micro-batch rounds with sync="micro")
    work_s: float  # every rank's busy seconds, summed
    wall_s: float  # sum over synchronisations of the slowest rank's seconds

    @property
    def utilisation(self) -> float:
        return self.work_s / (self.ranks * self.wall_s) if self.wall_s > 0 else 1.0

    def to_dict(self) -> dict[str, float | int | str]:
        return {
            "ranks": self.ranks, "grad_accum": self.grad_accum, "sync": self.sync, "steps": self.steps,
            "syncs": self.syncs, "work_s": self.work_s, "wall_s": self.wall_s,
            "utilisation": self.utilisation,
        }  # fmt: skip


def rank_utilisation(
    plan: Sequence[np.ndarray],
    lengths: np.ndarray,
    ranks: int,
    grad_accum: int,
    cost: Cost,
    sync: str = "step",
    capacity: int | None = None,
) -> RankUse:
    """Utilisation and wall time of `plan` (the global plan, in run order) dealt to `ranks` ranks."""
    validate.integer("ranks", ranks, high=1 << 16, hint="the number of processes (GPUs)")
    validate.integer("grad_accum", grad_accum, high=1 << 20)
    validate.choice("sync", sync, SYNCS)
    seconds = micro_batch_seconds(plan, lengths, cost, capacity)
    return use_of(seconds, ranks, grad_accum, sync)


def check_fills_one_step(num_lengths: int, micro_batch: int, grad_accum: int, ranks: int) -> None:
    """Refuse lengths that cannot fill one optimizer step on every rank (the plan would be repeats)."""
    one_step = micro_batch * grad_accum * ranks
    if num_lengths < one_step:
        raise TuneproofError(
            f"{num_lengths:,} lengths do not fill one optimizer step ({micro_batch} x {grad_accum} "
            f"micro-batches on each of {ranks} ranks = {one_step} sequences)",
            "pass more lengths, or fewer ranks, a smaller micro-batch or less accumulation",
        )


def use_of(seconds: np.ndarray, ranks: int, grad_accum: int, sync: str = "step") -> RankUse:
    """`rank_utilisation` from each micro-batch's seconds in run order."""
    n = seconds.size
    if n == 0:
        return RankUse(
            ranks=ranks, grad_accum=grad_accum, sync=sync, steps=0, syncs=0, work_s=0.0, wall_s=0.0
        )
    per_rank = -(-n // ranks)
    dealt = seconds[np.arange(per_rank * ranks) % n].reshape(per_rank, ranks)  # round x rank
    steps = -(-per_rank // grad_accum)
    if sync == "micro":
        slowest = dealt.max(axis=1)
    else:
        window = np.arange(per_rank) // grad_accum
        sums = np.zeros((steps, ranks))
        np.add.at(sums, window, dealt)
        slowest = sums.max(axis=1)
    return RankUse(
        ranks=ranks,
        grad_accum=grad_accum,
        sync=sync,
        steps=steps,
        syncs=slowest.size,
        work_s=float(dealt.sum()),
        wall_s=float(slowest.sum()),
    )
