"""Arms: the responses one model gave, read from JSONL, and two arms lined up on their shared prompts.

An arm file holds one row per response: `{"prompt_id": str, "run": int|str, "sample": int, "text": str}`.
`run` is an independent repetition of the whole arm (another seed); `sample` numbers the responses to a
prompt within a run. Extra keys are kept out of the way and ignored.

Benchmark runs are read as well, one run per input: an lm-eval output folder, results file or samples
file (`gate/lm_eval.py`), or a per-example CSV or JSONL (`gate/per_example.py`). Their scores go to
`Arm.bench`; the response texts of generation tasks become the run's prompts `<task>/<doc_id>`, each
response string in the row one sample.

Several files may make one arm; runs are then told apart by file (`<file name>:<run>`, the path where two
files share a name). A file given twice is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import input_file
from tuneproof.gate.inputs import jsonl_objects

if TYPE_CHECKING:
    from tuneproof.gate.bench_lineup import Lineup
    from tuneproof.gate.lm_eval import BenchRun

ARM_HINT = 'one JSON object per line: {"prompt_id": ..., "run": ..., "sample": ..., "text": ...}'


@dataclass(kw_only=True, frozen=True, slots=True)
class Response:
    prompt_id: str
    run: str
    sample: int
    text: str


@dataclass(kw_only=True, slots=True)
class Arm:
    """Responses of one model, indexed as runs[run][prompt_id] -> texts in sample order."""

    name: str
    sources: tuple[str, ...]
    runs: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    bench: dict[str, BenchRun] = field(default_factory=dict)  # benchmark runs by label

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
                    yield Response(prompt_id=prompt_id, run=run, sample=i, text=text)


def read_arm(paths: Sequence[str | Path], name: str) -> Arm:
    """One arm from one or more inputs: tuneproof arm JSONL (runs inside), or benchmark runs, one per
    input (an lm-eval output folder, results file or samples file; a per-example CSV or JSONL)."""
    if not paths:
        raise TuneproofError(f"no files given for the {name} arm", "pass at least one arm file")
    arm = Arm(name=name, sources=tuple(str(p) for p in paths))
    files = [Path(x) for x in paths]
    seen: dict[str, Path] = {}
    for p in files:
        key = str(p.resolve())
        if key in seen:
            raise TuneproofError(f"{p} is given twice for the {name} arm", "give each file once")
        seen[key] = p
    kinds = {p: _kind(p, name) for p in files}
    if len({k == "text" for k in kinds.values()}) > 1:  # lm-eval and per-example runs are both runs
        raise TuneproofError(
            f"the {name} arm mixes tuneproof arm files with benchmark results ({', '.join(map(str, files))})",
            "give an arm either response files or benchmark runs",
        )
    names = [p.name for p in files]
    keyed: dict[tuple[str, str], dict[int, str]] = {}
    for p in files:
        # runs from several files are told apart by file: its name, or its path where names repeat
        label = p.name if names.count(p.name) == 1 else str(p)
        if kinds[p] == "text":
            _text_rows(p, name, f"{label}:" if len(files) > 1 else "", keyed)
            continue
        from tuneproof.gate.lm_eval import read_run
        from tuneproof.gate.per_example import read_per_example

        run = read_run(p, name, label) if kinds[p] == "lm-eval" else read_per_example(p, label)
        arm.bench[label] = run
        for prompt_id, texts in run.texts.items():
            keyed[(label, prompt_id)] = dict(enumerate(texts))
    if not keyed and not arm.bench:
        raise TuneproofError(f"the {name} arm ({', '.join(arm.sources)}) holds no responses", ARM_HINT)
    _distinct_runs(arm)
    for (run_name, prompt_id), slots in keyed.items():
        arm.runs.setdefault(run_name, {})[prompt_id] = [slots[s] for s in sorted(slots)]
    return arm


def _distinct_runs(arm: Arm) -> None:
    """Two benchmark runs of one arm must be two runs: no file read by both, no lm-eval date twice (a copy
    of a run would halve the arm's measured noise)."""
    files: dict[str, str] = {}
    dates: dict[str, str] = {}
    for label, run in arm.bench.items():
        for f in run.files:
            if f in files:
                raise TuneproofError(
                    f"runs {files[f]} and {label} of the {arm.name} arm both read {f}", "give each run once"
                )
            files[f] = label
        if run.date is not None and run.date in dates:
            raise TuneproofError(
                f"runs {dates[run.date]} and {label} of the {arm.name} arm are the same lm-eval run (date "
                f"{run.date}): a copy is no second run",
                "give each run once; a repeat is another lm-eval invocation (another seed)",
            )
        if run.date is not None:
            dates[run.date] = label


INPUT_HINT = (
    "give a tuneproof arm JSONL, an lm-eval output folder or results_<date>.json, "
    "or a per-example CSV or JSONL"
)


def _kind(p: Path, arm: str) -> str:
    """ "lm-eval", "per-example" or "text" (a tuneproof arm file)."""
    from tuneproof.gate.lm_eval import is_lm_eval
    from tuneproof.gate.per_example import is_per_example

    if not p.is_dir():
        input_file(p, f"{arm} arm file", INPUT_HINT)
    if is_lm_eval(p):
        return "lm-eval"
    if is_per_example(p):
        return "per-example"
    for _, row in jsonl_objects(p, f"{arm} arm file", ARM_HINT):
        return "lm-eval" if "prompt_id" not in row and "doc_id" in row else "text"
    return "text"


def _text_rows(p: Path, arm: str, prefix: str, keyed: dict[tuple[str, str], dict[int, str]]) -> None:
    for line_no, row in jsonl_objects(p, f"{arm} arm file", ARM_HINT):
        r = _arm_row(row, p, line_no)
        slots = keyed.setdefault((prefix + r.run, r.prompt_id), {})
        if r.sample in slots:
            raise TuneproofError(
                f"{p}: prompt {r.prompt_id!r}, run {r.run!r} has sample {r.sample} twice",
                "number the samples of a prompt 0, 1, 2, ... within each run",
            )
        slots[r.sample] = r.text


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
    return Response(prompt_id=str(prompt_id), run=str(run), sample=sample, text=text)


@dataclass(frozen=True, slots=True)
class Pairing:
    """Two arms lined up on the prompts both answered in every run."""

    prompt_ids: list[str]
    num_dropped: int
    lineup: Lineup | None = None  # the benchmark runs lined up, when the arms are benchmark runs

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
