"""Tables for `tuneproof buckets` (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.data.compare import SamplerResult
    from tuneproof.data.project import ProjectionResult


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


# A packed row costs what its documents cost alone only when attention is masked per document
# (flex_attention with a document mask, FlashAttention's varlen path); SDPA over the whole row pays
# (sum of lengths)^2 or a dense mask, and lets documents see each other.
PACKING_ASSUMES = (
    "; packing's time assumes a document-masked kernel (flex_attention or FlashAttention varlen), "
    "under SDPA a packed row costs the square of its whole width"
)


def hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"
