"""A dataset's rows as the trainers read them: a JSONL file (`.jsonl`, `.jsonl.gz`), a JSON file (an
array, or one object), a Parquet file, or a folder saved with `datasets.save_to_disk`; every error one
line naming the file and what to fix. Rows are dicts, in file order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import input_file, jsonl_objects

HINT = "pass a JSONL, JSON or Parquet file, or a folder saved with datasets' save_to_disk"
SUFFIXES = (".jsonl", ".json", ".parquet", ".gz")


def check_path(path: Path) -> None:
    """What can be said of a dataset's path without reading it: it exists, and is a file of a kind
    read here or a folder saved with `datasets.save_to_disk`."""
    path = Path(path)
    if path.is_dir():
        if not (path / "dataset_info.json").exists() and not (path / "dataset_dict.json").exists():
            raise TuneproofError(f"{path} is a folder, not one saved with datasets' save_to_disk", HINT)
        return
    input_file(path, "dataset", HINT)
    if path.suffix not in (".parquet", ".json") and not path.name.endswith((".jsonl", ".jsonl.gz")):
        raise TuneproofError(f"dataset {path}: not a JSONL, JSON or Parquet file", HINT)


def read_rows(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of `path` (at most `limit`), refused in one line when it cannot be read or holds none."""
    path = Path(path)
    check_path(path)
    if path.is_dir():
        rows = _saved(path)
    elif path.suffix == ".parquet":
        rows = _parquet(path)
    elif path.suffix == ".json":
        rows = _json(path)
    else:
        rows = [row for _, row in jsonl_objects(path, "dataset", HINT)]
    if not rows:
        raise TuneproofError(f"dataset {path} holds no rows", "pass a dataset with rows")
    return rows[:limit] if limit is not None else rows


def _json(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as e:
        raise TuneproofError(f"dataset {path}: invalid UTF-8 at byte {e.start}", "save it as UTF-8") from None
    except json.JSONDecodeError as e:
        raise TuneproofError(f"dataset {path}: not JSON ({e.msg}, line {e.lineno})", "fix the file") from None
    rows = data if isinstance(data, list) else [data]
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise TuneproofError(f"dataset {path}: row {i} is not a JSON object", HINT)
    return rows


def _parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq

        return [dict(r) for r in pq.read_table(path).to_pylist()]
    except ImportError:
        raise TuneproofError("reading Parquet needs pyarrow", "pip install 'tuneproof[train]'") from None
    except Exception as e:  # pyarrow's own errors: a file that is not Parquet, a truncated one
        first = (str(e).splitlines() or [""])[0][:200]
        raise TuneproofError(f"cannot read {path} as Parquet: {first}", HINT) from None


def _saved(path: Path) -> list[dict[str, Any]]:
    try:
        from datasets import load_from_disk

        data = load_from_disk(str(path))
    except ImportError:
        raise TuneproofError(
            "reading a saved dataset folder needs datasets", "pip install datasets"
        ) from None
    except Exception as e:  # datasets' own errors on a damaged folder
        first = (str(e).splitlines() or [""])[0][:200]
        raise TuneproofError(f"{path} cannot be read as a saved dataset: {first}", HINT) from None
    if hasattr(data, "keys"):  # a DatasetDict: its train split, as the trainers take it
        if "train" not in data:
            raise TuneproofError(f"{path} holds splits {sorted(data)}, and no train split", HINT)
        data = data["train"]
    return [dict(r) for r in data]
