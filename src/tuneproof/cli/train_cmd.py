"""`tuneproof train`: the whole fine-tune on transformers' Trainer + PEFT, every CASE fix on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tuneproof.cli.common import Command, json_option, print_json

_PATH = click.Path(path_type=Path)


@click.command(cls=Command)
@click.argument("recipe", type=_PATH, required=False)
@click.option("--output", type=_PATH, default=None, help="Run folder (default: the recipe's run.output_dir).")
@click.option("--resume", is_flag=True, help="Continue the run in --output from its last checkpoint.")
@json_option
def train(recipe: Path | None, output: Path | None, resume: bool, json_out: bool) -> None:
    """Fine-tune with a LoRA on transformers' Trainer: bucketed batches, the attention path that fits
    (flex_attention with safe kernel options on CUDA, sdpa on the CPU), live intended and performed
    MFU in the logs, adapter health and the base's fingerprint at the end. Without RECIPE: the tiny
    model on a small dataset shipped with tuneproof, on a CPU in under a minute. Multi-GPU:
    `torchrun --nproc-per-node N -m tuneproof train R.toml`, or `accelerate launch -m tuneproof ...`."""
    from tuneproof.train.recipe import read_recipe
    from tuneproof.train.run import train as run_training

    parsed = read_recipe(recipe)
    with _own_warnings_on_one_line():
        result = run_training(parsed, output, resume, quiet=json_out)
    if not result.main:
        return  # one summary per run: rank 0 prints it
    if json_out:
        print_json({
            "output_dir": str(result.output_dir), "adapter": str(result.adapter_dir), "steps": result.steps,
            "loss": result.loss, "health": result.health, "attention": result.attention,
            "base_fingerprint": str(result.fingerprint) if result.fingerprint else None,
            "adapter_health": _if_file(result.output_dir / "adapter_health.json"),
            "report": _if_file(result.output_dir / "report" / "report.md"),
        })  # fmt: skip
        return
    print(
        f"trained   {result.steps} optimizer steps, mean loss {result.loss:.4f}, attention {result.attention}"
    )
    if resume:
        print("          (the mean loss is over the steps of this session, as the Trainer reports it)")
    print(f"adapter   {result.adapter_dir}")
    print(f"health    {result.health or 'unknown (not a PEFT model)'}")
    print(f"report    {result.output_dir / 'report' / 'report.md'} (plots beside it; report.json)")
    fp = result.fingerprint or "not recorded: the base is not a local safetensors folder"
    print(f"base      fingerprint {fp}")
    print(f"recipe    {result.output_dir / 'recipe.toml'} (every default filled in)")


def _if_file(path: Path) -> str | None:
    return str(path) if path.is_file() else None


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
