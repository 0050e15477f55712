"""Reading the gate's input files: JSONL rows (optionally gzipped) and TOML tables, each error one line
that names the file, the line and what to fix."""

from __future__ import annotations

import gzip
import json
import tomllib
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import input_file


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


def read_text(p: Path, what: str, hint: str) -> str:
    """A whole UTF-8 text file (`.gz` read as gzip; a byte-order mark dropped)."""
    input_file(p, what, hint)
    try:
        data = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TuneproofError(f"{p}: invalid UTF-8 at byte {e.start}", "save it as UTF-8") from None
    except (OSError, EOFError, zlib.error) as e:
        raise TuneproofError(f"cannot read {what} {p}: {e}", hint) from None


def read_toml(p: Path, what: str, hint: str) -> dict[str, Any]:
    """A TOML file's tables; `what` names it in errors ("the probes file")."""
    try:
        return tomllib.loads(p.read_text(encoding="utf-8-sig"))  # a byte-order mark is not TOML
    except OSError as e:
        raise TuneproofError(f"cannot read {what} {p}: {e.strerror}", hint) from None
    except UnicodeDecodeError as e:
        raise TuneproofError(f"{p}: invalid UTF-8 at byte {e.start}", "save it as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise TuneproofError(f"{p} is not valid TOML: {e}", hint) from None
