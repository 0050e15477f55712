"""Per-example results from harnesses other than lm-eval (lighteval details, exported Inspect logs, your
own scorer): one file is one run, one row per document.

    id,task,exact_match,f1            (CSV with a header), or JSONL:
    {"id": "q17", "task": "gsm8k", "exact_match": 1, "f1": 0.8}

`id` names the document (paired by it across runs and arms); `task` is optional (default: the file's
name without its extensions); `filter` is optional (default `none`); every other column is a metric, one
number per document (true/false count as 1/0); the first row decides which columns are metrics (a column
of text, such as a prediction, is left alone), and every row needs a number in each. Directions are not
in the file: they come from tuneproof's one table (`bench_lineup.DIRECTIONS`), else the gate spec; a
metric neither names is not judged.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.gate.inputs import jsonl_objects, read_text
from tuneproof.gate.lm_eval import BenchRun

HINT = "per-example rows: id, optional task and filter, then one number per metric (docs/gate.md)"
_META = ("id", "task", "filter")


def is_per_example(path: Path) -> bool:
    """A CSV, or a JSONL whose first row has `id` and no `prompt_id` or `doc_id`."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".csv"):
        return True
    if not name.endswith(".jsonl") or not path.is_file():
        return False
    for _, row in jsonl_objects(path, "results file", HINT):
        return "id" in row and "prompt_id" not in row and "doc_id" not in row
    return False


def read_per_example(path: Path, label: str) -> BenchRun:
    run = BenchRun(label=label, source=str(path), files=[str(path.resolve())])
    default_task = path.name.split(".")[0]
    metrics: list[str] | None = None
    for where, row in _rows(path):
        doc = row.get("id")
        if isinstance(doc, bool) or not isinstance(doc, int | str) or str(doc).strip() == "":
            raise TuneproofError(f"{where}: no id", HINT)
        task = str(row.get("task") or default_task)
        filt = str(row.get("filter") or "none")
        if metrics is None:  # the first row's numbers name the metrics; its text columns are left alone
            metrics = [k for k, v in row.items() if k not in _META and _is_number(v)]
            if not metrics:
                raise TuneproofError(f"{where}: no metric column (a column of numbers)", HINT)
        for name in metrics:
            docs = run.scores.setdefault((task, filt, name), {})
            if str(doc) in docs:
                raise TuneproofError(
                    f"{where}: id {doc!r} appears twice for {task} {name}", "give each document once per file"
                )
            docs[str(doc)] = _number(row.get(name), where, name)
    if not run.scores:
        raise TuneproofError(f"{path} holds no scored rows", HINT)
    return run


def _is_number(value: Any) -> bool:
    if isinstance(value, int | float):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return value.strip().lower() in ("true", "false")
        return True
    return False


def _rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    if path.name.removesuffix(".gz").endswith(".csv"):
        try:
            yield from _csv_rows(path)
        except csv.Error as e:
            raise TuneproofError(f"{path} is not a readable CSV ({e})", HINT) from None
        return
    for line_no, row in jsonl_objects(path, "results file", HINT):
        yield f"{path}, line {line_no}", row


def _number(value: Any, where: str, name: str) -> float:
    if value is None or value == "":
        raise TuneproofError(f"{where}: {name} is missing", "give every document a value for every metric")
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "false"):
            return float(text == "true")
        try:
            value = float(text)
        except ValueError:
            raise TuneproofError(f"{where}: {name} = {value!r} is not a number", HINT) from None
    if not isinstance(value, int | float):
        raise TuneproofError(f"{where}: {name} = {value!r} is not a number", HINT)
    if not math.isfinite(float(value)):
        raise TuneproofError(
            f"{where}: {name} is {value}", "drop or re-score the document with a broken metric"
        )
    return float(value)


def _csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(read_text(path, "results file", HINT), newline=""))
    if not reader.fieldnames or "id" not in reader.fieldnames:
        raise TuneproofError(f"{path}: no header with an id column", HINT)
    twice = next((c for c in reader.fieldnames if reader.fieldnames.count(c) > 1), None)
    if twice is not None:
        raise TuneproofError(f"{path}: the header names {twice!r} twice", "give each column its own name")
    for line_no, row in enumerate(reader, start=2):
        if None in row or any(v is None for v in row.values()):
            raise TuneproofError(f"{path}, line {line_no}: {len(reader.fieldnames)} columns expected", HINT)
        yield f"{path}, line {line_no}", row
