"""`tuneproof attractors mine`: stock phrases a model over-uses, ranked against a human reference text."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import Command, check_out_file, json_option, print_json, warn

_FILE = click.Path(path_type=Path)
MIN_REFERENCE_WORDS = 1000


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
def mine(outputs: tuple[Path, ...], reference: Path, top: int, out: Path | None, json_out: bool) -> None:
    """Phrases of 1-3 words over-represented in the outputs against the reference: log-odds with an
    informative Dirichlet prior (Monroe, Colaresi and Quinn 2008), seen under at least 2 prompts."""
    from tuneproof import validate
    from tuneproof.gate.arms import read_arm
    from tuneproof.gate.attractors import mine as mine_phrases
    from tuneproof.gate.inputs import read_text

    validate.integer("top", top, low=1, high=100_000)
    if out is not None:
        check_out_file(out, (*outputs, reference))
    text = read_text(reference, "the reference", "pass a human-written UTF-8 text file (or .gz)")
    arm = read_arm(outputs, "outputs")
    words = len(text.split())
    if words < MIN_REFERENCE_WORDS:
        warn(
            f"the reference holds {words} words: over-representation against so little human text is weak "
            f"evidence (give {MIN_REFERENCE_WORDS:,} words or more)"
        )
    phrases = mine_phrases(arm, text, top)
    if out is not None and not phrases:
        warn(f"no phrase is over-represented under >= 2 prompts: {out} was not written")
    elif out is not None:
        from tuneproof.io import atomic_write_text

        atomic_write_text(out, "".join(m.phrase + "\n" for m in phrases))
    if json_out:
        print_json({"phrases": [m.to_dict() for m in phrases], "out": str(out) if out else None})
        return
    if not phrases:
        print("no phrase is over-represented under >= 2 prompts")
    for m in phrases:
        print(f"{m.z:7.2f}  {m.count:6d} vs {m.reference_count:<6d} ({m.num_prompts} prompts)  {m.phrase}")
