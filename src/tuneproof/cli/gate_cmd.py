"""`tuneproof gate`: tuned vs base, each metric judged against the instrument's measured noise floor."""

from __future__ import annotations

from typing import Any

import click

from tuneproof.cli.common import PATH, command, finish, json_option, terminal_progress, warn_unused

_FILE = PATH


@command()
@click.option(
    "--base",
    multiple=True,
    type=_FILE,
    required=True,
    help="Base arm: a response JSONL, or one benchmark run per use (an lm-eval output folder, its "
    "results_<date>.json or a samples file; a per-example CSV/JSONL).",
)
@click.option("--tuned", multiple=True, type=_FILE, required=True, help="Tuned arm, as --base.")
@click.option(
    "--attractors", type=_FILE, default=None, help="Stock phrases, one per line (its sha256 is reported)."
)
@click.option(
    "--corpus",
    multiple=True,
    type=_FILE,
    help="Training text for memorisation: .txt or .jsonl with 'text' (.gz too); repeat for more files.",
)
@click.option(
    "--k", "k", type=int, default=None, help="Memorisation span length in tokens (default 32, or the spec's)."
)
@click.option(
    "--tokenizer",
    default=None,
    help="Local tokenizer folder for memorisation tokens (default: whitespace words).",
)
@click.option(
    "--probes",
    type=_FILE,
    default=None,
    help="Probes TOML: [[probe]] name, hypothesis, expect, prompts, regex|phrases.",
)
@click.option(
    "--spec",
    type=_FILE,
    default=None,
    help="Gate spec TOML: metrics, wanted directions, floor_k, thresholds.",
)
@click.option(
    "--embedder",
    default=None,
    help="Local model2vec or sentence-transformers folder for embedding diversity.",
)
@click.option(
    "--floor",
    "floors",
    multiple=True,
    help="METRIC=VALUE: a given floor (e.g. diversity=0.008); response metrics need one with 1 run per arm "
    "(benchmark lines take none).",
)
@click.option(
    "--floor-k", type=float, default=None, help="Floor = k x run-to-run SD (default 2, or the spec's)."
)
@click.option("--out", type=_FILE, default=None, help="Also write the JSON report to this file.")
@json_option
def gate(json_out: bool, **flags: Any) -> int:
    """Tuned vs base on diversity, attractor phrases, memorisation, probes and benchmark results (lm-eval
    runs or per-example files, judged per document). Every metric is judged on its paired 95 % interval,
    whose standard error carries the run-to-run noise (>= 2 runs per arm; for benchmarks with 1 run, a
    paired per-document test stands in), with Holm's correction over the verdicts that decide together;
    a floor is beaten too where the spec gives one. PASS, FAIL or INCONCLUSIVE, with delta / floor (for
    scale), the interval and the minimum detectable effect. Exit 0 all pass, 1 any fails, 3 some
    inconclusive, 2 bad input."""
    from tuneproof.commands.gate import GateCommandSpec, prepare, run

    warn_unused(("tokenizer", "k"), "--corpus", bool(flags["corpus"]))
    plan = prepare(GateCommandSpec(**flags))
    with terminal_progress() as update:
        result = run(plan, update)
    return finish(result, json_out)
