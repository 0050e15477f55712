"""Safe output: nothing the user had is lost, nothing half-written is left behind, files keep the
user's umask, and JSON is strict (no NaN or Infinity literals: an unknown number is null)."""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError


def input_file(path: str | Path, what: str, hint: str) -> Path:
    """`path` as a readable regular file, or one line saying what it is instead: not there, a folder,
    something else (a socket, a device), or unreadable. `what` names the input ("points file")."""
    p = Path(path)
    if p.is_dir():
        raise TuneproofError(f"{what} {p} is a folder, not a file", hint)
    if not p.exists():
        raise TuneproofError(f"{what} not found: {p}", hint)
    if not p.is_file():
        raise TuneproofError(f"{what} {p} is not a regular file", hint)
    if not os.access(p, os.R_OK):
        raise TuneproofError(f"{what} {p} cannot be read (permission denied)", hint)
    return p


def jsonl_objects(p: Path, what: str, hint: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of a JSONL file (`.gz` read as gzip). `what` names
    the file in a not-found error ("base arm file")."""
    input_file(p, what, hint)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rb") as f:
            for line_no, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8").strip()
                except UnicodeDecodeError as e:
                    raise TuneproofError(
                        f"{p}, line {line_no}: invalid UTF-8 at byte {e.start}", "save the file as UTF-8"
                    ) from None
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TuneproofError(f"{p}, line {line_no}: not JSON ({e.msg})", hint) from None
                if not isinstance(row, dict):
                    raise TuneproofError(f"{p}, line {line_no}: not a JSON object", hint)
                yield line_no, row
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TuneproofError(f"cannot read {p}: {e}", "pass a readable JSONL file (or .jsonl.gz)") from None


def cache_dir() -> Path:
    """Where tuneproof keeps what it can rebuild (resolved models, corpus indexes): $TUNEPROOF_CACHE,
    else $XDG_CACHE_HOME/tuneproof, else ~/.cache/tuneproof."""
    if os.environ.get("TUNEPROOF_CACHE"):
        return Path(os.environ["TUNEPROOF_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tuneproof"


def umask() -> int:
    """The process umask, read without changing it where Linux allows (/proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` via a temporary file in the same folder, then rename over it."""
    return atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write `data` to `path` via a temporary file in the same folder, then rename over it. The file
    gets the mode a plain `open(path, "w")` would give (0o666 minus the umask), not mkstemp's 0o600."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise TuneproofError(
            f"{folder} exists and is not a folder", "pass a folder path for the output"
        ) from None
    except OSError as e:
        raise TuneproofError(
            f"cannot create {folder}: {e.strerror}", "pass a writable output folder"
        ) from None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    except OSError as e:
        raise TuneproofError(
            f"cannot write in {folder}: {e.strerror}", "pass a writable output folder"
        ) from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask())
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def strict(data: Any) -> Any:
    """`data` with every non-finite float replaced by None and numpy scalars made plain, so that
    `json.dumps(..., allow_nan=False)` never meets NaN or Infinity. Producers give a reason next to
    every unknown; this is the last guard, not the way unknowns are made."""
    if isinstance(data, dict):
        return {str(k): strict(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [strict(v) for v in data]
    if isinstance(data, bool) or data is None or isinstance(data, str):
        return data
    if isinstance(data, int):
        return data
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    item = getattr(data, "item", None)  # numpy / torch scalars
    if callable(item):
        return strict(item())
    return data


def dumps(data: Any) -> str:
    """Strict JSON text (see `strict`)."""
    return json.dumps(strict(data), indent=2, allow_nan=False)


def atomic_write_json(path: Path, data: Any) -> Path:
    return atomic_write_text(path, dumps(data) + "\n")


def check_out_folder(out: Path, files: tuple[str, ...] = ()) -> Path:
    """Refuse an output folder that cannot be created or written, before any work is done, and one where
    an output named in `files` exists as something other than a file (a folder, a socket). Nothing is
    left behind by the check: it creates and removes one temporary file in the folder, or in the
    nearest existing parent when the folder does not exist yet (it is created with the first output)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TuneproofError(f"{out} is a file", "pass a folder; the outputs are written inside it")
    for name in files:
        target = out / name
        if target.exists() and not target.is_file():
            raise TuneproofError(
                f"{target} exists and is not a file", "move it away or pass another output folder"
            )
    probe_in = out
    while not probe_in.exists():
        if probe_in.parent == probe_in:
            break
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise TuneproofError(f"{out} cannot be created: {probe_in} is not a folder", "pass a folder path")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tuneproof-write-check.", dir=probe_in)
    except OSError as e:
        raise TuneproofError(
            f"{out} cannot be written: {e.strerror} in {probe_in}", "pass a writable folder"
        ) from None
    os.close(fd)
    os.unlink(tmp)
    return out


def check_out_file(out: Path, inputs: tuple[Path | str, ...] = ()) -> Path:
    """Refuse an output file path that cannot be written (a folder, an empty path, a path under a file,
    an unwritable folder) or that is one of the command's `inputs` (writing it would destroy them), before
    any work starts."""
    if str(out) in ("", ".") or out.name in ("", ".", ".."):
        raise TuneproofError(
            f"{{out}} {str(out)!r} is empty or a folder, not a file path",
            "pass a file path, e.g. result.json",
            fields=("out",),
        )
    if out.exists() and not out.is_file():
        raise TuneproofError(f"{out} exists and is not a file", "pass a file path for {out}", fields=("out",))
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise TuneproofError(
                    f"{{out}} {out} cannot be created: {parent} is a file, not a folder", fields=("out",)
                )
            break
    for source in inputs:
        if _same_file(out, Path(source)):
            raise TuneproofError(
                f"{{out}} {out} is also an input of this command: writing it would destroy that input",
                "pass another output path",
                fields=("out",),
            )
    check_out_folder(out.parent)
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False
