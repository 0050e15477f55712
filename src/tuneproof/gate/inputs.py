"""Reading the gate's input files: JSONL rows (optionally gzipped) and TOML tables, each error one line
that names the file, the line and what to fix."""

from __future__ import annotations

import gzip
import tomllib
import zlib
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import input_file
from tuneproof.core.io import jsonl_objects as jsonl_objects


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
