"""Resolved models kept on disk, so that counting a config seen before needs neither torch nor
transformers.

Why: reading a config through transformers' config class imports transformers and torch, about 2 s
of a `tuneproof flops` run that takes 50 ms to count (issue 20: under 2 s with start-up). The counting
commands need only what `resolve` derives from that config object, so that is what is kept: the
`ModelShape`, the notes (fields taken from transformers' defaults) and max_position_embeddings. The
config object itself is not kept: `ResolvedModel.config` reads the config dict in hand through
transformers on first use, so building a model or estimating its parameters pays the import and
counting does not. Defaults stay transformers' own: an entry only ever holds what a cold `resolve`
derived from them, and a cold run is today's path unchanged, plus writing the entry.

The key is the sha256 of the config as canonical JSON (sorted keys, no whitespace), the installed
transformers version (read from the package's `__init__.py` that `import transformers` would load:
`importlib.metadata` costs 80 ms), the tuneproof version and a digest of the source of
`tuneproof.arch` (a development checkout changes its readers without changing its version, and a
shape from an older reader would be silently wrong). A config that is not plain JSON (a caller's
dict holding other objects) is not cached.

Where: `$TUNEPROOF_CACHE`, else `$XDG_CACHE_HOME/tuneproof`, else `~/.cache/tuneproof`
(`tuneproof.core.io.cache_dir`), one `model-<key>.pickle` per config, written to a temporary file and
renamed. `TUNEPROOF_NO_CACHE=1` turns reading and writing off. The cache only ever saves time: an
entry that is missing, unreadable, damaged or not what its name says is ignored (and rewritten by the
cold path), and a folder that cannot be written leaves the command as it was, never an error.

Format: pickle, with a loader that builds only the dataclasses of `tuneproof.arch.shape`, the mixer
cores `tuneproof.arch.mixers.CORE_COSTS` costs (and plain values) and refuses every other global, so
an entry cannot run code when read (Python's "restricting globals"). JSON would need a reader per
dataclass kept in step with shape.py; pickle follows shape.py as it changes (the source digest is in
the key) and keeps identical layers shared.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import pickle
import re
from dataclasses import dataclass, is_dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from tuneproof.arch import shape as _shape
from tuneproof.arch.shape import ModelShape

FORMAT = "tuneproof-resolved-model-1"  # bump when the entry's layout changes
NO_CACHE_ENV = "TUNEPROOF_NO_CACHE"

# The globals an entry may name: the shape's own dataclasses, nothing callable beyond them.
_ALLOWED = {name: obj for name, obj in vars(_shape).items() if isinstance(obj, type) and is_dataclass(obj)}


@dataclass(frozen=True, slots=True)
class Entry:
    """What a cold `resolve` derived from one config: its shape, its notes and its position limit."""

    shape: ModelShape
    notes: tuple[str, ...]
    max_positions: int | None


def enabled() -> bool:
    """False when `TUNEPROOF_NO_CACHE` is set to anything but "" or "0"."""
    return os.environ.get(NO_CACHE_ENV, "") in ("", "0")


def entry_key(data: dict[str, Any], transformers_version: str) -> str | None:
    """The key of `data` read by `transformers_version`; None when `data` is not plain JSON or the
    source of tuneproof.arch cannot be read."""
    digest = source_digest()
    if digest is None:
        return None
    try:
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    from tuneproof.core.version import __version__

    h = hashlib.sha256()
    for part in (FORMAT, __version__, digest, transformers_version, canonical):
        h.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def key_for(data: dict[str, Any]) -> str | None:
    """The key for `data` under the installed transformers; None when the cache is off or the
    installed version cannot be read without importing it."""
    if not enabled():
        return None
    version = transformers_version()
    return entry_key(data, version) if version is not None else None


def entry_path(key: str) -> Path:
    from tuneproof.core.io import cache_dir

    return cache_dir() / f"model-{key[:32]}.pickle"


def load(key: str) -> Entry | None:
    """The entry stored under `key`, or None: missing, unreadable, damaged, written under another
    key, or naming a global outside `tuneproof.arch.shape` (all the same to the caller: a miss)."""
    try:
        raw = entry_path(key).read_bytes()
        payload = _ShapeUnpickler(io.BytesIO(raw)).load()
    except Exception:  # a damaged pickle can raise almost anything; every failure is a miss
        return None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or payload.get("key") != key:
        return None
    entry = payload.get("entry")
    if not isinstance(entry, dict):
        return None
    shape, notes, limit = entry.get("shape"), entry.get("notes"), entry.get("max_positions")
    if not isinstance(shape, ModelShape) or not isinstance(notes, tuple):
        return None
    if not all(isinstance(n, str) for n in notes) or not (limit is None or type(limit) is int):
        return None
    return Entry(shape, notes, limit)


def store(key: str, entry: Entry) -> None:
    """Keep `entry` under `key` (temporary file, then rename). A cache folder that cannot be written
    costs the next run its speed, nothing else: every failure is ignored."""
    from tuneproof.core.errors import TuneproofError
    from tuneproof.core.io import atomic_write_bytes

    body = {"shape": entry.shape, "notes": entry.notes, "max_positions": entry.max_positions}
    try:
        data = pickle.dumps({"format": FORMAT, "key": key, "entry": body}, protocol=pickle.HIGHEST_PROTOCOL)
        atomic_write_bytes(entry_path(key), data)
    except (TuneproofError, OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return


@functools.cache
def _mixer_cores() -> dict[tuple[str, str], type]:
    """The Core subclasses defined outside shape.py (SelectiveScan, Lightning, RgLru, Wkv, ShortConv,
    KimiDelta, MLstm, CcaConv, ...): every type `tuneproof.arch.mixers.CORE_COSTS` costs, by module and
    name. Without them an entry of a Mamba, RWKV, LFM2, MiniMax, Kimi-Linear or RecurrentGemma shape
    was refused on every read, so those families never hit."""
    from tuneproof.arch.mixers import CORE_COSTS

    return {(t.__module__, t.__qualname__): t for t in CORE_COSTS if is_dataclass(t)}


class _ShapeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == _shape.__name__ and name in _ALLOWED:
            return _ALLOWED[name]
        if (core := _mixer_cores().get((module, name))) is not None:
            return core
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a model shape")


_VERSION = re.compile(rb"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def transformers_version() -> str | None:
    """The version of the transformers `import transformers` would load, read from its `__init__.py`
    without importing it; None when it is not installed or the file does not say."""
    try:
        spec = find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    try:
        with open(spec.origin, "rb") as f:
            found = _VERSION.search(f.read(1 << 16))
    except OSError:
        return None
    return found.group(1).decode() if found else None


@functools.cache
def source_digest() -> str | None:
    """sha256 over the names and bytes of tuneproof.arch's modules (the code that derives a shape);
    None when one cannot be read (then nothing is cached: a stale shape could not be told apart)."""
    h = hashlib.sha256()
    try:
        for p in sorted(Path(__file__).resolve().parent.glob("*.py")):
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    except OSError:
        return None
    return h.hexdigest()
