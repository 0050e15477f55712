"""`tuneproof generate`: an arm file (R runs x N samples per prompt) for the gate, from a local model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tuneproof.cli.common import PATH, command, finish, terminal_progress, warn_unused

_FILE = PATH


@command()
@click.option("--model", required=True, help="Local transformers model folder, or 'tiny' (random weights).")
@click.option("--adapter", default=None, help="PEFT adapter folder applied on top of --model.")
@click.option(
    "--prompts",
    type=_FILE,
    required=True,
    help='JSONL: {"prompt_id", "prompt"} or {"prompt_id", "messages"}.',
)
@click.option(
    "--runs",
    type=int,
    default=2,
    show_default=True,
    help="Independent runs (seed + r each); the gate needs >= 2.",
)
@click.option("--samples", type=int, default=4, show_default=True, help="Responses per prompt per run.")
@click.option(
    "--max-new-tokens", type=int, default=128, show_default=True, help="Tokens generated per response."
)
@click.option(
    "--temperature", type=float, default=1.0, show_default=True, help="Sampling temperature; 0 = greedy."
)
@click.option("--top-p", type=float, default=1.0, show_default=True, help="Nucleus sampling mass in (0, 1].")
@click.option("--batch-size", type=int, default=8, show_default=True, help="Prompts per generate call.")
@click.option("--seed", type=int, default=0, show_default=True, help="Run r samples with seed + r.")
@click.option("--out", type=_FILE, required=True, help="Arm JSONL to write (and ARM.meta.json beside it).")
@click.option("--json", "json_out", is_flag=True, help="Print the sidecar (meta) as JSON.")
def generate(out: Path, json_out: bool, **flags: Any) -> int:
    """Generate an arm for `tuneproof gate`: every prompt answered SAMPLES times in each of RUNS independent
    runs, with seeds recorded per row, and a sidecar ARM.meta.json (model and adapter paths, weight
    fingerprints, generation settings, package versions). Both files are written atomically."""
    from tuneproof.commands.generate import GenerateSpec, prepare, run

    spec = GenerateSpec(**{**flags, "prompts": str(flags["prompts"])}, out=out)
    warn_unused(("top_p",), "a temperature > 0 (greedy decoding ignores it)", spec.temperature > 0)
    plan = prepare(spec)
    with terminal_progress() as progress:
        result = run(plan, progress)
    return finish(result, json_out)
