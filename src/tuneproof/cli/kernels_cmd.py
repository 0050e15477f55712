"""`tuneproof kernels`: time by kernel class from a profiler Chrome trace."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import console, json_option, print_json


@click.command()
@click.option(
    "--trace",
    type=click.Path(path_type=Path),
    required=True,
    help="Chrome trace from torch.profiler (export_chrome_trace or tensorboard handler; .json or .json.gz).",
)
@click.option("--top", type=int, default=5, show_default=True, help="Top kernels listed per class.")
@json_option
def kernels(trace: Path, top: int, json_out: bool) -> None:
    """Sum device time by kernel class (attention, gemm, communication, memory, other) and read arch tags."""
    from tuneproof.measure.kernels import kernel_table, load_trace

    table = kernel_table(load_trace(trace), top_n=max(1, top))
    if json_out:
        print_json(table.to_dict())
        return
    from tuneproof.measure.render import render_kernels

    render_kernels(table, console())
