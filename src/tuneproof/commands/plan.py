"""`tuneproof plan`: the whole run's wall time, projected from its real batch plan before launch.

Trainers' ETAs extrapolate the first steps linearly, which is wrong whenever widths vary (the reference run's
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

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.data.ranks import StepCost
from tuneproof.measure.projection import (
    SAMPLERS,
    Projection,
    check_plan_args,
    check_run,
    fastest,
    hours,
    project_checked,
)
from tuneproof.measure.step_model import StepModel

if TYPE_CHECKING:
    pass
    from rich.console import Console


# ---- the front door: `tuneproof plan` ------------------------------------------------------------


@dataclass(kw_only=True, frozen=True, slots=True)
class ProjectionSpec:
    """What `tuneproof plan` projects. The step cost comes one way: `fit` (a StepCost given as numbers),
    `points` (a width,seconds CSV) or `probe` (a ResolvedModel timed now with `attn`, `mode` and
    `probe_budget_s`). `step_overhead_s` None: measured by the probe, else 0."""

    lengths_file: Path | None = None
    micro_batch: int = 2
    grad_accum: int = 1
    ranks: int = 1
    epochs: float = 1.0
    fit: StepCost | None = None
    points: Path | None = None
    probe: Any = None
    attn: str = "sdpa"
    mode: str = "lora"
    probe_budget_s: float = 30.0
    samplers: tuple[str, ...] = SAMPLERS
    step_overhead_s: float | None = None
    gpu_hour_cost: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        check_plan_args(self.micro_batch, self.grad_accum, self.ranks, self.epochs, self.samplers, self.seed,
                        self.step_overhead_s or 0.0, self.gpu_hour_cost)  # fmt: skip
        given = (("fit", self.fit), ("points", self.points), ("probe", self.probe))
        sources = ["{" + name + "}" for name, value in given if value is not None]
        if len(sources) != 1:
            raise TuneproofError(
                "give the step cost one way" + (f", not {' and '.join(sources)}" if sources else ""),
                "pass {fit} A,B, {points} CSV, or {probe} (with {config})",
                fields=("fit", "points", "probe", "config"),
            )
        if self.probe is not None:
            validate.real("probe_budget_s", self.probe_budget_s, low=0.0, low_open=True, high=86_400.0)


@dataclass(kw_only=True, frozen=True, slots=True)
class ProjectionPlan:
    spec: ProjectionSpec
    lengths: np.ndarray
    points: tuple[np.ndarray, np.ndarray, int, str] | None  # widths, seconds, their batch, said how
    probe: Any  # the checked ProbeSpec, or None


def prepare(spec: ProjectionSpec) -> ProjectionPlan:
    """Read the points (before the lengths: a bad file fails fast) and the lengths, check that they fill
    the run, and check the probe's spec against the model and this machine."""
    from tuneproof.data.lengths import read_lengths, synthetic_lengths
    from tuneproof.measure.step_model import points_batch, probe_spec

    points = None
    if spec.points is not None:
        from tuneproof.measure.points import read_points

        widths, seconds = read_points(spec.points)
        points = (widths, seconds, *points_batch(spec.points, spec.micro_batch))
    lengths, _ = read_lengths(spec.lengths_file) if spec.lengths_file is not None else synthetic_lengths()
    check_run(lengths, spec.micro_batch, spec.grad_accum, spec.ranks, spec.epochs)
    probe = None
    if spec.probe is not None:
        probe = probe_spec(spec.probe, spec.attn, spec.mode, spec.micro_batch, spec.probe_budget_s, spec.seed,
                           lengths)  # fmt: skip
    return ProjectionPlan(spec=spec, lengths=lengths, points=points, probe=probe)


def run(plan: ProjectionPlan, progress: Progress | None = None) -> ProjectionResult:
    """The step-cost model (given, fitted to the points, or probed now), then every sampler's projection."""
    s = plan.spec
    overhead = s.step_overhead_s
    if s.fit is not None:
        model = StepModel(cost=s.fit)
    elif plan.points is not None:
        widths, seconds, batch, said = plan.points
        model = StepModel.from_points(widths, seconds, batch, s.seed, f"points from {s.points}, {said}")
    else:
        from tuneproof.measure.step_model import time_step_model

        model, measured = time_step_model(s.probe, plan.probe, progress)
        overhead = measured if overhead is None else overhead
    source = (
        "given"
        if s.step_overhead_s is not None
        else ("measured by the probe" if s.probe is not None else "none")
    )
    overhead = overhead or 0.0
    projections = project_checked(plan.lengths, s.micro_batch, s.grad_accum, model, s.ranks, s.epochs,
                               s.samplers, s.seed, overhead, s.gpu_hour_cost)  # fmt: skip
    return ProjectionResult(projections=projections, model=model, num_lengths=int(plan.lengths.size),
                            micro_batch=s.micro_batch, grad_accum=s.grad_accum, ranks=s.ranks,
                            epochs=s.epochs, step_overhead_s=overhead,
                            step_overhead_source=source)  # fmt: skip


