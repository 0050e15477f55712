"""What a training run leaves for the shipping commands: the adapter's health (judged on the live
model) and the base's fingerprint (`base_fingerprint.json`, what `tuneproof merge` checks a base
against). `TuneproofCallback` records both at train end for any Trainer; `tuneproof train` writes
the fingerprint into its adapter folder itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuneproof.train.say import say


def adapter_health(model: Any) -> Any:
    """The adapter's `Health` (tuneproof.ship.health) on the live model; None for a model that is not
    a PEFT model (nothing to judge)."""
    try:
        from peft import PeftModel
    except ImportError:
        return None
    if not isinstance(model, PeftModel):
        return None
    from tuneproof.ship.health import live_health

    return live_health(model)


def base_folder(model: Any) -> tuple[Path | None, str]:
    """(the local folder the model's base was loaded from, or its hub cache snapshot; or None) and
    the name it was loaded under ("" when built from a config)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    source = getattr(base.config, "_name_or_path", "") or ""
    return (Path(source) if source and Path(source).is_dir() else _hub_snapshot(source)), source


def write_base_fingerprint(folder: Path | None, source: str, out: Path) -> Path | None:
    """Write the fingerprint of the base's weight files in `folder` to OUT/base_fingerprint.json and
    return its path; a base that is no local safetensors folder is warned about (once, naming
    `source`) and nothing is written."""
    from tuneproof.core.io import atomic_write_json
    from tuneproof.ship.identity import FINGERPRINT_NAME, fingerprint

    if folder is None or not any(folder.glob("*.safetensors")):
        say(
            f"tuneproof: the base ({source or 'built from a config'}) is not a local safetensors folder: "
            "no base_fingerprint.json (record one with tuneproof fingerprint)"
        )
        return None
    return atomic_write_json(out / FINGERPRINT_NAME, fingerprint(folder).to_json())


def _hub_snapshot(name: str) -> Path | None:
    """The local snapshot folder of a hub id, if it is in the cache (never downloads)."""
    if not name:
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # not cached, not a hub id, offline: nothing to fingerprint
        return None
