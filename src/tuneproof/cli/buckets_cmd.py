"""`tuneproof buckets`: padding, mixing and planning time of batching choices on your lengths."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.attention.paths import names
from tuneproof.cli.common import (
    command,
    finish,
    int_list,
    json_option,
    lengths_option,
    resolve_model,
    step_fit,
    str_list,
    warn_unused,
)
from tuneproof.data.compare import CASE_FIT_TEXT, COMPARE_CHOICES


@command()
@lengths_option
@click.option("--micro-batch", type=int, default=2, show_default=True, help="Sequences per micro-batch.")
@click.option(
    "--grad-accum", type=int, default=16, show_default=True, help="Micro-batches per optimizer step."
)
@click.option(
    "--sweep",
    default="1,4,16,64,256",
    show_default=True,
    help="Bucket widths (tokens) to sweep; empty for none.",
)
@click.option(
    "--compare",
    "choices",
    default=",".join(COMPARE_CHOICES),
    show_default=True,
    help="Baselines: " + ", ".join(COMPARE_CHOICES) + " (empty for none).",
)
@click.option(
    "--config",
    default=None,
    help="config.json, its folder, a hub id in the local Hugging Face cache (owner/name) or 'tiny': "
    "adds the attention FLOPs each plan performs.",
)
@click.option(
    "--attn",
    default="sdpa",
    show_default=True,
    help="Attention path for --config: " + ", ".join(names()) + ".",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of every shuffle (same seed, same plan)."
)
@click.option(
    "--ranks",
    type=int,
    default=1,
    show_default=True,
    help="Processes (GPUs) the plan is dealt to: adds each sampler's utilisation across ranks.",
)
@click.option(
    "--fit",
    default=CASE_FIT_TEXT,
    show_default=True,
    help="Step cost for --ranks: A,B (or A,B,C) of t = C + A*w + B*w^2 seconds per sequence "
    "(default: the reference run's fit).",
)
@json_option
def buckets(
    lengths_file: Path | None,
    micro_batch: int,
    grad_accum: int,
    sweep: str,
    choices: str,
    config: str | None,
    attn: str,
    seed: int,
    ranks: int,
    fit: str,
    json_out: bool,
) -> int:
    """Bucketing vs random, HF length grouping and packing: padding, zero-pad share, roots per window,
    length mix, planning time; with --config, the attention FLOPs each plan performs; with --ranks,
    how much of the ranks' time each plan spends waiting for the slowest."""
    from tuneproof.commands import buckets as area

    warn_unused(("attn",), "--config", config is not None)
    warn_unused(("fit",), "--ranks above 1", ranks > 1)
    spec = area.BucketsSpec(
        lengths_file=lengths_file,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        sweep=int_list(sweep, "--sweep"),
        choices=str_list(choices, "--compare"),
        model=resolve_model(config) if config is not None else None,
        attn=attn,
        seed=seed,
        ranks=ranks,
        cost=step_fit(fit, "--fit"),
    )
    return finish(area.run(area.prepare(spec)), json_out)
