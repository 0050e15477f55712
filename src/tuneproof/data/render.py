"""Tables for `tuneproof buckets` (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.data.compare import SamplerResult


def render_buckets(
    results: list[SamplerResult],
    sweep: list[dict[str, Any]],
    n: int,
    micro_batch: int,
    grad_accum: int,
    attn: str | None,
    console: Console,
) -> None:
    from rich.table import Table

    base = next((r for r in results if r.name == "random"), None)
    t = Table(
        title=f"{n} lengths, micro-batch {micro_batch}, grad-accum {grad_accum} "
        "(windows = grad-accum consecutive micro-batches)"
    )
    cols = ["sampler", "padding", "zero-pad", "roots/window", "length mix", "plan s"]
    if attn:
        cols += [f"attn FLOPs ({attn})", "perf/int"]
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
        if attn:
            a = r.attention
            row += [f"{a['performed']:.3e}", f"{a['performed'] / a['intended']:.2f}x"]
        t.add_row(*row)
    console.print(t)
    console.print(
        "(%) = share of the random shuffle's value. Packed rows hold many documents, so their "
        "windows are not comparable on roots or length mix."
    )
    if sweep:
        st = Table(
            title="bucket width sweep: padding grows, mixing does not move "
            "(bucket size is not a diversity knob)"
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
