"""A run's own config read into the one run type: an Axolotl YAML or a tuneproof recipe TOML, by its
suffix (`preflight`, `tokens` and the Axolotl plugin read runs through here)."""

from __future__ import annotations

from pathlib import Path

from tuneproof.core.errors import TuneproofError
from tuneproof.runs.run import Run

RUN_HINT = "pass an Axolotl YAML (.yml, .yaml) or a tuneproof recipe (.toml)"


def read_run_file(path: Path) -> Run:
    """The run `path` describes; anything but a YAML or a TOML is refused, naming both."""
    from tuneproof.core.io import input_file

    input_file(path, "run config", RUN_HINT)
    suffix = path.suffix.lower()
    if suffix in (".yml", ".yaml"):
        from tuneproof.runs.axolotl import from_axolotl, read_yaml

        data, lines, duplicates = read_yaml(path)
        return from_axolotl(data, str(path), lines, duplicates)
    if suffix == ".toml":
        from tuneproof.runs.from_recipe import from_recipe

        return from_recipe(path)
    raise TuneproofError(f"{path}: not a YAML or TOML file", RUN_HINT)
