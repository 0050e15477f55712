"""`tuneproof buckets`: padding, mixing and planning time of batching choices on your lengths."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import console, int_list, json_option, print_json
from tuneproof.errors import TuneproofError


@click.command()
@click.option(
    "--lengths",
    "lengths_file",
    type=click.Path(path_type=Path),
    default=None,
    help="One integer per line, or JSONL with 'length' (and 'root'). Default: the shipped synthetic set.",
)
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
    "compare_with",
    default="random,hf-length-grouped,packing",
    show_default=True,
    help="Baselines: random, hf-length-grouped, packing.",
)
@click.option(
    "--config", default=None, help="config.json (or 'tiny') to add the attention FLOPs each plan performs."
)
@click.option("--attn", default="sdpa", show_default=True, help="Attention path for --config.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of every shuffle (same seed, same plan)."
)
@json_option
def buckets(
    lengths_file: Path | None,
    micro_batch: int,
    grad_accum: int,
    sweep: str,
    compare_with: str,
    config: str | None,
    attn: str,
    seed: int,
    json_out: bool,
) -> None:
    """Bucketing vs random, HF length grouping and packing: padding, zero-pad share, roots per window,
    length mix, planning time; with --config, the attention FLOPs each plan performs."""
    from tuneproof.cli.common import resolve_config
    from tuneproof.data import read_lengths, synthetic_lengths
    from tuneproof.data.compare import compare

    if micro_batch < 1 or grad_accum < 1:
        raise TuneproofError("--micro-batch and --grad-accum must be >= 1", "pass positive integers")
    lengths, roots = read_lengths(lengths_file) if lengths_file else synthetic_lengths()
    shape = resolve_config(config) if config else None
    if shape is not None:
        from tuneproof.flops.attention import ATTN_PATHS

        if attn not in ATTN_PATHS:
            raise TuneproofError(f"--attn {attn!r} is not known", "use one of: " + ", ".join(ATTN_PATHS))
    choices = tuple(c.strip() for c in compare_with.split(",") if c.strip())
    results, rows = compare(
        lengths, roots, micro_batch, grad_accum, choices, int_list(sweep, "--sweep"), shape, attn, seed
    )
    if json_out:
        print_json(
            {
                "num_lengths": int(lengths.size),
                "micro_batch": micro_batch,
                "grad_accum": grad_accum,
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
    )
