"""Human-readable tables for the measurement tools (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from rich.markup import escape

from tuneproof.measure.kernels import CLASSES, PROFILE_COLUMNS

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.measure.fit import ScalingFit
    from tuneproof.measure.kernels import KernelTable, RankTables
    from tuneproof.measure.peak import MeasuredPeak
    from tuneproof.measure.probe_result import ProbeResult
    from tuneproof.trace.timeline import Timeline


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


KERNEL_NAME_CHARS = 60  # a kernel's name in the table; --json holds every name whole


def _short(name: str, at: int | None = None) -> str:
    """A long kernel name cut with a visible '...' (a cut that looks like the real name misleads): its
    head and tail, or with `at`, its head and the part from `at` (where it differs from a neighbour)."""
    n = KERNEL_NAME_CHARS
    if len(name) <= n:
        return name
    if at is None or at < n // 2:
        return name[: 3 * n // 5] + "..." + name[-(2 * n // 5 - 3) :]
    end = at - 4 + n - n // 3 - 6
    return name[: n // 3] + "..." + name[at - 4 : end] + ("..." if end < len(name) else "")


def _common(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _shorts(names: list[str]) -> list[str]:
    """Cut names that stay distinct: where two cut the same, each shows where it first differs from
    the others that cut alike."""
    cut = [_short(n) for n in names]
    out = list(cut)
    for i, n in enumerate(names):
        alike = [m for j, m in enumerate(names) if cut[j] == cut[i] and m != n]
        if alike:
            out[i] = _short(n, max(_common(n, m) for m in alike))
    return out


def render_kernels(table: KernelTable, console: Console) -> None:
    from tuneproof.core.tables import Table

    where = (
        "device kernels" if table.source == "device" else "CPU operator rows (self time; no device kernels)"
    )
    tl = table.timeline
    multi = tl is not None and tl.num_streams > 1  # on one stream, summed time is busy (wall) time
    rank = f" (rank {escape(table.rank)})" if table.rank else ""
    t = Table(title=f"time by kernel class, from {where}{rank}")
    cols = ["class", "ms summed", "share of summed"] + (["share of window"] if multi else [])
    for col in (*cols, "top kernels (ms, calls)"):
        t.add_column(col, justify="left" if col in ("class", "top kernels (ms, calls)") else "right")
    for cls in CLASSES:
        rows = table.top.get(cls, [])[:3]
        shorts = _shorts([n for n, _, _ in rows])
        tops = "; ".join(f"{escape(c)} ({_ms(ms)}, {k})" for c, (_, ms, k) in zip(shorts, rows, strict=True))
        wall = table.wall_share(cls)
        cells = [cls, _ms(table.ms.get(cls, 0.0)), _pct(table.share(cls))]
        t.add_row(*cells, *([_pct(wall) if wall is not None else "-"] if multi else []), tops or "-")
    console.print(t)
    if tl is None:
        span = table.total_ms + table.idle_ms  # CPU self times tile the operators' union
        pct = f" ({100 * table.idle_ms / span:.1f} % of the {span:.4g} ms from first start to last end)"
        console.print(f"idle between them: {table.idle_ms:.3g} ms" + (pct if span else ""))
    else:
        _render_timeline(tl, console)
    if table.unclassified:
        shorts = _shorts([n for n, _, _ in table.unclassified])
        named = "; ".join(
            f"{escape(c)} ({_ms(ms)} ms, {_pct(ms / table.total_ms)})"
            for c, (_, ms, _) in zip(shorts, table.unclassified, strict=True)
        )
        console.print(f"unclassified (no rule matched, counted in other), over 1 % of summed time: {named}")
    if table.device:  # trace_device.device_info: CUDA capability, ROCm gfx arch or CPU only
        console.print(f"device: {escape(str(table.device.get('description')))}")
    for m in table.arch_mismatch:
        console.print(f"[bold]finding:[/bold] {escape(m.finding)}; e.g. {escape(', '.join(m.examples))}")


def _ms(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def _render_timeline(tl: Timeline, console: Console) -> None:
    w = tl.window_ms

    def of_w(x: float) -> str:
        return f"{100 * x / w:.1f} % of the window" if w else "no window"

    if tl.num_streams == 1:
        console.print(
            f"window (first start to last end): {_ms(w)} ms on one stream; "
            f"kernels busy {_ms(tl.union_ms)} ms "
            f"({of_w(tl.union_ms)}), idle {_ms(tl.idle_ms)} ms ({of_w(tl.idle_ms)})"
        )
        return
    console.print(
        f"window (first start to last end): {_ms(w)} ms; summed kernel time {_ms(tl.summed_ms)} ms "
        f"({tl.summed_ms / w if w else 0:.2f}x the window) on {tl.num_streams} streams; "
        f"busy on any stream {_ms(tl.union_ms)} ms ({of_w(tl.union_ms)})"
    )
    console.print(f"idle (window minus busy): {_ms(tl.idle_ms)} ms ({of_w(tl.idle_ms)})")
    streams = ", ".join(
        f"{escape(k)} {_ms(v)} ms" for k, v in sorted(tl.stream_ms.items(), key=lambda kv: -kv[1])
    )
    console.print(f"busy per stream (device/stream): {streams}")
    hidden = tl.comm_overlap_of_comm()
    console.print(
        f"overlap: compute with communication {_ms(tl.comm_compute_overlap_ms)} ms "
        f"({of_w(tl.comm_compute_overlap_ms)}"
        + (f"; {100 * hidden:.1f} % of communication time" if hidden is not None else "")
        + f"), compute with compute on two or more streams {_ms(tl.compute_compute_overlap_ms)} ms "
        f"({of_w(tl.compute_compute_overlap_ms)})"
    )


def render_ranks(ranks: RankTables, console: Console) -> None:
    for table in ranks.tables:
        render_kernels(table, console)
        console.print("")
    sk = ranks.skew
    if sk is not None:
        ratio = (
            f"{sk.max_over_min:.3f}x" if sk.max_over_min is not None else "unknown (a rank has no busy time)"
        )
        slow, fast = max(sk.union_ms), min(sk.union_ms)  # the ratio's own numbers (labels are distinct)
        console.print(
            f"rank skew (busy on any stream): slowest rank {escape(sk.slowest)} {_ms(slow)} ms, "
            f"fastest rank {escape(sk.fastest)} {_ms(fast)} ms, max/min {ratio}"
        )


def render_fit(fit: ScalingFit, console: Console) -> None:
    from tuneproof.core.tables import Table

    console.print(
        f"{fit.model}, NNLS on per-width medians of {fit.num_rows} rows: A = {fit.a:.4g} s/token, "
        f"B = {fit.b:.4g} s/token^2" + (f", C = {fit.c:.4g} s" if fit.constant_in_model else "")
    )
    console.print(f"model: {escape(fit.model_reason)}")
    title = "quadratic share B*w^2 / t(w)" + (f", {fit.ci_method}" if fit.quad_share_ci else "")
    table = Table(title=title)
    for col in ("width", "rows", "median t (s)", "fit t (s)", "quadratic share", "95 % interval"):
        table.add_column(col, justify="right")
    for w, share in fit.quad_share.items():
        ci = fit.quad_share_ci.get(w) if fit.quad_share_ci else None
        table.add_row(
            f"{w:g}",
            str(fit.rows.get(w, "-")),
            f"{fit.medians[w]:.4g}" if w in fit.medians else "-",
            f"{fit.fitted(w):.4g}",
            "unstable" if w in fit.unstable else _pct(share),
            f"{100 * ci[0]:.1f}-{100 * ci[1]:.1f} %" if ci else "-",
        )
    console.print(table)
    if fit.ci_reason:
        console.print(f"interval: {fit.ci_reason}")
    for w, rows in fit.outliers.items():
        if rows:
            console.print(
                f"width {w:g}: {len(rows)} outlying repeat(s) set aside ("
                + ", ".join(f"{x:.4g}" for x in rows)
                + f" s vs median {fit.medians[w]:.4g} s)"
            )
    worst = max(abs(r) for r in fit.residuals_s)
    console.print(f"largest residual of the medians: {worst * 1e3:.2f} ms")
    console.print(f"constant term: {fit.constant.verdict}: {escape(fit.constant.reason)}")


def render_probe(result: ProbeResult, console: Console) -> None:
    from tuneproof.core.tables import Table
    from tuneproof.flops.render import render_mfu

    s = result.spec
    console.print(
        f"[bold]probe[/bold] {escape(result.model)}: attn={s.attn}, mode={s.mode}"
        f"{', grad-ckpt' if s.grad_ckpt else ''}, batch {s.batch}, {s.device} {s.torch_dtype}"
    )
    timing = result.timing
    console.print(f"timing: widths interleaved round-robin; {timing.stopped} ({timing.seconds:.1f} s)")
    t = Table(title="step time per width (warm-up excluded, outliers set aside)")
    for col in ("width", "median s", "95 % interval", "repeats", "outliers", "fit s", "quad share", "95 %"):
        t.add_column(col, justify="right")
    f = result.fit
    for w, tm in sorted(result.timings.items()):
        ci = tm.median_interval
        q_ci = f.quad_share_ci.get(float(w)) if f.quad_share_ci else None
        t.add_row(
            str(w),
            f"{tm.median_s:.4f}",
            f"{ci[0]:.4f}-{ci[1]:.4f}" if ci else "unknown",
            str(tm.repeats),
            str(tm.num_outliers),
            f"{f.fitted(w):.4f}",
            "unstable" if float(w) in f.unstable else _pct(f.quad_share[float(w)]),
            f"{100 * q_ci[0]:.1f}-{100 * q_ci[1]:.1f}" if q_ci else "-",
        )
    console.print(t)
    if f.ci_reason:
        console.print(f"quad share interval: {escape(f.ci_reason)}")
    if f.unstable:
        console.print(
            f"quad share unstable at {', '.join(f'{x:g}' for x in f.unstable)}: the estimate lies "
            "outside its own interval (the fit is unstable at these widths; time more repeats)"
        )
    for note in timing.notes:
        console.print(f"note: {escape(note)}")
    for w, reason in sorted(result.skipped.items()):
        console.print(f"skipped width {w}: {escape(reason)}")
    console.print(
        f"fit: {f.model}: A = {f.a:.4g} s/token, B = {f.b:.4g} s/token^2"
        + (f", C = {f.c:.4g} s" if f.constant_in_model else "")
    )
    console.print(f"constant term: {f.constant.verdict}: {escape(f.constant.reason)}")
    render_kernels(result.kernels, console)
    kt = Table(title="profiled time per width (median of the kept profiles, ms)")
    kt.add_column("width", justify="right")
    kt.add_column("profiles", justify="right")
    for c in PROFILE_COLUMNS:
        kt.add_column(c, justify="right")
    for w, profiles in sorted(result.kernel_ms.items()):
        medians = (float(np.median([p[c] for p in profiles])) for c in PROFILE_COLUMNS)
        kt.add_row(str(w), str(len(profiles)), *(f"{m:.1f}" for m in medians))
    console.print(kt)
    cross = result.cross
    console.print(f"[bold]cross-check:[/bold] {escape(cross.line())}")
    for line in cross.explanation:
        console.print(f"  {escape(line)}")
    for note in cross.notes:
        console.print(f"  note: {escape(note)}")
    rep = result.flops
    console.print(
        f"FLOPs at width {result.profiled_width}: intended {rep.intended.total:.3e}, "
        f"performed {rep.performed.total:.3e} (see `tuneproof flops` for the ledger)"
    )
    render_mfu(rep, console, mfu_lines=False)  # MFU once, with its interval
    for d in result.derived:
        if d.name.startswith("mfu_") and d.value is not None:
            console.print(f"  {escape(d.text())}")
    for k, v in result.files.items():
        console.print(f"{k}: {escape(v)}")


def render_peak(result: MeasuredPeak, console: Console) -> None:
    console.print(
        f"measured peak: {result.tflops:.4g} TFLOP/s dense {result.dtype} on {result.device} "
        f"({result.size}^3 GEMM, median {result.median_s * 1e3:.3f} ms, IQR {result.iqr_s * 1e3:.3f} ms, "
        f"{result.runs} runs)"
    )
    t = result.table
    if t is not None and t.tflops is not None:
        share = f": measured is {100 * (result.share_of_table or 0):.1f} % of it"
        console.print(
            f"table peak: {t.tflops:g} TFLOP/s dense {t.dtype} ({escape(t.source or '')}){share}",
            soft_wrap=True,
        )
    elif t is not None:
        console.print(f"table peak: none ({escape(t.reason or '')})", soft_wrap=True)
