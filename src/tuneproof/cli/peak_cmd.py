"""`tuneproof peak`: measured dense GEMM throughput of this device."""

from __future__ import annotations

import click

from tuneproof.cli.common import command, console, json_option, print_json


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
@json_option
def peak(device: str, dtype: str, max_seconds: float, json_out: bool) -> None:
    """Measure achievable dense GEMM TFLOP/s: the MFU denominator for devices the table does not know."""
    from tuneproof.measure.peak import measure_peak

    result = measure_peak(device, dtype, max_seconds)
    if json_out:
        print_json(result.to_dict())
    else:
        console().print(
            f"measured peak: {result.tflops:.4g} TFLOP/s dense {result.dtype} on {result.device} "
            f"({result.size}^3 GEMM, median {result.median_s * 1e3:.3f} ms, IQR {result.iqr_s * 1e3:.3f} ms, "
            f"{result.runs} runs)"
        )
