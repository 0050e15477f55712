"""`tuneproof adjudicate`: each attention backend against fp32 math ground truth."""

from __future__ import annotations

import click

from tuneproof.attention.paths import names
from tuneproof.cli.common import (
    command,
    config_option,
    finish,
    int_list,
    json_option,
    str_list,
    terminal_progress,
    with_model,
)
from tuneproof.commands.adjudicate import CRITERIA, GRADS


@command()
@config_option
@click.option(
    "--widths", default="256,1024", show_default=True, help="Comma list of sequence widths (tokens)."
)
@click.option(
    "--backends",
    default=",".join(names(adjudicate=True)),
    show_default=True,
    help="Comma list of attention paths to judge.",
)
@click.option("--dtype", default="bf16", show_default=True, help="Low precision under test: bf16 or fp16.")
@click.option(
    "--grads",
    default="auto",
    show_default=True,
    help=f"{', '.join(GRADS)}: compare gradients where the backend has a backward here / always / never.",
)
@click.option(
    "--criterion",
    default="logits",
    show_default=True,
    help="What 'closest to the truth' means: " + "; ".join(f"{k}: {v}" for k, v in CRITERIA.items()) + ".",
)
@click.option("--batch", type=int, default=1, show_default=True, help="Sequences per batch.")
@click.option(
    "--samples",
    type=int,
    default=3,
    show_default=True,
    help="Random batches per width (2+ to tell a win from a tie).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the weights and the batches.")
@click.option(
    "--budget",
    "budget_s",
    type=float,
    default=600.0,
    show_default=True,
    help="Seconds for the whole run: a batch that would end past it is not started (the first always "
    "runs); what was left out is said.",
)
@json_option
def adjudicate(
    config: str,
    widths: str,
    backends: str,
    dtype: str,
    grads: str,
    criterion: str,
    batch: int,
    samples: int,
    seed: int,
    budget_s: float,
    json_out: bool,
) -> int:
    """Distance of each backend to fp32 truth (loss, logits, gradients); the closest per width, or a tie."""
    from tuneproof.commands.adjudicate import AdjudicateSpec, prepare, run

    spec = AdjudicateSpec(
        model=config, widths=int_list(widths, "--widths"), backends=str_list(backends, "--backends"),
        dtype=dtype, grads=grads, criterion=criterion, batch=batch, samples=samples, seed=seed,
        budget_s=budget_s, budget_from_start=True,
    )  # fmt: skip
    plan = prepare(with_model(spec))
    with terminal_progress() as update:
        result = run(plan, update)
    return finish(result, json_out)
