"""`tuneproof peak`: measured dense GEMM throughput of this device."""

from __future__ import annotations

import click

from tuneproof.cli.common import console, json_option, print_json


@click.command()
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--dtype", default="bf16", show_default=True, help="bf16, fp16, fp32 or tf32.")
@click.option("--repeats", type=int, default=5, show_default=True, help="Timed repeats per GEMM size (>= 2).")
@json_option
def peak(device: str, dtype: str, repeats: int, json_out: bool) -> None:
    """Measure achievable dense GEMM TFLOP/s: the MFU denominator for devices the table does not know."""
    from tuneproof.measure.peak import measure_peak

    result = measure_peak(device, dtype, repeats)
    if json_out:
        print_json(result.to_dict())
    else:
        console().print(
            f"measured peak: {result.tflops:.4g} TFLOP/s dense {result.dtype} on {result.device} "
            f"({result.size}^3 GEMM, {result.timing})"
        )
