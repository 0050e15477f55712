"""lm-evaluation-harness outputs as benchmark runs: one output folder is one run.

lm-eval `--output_path P --log_samples` writes, in `P/<model>/`, `results_<date>.json` and one
`samples_<task>_<date>.jsonl` per task (lm_eval/loggers/evaluation_tracker.py). A samples row
(lm_eval/evaluator.py) holds `doc_id`, `doc_hash`, `filter`, `metrics` (the names) and each metric's
per-document value; a task with several filters (gsm8k: `strict-match`, `flexible-extract`) writes one
row per document and filter. The results file holds the aggregate as `results[task]["<metric>,<filter>"]`,
the groups as `group_subtasks`, the directions as `higher_is_better[task][metric]`. lm-eval before 0.4.3
kept the samples inside the results file (`samples[task]`); those are read too.

A run is given as its folder (the `<model>` folder or the one above it), as its results file, or as one
samples file (one task, no aggregate to compare). A folder holding two dates is two runs and is refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.gate.inputs import jsonl_objects, read_text

Row = tuple[str, str, str]  # (task, filter, metric)
SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl(\.gz)?$")
RESULTS = re.compile(r"^results_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.json(\.gz)?$")
LM_EVAL_HINT = "pass an lm-eval output folder written with log_samples on, or its results_<date>.json"
_ROW_KEYS = {
    "doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics", "doc_hash",
    "prompt_hash", "target_hash", "task", "task_name",
}  # fmt: skip


@dataclass(kw_only=True, slots=True)
class BenchRun:
    """One run of one model on one or more tasks: per (task, filter, metric), each document's value."""

    label: str
    source: str
    files: list[str] = field(default_factory=list)  # every file read, resolved
    date: str | None = None  # lm-eval's date id, from the file names
    scores: dict[Row, dict[str, float]] = field(default_factory=dict)
    corpus_level: dict[Row, str] = field(default_factory=dict)  # rows with no per-document number: why
    doc_hashes: dict[tuple[str, str], str] = field(default_factory=dict)
    aggregates: dict[Row, float] = field(default_factory=dict)  # lm-eval's own figure (results file)
    stderrs: dict[Row, float] = field(default_factory=dict)
    higher: dict[tuple[str, str], bool] = field(default_factory=dict)  # (task, metric) -> higher is better
    groups: dict[str, list[str]] = field(default_factory=dict)  # group -> its direct subtasks
    texts: dict[str, list[str]] = field(default_factory=dict)  # "<task>/<doc_id>" -> responses
    results_file: str | None = None
    version: str | None = None

    @property
    def tasks(self) -> set[str]:
        return {task for task, _, _ in (*self.scores, *self.corpus_level)}


def is_lm_eval(path: Path) -> bool:
    """A folder, a results_<date>.json or a samples_<task>_<date>.jsonl: read by `read_run`."""
    return path.is_dir() or bool(RESULTS.match(path.name) or SAMPLES.match(path.name))


