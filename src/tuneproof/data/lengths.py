"""Sequence lengths (and optional root-document ids) from a file, with line-numbered errors."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import input_file
from tuneproof.core.validate import MAX_TOKENS

_INT = re.compile(r"-?[0-9]+")  # ASCII digits only: str.isdigit also accepts "²", which int() refuses
SYNTHETIC = Path(__file__).resolve().parent / "longtail_20k.jsonl.gz"


def read_lengths(path: str | Path) -> tuple[np.ndarray, np.ndarray | None]:
    """One integer per line, or JSONL objects with "length" and optional "root".

    Returns (lengths int64, roots int64 or None). Roots are mapped to dense ids in first-seen order."""
    p = input_file(path, "lengths file", "pass one integer per line, or JSONL with 'length'")
    opener = gzip.open if p.suffix == ".gz" else open
    lengths: list[int] = []
    roots: list[object] = []
    try:
        with opener(p, "rt") as f:
            for line_no, raw in enumerate(f, start=1):
                line = raw.strip()
                if not line:
                    continue
                n, root = _parse(line, p, line_no)
                lengths.append(n)
                roots.append(root)
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as e:
        raise TuneproofError(f"cannot read {p}: {e}", "pass a text file (or .gz)") from None
    if not lengths:
        raise TuneproofError(f"{p} holds no lengths", "one integer per line, or JSONL with 'length'")
    have = [r is not None for r in roots]
    if any(have) and not all(have):
        first = have.index(False) if have[0] else have.index(True)
        raise TuneproofError(
            f"{p}: some rows have a root and some do not (first mismatch: row {first + 1})",
            "give every row a 'root', or none",
        )
    ids = None
    if all(have):
        table: dict[object, int] = {}
        ids = np.fromiter((table.setdefault(r, len(table)) for r in roots), dtype=np.int64, count=len(roots))
    return np.asarray(lengths, dtype=np.int64), ids


def _parse(line: str, p: Path, line_no: int) -> tuple[int, object]:
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            msg = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
            raise TuneproofError(f"{p}:{line_no}: not JSON: {msg}", "fix that line") from None
        if not isinstance(obj, dict) or "length" not in obj:
            raise TuneproofError(f"{p}:{line_no}: no 'length' key", "each JSONL row needs 'length'")
        value, root = obj["length"], obj.get("root")
        if root is not None and (isinstance(root, bool) or not isinstance(root, int | str)):
            raise TuneproofError(
                f"{p}:{line_no}: root {root!r} is not a string or an integer", "fix that line"
            )
    else:
        value, root = line, None
    if isinstance(value, bool) or not isinstance(value, int | str) or not _INT.fullmatch(str(value).strip()):
        raise TuneproofError(f"{p}:{line_no}: length {value!r} is not an integer", "lengths are token counts")
    n = int(value)
    if n <= 0:
        raise TuneproofError(f"{p}:{line_no}: length {n} must be > 0", "drop empty sequences before batching")
    if n > MAX_TOKENS:
        raise TuneproofError(
            f"{p}:{line_no}: length {n:,} is beyond any model's context",
            f"lengths are at most {MAX_TOKENS:,}",
        )
    return n, root


def synthetic_lengths() -> tuple[np.ndarray, np.ndarray]:
    """The shipped long-tail set: 20,000 lengths, lognormal, clipped to [64, 16384], ~5 samples per root."""
    if not SYNTHETIC.is_file():  # an installation problem, not the user's input
        raise TuneproofError(
            f"the shipped lengths file is missing from this installation: {SYNTHETIC}",
            "reinstall tuneproof, or pass a lengths file of your own",
        )
    lengths, roots = read_lengths(SYNTHETIC)
    assert roots is not None
    return lengths, roots
