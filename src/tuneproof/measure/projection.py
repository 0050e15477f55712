"""The whole run's wall time, projected from its real batch plan (`tuneproof plan`'s engine, which the
doctor and bench/plan_vs_run.py run too): every micro-batch of every epoch planned by the sampler the
run will use (`tuneproof.data`), timed by a step model (`StepModel`: a fit, measured points or a
probe), dealt to the ranks, every synchronisation waiting for the slowest rank; wall time is the sum
of those waits plus a per-optimizer-step overhead when one is given. The command's own module,
`tuneproof.commands.plan`, says what the step cost covers and how its interval is made.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.data.batch_plan import Plan
from tuneproof.data.compare import PLAN_SAMPLERS
from tuneproof.data.ranks import StepCost, check_fills_one_step, use_of
from tuneproof.measure.step_model import StepModel

SAMPLERS = PLAN_SAMPLERS


@dataclass(kw_only=True, slots=True)
class Projection:
    sampler: str
    wall_s: float
    wall_s_ci95: tuple[float, float] | None
    steps: int
    micro_batches: int  # per rank, over the run
    tokens: int  # real tokens trained on, every rank
    utilisation: float
    epochs: float
    cost_usd: float | None = None
    extrapolated_share: float = 0.0  # share of the wall time spent at widths outside the measured range
    widest: int = 0  # the plan's widest micro-batch

    def to_dict(self) -> dict[str, Any]:
        return {
            "sampler": self.sampler, "wall_s": self.wall_s,
            "wall_s_ci95": list(self.wall_s_ci95) if self.wall_s_ci95 else None, "steps": self.steps,
            "micro_batches_per_rank": self.micro_batches, "tokens": self.tokens,
            "utilisation": self.utilisation, "epochs": self.epochs, "cost_usd": self.cost_usd,
            "extrapolated_share": self.extrapolated_share, "widest": self.widest,
        }  # fmt: skip


def check_plan_args(
    micro_batch: int, grad_accum: int, ranks: int, epochs: float, samplers: tuple[str, ...], seed: int,
    step_overhead_s: float, gpu_hour_cost: float | None,
) -> None:  # fmt: skip
    validate.integer("micro_batch", micro_batch, high=1 << 20)
    validate.integer("grad_accum", grad_accum, high=1 << 20)
    validate.integer("ranks", ranks, high=1 << 16, hint="the number of processes (GPUs)")
    validate.real("epochs", epochs, low=0.0, low_open=True, high=1e4, hint="passes over the data")
    validate.integer("seed", seed, low=0, high=2**63 - 1)
    validate.real("step_overhead_s", step_overhead_s, low=0.0, high=1e6, hint="seconds per optimizer step")
    if gpu_hour_cost is not None:
        validate.real("gpu_hour_cost", gpu_hour_cost, low=0.0, high=1e6, hint="USD per GPU-hour")
    if not samplers:
        raise TuneproofError("{sampler} is empty", f"give one or more of {', '.join(SAMPLERS)}",
                             fields=("sampler",))  # fmt: skip
    for s in samplers:
        validate.choice("sampler", s, SAMPLERS)


def project(
    lengths: np.ndarray,
    micro_batch: int,
    grad_accum: int,
    model: StepModel,
    ranks: int = 1,
    epochs: float = 1.0,
    samplers: tuple[str, ...] = SAMPLERS,
    seed: int = 0,
    step_overhead_s: float = 0.0,
    gpu_hour_cost: float | None = None,
) -> list[Projection]:
    """The run's wall time per sampler, from every micro-batch its plan holds."""
    check_plan_args(micro_batch, grad_accum, ranks, epochs, samplers, seed, step_overhead_s, gpu_hour_cost)
    check_run(lengths, micro_batch, grad_accum, ranks, epochs)
    return project_checked(lengths, micro_batch, grad_accum, model, ranks, epochs, samplers, seed,
                        step_overhead_s, gpu_hour_cost)  # fmt: skip


