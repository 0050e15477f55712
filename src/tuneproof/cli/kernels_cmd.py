"""`tuneproof kernels`: time by kernel class from a profiler Chrome trace."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import PATH, command, finish, json_option


@command()
@click.option(
    "--trace",
    type=PATH,
    required=True,
    multiple=True,
    help="Chrome trace from torch.profiler (export_chrome_trace or tensorboard handler; .json or .json.gz, "
    "read streaming), or a folder of them; repeat it for one file per rank.",
)
@click.option(
    "--top", "top_n", type=int, default=5, show_default=True, help="Top kernels listed per class (>= 1)."
)
@json_option
def kernels(trace: tuple[Path, ...], top_n: int, json_out: bool) -> int:
    """Sum device time by kernel class (attention, gemm, communication, memory, other) and read arch tags."""
    from tuneproof.commands import kernels as area

    return finish(
        area.run(area.prepare(area.KernelsSpec(trace=trace[0], top_n=top_n, more=trace[1:]))), json_out
    )
