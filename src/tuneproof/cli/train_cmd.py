"""`tuneproof train`: the whole fine-tune on Trainer + PEFT, every fix from the reference run on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tuneproof.cli.common import PATH, Command, finish, json_option
from tuneproof.core.terminal import PrintedProgress

_PATH = PATH


@click.command(cls=Command)
@click.argument("recipe", type=_PATH, required=False)
@click.option("--output", type=_PATH, default=None, help="Run folder (default: the recipe's run.output_dir).")
@click.option("--resume", is_flag=True, help="Continue the run in --output from its last checkpoint.")
@click.option(
    "--budget",
    "budget_s",
    type=float,
    default=None,
    help="Seconds for the whole command: training stops (a checkpoint saved, --resume continues) when "
    "one more step and the report's probe would end past it; the first step always runs. Default: none.",
)
@json_option
def train(
    recipe: Path | None, output: Path | None, resume: bool, budget_s: float | None, json_out: bool
) -> int:
    """Fine-tune with a LoRA on transformers' Trainer: bucketed batches, the attention path that fits
    (flex_attention with safe kernel options on CUDA, sdpa on the CPU), live intended and performed
    MFU in the logs, adapter health and the base's fingerprint at the end. Without RECIPE: the tiny
    model on a small dataset shipped with tuneproof, on an idle 2-core CPU in about a minute. Multi-GPU:
    `torchrun --nproc-per-node N -m tuneproof train R.toml`, or `accelerate launch -m tuneproof ...`."""
    from tuneproof.commands import train as t
    from tuneproof.runs.recipe import read_recipe

    spec = t.TrainSpec(
        recipe=read_recipe(recipe),
        output_dir=output,
        resume=resume,
        quiet=json_out,
        budget_s=budget_s,
        budget_from_start=True,
    )
    with _own_warnings_on_one_line():
        result = t.run(t.prepare(spec), None if json_out else PrintedProgress())
    if not result.main:
        return 0  # one summary per run: rank 0 prints it
    return finish(result, json_out)


@contextlib.contextmanager
def _own_warnings_on_one_line() -> Iterator[None]:
    """tuneproof's warnings during the run as `warning: tuneproof: ...` lines on stderr, not with the
    file and source line of the Trainer's callback dispatch that raised them (only the format
    changes: whoever records warnings still gets them)."""
    import warnings

    formatted = warnings.formatwarning

    def one_line(message: Any, category: Any, filename: str, lineno: int, line: Any = None) -> str:
        if str(message).startswith("tuneproof:"):
            return f"warning: {message}\n"
        return formatted(message, category, filename, lineno, line)

    warnings.formatwarning = one_line
    try:
        yield
    finally:
        warnings.formatwarning = formatted