def read_run(path: Path, arm: str, label: str) -> BenchRun:
    """One lm-eval run from its folder, its results file or one samples file (see the module docstring;
    a samples file not named samples_<task>_<date>.jsonl gives its task as the file's name)."""
    if path.is_dir():
        results, samples = _folder(path, arm)
    elif RESULTS.match(path.name):
        results, samples = path, _beside(path)
    else:
        m = SAMPLES.match(path.name)
        results, samples = None, {m.group("task") if m else path.name.split(".")[0]: path}
    run = BenchRun(label=label, source=str(path))
    run.files = [str(p.resolve()) for p in (results, *samples.values()) if p is not None]
    first = results if results is not None else next(iter(samples.values()))
    named = RESULTS.match(first.name) or SAMPLES.match(first.name)
    run.date = named.group("date") if named else None
    data: dict[str, Any] = {}
    if results is not None:
        data = _results(results)
        run.results_file, run.version = str(results), data.get("lm_eval_version")
        _read_aggregates(run, data, results)
    embedded: dict[str, Any] = data["samples"] if isinstance(data.get("samples"), dict) else {}
    tasks = _leaf_tasks(data) if data else list(samples)
    missing = [t for t in tasks if t not in samples and t not in embedded]
    if missing:
        raise TuneproofError(
            f"{results} has no samples for {', '.join(sorted(missing)[:4])}"
            + (f" (and {len(missing) - 4} more)" if len(missing) > 4 else ""),
            "run lm-eval with log_samples on; keep its samples_<task>_<date>.jsonl files beside the results",
        )
    seen: set[tuple[str, str, str]] = set()
    configs: dict[str, Any] = data["configs"] if isinstance(data.get("configs"), dict) else {}
    for task in tasks:
        config: dict[str, Any] = configs[task] if isinstance(configs.get(task), dict) else {}
        generates = config.get("output_type", "generate_until") == "generate_until"
        rows = _rows(samples[task]) if task in samples else _embedded(embedded[task], results)
        count = 0
        for where, row in rows:
            _add_row(run, task, row, where, seen, generates)
            count += 1
        if not count:
            raise TuneproofError(f"the samples of {task} in {path} hold no rows", LM_EVAL_HINT)
    if not run.scores and not run.corpus_level and not run.texts:
        raise TuneproofError(f"{path} holds no scored documents and no response text", LM_EVAL_HINT)
    return run


def _folder(path: Path, arm: str) -> tuple[Path | None, dict[str, Path]]:
    """The results file and the samples files (by task) of the one run a folder (or its subfolders) holds."""
    files = [p for p in (*path.glob("*"), *path.glob("*/*")) if p.is_file()]
    dates: dict[str, list[Path]] = {}
    for p in files:
        m = RESULTS.match(p.name) or SAMPLES.match(p.name)
        if m:
            dates.setdefault(m.group("date"), []).append(p)
    if not dates:
        raise TuneproofError(
            f"{path} holds no lm-eval results_<date>.json or samples_<task>_<date>.jsonl", LM_EVAL_HINT
        )
    if len(dates) > 1:
        shown = ", ".join(sorted(dates)[:3])
        raise TuneproofError(
            f"{path} holds {len(dates)} lm-eval runs (dates {shown}), given as one run of the {arm} arm",
            "give each run on its own: its results_<date>.json file, or a folder holding one run",
        )
    (found,) = dates.values()
    results = [p for p in found if RESULTS.match(p.name)]
    return (results[0] if results else None), {_task_of(p): p for p in found if SAMPLES.match(p.name)}


def _beside(results: Path) -> dict[str, Path]:
    date = RESULTS.match(results.name).group("date")  # type: ignore[union-attr]
    out = {}
    for p in results.parent.glob(f"samples_*_{date}.jsonl*"):
        if SAMPLES.match(p.name):
            out[_task_of(p)] = p
    return out


def _task_of(p: Path) -> str:
    return SAMPLES.match(p.name).group("task")  # type: ignore[union-attr]


