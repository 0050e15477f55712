"""Human-readable tables for a `MemoryReport` (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from tuneproof.memory.report import HEADROOM_WARN, UNKNOWN, gib

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.memory.report import MemoryReport

ACTIVATION_ORDER = (
    "embedding", "mask", "norms", "projections", "adapters", "attention", "mlp", "experts", "weights",
    "lm_head", "loss",
)  # fmt: skip


def render_report(report: MemoryReport, console: Console) -> None:
    from tuneproof.core.tables import Table

    run, p = report.run, report.performed
    pr, tr = run.precision, run.training
    console.print(
        f"[bold]memory ledger[/bold] {report.model_type}: T={run.seq_len} x B={run.batch}, attn={run.attn}, "
        f"mode={run.mode}" + (", grad-ckpt" if run.grad_ckpt else "")
        + f"; weights {pr.dtype}" + (f" ({pr.quant})" if pr.quant else "")
        + (f", autocast {pr.autocast}" if pr.autocast else ", no autocast")
        + f"; {tr.optimizer} ({tr.optimizer_impl})"
        + (f", {tr.grad_accum} micro-batches per step" if tr.grad_accum > 1 else "")
        + (f"; {tr.parallel} over {tr.world_size} ranks, per rank" if tr.world_size > 1 else "")
    )  # fmt: skip
    top = p.peak.top
    console.print(f"peak {gib(top.total)} at {escape(top.where)}")
    table = Table(title="at the peak")
    table.add_column("component")
    table.add_column("bytes", justify="right")
    sharding = sum(i.nbytes for i in p.sharding)
    for name, value in (
        ("weights and adapters", top.fixed - sharding), ("optimizer states", top.optimizer_states),
        ("gradients", top.gradients), ("activations saved for backward", top.activations),
        ("temporaries", top.temporaries), (f"{tr.parallel.upper()} (buckets, gathered layers)", sharding),
    ):  # fmt: skip
        if value or name != f"{tr.parallel.upper()} (buckets, gathered layers)":
            table.add_row(name, gib(value))
    table.add_row("[bold]peak[/bold]", f"[bold]{gib(top.total)}[/bold]")
    console.print(table)
    _activations(report, console)
    _excess(report, console)
    _fit(report, console)
    console.print("unknown (not derivable from a config; bench/gpu_check.py measures them on a card):")
    for what, why in UNKNOWN.items():
        console.print(f"  {what}: {escape(why)}")
    for note in report.notes:
        console.print(f"note: {escape(note)}")


def _activations(report: MemoryReport, console: Console) -> None:
    from tuneproof.core.tables import Table

    saved = report.activations_by_component()
    table = Table(title="saved for backward, whole step (before any is freed)")
    table.add_column("kind")
    table.add_column("bytes", justify="right")
    names = [c for c in ACTIVATION_ORDER if c in saved] + sorted(set(saved) - set(ACTIVATION_ORDER))
    for name in names:
        table.add_row(name, gib(saved[name]))
    console.print(table)
    groups = ", ".join(f"{backend}: {len(idxs)} layer(s)" for backend, idxs in _by_backend(report).items())
    if groups:
        console.print(f"attention backends (as dispatch decides): {escape(groups)}")


def _by_backend(report: MemoryReport) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, backend in report.performed.backends.items():
        out.setdefault(backend, []).append(i)
    return out


def _excess(report: MemoryReport, console: Console) -> None:
    from tuneproof.core.tables import Table

    intended = report.intended.peak.peak_bytes
    console.print(
        f"intended peak (every attention layer on a fused kernel, no mask built): {gib(intended)}; "
        f"performed {gib(report.performed.peak.peak_bytes)}"
    )
    if not report.excess:
        console.print("excess: none (the attention already keeps O(T) statistics)")
        return
    table = Table(title="excess: what the performed path saves beyond the intended one")
    table.add_column("excess")
    table.add_column("bytes", justify="right")
    table.add_column("why")
    for e in report.excess:
        table.add_row(escape(e.name), gib(e.nbytes), escape(e.why))
    console.print(table)


def _fit(report: MemoryReport, console: Console) -> None:
    fit = report.fit
    if fit is None:
        console.print("fit: no card given (--gpu NAME or auto)")
        return
    card = fit.card
    share = fit.headroom / fit.total
    verdict = "fits" if fit.fits else "does NOT fit"
    console.print(
        f"on {escape(str(card.name))} ({gib(fit.total)}, {escape(str(card.memory_source))}): {verdict}, "
        f"headroom {gib(fit.headroom)} ({share:.0%})"
    )
    if fit.fits and share < HEADROOM_WARN:
        console.print(f"  under {HEADROOM_WARN:.0%} free at the peak: the unknowns below come out of it")
    console.print(
        f"  largest micro-batch at T={report.run.seq_len}: {fit.largest_batch or 'none fits'}; "
        f"largest width at B={report.run.batch}: {fit.largest_width or 'none fits'}"
    )
    for change, peak in fit.options:
        mark = "fits" if peak <= fit.total else "does not fit"
        console.print(f"  {escape(change)}: peak {gib(peak)} ({mark})")