@dataclass(kw_only=True, slots=True)
class ProjectionResult:
    projections: list[Projection]
    model: StepModel
    num_lengths: int
    micro_batch: int
    grad_accum: int
    ranks: int
    epochs: float
    step_overhead_s: float
    step_overhead_source: str  # "given" | "measured by the probe" | "none"
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> None:
        return None

    def to_dict(self) -> dict[str, Any]:
        m = self.model
        return {
            "num_lengths": self.num_lengths, "micro_batch": self.micro_batch, "grad_accum": self.grad_accum,
            "ranks": self.ranks, "epochs": self.epochs, "step_overhead_s": self.step_overhead_s,
            "step_overhead_source": self.step_overhead_source,
            "step_cost": {
                "A": m.cost.a, "B": m.cost.b, "C": m.cost.c, "batch": m.cost.batch, "source": m.source,
                "measured_widths": list(m.measured) if m.measured else None, "replicates": len(m.replicates),
                "no_interval": m.no_interval if not m.replicates else None,
            },
            "samplers": {p.sampler: p.to_dict() for p in self.projections},
        }  # fmt: skip

    def render(self, console: Any) -> None:

        render_projection(self, console)


def render_projection(result: ProjectionResult, console: Console) -> None:
    """`tuneproof plan`: one row per sampler, the interval, and what the projection extrapolates."""
    from tuneproof.core.tables import Table

    projections, model = result.projections, result.model
    cost = model.cost
    terms = (
        f"C = {cost.c:.3g} s + " if cost.c else ""
    ) + f"A = {cost.a:.3g} s/token, B = {cost.b:.3g} s/token^2"
    per = "per sequence" if cost.batch == 1 else f"per micro-batch of {cost.batch}"
    t = Table(
        title=f"{result.num_lengths:,} lengths, micro-batch {result.micro_batch}, grad-accum "
        f"{result.grad_accum}, {result.ranks} rank(s), {result.epochs:g} epoch(s)"
    )
    cols = ["sampler", "wall", "95 % interval", "steps", "rank use", "tokens"]
    if projections and projections[0].cost_usd is not None:
        cols.append("cost")
    for c in cols:
        t.add_column(c, justify="left" if c == "sampler" else "right")
    for p in projections:
        ci = f"{hours(p.wall_s_ci95[0])} - {hours(p.wall_s_ci95[1])}" if p.wall_s_ci95 else "-"
        row = [
            p.sampler,
            hours(p.wall_s),
            ci,
            f"{p.steps:,}",
            f"{100 * p.utilisation:.1f} %",
            f"{p.tokens:,}",
        ]
        if p.cost_usd is not None:
            row.append(f"${p.cost_usd:,.2f}")
        t.add_row(*row)
    console.print(t)
    console.print(f"step cost: {terms} {per} ({model.source})")
    overhead = result.step_overhead_s
    if overhead or result.step_overhead_source != "none":
        first = projections[0] if projections else None
        share = 100 * overhead * first.steps / first.wall_s if first and first.wall_s else 0.0
        name = first.sampler if first else ""
        console.print(
            f"per optimizer step: + {1000 * overhead:.1f} ms ({result.step_overhead_source}), "
            f"{share:.0f} % of {name}'s time"
        )
    if not model.replicates:
        console.print(f"no interval: {model.no_interval}")
    if model.measured is not None:
        lo, hi = model.measured
        for p in projections:
            if p.extrapolated_share >= 0.005:
                console.print(
                    f"{p.sampler}: {100 * p.extrapolated_share:.0f} % of the time is at widths outside the "
                    f"measured {lo:,}-{hi:,} (widest micro-batch {p.widest:,}, "
                    f"{p.widest / hi:.1f}x the widest measured): extrapolated"
                )
    if len(set(p.tokens for p in projections)) > 1:
        console.print(
            "tokens differ between samplers: a fraction of an epoch takes each sampler's first steps, and "
            "filling the last step on every rank repeats a few examples"
        )
    if len(projections) > 1:
        console.print(
            ", ".join(f"{p.sampler} {hours(p.wall_s)}" for p in projections)
            + f": {fastest(projections, model)}"
        )
