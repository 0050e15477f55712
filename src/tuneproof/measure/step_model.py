"""The step-cost model a projection times micro-batches with (`StepModel`): a fit given as numbers,
fitted here to timed points (with bootstrap replicates for an interval), or measured now by a probe
of the model (with what a Trainer step adds beyond its micro-batches)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.core.extras import require
from tuneproof.data.ranks import StepCost

RESAMPLES = 400


@dataclass(kw_only=True, frozen=True, slots=True)
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
        from tuneproof.measure.fit import Samples, fit_scaling, nonneg, require_growth

        fit = fit_scaling(widths, seconds, seed=seed)
        samples = Samples.of(widths, seconds)
        with_c = fit.constant_in_model
        require_growth(fit, widths, source)
        cost = StepCost(a=fit.a, b=fit.b, c=fit.c if with_c else 0.0, batch=batch)
        replicates = []
        if samples.resamplable:
            rng = np.random.default_rng([seed, 7])
            for _ in range(RESAMPLES):
                med = np.array([np.median(rng.choice(k, k.size)) for k in samples.kept])
                coef = nonneg(samples.widths, med, with_c)
                c, a, b = [float(v) for v in coef] if with_c else [0.0, *(float(v) for v in coef)]
                if a > 0 or b > 0:
                    replicates.append(StepCost(a=a, b=b, c=c, batch=batch))
        span = (int(samples.widths.min()), int(samples.widths.max()))
        few = min(k.size for k in samples.kept)
        why = (
            f"{few} kept repeat(s) at a width: an interval needs more (time longer)" if not replicates else ""
        )
        return cls(cost=cost, replicates=replicates, measured=span, source=source, no_interval=why)


def points_batch(points: Path, micro_batch: int) -> tuple[int, str]:
    """The batch the points were timed at: the probe's own (its probe.json beside points.csv), else
    `micro_batch`, and the words that say which."""
    beside = points.parent / "probe.json"
    try:
        batch = json.loads(beside.read_text())["spec"]["batch"]
    except (OSError, ValueError, KeyError, TypeError):
        return (
            micro_batch,
            f"taken as micro-batches of {micro_batch} (--micro-batch; no probe.json beside them)",
        )
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        return micro_batch, f"taken as micro-batches of {micro_batch} (probe.json's batch unreadable)"
    return batch, f"timed at batch {batch} ({beside}), scaled to the plan's micro-batches"


def probe_spec(model: Any, attn: str, mode: str, micro_batch: int, budget_s: float, seed: int,
               lengths: np.ndarray) -> Any:  # fmt: skip
    """The `ProbeSetup` that times `model` (a ResolvedModel) at three widths up to the longest length,
    with micro-batches of `micro_batch`, checked (`check_probe`) before anything is built."""
    import torch

    from tuneproof.attention.paths import names as path_names
    from tuneproof.core import validate
    from tuneproof.measure.probe import ProbeSetup, check_probe, span_widths
    from tuneproof.runs.run import Run

    if mode != "forward":  # the step's own overhead is timed in a real Trainer step (accelerate, PEFT)
        require("train", f"timing a {mode} Trainer step (the plan's probe)")
    # widths past the model's positions cannot run: the probe stops there and the plan names how far
    # its longest lengths are extrapolated beyond the widest measured
    longest = min(int(lengths.max()), model.max_positions or int(lengths.max()))
    widths = span_widths([int(lengths.min()), longest])
    if widths is None:
        raise TuneproofError(
            f"the longest length the probe can time ({longest}) is too short for a 4x span of probe widths",
            "give the step cost as a fit or as timed points",
        )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    validate.choice("attn", attn, path_names(probe=True))  # the paths a probe can run
    run = Run.of_flags(attn=attn, mode=mode, seq_len=max(widths), micro_batch=micro_batch)
    spec = ProbeSetup(run=run, widths=widths, batch=micro_batch, device=device, budget_s=budget_s, seed=seed)
    try:
        check_probe(model, spec)
    except TuneproofError as e:
        raise TuneproofError(
            f"the probe cannot time this run's longest lengths here: {e.message}",
            "time them on the machine that fits them and give the points, or give a fit",
        ) from None
    return spec


def probe_step_model(
    model: Any, attn: str, mode: str, micro_batch: int, budget_s: float, seed: int, lengths: np.ndarray,
    progress: Callable[[str], None] | None = None,
) -> tuple[StepModel, float]:  # fmt: skip
    """`probe_spec` and `time_step_model` in one call."""
    spec = probe_spec(model, attn, mode, micro_batch, budget_s, seed, lengths)
    return time_step_model(model, spec, progress)


def time_step_model(
    model: Any, spec: Any, progress: Callable[[str], None] | None = None
) -> tuple[StepModel, float]:
    """Time `model` (random weights) as `spec` (from `probe_spec`) says, and what a Trainer step adds
    beyond its micro-batches (collator, clipping, AdamW, scheduler, bookkeeping): (the fitted
    StepModel, seconds per optimizer step)."""
    from tuneproof.measure.probe import time_widths, timing_rows
    from tuneproof.measure.steps import probe_model, trainer_overhead

    net = probe_model(model, spec)
    steps, timing = time_widths(model, spec, progress, net)
    ws, ts = timing_rows(timing)
    ran = ", ".join(map(str, sorted(timing.timings)))
    source = f"probe of {model.name} ({spec.mode}, {spec.attn}, {spec.device}) at widths {ran}"
    fitted = StepModel.from_points(ws, ts, spec.batch, spec.seed, source)
    overhead = 0.0
    if spec.mode != "forward":
        if progress:
            progress("a Trainer step's own overhead")
        narrowest = min(timing.timings)
        overhead, _ = trainer_overhead(net, spec, int(model.config.vocab_size), steps[narrowest])
    return fitted, overhead
