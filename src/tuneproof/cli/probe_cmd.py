"""`tuneproof probe`: time, fit, profile and cross-check a real training step."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tuneproof.attention.paths import names
from tuneproof.cli.common import (
    PATH,
    command,
    config_option,
    finish,
    int_list,
    json_option,
    terminal_progress,
    with_model,
)


@command()
@config_option
@click.option("--attn", default="sdpa", show_default=True, help=", ".join(names(probe=True)) + ".")
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
@click.option(
    "--min-repeats",
    type=int,
    default=6,
    show_default=True,
    help="Timed repeats per width before stopping early (6 or more give the median a 95 % interval).",
)
@click.option("--max-repeats", type=int, default=30, show_default=True, help="Most timed repeats per width.")
@click.option(
    "--budget",
    "budget_s",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds for the whole probe (build, warm-up, timing rounds, profiles, peak); the estimate is "
    "printed after the first round; rounds stop earlier once every median is tight.",
)
@click.option(
    "--over-budget",
    type=click.Choice(["refuse", "floor"]),
    default="refuse",
    show_default=True,
    help="When the floor (3 rounds and the profiles) cannot fit the budget: refuse (exit 2), or run it.",
)
@click.option(
    "--target",
    type=float,
    default=0.05,
    show_default=True,
    help="Stop when every width's median is known to +-this share (0.05 = 5 %).",
)
@click.option(
    "--profiles",
    type=int,
    default=3,
    show_default=True,
    help="Profiled steps per width (2+ give an interval; from 3 an outlying profile is re-taken).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the weights and the inputs.")
@click.option(
    "--out",
    type=PATH,
    default=None,
    help="Folder for points.csv, kernels.csv, trace.json.gz and probe.json (created if missing).",
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
    min_repeats: int,
    max_repeats: int,
    budget_s: float,
    target: float,
    profiles: int,
    seed: int,
    out: Path | None,
    over_budget: str,
    json_out: bool,
) -> int:
    """Time a step at several widths, fit t = A*w + B*w^2, profile every width, cross-check the two."""
    from tuneproof.commands import probe as area

    spec = area.ProbeSpec.of(
        model=config, out=out, attn=attn, widths=int_list(widths, "--widths"), batch=batch, mode=mode,
        grad_ckpt=grad_ckpt, device=device, dtype=dtype, min_repeats=min_repeats, max_repeats=max_repeats,
        budget_s=budget_s, target=target, profiles=profiles, seed=seed, over_budget=over_budget,
    )  # fmt: skip
    plan = area.prepare(with_model(spec))
    with terminal_progress() as update:
        result = area.run(plan, update, notice=lambda line: print(line, file=sys.stderr))
    return finish(result, json_out)
