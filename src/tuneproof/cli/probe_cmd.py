"""`tuneproof probe`: time, fit, profile and cross-check a real training step."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import config_option, console, int_list, json_option, print_json
from tuneproof.io import check_out_folder


@click.command()
@config_option
@click.option("--attn", default="sdpa", show_default=True, help="sdpa, eager or flex_attention.")
@click.option(
    "--widths",
    default="512,1024,2048",
    show_default=True,
    help="Comma list of sequence widths (tokens): at least 3, spanning at least 4x.",
)
@click.option("--batch", type=int, default=1, show_default=True, help="Sequences per step.")
@click.option("--mode", default="full", show_default=True, help="full, lora (training step) or forward.")
@click.option("--grad-ckpt", is_flag=True, help="Activation checkpointing on every decoder layer.")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--dtype", default=None, help="fp32, bf16 or fp16 (default: fp32 on cpu, bf16 on cuda).")
@click.option("--repeats", type=int, default=3, show_default=True, help="Timed repeats per width (>= 2).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for points.csv, trace.json.gz and probe.json (created if missing).",
)
@json_option
def probe(
    config: str,
    attn: str,
    widths: str,
    batch: int,
    mode: str,
    grad_ckpt: bool,
    device: str,
    dtype: str | None,
    repeats: int,
    out: Path | None,
    json_out: bool,
) -> None:
    """Time a step at several widths, fit t = A*w + B*w^2, profile the largest, cross-check the two."""
    from tuneproof.cli.common import progress_bar
    from tuneproof.measure.probe import ProbeSpec, run_probe

    if out is not None:
        check_out_folder(out)
    spec = ProbeSpec(
        config=config,
        attn=attn,
        widths=int_list(widths, "--widths"),
        batch=batch,
        mode=mode,
        grad_ckpt=grad_ckpt,
        device=device,
        dtype=dtype,
        repeats=repeats,
    )
    with progress_bar() as update:
        result = run_probe(spec, out, progress=update)
    if json_out:
        print_json(result.to_dict())
        return
    from tuneproof.measure.render import render_probe

    render_probe(result, console())
