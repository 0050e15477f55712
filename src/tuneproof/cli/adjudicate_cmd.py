"""`tuneproof adjudicate`: each attention backend against fp32 math ground truth."""

from __future__ import annotations

import click

from tuneproof.cli.common import config_option, console, int_list, json_option, print_json


@click.command()
@config_option
@click.option(
    "--widths", default="256,1024", show_default=True, help="Comma list of sequence widths (tokens)."
)
@click.option(
    "--backends",
    default="sdpa,flex_attention,eager",
    show_default=True,
    help="Comma list of attention backends to judge.",
)
@click.option("--dtype", default="bf16", show_default=True, help="Low precision under test: bf16 or fp16.")
@click.option(
    "--grads",
    default="auto",
    show_default=True,
    help="auto (where the backend has a backward here), on (required), off (forward only).",
)
@click.option("--batch", type=int, default=1, show_default=True, help="Sequences per batch.")
@json_option
def adjudicate(
    config: str, widths: str, backends: str, dtype: str, grads: str, batch: int, json_out: bool
) -> None:
    """Distance of each backend to fp32 truth (loss, logits, gradients); names the closest per width."""
    from tuneproof.attention.adjudicate import adjudicate as run
    from tuneproof.cli.common import progress_bar

    with progress_bar() as update:
        update("building models and compiling (flex compiles once per width on CPU)")
        result = run(
            config,
            list(int_list(widths, "--widths")),
            [b.strip() for b in backends.split(",") if b.strip()],
            dtype=dtype,
            grads=grads,
            batch=batch,
        )
    if json_out:
        print_json(result.to_dict())
        return
    from rich.table import Table

    out = console()
    t = Table(title=f"distance to fp32 math truth ({result.dtype} on {result.device}; same rounded weights)")
    for col in ("width", "backend", "|loss diff|", "logits max", "logits mean", "grads max", "grads mean"):
        t.add_column(col, justify="left" if col == "backend" else "right")
    for r in result.results:
        g = r.grads
        t.add_row(
            str(r.width),
            r.backend,
            f"{r.loss_diff:.3e}",
            f"{r.logits.max_abs:.3e}",
            f"{r.logits.mean_abs:.3e}",
            f"{g.max_abs:.3e}" if g else "-",
            f"{g.mean_abs:.3e}" if g else "-",
        )
    out.print(t)
    for w, b in result.verdicts().items():
        out.print(f"width {w}: closest to fp32 truth: {b}")
    for n in result.notes:
        out.print(f"note: {n}")
