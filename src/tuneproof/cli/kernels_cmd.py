"""`tuneproof kernels`: time by kernel class from a profiler Chrome trace."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import command, console, json_option, print_json


@command()
@click.option(
    "--trace",
    type=click.Path(path_type=Path),
    required=True,
    help="Chrome trace from torch.profiler (export_chrome_trace or tensorboard handler; .json or .json.gz).",
)
@click.option(
    "--top", "top_n", type=int, default=5, show_default=True, help="Top kernels listed per class (>= 1)."
)
@json_option
def kernels(trace: Path, top_n: int, json_out: bool) -> None:
    """Sum device time by kernel class (attention, gemm, communication, memory, other) and read arch tags."""
    from tuneproof import validate
    from tuneproof.measure.kernels import kernel_table, load_trace

    validate.integer("top_n", top_n, high=10_000)
    table = kernel_table(load_trace(trace), top_n=top_n)
    if json_out:
        print_json(table.to_dict())
        return
    from tuneproof.measure.render import render_kernels

    render_kernels(table, console())
