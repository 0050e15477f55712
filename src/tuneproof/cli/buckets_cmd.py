"""`tuneproof buckets`: padding, mixing and planning time of batching choices on your lengths."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.attention.paths import PATHS
from tuneproof.cli.common import (
    command,
    console,
    int_list,
    json_option,
    lengths_option,
    print_json,
    resolve_model,
    step_fit,
    str_list,
    warn,
)
from tuneproof.data.compare import COMPARE_CHOICES


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
    "--config", default=None, help="config.json (or 'tiny') to add the attention FLOPs each plan performs."
)
@click.option(
    "--attn", default="sdpa", show_default=True, help="Attention path for --config: " + ", ".join(PATHS) + "."
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
    default="6.87e-4,8.85e-8",
    show_default=True,
    help="Step cost for --ranks: A,B (or A,B,C) of t = C + A*w + B*w^2 seconds per sequence "
    "(default: the CASE's fit).",
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
) -> None:
    """Bucketing vs random, HF length grouping and packing: padding, zero-pad share, roots per window,
    length mix, planning time; with --config, the attention FLOPs each plan performs; with --ranks,
    how much of the ranks' time each plan spends waiting for the slowest."""
    from tuneproof.data import read_lengths, synthetic_lengths
    from tuneproof.data.compare import check_compare_args, compare

    sweep_widths = int_list(sweep, "--sweep")
    baselines = str_list(choices)
    check_compare_args(micro_batch, grad_accum, baselines, sweep_widths, attn, seed, ranks)
    cost = step_fit(fit, "--fit")
    model = resolve_model(config) if config is not None else None
    lengths, roots = read_lengths(lengths_file) if lengths_file is not None else synthetic_lengths()
    shape = model.shape if model is not None else None
    results, rows = compare(
        lengths, roots, micro_batch, grad_accum, baselines, sweep_widths, shape, attn, seed, ranks, cost
    )
    if model is not None and model.max_positions is not None and int(lengths.max()) > model.max_positions:
        warn(
            f"the longest length {int(lengths.max())} exceeds the config's max_position_embeddings "
            f"{model.max_positions}"
        )
    if json_out:
        print_json(
            {
                "num_lengths": int(lengths.size),
                "micro_batch": micro_batch,
                "grad_accum": grad_accum,
                "ranks": ranks,
                "step_cost": {"A": cost.a, "B": cost.b, "C": cost.c} if ranks > 1 else None,
                "samplers": {r.name: r.to_dict() for r in results},
                "sweep": rows,
                "attn": attn if shape is not None else None,
            }
        )
        return
    from tuneproof.data.render import render_buckets

    render_buckets(
        results,
        rows,
        int(lengths.size),
        micro_batch,
        grad_accum,
        attn if shape is not None else None,
        console(),
        ranks,
    )
