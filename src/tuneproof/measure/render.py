"""Human-readable tables for the measurement tools (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.measure.kernels import KernelTable
    from tuneproof.measure.probe import ProbeResult

from rich.markup import escape

from tuneproof.measure.kernels import CLASSES


def render_kernels(table: KernelTable, console: Console) -> None:
    from rich.table import Table

    where = (
        "device kernels" if table.source == "device" else "CPU operator rows (self time; no device kernels)"
    )
    t = Table(title=f"time by kernel class, from {where}")
    for col in ("class", "ms", "share", "top kernels (ms, calls)"):
        t.add_column(col, justify="right" if col in ("ms", "share") else "left")
    for cls in CLASSES:
        tops = "; ".join(f"{escape(n[:70])} ({ms:.1f}, {k})" for n, ms, k in table.top.get(cls, [])[:3])
        t.add_row(cls, f"{table.ms.get(cls, 0.0):.1f}", f"{100 * table.share(cls):.1f} %", tops or "-")
    console.print(t)
    if table.device:
        console.print(
            f"device: {table.device.get('name')} (compute capability "
            f"{table.device.get('computeMajor')}.{table.device.get('computeMinor')})"
        )
    for m in table.arch_mismatch:
        console.print(f"[bold]finding:[/bold] {escape(m.finding)}; e.g. {escape(', '.join(m.examples))}")


def render_probe(result: ProbeResult, console: Console) -> None:
    from rich.table import Table

    from tuneproof.flops.render import render_mfu

    s = result.spec
    console.print(
        f"[bold]probe[/bold] {s.config}: attn={s.attn}, mode={s.mode}{', grad-ckpt' if s.grad_ckpt else ''}, "
        f"batch {s.batch}, {s.device} {s.torch_dtype}"
    )
    t = Table(title="step time per width (warm-up excluded)")
    for col in ("width", "median s", "min s", "spread s", "repeats", "fit s", "quadratic share"):
        t.add_column(col, justify="right")
    f = result.fit
    for w, tm in sorted(result.timings.items()):
        t.add_row(
            str(w),
            f"{tm.median_s:.4f}",
            f"{tm.min_s:.4f}",
            f"{tm.spread_s:.4f}",
            str(tm.repeats),
            f"{f.a * w + f.b * w * w:.4f}",
            f"{100 * f.quad_share[float(w)]:.1f} %",
        )
    console.print(t)
    for w, reason in sorted(result.skipped.items()):
        console.print(f"skipped width {w}: {reason}")
    console.print(f"fit: A = {f.a:.4g} s/token, B = {f.b:.4g} s/token^2; constant term: {f.constant.reason}")
    render_kernels(result.kernels, console)
    console.print(f"[bold]cross-check:[/bold] {result.cross_check_line()}")
    console.print(f"  {result.meaning}")
    rep = result.flops
    console.print(
        f"FLOPs at width {result.profiled_width}: intended {rep.intended.total:.3e}, "
        f"performed {rep.performed.total:.3e} (see `tuneproof flops` for the ledger)"
    )
    render_mfu(rep, console)
    for k, v in result.files.items():
        console.print(f"{k}: {v}")
