"""`tuneproof attractors mine`: stock phrases a model over-uses, ranked against a human reference text."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import PATH, Command, finish, json_option

_FILE = PATH


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def attractors() -> None:
    """Attractor (stock-phrase) lists for `tuneproof gate --attractors`."""


@attractors.command(cls=Command)
@click.option(
    "--outputs", multiple=True, type=_FILE, required=True, help="Arm JSONL (model outputs); repeat for more."
)
@click.option("--reference", type=_FILE, required=True, help="Human-written reference text (UTF-8 file).")
@click.option("--top", type=int, default=50, show_default=True, help="How many phrases to keep.")
@click.option("--out", type=_FILE, default=None, help="Write the phrases, one per line, to this file.")
@json_option
def mine(outputs: tuple[Path, ...], reference: Path, top: int, out: Path | None, json_out: bool) -> int:
    """Phrases of 1-3 words over-represented in the outputs against the reference: log-odds with an
    informative Dirichlet prior (Monroe, Colaresi and Quinn 2008), seen under at least 2 prompts."""
    from tuneproof.commands.attractors import MiningSpec, prepare, run

    return finish(run(prepare(MiningSpec(outputs=outputs, reference=reference, top=top, out=out))), json_out)
