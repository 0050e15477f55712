"""Safe output: nothing the user had is lost, nothing half-written is left behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tuneproof.errors import TuneproofError


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` via a temporary file in the same folder, then rename over it."""
    return atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write `data` to `path` via a temporary file in the same folder, then rename over it."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise TuneproofError(f"{folder} exists and is not a folder", "pass a folder path to --out") from None
    except PermissionError:
        raise TuneproofError(
            f"cannot create {folder}: permission denied", "pass a writable --out folder"
        ) from None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def check_out_folder(out: Path) -> Path:
    """Refuse an --out that names an existing file, before any work is done; the folder itself is
    created when the first output is written."""
    if out.exists() and not out.is_dir():
        raise TuneproofError(f"--out {out} is a file", "pass a folder; the outputs are written inside it")
    return out
