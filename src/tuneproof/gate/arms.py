"""Arms: the responses one model gave, read from JSONL, and two arms lined up on their shared prompts.

An arm file holds one row per response: `{"prompt_id": str, "run": int|str, "sample": int, "text": str}`.
`run` is an independent repetition of the whole arm (another seed); `sample` numbers the responses to a
prompt within a run. Extra keys are kept out of the way and ignored.

lm-evaluation-harness `--log_samples` files (`samples_<task>_*.jsonl`, rows with `doc_id` and
`filtered_resps` or `resps`) are read as well: each such file is one run, its prompt ids are
`<task>/<doc_id>`, and each response string in the row is one sample.

Several files may make one arm; runs are then told apart by file (`<file name>:<run>`, the path where two
files share a name). A file given twice is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuneproof.errors import TuneproofError
from tuneproof.gate.inputs import jsonl_objects

ARM_HINT = 'one JSON object per line: {"prompt_id": ..., "run": ..., "sample": ..., "text": ...}'
_LM_EVAL_NAME = re.compile(r"^samples_(?P<task>.+?)_\d{4}-\d{2}-\d{2}T")


@dataclass(frozen=True, slots=True)
class Response:
    prompt_id: str
    run: str
    sample: int
    text: str


@dataclass(slots=True)
class Arm:
    """Responses of one model, indexed as runs[run][prompt_id] -> texts in sample order."""

    name: str
    sources: tuple[str, ...]
    runs: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def run_names(self) -> list[str]:
        return list(self.runs)

    @property
    def prompt_ids(self) -> list[str]:
        """Prompts answered in every run, in first-seen order."""
        runs = list(self.runs.values())
        if not runs:
            return []
        common = set(runs[0]).intersection(*runs[1:])
        seen = dict.fromkeys(p for r in runs for p in r)
        return [p for p in seen if p in common]

    @property
    def all_prompt_ids(self) -> set[str]:
        return {p for run in self.runs.values() for p in run}

    @property
    def num_responses(self) -> int:
        return sum(len(texts) for run in self.runs.values() for texts in run.values())

    def texts(self, run: str, prompt_id: str) -> list[str]:
        return self.runs[run][prompt_id]

    def responses(self) -> Iterator[Response]:
        for run, prompts in self.runs.items():
            for prompt_id, texts in prompts.items():
                for i, text in enumerate(texts):
                    yield Response(prompt_id, run, i, text)


def read_arm(paths: Sequence[str | Path], name: str) -> Arm:
    """One arm from one or more files (tuneproof arm JSONL or lm-eval samples JSONL, optionally .gz)."""
    if not paths:
        raise TuneproofError(f"no files given for the {name} arm", "pass at least one arm file")
    arm = Arm(name=name, sources=tuple(str(p) for p in paths))
    keyed: dict[tuple[str, str], dict[int, str]] = {}
    files = [Path(x) for x in paths]
    seen: dict[str, Path] = {}
    for p in files:
        key = str(p.resolve())
        if key in seen:
            raise TuneproofError(f"{p} is given twice for the {name} arm", "give each file once")
        seen[key] = p
    names = [p.name for p in files]
    for p in files:
        # runs from several files are told apart by file: its name, or its path where names repeat
        label = p.name if names.count(p.name) == 1 else str(p)
        prefix = f"{label}:" if len(files) > 1 else ""
        for row in _read_rows(p, name):
            run = prefix + row.run
            slots = keyed.setdefault((run, row.prompt_id), {})
            if row.sample in slots:
                if not row.run:  # lm-eval rows: the file is the run
                    raise TuneproofError(
                        f"{p}: {row.prompt_id!r} appears twice", "give each doc_id once per file"
                    )
                raise TuneproofError(
                    f"{p}: prompt {row.prompt_id!r}, run {row.run!r} has sample {row.sample} twice",
                    "number the samples of a prompt 0, 1, 2, ... within each run",
                )
            slots[row.sample] = row.text
    if not keyed:
        raise TuneproofError(f"the {name} arm ({', '.join(arm.sources)}) holds no responses", ARM_HINT)
    for (run, prompt_id), slots in keyed.items():
        arm.runs.setdefault(run, {})[prompt_id] = [slots[s] for s in sorted(slots)]
    return arm


def _read_rows(p: Path, arm: str) -> Iterator[Response]:
    lm_eval = _LM_EVAL_NAME.match(p.name)
    task = lm_eval.group("task") if lm_eval else None
    for line_no, row in jsonl_objects(p, f"{arm} arm file", ARM_HINT):
        if "prompt_id" not in row and "doc_id" in row:
            yield from _lm_eval_row(row, p, line_no, task)
        else:
            yield _arm_row(row, p, line_no)


def _arm_row(row: dict[str, object], p: Path, line_no: int) -> Response:
    where = f"{p}, line {line_no}"
    for key in ("prompt_id", "run", "sample", "text"):
        if key not in row:
            raise TuneproofError(f"{where}: no {key!r}", ARM_HINT)
    prompt_id, run, sample, text = row["prompt_id"], row["run"], row["sample"], row["text"]
    if not isinstance(text, str):
        raise TuneproofError(f"{where}: 'text' must be a string, got {type(text).__name__}", ARM_HINT)
    if isinstance(prompt_id, bool) or not isinstance(prompt_id, str | int) or prompt_id == "":
        raise TuneproofError(f"{where}: 'prompt_id' must be a non-empty string, got {prompt_id!r}", ARM_HINT)
    if isinstance(run, bool) or not isinstance(run, str | int):
        raise TuneproofError(f"{where}: 'run' must be an integer or a string, got {run!r}", ARM_HINT)
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise TuneproofError(f"{where}: 'sample' must be an integer >= 0, got {sample!r}", ARM_HINT)
    return Response(str(prompt_id), str(run), sample, text)


def _lm_eval_row(row: dict[str, object], p: Path, line_no: int, task: str | None) -> Iterator[Response]:
    """lm-eval `--log_samples`: `filtered_resps` is a list of strings (one per repeat), `resps` a list of
    lists of strings; the file is one run."""
    where = f"{p}, line {line_no}"
    resps = row.get("filtered_resps", row.get("resps"))
    texts = _flatten_strings(resps)
    if texts is None:
        raise TuneproofError(
            f"{where}: lm-eval row without string responses in 'filtered_resps' or 'resps'",
            "pass lm-eval log_samples files of a generation task (generate_until)",
        )
    prompt_id = f"{task}/{row['doc_id']}" if task else str(row["doc_id"])
    for i, text in enumerate(texts):
        yield Response(prompt_id, "", i, text)


def _flatten_strings(value: object) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        out: list[str] = []
        for v in value:
            flat = _flatten_strings(v)
            if flat is None:
                return None
            out.extend(flat)
        return out
    return None


@dataclass(frozen=True, slots=True)
class Pairing:
    """Two arms lined up on the prompts both answered in every run."""

    prompt_ids: list[str]
    num_dropped: int

    def note(self) -> str | None:
        if not self.num_dropped:
            return None
        return (
            f"{self.num_dropped} prompts are missing from one arm or one run; the gate runs on the "
            f"{len(self.prompt_ids)} prompts both arms answered in every run"
        )


def pair(base: Arm, tuned: Arm) -> Pairing:
    """Shared prompts of two arms (each answered in every run of both); refuses when there are none."""
    shared_set = set(base.prompt_ids) & set(tuned.prompt_ids)
    shared = [p for p in base.prompt_ids if p in shared_set]
    if not shared:
        b, t = base.prompt_ids, tuned.prompt_ids
        raise TuneproofError(
            f"the base and tuned arms share no prompt answered in every run (base: {len(b)} such prompts"
            f"{', e.g. ' + repr(b[0]) if b else ''}; tuned: {len(t)}{', e.g. ' + repr(t[0]) if t else ''})",
            "generate both arms from the same prompts; lm-eval ids are <task>/<doc_id>, the task taken from "
            "the samples_<task>_<date>.jsonl file name",
        )
    return Pairing(shared, len(base.all_prompt_ids | tuned.all_prompt_ids) - len(shared))
