"""`tuneproof gate`: tuned vs base, each metric judged against the instrument's measured noise floor."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import (
    check_out_file,
    command,
    console,
    json_option,
    print_json,
    progress_bar,
    warn,
    warn_unused,
)
from tuneproof.errors import TuneproofError

_FILE = click.Path(path_type=Path)


def parse_floors(values: tuple[str, ...]) -> dict[str, float]:
    """`--floor METRIC=VALUE` pairs; the value a finite number >= 0."""
    import math

    out: dict[str, float] = {}
    for item in values:
        name, sep, text = item.rpartition("=")  # a probe's name may hold "="; a number never does
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not sep or not name.strip() or not math.isfinite(value) or value < 0:
            raise TuneproofError(
                f"--floor {item!r} is not METRIC=VALUE with a number >= 0", "e.g. --floor diversity=0.008"
            )
        if name.strip() in out:
            raise TuneproofError(f"--floor {name.strip()} is given twice", "give each metric's floor once")
        out[name.strip()] = value
    return out


@command()
@click.option(
    "--base",
    multiple=True,
    type=_FILE,
    required=True,
    help="Base arm JSONL (repeat for lm-eval files: one per run).",
)
@click.option(
    "--tuned", multiple=True, type=_FILE, required=True, help="Tuned arm JSONL (repeat like --base)."
)
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
    help="METRIC=VALUE: a given floor (e.g. diversity=0.008); needed with 1 run per arm.",
)
@click.option(
    "--floor-k", type=float, default=None, help="Floor = k x run-to-run SD (default 2, or the spec's)."
)
@click.option("--out", type=_FILE, default=None, help="Also write the JSON report to this file.")
@json_option
def gate(
    base: tuple[Path, ...],
    tuned: tuple[Path, ...],
    attractors: Path | None,
    corpus: tuple[Path, ...],
    k: int | None,
    tokenizer: str | None,
    probes: Path | None,
    spec: Path | None,
    embedder: str | None,
    floors: tuple[str, ...],
    floor_k: float | None,
    out: Path | None,
    json_out: bool,
) -> int:
    """Tuned vs base on diversity, attractor phrases, memorisation and probes. Every metric is judged
    against the run-to-run noise of the same arm (>= 2 runs per arm): PASS, FAIL or INCONCLUSIVE, with
    delta / floor, a paired 95 % interval and the minimum detectable effect. Exit 0 all pass, 1 any
    fails, 3 some inconclusive, 2 bad input."""
    from dataclasses import replace

    from tuneproof.gate.arms import read_arm
    from tuneproof.gate.attractors import PhraseMatcher, read_phrases
    from tuneproof.gate.memorise import check_corpus
    from tuneproof.gate.probes import read_probes
    from tuneproof.gate.run import check_inputs, run_gate
    from tuneproof.gate.spec import GateSpec, read_spec

    # Everything cheap is read and checked before any long work starts.
    gate_spec = read_spec(spec) if spec else GateSpec()
    if floor_k is not None:
        gate_spec = replace(gate_spec, floor_k=floor_k)
    if k is not None:
        gate_spec = replace(gate_spec, k=k)
    given = parse_floors(floors)
    phrases = None
    if attractors is not None:
        listed, sha = read_phrases(attractors)
        phrases = (PhraseMatcher(listed), sha)
    probe_list = read_probes(probes) if probes else []
    check_corpus(corpus)
    if out is not None:
        sources = (*base, *tuned, *corpus, *(p for p in (attractors, probes, spec) if p is not None))
        check_out_file(out, sources)
    for flag, value in (("--tokenizer", tokenizer), ("--embedder", embedder)):
        if value is not None and not value.strip():
            raise TuneproofError(f"{flag} is empty", "pass a local model folder, or leave the option out")
    warn_unused(("tokenizer", "k"), "--corpus", bool(corpus))
    base_arm, tuned_arm = read_arm(base, "base"), read_arm(tuned, "tuned")
    pairing = check_inputs(
        base_arm, tuned_arm, gate_spec, given, phrases is not None, probe_list, bool(embedder)
    )
    if pairing.note():
        warn(str(pairing.note()))
    tokens = None
    if tokenizer and corpus:
        from tuneproof.gate.tokens import load_tokenizer

        tokens = load_tokenizer(tokenizer)
    embed = None
    if embedder:
        from tuneproof.gate.diversity import load_embedder

        embed = load_embedder(embedder)
    with progress_bar() as update:
        report = run_gate(
            base_arm,
            tuned_arm,
            gate_spec,
            attractors=phrases,
            corpus=corpus,
            tokens=tokens,
            probes=probe_list,
            embed=embed,
            given_floors=given,
            progress=update,
        )
    if out is not None:
        from tuneproof.io import atomic_write_json

        atomic_write_json(out, report.to_dict())
    if json_out:
        print_json(report.to_dict())
    else:
        from tuneproof.gate.render import render_gate

        render_gate(report, console())
    return report.exit_code
