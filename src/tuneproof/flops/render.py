"""Human-readable tables for a `FlopReport` (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.flops.report import FlopReport

COMPONENT_ORDER = (
    "q_proj",
    "k_proj",
    "v_proj",
    "norm_gate",
    "hyper_connection",
    "attention.proj",
    "o_proj",
    "attention.qk",
    "attention.av",
    "attention.qk_kernel_recompute",
    "attention.indexer_proj",
    "attention.indexer",
    "linear_attention",
    "linear_attention.conv",
    "mlp",
    "shared_expert",
    "router",
    "experts",
    "per_layer_input",
    "model_proj",
    "lora",
    "lora.experts",
    "lm_head",
)


def fmt_flops(x: float) -> str:
    return f"{x:.3e}"


def render_report(report: FlopReport, console: Console) -> None:
    from tuneproof.core.tables import Table

    run = report.run
    console.print(
        f"[bold]FLOP ledger[/bold] {report.shape.model_type}: {report.shape.num_layers} layers, "
        + (f"run {len(report.shape.runs)} times with the loops, " if report.shape.schedule else "")
        + f"T={run.seq_len} x B={run.batch}, attn={run.attn}, mode={run.mode}"
        + (f" r={run.lora_rank}" if run.mode == "lora" else "")
        + (
            f" target_parameters={','.join(run.lora_target_parameters)}"
            if run.mode == "lora" and run.lora_target_parameters
            else ""
        )
        + (", grad-ckpt" if run.grad_ckpt else "")
        + f", {run.real_tokens} real of {run.padded_tokens} token slots"
    )
    console.print(
        "convention: matmul FLOPs (2*m*n*k); intended = real tokens, exact causal/window pairs, "
        "no recompute; performed = what the path computes"
    )
    intended, performed = report.intended.by("component"), report.performed.by("component")
    table = Table(title="per component (all layers, all passes)")
    table.add_column("component")
    table.add_column("intended", justify="right")
    table.add_column("performed", justify="right")
    table.add_column("perf/int", justify="right")
    names = [c for c in COMPONENT_ORDER if c in intended or c in performed]
    names += sorted((set(intended) | set(performed)) - set(names))
    for c in names:
        i, p = intended.get(c, 0.0), performed.get(c, 0.0)
        table.add_row(c, fmt_flops(i), fmt_flops(p), f"{p / i:.2f}x" if i else "-")
    table.add_row(
        "[bold]total[/bold]",
        fmt_flops(report.intended.total),
        fmt_flops(report.performed.total),
        f"{report.performed.total / report.intended.total:.2f}x" if report.intended.total else "-",
    )
    console.print(table)
    passes = Table(title="per pass")
    passes.add_column("pass")
    passes.add_column("intended", justify="right")
    passes.add_column("performed", justify="right")
    ip, pp = report.intended.by("pass_"), report.performed.by("pass_")
    for name in ("forward", "recompute", "backward"):
        if name in ip or name in pp:
            passes.add_row(name, fmt_flops(ip.get(name, 0.0)), fmt_flops(pp.get(name, 0.0)))
    console.print(passes)
    if report.excess:
        ex = Table(title="excess: performed - intended, line by line")
        ex.add_column("excess")
        ex.add_column("FLOPs", justify="right")
        ex.add_column("why")
        for e in report.excess:
            ex.add_row(escape(e.name), fmt_flops(e.flops), escape(e.why))
        console.print(ex)
    else:
        console.print("excess: none (performed = intended)")
    render_mfu(report, console)
    for note in report.notes:
        console.print(f"note: {escape(note)}")


def render_mfu(report: FlopReport, console: Console, *, mfu_lines: bool = True) -> None:
    """`mfu_lines` False: the achieved rate and the peak only (the probe prints MFU with its interval)."""
    m = report.mfu
    if m.intended is None or m.performed is None or m.step_time_s is None:
        console.print(f"MFU: unknown ({escape(m.reason or '')})")
        return
    t = m.step_time_s
    console.print(
        f"achieved: {report.intended.total / t / 1e12:.3g} TFLOP/s intended, "
        f"{report.performed.total / t / 1e12:.3g} TFLOP/s performed (step {t:.4g} s)"
    )
    if mfu_lines:
        console.print(f"mfu_{m.dtype}_intended  = {100 * m.intended:.1f} %")
        console.print(f"mfu_{m.dtype}_performed = {100 * m.performed:.1f} %")
    # one line however long the source (an assumed variant leads it), for grep and logs
    console.print(
        f"peak: {m.peak_tflops:g} TFLOP/s dense {m.dtype} ({escape(m.peak_source or '')})", soft_wrap=True
    )
