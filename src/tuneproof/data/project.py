"""`tuneproof plan`: the whole run's wall time, projected from its real batch plan before launch.

Trainers' ETAs extrapolate the first steps linearly, which is wrong whenever widths vary (the CASE's
run finished in 7:21:52 against a 13.85 h projection). Here every micro-batch of every epoch is
planned by the sampler the run will use, timed by a step-cost fit (`StepCost`: per sequence from
`--fit`, per micro-batch from measured points or a probe), dealt to the ranks, and every
synchronisation waits for the slowest rank (`tuneproof.data.ranks`). Wall time = the sum of those
waits, plus a per-optimizer-step overhead when one is given (the optimizer update, logging).

What the step cost covers: a micro-batch is costed at its padded width, every token slot computed
(what padding costs); packed rows as their documents (a document-masked kernel: flex or flash
varlen; under SDPA the block-diagonal mask is materialised and costs far more, see `tuneproof
buckets --config`). A mask's own effect on the kernel (SDPA leaves its causal fast path for padded
batches) is not in a fit measured on unpadded micro-batches.

Uncertainty: with measured points (or a probe) the fit's coefficients are re-estimated on bootstrap
resamples of the repeats within each width, and each resample's projection gives the 95 % interval;
a fit given as numbers carries none (said so). Widths beyond the measured range are extrapolated: the
projection says which share of its time lies outside the points' widths, and how far.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneproof import validate
from tuneproof.data.compare import PLAN_SAMPLERS
from tuneproof.data.plan import Plan
from tuneproof.data.ranks import StepCost, check_fills_one_step, use_of
from tuneproof.errors import TuneproofError

SAMPLERS = PLAN_SAMPLERS
RESAMPLES = 400


@dataclass(frozen=True, slots=True)
class StepModel:
    """A step-cost fit with its bootstrap replicates (empty when the fit was given as numbers), and the
    widths it was measured at (None: unknown)."""

    cost: StepCost
    replicates: list[StepCost] = field(default_factory=list)
    measured: tuple[int, int] | None = None  # (narrowest, widest) measured width
    source: str = "given"
    no_interval: str = (
        "a fit given as numbers carries no uncertainty (time points or probe the model for one)"
    )

    @classmethod
    def from_points(
        cls, widths: np.ndarray, seconds: np.ndarray, batch: int, seed: int = 0, source: str = "points"
    ) -> StepModel:
        """Fit t = [C +] A*w + B*w^2 per micro-batch of `batch` rows to timed repeats (the constant
        kept unless the fit's constant test shows it absent), with bootstrap replicates."""
        from tuneproof.measure.fit import Samples, fit_scaling, nonneg

        fit = fit_scaling(widths, seconds, seed=seed)
        samples = Samples.of(widths, seconds)
        with_c = fit.constant_in_model
        cost = StepCost(fit.a, fit.b, fit.c if with_c else 0.0, batch)
        replicates = []
        if samples.resamplable:
            rng = np.random.default_rng([seed, 7])
            for _ in range(RESAMPLES):
                med = np.array([np.median(rng.choice(k, k.size)) for k in samples.kept])
                coef = nonneg(samples.widths, med, with_c)
                c, a, b = [float(v) for v in coef] if with_c else [0.0, *(float(v) for v in coef)]
                if a > 0 or b > 0:
                    replicates.append(StepCost(a, b, c, batch))
        span = (int(samples.widths.min()), int(samples.widths.max()))
        few = min(k.size for k in samples.kept)
        why = (
            f"{few} kept repeat(s) at a width: an interval needs more (time longer)" if not replicates else ""
        )
        return cls(cost, replicates, span, source, why)


@dataclass(slots=True)
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
    check_fills_one_step(int(lengths.size), micro_batch, grad_accum, ranks)
    micro_batches = math.ceil(int(lengths.size) / micro_batch)
    per_epoch = math.ceil(micro_batches / (ranks * grad_accum))
    if epochs * per_epoch < 1:
        raise TuneproofError(
            f"{{epochs}} {epochs:g} is less than one optimizer step (an epoch is {per_epoch} steps)",
            f"pass at least {1 / per_epoch:.3g}",
            fields=("epochs",),
        )
    out = []
    for name in samplers:
        out.append(_project_one(name, lengths, micro_batch, grad_accum, model, ranks, epochs, seed,
                                step_overhead_s, gpu_hour_cost))  # fmt: skip
    return out


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
    return Projection(name, point, ci, steps, micro, tokens, work / (ranks * busy) if busy else 1.0,
                      epochs, cost_usd, extrapolated, widest)  # fmt: skip


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


def probe_step_model(
    model: Any,
    attn: str,
    mode: str,
    micro_batch: int,
    budget_s: float,
    seed: int,
    lengths: np.ndarray,
    progress: Callable[[str], None] | None = None,
) -> tuple[StepModel, float]:
    """Time `model` (a ResolvedModel, random weights) at three widths up to the longest length, with
    micro-batches of `micro_batch`, and what a Trainer step adds beyond them (collator, clipping,
    AdamW, scheduler, bookkeeping): (the fitted StepModel, seconds per optimizer step)."""
    import torch

    from tuneproof.measure.probe import ProbeSpec, check_probe, span_widths, time_widths, timing_rows
    from tuneproof.measure.steps import probe_model, trainer_overhead

    widths = span_widths([int(lengths.min()), int(lengths.max())])
    if widths is None:
        raise TuneproofError(
            f"the longest length ({int(lengths.max())}) is too short for a 4x span of probe widths",
            "give the step cost as a fit or as timed points",
        )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    spec = ProbeSpec(attn=attn, widths=widths, batch=micro_batch, mode=mode, device=device, budget_s=budget_s,
                     seed=seed)  # fmt: skip
    try:
        check_probe(model, spec)
    except TuneproofError as e:
        raise TuneproofError(
            f"the probe cannot time this run's longest lengths here: {e.what}",
            "time them on the machine that fits them and give the points, or give a fit",
        ) from None
    net = probe_model(model, spec)
    steps, timing = time_widths(model, spec, progress, net)
    ws, ts = timing_rows(timing)
    ran = ", ".join(map(str, sorted(timing.timings)))
    source = f"probe of {model.name} ({mode}, {attn}, {device}) at widths {ran}"
    fitted = StepModel.from_points(ws, ts, micro_batch, seed, source)
    overhead = 0.0
    if mode != "forward":
        if progress:
            progress("a Trainer step's own overhead")
        narrowest = min(timing.timings)
        overhead, _ = trainer_overhead(net, spec, int(model.config.vocab_size), steps[narrowest])
    return fitted, overhead
