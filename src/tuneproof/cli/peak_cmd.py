"""`tuneproof peak`: measured dense GEMM throughput of this device."""

from __future__ import annotations

import click

from tuneproof.cli.common import command, finish, json_option


@command()
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--dtype", default="bf16", show_default=True, help="bf16, fp16, fp32 or tf32.")
@click.option(
    "--max-seconds",
    type=float,
    default=2.0,
    show_default=True,
    help="Most seconds per GEMM size; each stops earlier once its IQR is within 10 % of the median.",
)
@click.option(
    "--gpu", default=None, help="Also show this card's datasheet peak (table name, or auto: this device)."
)
@json_option
def peak(device: str, dtype: str, max_seconds: float, gpu: str | None, json_out: bool) -> int:
    """Measure achievable dense GEMM TFLOP/s: the MFU denominator for devices the table does not know."""
    from tuneproof.commands import peak as area

    return finish(
        area.run(area.prepare(area.PeakSpec(device=device, dtype=dtype, max_seconds=max_seconds, gpu=gpu))),
        json_out,
    )
