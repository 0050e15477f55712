"""`tuneproof buckets`: a `BucketsSpec` (lengths, batching, the baselines), `prepare` (the lengths read
and checked) and `run`: bucketing against random, HF length grouping and packing (`data.compare`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneproof.core.progress import Progress
from tuneproof.data.compare import COMPARE_CHOICES, case_cost, check_compare_args, compare

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console

    from tuneproof.data.compare import SamplerResult


@dataclass(kw_only=True, frozen=True, slots=True)
class BucketsSpec:
    """What `tuneproof buckets` compares: the lengths file (None: the shipped synthetic set), the
    batching, the baselines and sweep widths, and optionally a model (a `ResolvedModel`) whose
    attention FLOPs each plan performs under `attn`; `cost` (a `StepCost`) for utilisation across ranks."""

    lengths_file: Path | None = None
    micro_batch: int = 2
    grad_accum: int = 16
    sweep: tuple[int, ...] = ()
    choices: tuple[str, ...] = COMPARE_CHOICES
    model: Any = None
    attn: str = "sdpa"
    seed: int = 0
    ranks: int = 1
    cost: Any = None

    def __post_init__(self) -> None:
        check_compare_args(
            self.micro_batch, self.grad_accum, self.choices, self.sweep, self.attn, self.seed, self.ranks
        )


@dataclass(kw_only=True, frozen=True, slots=True)
class BucketsPlan:
    spec: BucketsSpec
    lengths: np.ndarray
    roots: np.ndarray | None
    warnings: list[str]


def prepare(spec: BucketsSpec) -> BucketsPlan:
    """Read the lengths; refuse lengths that do not fill one optimizer step; note a longest length past
    the model's max_position_embeddings."""
    from tuneproof.data.lengths import read_lengths, synthetic_lengths
    from tuneproof.data.ranks import check_fills_one_step

    lengths, roots = read_lengths(spec.lengths_file) if spec.lengths_file is not None else synthetic_lengths()
    check_fills_one_step(int(lengths.size), spec.micro_batch, spec.grad_accum, spec.ranks)
    problem = spec.model.positions_problem(int(lengths.max()), "the longest length") if spec.model else None
    warnings = [problem] if problem else []  # bucketing only counts widths: noted, not refused
    return BucketsPlan(spec=spec, lengths=lengths, roots=roots, warnings=warnings)


def run(plan: BucketsPlan, progress: Progress | None = None) -> BucketsResult:
    s = plan.spec
    shape = s.model.shape if s.model is not None else None
    results, rows = compare(plan.lengths, plan.roots, s.micro_batch, s.grad_accum, s.choices, s.sweep,
                             shape, s.attn, s.seed, s.ranks, s.cost)  # fmt: skip
    cost = s.cost if s.cost is not None else case_cost()
    attn = s.attn if shape is not None else None
    return BucketsResult(samplers=results, sweep=rows, num_lengths=int(plan.lengths.size),
                         micro_batch=s.micro_batch, grad_accum=s.grad_accum, ranks=s.ranks, cost=cost,
                         attn=attn, warnings=plan.warnings)  # fmt: skip


@dataclass(kw_only=True, slots=True)
class BucketsResult:
    samplers: list[SamplerResult]
    sweep: list[dict[str, Any]]
    num_lengths: int
    micro_batch: int
    grad_accum: int
    ranks: int
    cost: Any  # StepCost of the utilisation across ranks
    attn: str | None  # the path the attention FLOPs are counted under; None without a model
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> None:
        return None

    def to_dict(self) -> dict[str, Any]:
        c = self.cost
        return {
            "num_lengths": self.num_lengths,
            "micro_batch": self.micro_batch,
            "grad_accum": self.grad_accum,
            "ranks": self.ranks,
            "step_cost": {"A": c.a, "B": c.b, "C": c.c} if self.ranks > 1 else None,
            "samplers": {r.name: r.to_dict() for r in self.samplers},
            "sweep": self.sweep,
            "attn": self.attn,
        }

    def render(self, console: Any) -> None:
        render_buckets(self.samplers, self.sweep, self.num_lengths, self.micro_batch, self.grad_accum,
                       self.attn, console, self.ranks)  # fmt: skip


def render_buckets(
    results: list[SamplerResult],
    sweep: list[dict[str, Any]],
    n: int,
    micro_batch: int,
    grad_accum: int,
    attn: str | None,
    console: Console,
    ranks: int = 1,
) -> None:
    from tuneproof.core.tables import Table

    base = next((r for r in results if r.name == "random"), None)
    window = (
        "windows = grad-accum consecutive micro-batches"
        if ranks == 1
        else f"{ranks} ranks; windows = one optimizer step, grad-accum x ranks micro-batches"
    )
    t = Table(title=f"{n} lengths, micro-batch {micro_batch}, grad-accum {grad_accum} ({window})")
    cols = ["sampler", "padding", "zero-pad", "roots", "mix", "plan s"]
    if ranks > 1:
        cols += ["rank use"]
    if attn:
        cols += [f"attn FLOPs ({attn})", "perf / int"]
    for c in cols:
        t.add_column(c, justify="left" if c == "sampler" else "right")
    for r in results:
        s = r.stats
        rel = ""
        if base is not None and r is not base and s.roots_per_window and base.stats.roots_per_window:
            rel = f" ({100 * s.roots_per_window / base.stats.roots_per_window:.0f}%)"
        mix = f"{s.length_mix:.3f}" + (
            f" ({100 * s.length_mix / base.stats.length_mix:.0f}%)"
            if base is not None and r is not base and base.stats.length_mix
            else ""
        )
        row = [
            r.name,
            f"{100 * s.padding_fraction:.2f} %",
            f"{100 * s.zero_pad_share:.1f} %",
            f"{s.roots_per_window:.2f}{rel}" if s.roots_per_window is not None else "-",
            mix,
            f"{r.plan_seconds:.3f}",
        ]
        if ranks > 1:
            row += [f"{100 * r.ranks.utilisation:.1f} %"]
        if attn:
            a = r.attention
            row += [f"{a['performed']:.3e}", f"{a['performed'] / a['intended']:.2f}x"]
        t.add_row(*row)
    console.print(t)
    console.print(
        "(%) = share of the random shuffle's value. Packed rows hold many documents, so their "
        "windows are not comparable on roots or length mix."
    )
    if ranks > 1:
        console.print(
            "rank use = work done / (ranks x the slowest rank's time), summed over optimizer steps (DDP "
            "syncs once per step), from the step-cost fit. Rank i runs micro-batches i, i + ranks, ...; "
            "ours is rank-synchronous (neighbouring widths run together on the ranks), its interleaved "
            "variant deals one rank's plan round-robin. With grad-accum 1 a synchronous step holds one "
            "width on every rank: its length mix per step is ~0 by construction; mixing comes back "
            "with grad-accum (each rank's window holds grad-accum shuffled widths)."
        )
    if sweep:
        st = Table(
            title="bucket width sweep, one rank, windows of grad-accum micro-batches: padding grows, "
            "roots per window do not move (bucket size is not a diversity knob)"
        )
        for c in ("bucket width", "padding", "zero-pad", "roots/window", "length mix"):
            st.add_column(c, justify="right")
        for sw in sweep:
            st.add_row(
                str(sw["bucket_width"]),
                f"{100 * sw['padding_fraction']:.2f} %",
                f"{100 * sw['zero_pad_share']:.1f} %",
                f"{sw['roots_per_window']:.2f}" if sw["roots_per_window"] is not None else "-",
                f"{sw['length_mix']:.3f}",
            )
        console.print(st)
