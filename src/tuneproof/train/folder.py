"""The run folder: what may be written where, nothing overwritten, and what says a run is finished.

OUT/recipe.toml       the resolved recipe (the run's identity: another recipe is another run)
OUT/base/             the tiny base, when the run trained it (kept to merge onto)
OUT/checkpoints/      the Trainer's checkpoints (what --resume continues from)
OUT/adapter/          the adapter and its base_fingerprint.json
OUT/run_state.json    the steps trained of the steps planned, written at the end
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tuneproof.core.errors import TuneproofError
from tuneproof.runs.recipe import Recipe

RECIPE_NAME = "recipe.toml"
STATE_NAME = "run_state.json"  # written at the end: the steps trained of the steps planned


def check_output(out: Path, recipe: Recipe, resume: bool) -> None:
    """Nothing is overwritten: an output folder holding another run (another resolved recipe) is
    refused, the same run too unless resuming, and a non-empty folder that is no run."""
    if out.exists() and not out.is_dir():
        raise TuneproofError(f"{out} is a file", "pass a folder for the run")
    previous = out / RECIPE_NAME
    if previous.is_file():
        differs = _first_difference(previous, recipe)
        if differs:
            raise TuneproofError(
                f"{out} holds a different run (its {RECIPE_NAME} differs from this recipe: {differs})",
                "pass another output folder",
            )
        if _finished(out):
            raise TuneproofError(
                f"{out} holds this run finished (all its steps trained, the adapter saved)",
                "pass another folder to train again",
            )
        if not resume:
            raise TuneproofError(
                f"{out} holds this run already",
                "resume it ({resume}), or pass another folder",
                fields=("resume",),
            )
    elif resume:
        raise TuneproofError(
            f"{out} holds no run to resume", "drop {resume} or pass the run's folder", fields=("resume",)
        )
    elif out.is_dir() and any(out.iterdir()):
        raise TuneproofError(f"{out} is not empty and holds no tuneproof run", "pass a new or empty folder")
    from tuneproof.core.io import check_out_folder

    check_out_folder(out)  # creatable and writable, probed before the model loads


def _first_difference(previous: Path, recipe: Recipe) -> str:
    """The first key whose value differs between the run folder's recipe and this one ("" if none);
    where the recipe was read from and the output folder's own path do not count (a copied run is
    the same run)."""
    import tomllib

    try:
        old = tomllib.loads(previous.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return f"{previous.name} cannot be read"
    new = tomllib.loads(recipe.to_toml())
    for part in sorted(set(old) | set(new)):
        for key in sorted(set(old.get(part, {})) | set(new.get(part, {}))):
            if (part, key) == ("run", "output_dir"):
                continue
            a, b = old.get(part, {}).get(key), new.get(part, {}).get(key)
            if a != b:
                return f"{part}.{key} was {a!r}, now {b!r}"
    return ""


def _finished(out: Path) -> bool:
    try:
        state = json.loads((out / STATE_NAME).read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(state, dict) and state.get("finished"))


def last_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint (its trainer_state.json written last by the Trainer): one cut
    short by Ctrl-C during its save is passed over."""
    folder = out / "checkpoints"
    found = []
    for p in folder.glob("checkpoint-*") if folder.is_dir() else []:
        step = p.name.rsplit("-", 1)[-1]
        if step.isdigit() and (p / "trainer_state.json").is_file():
            found.append((int(step), p))
    return max(found)[1] if found else None


def write_state(out: Path, step: int, max_steps: int) -> None:
    """run_state.json: a run stopped early (a callback, a time limit) is not finished, and --resume
    continues it; one that trained all its planned steps is refused as finished."""
    from tuneproof.core.io import atomic_write_text

    done = {"step": step, "max_steps": max_steps}
    atomic_write_text(out / STATE_NAME, json.dumps({**done, "finished": step >= max_steps}))


class Written:
    """What a run creates before training starts, removed again (newest first) if it fails then, so
    that the folder is left as it was."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def add(self, path: Path) -> None:
        """Record `path` as this run's creation unless it is there already."""
        if not path.exists():
            self.paths.append(path)

    def remove(self) -> None:
        for path in reversed(self.paths):
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