def project_checked(
    lengths: np.ndarray, micro_batch: int, grad_accum: int, model: StepModel, ranks: int, epochs: float,
    samplers: tuple[str, ...], seed: int, step_overhead_s: float, gpu_hour_cost: float | None,
) -> list[Projection]:  # fmt: skip
    """`project` on arguments already checked."""
    return [_project_one(name, lengths, micro_batch, grad_accum, model, ranks, epochs, seed, step_overhead_s,
                         gpu_hour_cost) for name in samplers]  # fmt: skip


def check_run(lengths: np.ndarray, micro_batch: int, grad_accum: int, ranks: int, epochs: float) -> None:
    """The lengths fill one optimizer step on every rank, and the epochs hold at least one step."""
    check_fills_one_step(int(lengths.size), micro_batch, grad_accum, ranks)
    micro_batches = math.ceil(int(lengths.size) / micro_batch)
    per_epoch = math.ceil(micro_batches / (ranks * grad_accum))
    if epochs * per_epoch < 1:
        raise TuneproofError(
            f"{{epochs}} {epochs:g} is less than one optimizer step (an epoch is {per_epoch} steps)",
            f"pass at least {1 / per_epoch:.3g}",
            fields=("epochs",),
        )


def _project_one(
    name: str, lengths: np.ndarray, micro_batch: int, grad_accum: int, model: StepModel, ranks: int,
    epochs: float, seed: int, step_overhead_s: float, gpu_hour_cost: float | None,
) -> Projection:  # fmt: skip
    whole = math.ceil(epochs)
    features = []  # per epoch: (ones, rows/batch*w, rows/batch*w^2) per micro-batch in run order
    tokens, widest = 0, 0
    capacity = micro_batch * int(lengths.max()) if name == "packing" else None
    planner = _planner(name, lengths, micro_batch, grad_accum, ranks, seed)  # one sampler, every epoch
    for epoch in range(whole):
        plan = Plan.from_batches(planner(epoch))
        x = _features(plan, lengths, model.cost.batch, capacity)
        if epoch == whole - 1 and epochs < whole:  # a fraction of the last epoch: its first steps
            keep = round((epochs - epoch) * x.shape[1] / (ranks * grad_accum)) * ranks * grad_accum
            x = x[:, : max(keep, ranks)]
            plan = plan.select(np.arange(min(len(plan), x.shape[1])))
        features.append(x)
        tokens += int(sum(int(lengths[b].sum()) for b in plan))
        widest = max(widest, max(int(lengths[b].max()) for b in plan))

    def wall(cost: StepCost) -> tuple[float, Any]:
        uses = [use_of(cost.c * x[0] + cost.a * x[1] + cost.b * x[2], ranks, grad_accum) for x in features]
        return sum(u.wall_s + step_overhead_s * u.steps for u in uses), uses

    point, uses = wall(model.cost)
    steps = sum(u.steps for u in uses)
    work = sum(u.work_s for u in uses)
    busy = sum(u.wall_s for u in uses)
    ci = None
    if model.replicates:
        walls = np.array([wall(c)[0] for c in model.replicates])
        ci = (float(np.percentile(walls, 2.5)), float(np.percentile(walls, 97.5)))
    micro = sum(-(-x.shape[1] // ranks) for x in features)
    extrapolated = _extrapolated_share(features, model) if model.measured else 0.0
    cost_usd = gpu_hour_cost * ranks * point / 3600 if gpu_hour_cost is not None else None
    return Projection(sampler=name, wall_s=point, wall_s_ci95=ci, steps=steps, micro_batches=micro,
                      tokens=tokens, utilisation=work / (ranks * busy) if busy else 1.0, epochs=epochs,
                      cost_usd=cost_usd,
                      extrapolated_share=extrapolated, widest=widest)  # fmt: skip


def _features(plan: Plan, lengths: np.ndarray, batch: int, capacity: int | None) -> np.ndarray:
    """(3, micro-batches): the constant's, A's and B's multipliers of each micro-batch's time."""
    ones = np.ones(len(plan))
    if capacity is None:
        widths = np.array([int(lengths[b].max()) for b in plan], dtype=np.float64)
        rows = plan.sizes.astype(np.float64) / batch
        return np.stack([ones, rows * widths, rows * widths * widths])
    lin = np.array([float(lengths[b].sum()) for b in plan]) / batch
    quad = np.array([float((lengths[b].astype(np.float64) ** 2).sum()) for b in plan]) / batch
    return np.stack([ones, lin, quad])


def _extrapolated_share(features: list[np.ndarray], model: StepModel) -> float:
    """Share of the (single-rank) compute spent at widths outside the measured range."""
    assert model.measured is not None
    lo, hi = model.measured
    c = model.cost
    total = outside = 0.0
    for x in features:
        widths = x[2] / np.maximum(x[1], 1e-300)  # w^2 / w (packed rows: their documents' mean, weighted)
        seconds = c.c * x[0] + c.a * x[1] + c.b * x[2]
        total += float(seconds.sum())
        outside += float(seconds[(widths < lo) | (widths > hi)].sum())
    return outside / total if total else 0.0


def _planner(
    name: str, lengths: np.ndarray, micro_batch: int, grad_accum: int, ranks: int, seed: int
) -> Callable[[int], Any]:
    """epoch -> the global plan (run order; rank r runs positions r, r + R, ...)."""
    from tuneproof.data.packing import PackedBatchSampler
    from tuneproof.data.sampler import BucketBatchSampler
    from tuneproof.data.stats import hf_length_grouped_plan, random_plan

    if name == "ours":
        sampler = BucketBatchSampler(lengths, micro_batch, grad_accum, seed=seed, num_replicas=ranks, rank=0)
        return lambda epoch: sampler.global_plan(epoch)
    if name == "random":
        return lambda epoch: random_plan(lengths.size, micro_batch, seed + epoch)
    if name == "hf-length-grouped":
        # the Trainer groups mega-batches of per-device batch x grad-accum; accelerate deals the batches
        return lambda epoch: hf_length_grouped_plan(lengths, micro_batch, grad_accum, seed + epoch)
    packed = PackedBatchSampler(
        lengths, micro_batch * int(lengths.max()), seed=seed, num_replicas=ranks, rank=0
    )

    def packing(epoch: int) -> Any:
        packed.set_epoch(epoch)
        return packed.global_plan()

    return packing


def fastest(projections: list[Any], model: Any) -> str:
    """Which sampler is fastest, said only when the projection can tell: under a fit given as numbers
    the ranking is the fit's; with measured points, only when the fastest's interval clears the rest."""
    best = min(projections, key=lambda p: p.wall_s)
    others = [p for p in projections if p is not best]
    if not model.replicates and model.measured is not None:
        return f"no sampler named fastest: {model.no_interval}"
    if model.replicates and any(
        p.wall_s_ci95 is None or best.wall_s_ci95 is None or p.wall_s_ci95[0] <= best.wall_s_ci95[1]
        for p in others
    ):
        return "no sampler named fastest: the intervals overlap (inconclusive)"
    saved = hours(max(p.wall_s for p in projections) - best.wall_s)
    return (
        f"the fastest, {best.sampler}, saves {saved} on the slowest"
        + ("" if model.replicates else " (under this fit)")
        + (PACKING_ASSUMES if best.sampler == "packing" else "")
    )


def hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


# A packed row costs what its documents cost alone only when attention is masked per document
# (flex_attention with a document mask, FlashAttention's varlen path); SDPA over the whole row pays
# (sum of lengths)^2 or a dense mask, and lets documents see each other.
PACKING_ASSUMES = (
    "; packing's time assumes a document-masked kernel (flex_attention or FlashAttention varlen), "
    "under SDPA a packed row costs the square of its whole width"
)