def _results(p: Path) -> dict[str, Any]:
    text = read_text(p, "lm-eval results file", LM_EVAL_HINT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TuneproofError(f"{p} is not JSON ({e.msg}, line {e.lineno})", LM_EVAL_HINT) from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise TuneproofError(f"{p} has no 'results' table: not an lm-eval results file", LM_EVAL_HINT)
    return data


def _group_names(data: dict[str, Any]) -> set[str]:
    subtasks = data.get("group_subtasks") or {}
    groups = data.get("groups") or {}
    return {g for g, subs in subtasks.items() if subs} | set(groups)


def _leaf_tasks(data: dict[str, Any]) -> list[str]:
    groups = _group_names(data)
    return [t for t in data["results"] if t not in groups]


def _read_aggregates(run: BenchRun, data: dict[str, Any], p: Path) -> None:
    subtasks = data.get("group_subtasks") or {}
    run.groups = {
        g: [str(s) for s in subs] for g, subs in subtasks.items() if isinstance(subs, list) and subs
    }
    for section in ("results", "groups"):
        table = data.get(section) or {}
        for task, values in table.items():
            if not isinstance(values, dict):
                raise TuneproofError(f"{p}: {section}[{task!r}] is not a table", LM_EVAL_HINT)
            for key, value in values.items():
                metric, sep, filt = str(key).partition(",")
                if not sep or isinstance(value, bool) or not isinstance(value, int | float):
                    continue
                if metric.endswith("_stderr"):
                    run.stderrs[(task, filt, metric.removesuffix("_stderr"))] = float(value)
                else:
                    run.aggregates[(task, filt, metric)] = float(value)
    for task, metrics in (data.get("higher_is_better") or {}).items():
        if isinstance(metrics, dict):
            run.higher.update({(task, m): v for m, v in metrics.items() if isinstance(v, bool)})


def _rows(p: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for line_no, row in jsonl_objects(p, "lm-eval samples file", LM_EVAL_HINT):
        yield f"{p}, line {line_no}", row


def _embedded(rows: Any, results: Path | None) -> Iterable[tuple[str, dict[str, Any]]]:
    if not isinstance(rows, list):
        raise TuneproofError(f"{results}: 'samples' of a task is not a list of rows", LM_EVAL_HINT)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TuneproofError(f"{results}: samples row {i} is not a JSON object", LM_EVAL_HINT)
        yield f"{results}, samples row {i}", row


def _add_row(
    run: BenchRun,
    task: str,
    row: dict[str, Any],
    where: str,
    seen: set[tuple[str, str, str]],
    generates: bool,
) -> None:
    doc = row.get("doc_id")
    if isinstance(doc, bool) or not isinstance(doc, int | str) or doc == "":
        raise TuneproofError(f"{where}: no doc_id (an integer or a string)", LM_EVAL_HINT)
    doc_id, filt = str(doc), str(row.get("filter", "none"))
    if (task, filt, doc_id) in seen:
        raise TuneproofError(
            f"{where}: doc {doc_id!r} appears twice for {task} filter {filt!r}",
            "give each doc_id once per filter (one lm-eval run per folder)",
        )
    seen.add((task, filt, doc_id))
    names = row.get("metrics")
    if not isinstance(names, list):  # rows before lm-eval 0.4.2 list no names: every other key is a metric
        names = [k for k in row if k not in _ROW_KEYS]
    for name in names:
        if not isinstance(name, str):
            raise TuneproofError(
                f"{where}: metrics of doc {doc_id} names {name!r}, not a metric name",
                "give metrics as a list of the row's metric keys",
            )
        key = (task, filt, name)
        value = row.get(name)
        if isinstance(value, int | float):  # bool is an int
            number = float(value)
            if not math.isfinite(number):
                raise TuneproofError(
                    f"{where}: {name} of doc {doc_id} is {value}",
                    "re-run or drop the run with a broken metric",
                )
            run.scores.setdefault(key, {})[doc_id] = number
        elif isinstance(
            value, list | dict
        ):  # bleu's (reference, prediction) pairs: aggregated over the corpus
            run.corpus_level.setdefault(key, f"{type(value).__name__} per document (a corpus-level metric)")
        else:
            got = "missing" if name not in row else f"{value!r}, not a number"
            raise TuneproofError(
                f"{where}: {name} of doc {doc_id} is {got}", "re-run or drop the run with a broken metric"
            )
    doc_hash = row.get("doc_hash")
    if isinstance(doc_hash, str):
        run.doc_hashes.setdefault((task, doc_id), doc_hash)
    texts = _texts(row) if generates else None
    if texts:
        run.texts.setdefault(f"{task}/{doc_id}", texts)


def _texts(row: dict[str, Any]) -> list[str] | None:
    """The response strings of a generate_until row: `resps` is one list of strings per request
    (`filtered_resps` one string each, read only where `resps` is absent). A loglikelihood row's `resps`
    holds [logprob, is_greedy] pairs, written as strings by lm-eval 0.4.13: no text, None."""
    value = row["resps"] if "resps" in row else row.get("filtered_resps")
    if not isinstance(value, list) or not value:
        return None
    out: list[str] = []
    for request in value:
        if isinstance(request, str) and "resps" not in row:
            out.append(request)
        elif isinstance(request, list) and request and all(isinstance(x, str) for x in request):
            out.extend(request)
        else:
            return None
    return out
